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
  /// AdamW's decoupled weight decay: p is multiplied by the 0-d input `decay` (1 - lr * wd) before
  /// the step, in the same pass (set by adam_update when it is given one).
  bool decay = false;
};

/// torch.optim.Adam's single-tensor step (Adam's coupled weight decay already applied to g):
///   m' = lerp(m, g, 1 - b1)         v' = b2 v + (1 - b2) g^2        vmax' = max(vmax, v')
///   p' = p [* decay] - step_size * m' / (sqrt(amsgrad ? vmax' : v') / bc2_sqrt + eps)
/// step_size, bc2_sqrt and decay (AdamW's 1 - lr * wd, when given) are 0-d arrays of p's dtype.
/// Returns {p', m', v'} and vmax' last when amsgrad.
/// float32 and float64 operands of one shape and dtype run as one fused primitive; other cases (and its
/// rules: vjp, jvp, vmap) use these ops.
std::vector<Array> adam_update(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, const Array& step_size,
                               const Array& bc2_sqrt, const std::optional<Array>& decay = std::nullopt);
/// The same with the scalars given on the host (made 0-d arrays of p's dtype).
std::vector<Array> adam_update(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, double step_size,
                               double bc2_sqrt, std::optional<double> decay = std::nullopt);

}  // namespace kiln::optim::detail
