#include "kiln/optim/clip.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"

namespace kiln::optim {

namespace {

void check_grads(const nn::ParamTree& grads, const char* op) {
  for (const auto& [key, g] : grads) {
    if (!g.valid()) throw ValueError::of(op, "empty Array", "gradient '{}'", key);
    if (!is_floating(g.dtype()))
      throw DtypeError::of(op, "gradients must be floating point", "'{}' is {}", key, dtype_name(g.dtype()));
  }
}

}  // namespace

ClippedGrads clip_grad_norm(const nn::ParamTree& grads, double max_norm, double norm_type) {
  if (!(max_norm >= 0)) throw ValueError::of("clip_grad_norm", "max_norm must be >= 0", "got {}", max_norm);
  if (!(norm_type > 0)) throw ValueError::of("clip_grad_norm", "norm_type must be > 0", "got {}", norm_type);
  check_grads(grads, "clip_grad_norm");
  Dtype acc = float32;
  for (const auto& [key, g] : grads)
    if (g.dtype() == float64) acc = float64;

  // Per-array norms, then the norm of those norms (PyTorch's order of operations).
  const bool inf = std::isinf(norm_type);
  std::vector<Array> norms;
  for (const auto& [key, g] : grads) {
    if (g.size() == 0) continue;
    const Array a = abs(astype(g, acc));
    if (inf)
      norms.push_back(max(a));
    else if (norm_type == 2.0)
      norms.push_back(sqrt(sum(square(a))));
    else
      norms.push_back(power(sum(power(a, norm_type)), 1.0 / norm_type));
  }
  if (norms.empty()) return {grads, Array(0.0, acc)};
  const Array all = stack(norms);
  Array total;
  if (inf)
    total = max(all);
  else if (norm_type == 2.0)
    total = sqrt(sum(square(all)));
  else
    total = power(sum(power(all, norm_type)), 1.0 / norm_type);

  const Array coef = minimum(max_norm / (total + 1e-6), 1.0);
  nn::ParamTree out =
      grads.map([&](const std::string&, const Array& g) { return g * astype(coef, g.dtype()); });
  return {std::move(out), total};
}

nn::ParamTree clip_grad_value(const nn::ParamTree& grads, double clip_value) {
  if (!(clip_value >= 0))
    throw ValueError::of("clip_grad_value", "clip_value must be >= 0", "got {}", clip_value);
  check_grads(grads, "clip_grad_value");
  return grads.map([&](const std::string&, const Array& g) { return clip(g, -clip_value, clip_value); });
}

}  // namespace kiln::optim
