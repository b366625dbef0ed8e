#pragma once
// Gradient clipping over a whole tree of gradients, as torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_ (functional: new Arrays, nothing evaluated).
#include "kiln/nn/param_tree.h"

namespace kiln::optim {

/// What clip_grad_norm returns: `auto [grads, norm] = optim::clip_grad_norm(grads, 1.0);`.
struct ClippedGrads {
  nn::ParamTree grads;  // same keys, order, shapes and dtypes as the input
  Array total_norm;     // 0-d: the norm before clipping (float32, float64 if any gradient is)
};

/// The global norm of all gradients together (the norm_type-norm of the per-array norms;
/// norm_type may be +infinity for the largest |g|), and every gradient scaled by
/// min(1, max_norm / (total_norm + 1e-6)), as torch.nn.utils.clip_grad_norm_. An empty tree gives
/// total_norm 0. Throws ValueError for max_norm < 0 or norm_type <= 0 (or NaN), DtypeError for a
/// non-float gradient.
ClippedGrads clip_grad_norm(const nn::ParamTree& grads, double max_norm, double norm_type = 2.0);

/// Every gradient clamped to [-clip_value, clip_value], as torch.nn.utils.clip_grad_value_.
/// Throws ValueError for clip_value < 0 (or NaN).
nn::ParamTree clip_grad_value(const nn::ParamTree& grads, double clip_value);

}  // namespace kiln::optim
