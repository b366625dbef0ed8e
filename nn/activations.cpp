#include "kiln/nn/activations.h"

#include <numbers>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"

namespace kiln::nn {

namespace {

// log(1 + exp(z)) without overflow. Each branch of the `where` is fed an input clamped to its own
// side of 0, so the branch that is not taken stays finite: a masked-out exp(1000) = inf would
// still turn its zero cotangent into 0 * inf = NaN in the backward pass. At z == 0 the second
// branch is taken and gives the exact derivative sigmoid(0) = 0.5 (a max(z, 0) + log1p(exp(-|z|))
// form would give 1 there).
Array softplus_stable(const Array& z) {
  const Array positive_part = z + log1p(exp(-maximum(z, 0.0)));
  const Array negative_part = log1p(exp(minimum(z, 0.0)));
  return where(z > 0.0, positive_part, negative_part);
}

}  // namespace

Array relu(const Array& x) {
  // `x <= 0` is false for NaN, so NaN passes through; the gradient at 0 is 0 as in PyTorch.
  return where(x <= 0, 0, x);
}

Array relu6(const Array& x) { return where(x <= 0, 0, where(x >= 6, 6, x)); }

Array leaky_relu(const Array& x, double negative_slope) { return where(x > 0, x, x * negative_slope); }

Array elu(const Array& x, double alpha) {
  // expm1 sees min(x, 0): for a large positive x the untaken branch would be inf, and its
  // gradient 0 * inf = NaN.
  return where(x > 0.0, x, alpha * expm1(minimum(x, 0.0)));
}

Array selu(const Array& x) {
  constexpr double kAlpha = 1.6732632423543772848170429916717;
  constexpr double kScale = 1.0507009873554804934193349852946;
  return kScale * elu(x, kAlpha);
}

Array gelu(const Array& x) {
  constexpr double kInvSqrt2 = 0.5 * std::numbers::sqrt2;
  return 0.5 * x * (1.0 + erf(x * kInvSqrt2));
}

Array gelu_tanh(const Array& x) {
  constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
  return 0.5 * x * (1.0 + tanh(kSqrt2OverPi * (x + 0.044715 * x * square(x))));
}

Array silu(const Array& x) { return x * sigmoid(x); }

Array mish(const Array& x) { return x * tanh(softplus_stable(x)); }

Array softplus(const Array& x, double beta, double threshold) {
  if (!(beta > 0)) throw ValueError::of("softplus", "beta must be > 0", "got {}", beta);
  const Array z = beta == 1.0 ? x : x * beta;
  const Array smooth = beta == 1.0 ? softplus_stable(z) : softplus_stable(z) / beta;
  // PyTorch switches to the identity above the threshold; kept so results match it bit for bit
  // in that range (the smooth branch differs from x there by less than exp(-threshold)).
  return where(z > threshold, x, smooth);
}

Array log_sigmoid(const Array& x) { return -softplus_stable(-x); }

Array glu(const Array& x, int axis) {
  const int ax = normalize_axis("glu", axis, x.ndim());
  if (x.shape(ax) % 2 != 0)
    throw ValueError::of("glu", "the split axis must have an even size", "axis {} has size {} in shape {}",
                         axis, x.shape(ax), shape_str(x.shape()));
  const std::vector<Array> halves = split(x, 2, ax);
  return halves[0] * sigmoid(halves[1]);
}

}  // namespace kiln::nn
