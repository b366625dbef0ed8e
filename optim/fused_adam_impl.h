#pragma once
// Internal: Adam's elementwise update as one primitive (optim/fused_adam.cpp), so a step reads
// each parameter, gradient and moment once instead of a dozen passes of separate ops.
#include <optional>
#include <vector>

#include "kiln/core/array.h"

namespace kiln::optim::detail {

struct AdamConstants {
  double beta1, beta2, eps;
  bool amsgrad;
};

/// torch.optim.Adam's single-tensor step (weight decay already applied to g):
///   m' = lerp(m, g, 1 - b1)         v' = b2 v + (1 - b2) g^2        vmax' = max(vmax, v')
///   p' = p - step_size * m' / (sqrt(amsgrad ? vmax' : v') / bc2_sqrt + eps)
/// step_size and bc2_sqrt are 0-d arrays of p's dtype. Returns {p', m', v'} and vmax' last when amsgrad.
/// float32 and float64 operands of one shape and dtype run as one fused primitive; other cases (and its
/// rules: vjp, jvp, vmap) use these ops.
std::vector<Array> adam_update(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, const Array& step_size,
                               const Array& bc2_sqrt);
/// The same with the two scalars given on the host (made 0-d arrays of p's dtype).
std::vector<Array> adam_update(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, double step_size,
                               double bc2_sqrt);

}  // namespace kiln::optim::detail
