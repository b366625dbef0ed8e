// Reductions built from other ops, whose gradients come from the parts: var, std, logsumexp, softmax
// and log_softmax. float16/bfloat16 inputs are computed in float32 and rounded once at the end:
// squared deviations and sums of exponentials overflow float16 long before the result does.
// softmax and log_softmax along the last axis alone are one fused primitive (fused_norm.cpp).
#include <algorithm>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/fused_norm.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace {

void check_valid(const char* op, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
}

struct Precision {
  Dtype compute, result;
};
// Integers and bool give float32 results; half floats compute in float32.
Precision precision_of(Dtype t) {
  if (t == float16 || t == bfloat16) return {float32, t};
  if (!is_floating(t)) return {float32, float32};
  return {t, t};
}

Array to_result(const Array& r, Dtype t, StreamOrDevice s) { return r.dtype() == t ? r : astype(r, t, s); }

// The fused kernels normalize the last axis; the composite takes any other set of axes.
bool is_last_axis(const Axes& axes, int ndim) { return axes.size() == 1 && axes[0] == ndim - 1; }

int64_t count_over(const Shape& shape, const Axes& axes) {
  int64_t n = 1;
  for (int a : axes) n *= shape[a];
  return n;
}

// x is already in its compute dtype; axes are normalized.
Array var_impl(const Array& x, const Axes& axes, bool keepdims, int ddof, StreamOrDevice s) {
  const Array sq = square(subtract(x, mean(x, axes, true, s), s), s);
  if (ddof == 0) return mean(sq, axes, keepdims, s);
  // No degrees of freedom left: inf (NaN for zero spread), as NumPy.
  const int64_t dof = std::max<int64_t>(count_over(x.shape(), axes) - ddof, 0);
  return divide(sum(sq, axes, keepdims, s), static_cast<double>(dof), s);
}

// The max, as a constant shift: no gradient flows through it, and an infinite max (which would
// give inf - inf) is replaced by 0.
Array stable_shift(const Array& x, const Axes& axes, StreamOrDevice s) {
  const Array m = max(x, axes, true, s);
  return stop_gradient(where(isinf(m, s), 0.0, m, s), s);
}

Array logsumexp_impl(const Array& x, const Axes& axes, bool keepdims, StreamOrDevice s) {
  if (axes.empty()) return x;
  if (count_over(x.shape(), axes) == 0) return log(sum(exp(x, s), axes, keepdims, s), s);  // -inf
  const Array m = stable_shift(x, axes, s);
  const Array r = log(sum(exp(subtract(x, m, s), s), axes, keepdims, s), s);
  return add(r, keepdims ? m : squeeze(m, axes, s), s);
}

}  // namespace

Array var(const Array& a, const Axes& axes, bool keepdims, int ddof, StreamOrDevice s) {
  check_valid("var", a);
  const Axes ax = normalize_axes("var", axes, a.ndim());
  const auto [compute, result] = precision_of(a.dtype());
  return to_result(var_impl(astype(a, compute, s), ax, keepdims, ddof, s), result, s);
}
Array var(const Array& a, bool keepdims, int ddof, StreamOrDevice s) {
  check_valid("var", a);
  return var(a, all_axes(a.ndim()), keepdims, ddof, s);
}

Array std(const Array& a, const Axes& axes, bool keepdims, int ddof, StreamOrDevice s) {
  check_valid("std", a);
  const Axes ax = normalize_axes("std", axes, a.ndim());
  const auto [compute, result] = precision_of(a.dtype());
  return to_result(sqrt(var_impl(astype(a, compute, s), ax, keepdims, ddof, s), s), result, s);
}
Array std(const Array& a, bool keepdims, int ddof, StreamOrDevice s) {
  check_valid("std", a);
  return std(a, all_axes(a.ndim()), keepdims, ddof, s);
}

Array logsumexp(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  check_valid("logsumexp", a);
  const Axes ax = normalize_axes("logsumexp", axes, a.ndim());
  const auto [compute, result] = precision_of(a.dtype());
  return to_result(logsumexp_impl(astype(a, compute, s), ax, keepdims, s), result, s);
}
Array logsumexp(const Array& a, bool keepdims, StreamOrDevice s) {
  check_valid("logsumexp", a);
  return logsumexp(a, all_axes(a.ndim()), keepdims, s);
}
Array logsumexp(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return logsumexp(a, Axes{axis}, keepdims, s);
}

// exp(x - max) / sum: one exponential per element, and the quotient is within an ulp or two even
// far from the max (exp(x - logsumexp) loses |logsumexp| * eps there).
Array softmax(const Array& a, const Axes& axes, StreamOrDevice s) {
  check_valid("softmax", a);
  const Axes ax = normalize_axes("softmax", axes, a.ndim());
  const auto [compute, result] = precision_of(a.dtype());
  if (is_last_axis(ax, a.ndim())) return detail::softmax_last_axis(to_result(a, result, s), false, s);
  const Array x = astype(a, compute, s);
  if (x.size() == 0 || ax.empty()) return to_result(exp(subtract(x, x, s), s), result, s);
  const Array e = exp(subtract(x, stop_gradient(max(x, ax, true, s), s), s), s);
  return to_result(divide(e, sum(e, ax, true, s), s), result, s);
}
Array softmax(const Array& a, int axis, StreamOrDevice s) { return softmax(a, Axes{axis}, s); }

Array log_softmax(const Array& a, const Axes& axes, StreamOrDevice s) {
  check_valid("log_softmax", a);
  const Axes ax = normalize_axes("log_softmax", axes, a.ndim());
  const auto [compute, result] = precision_of(a.dtype());
  if (is_last_axis(ax, a.ndim())) return detail::softmax_last_axis(to_result(a, result, s), true, s);
  const Array x = astype(a, compute, s);
  if (x.size() == 0 || ax.empty()) return to_result(subtract(x, x, s), result, s);
  // (x - m) - log(sum(exp(x - m))) rather than x - logsumexp: x - m is exact, so the result keeps
  // its relative precision even when |x| is large.
  const Array shifted = subtract(x, stable_shift(x, ax, s), s);
  return to_result(subtract(shifted, log(sum(exp(shifted, s), ax, true, s), s), s), result, s);
}
Array log_softmax(const Array& a, int axis, StreamOrDevice s) { return log_softmax(a, Axes{axis}, s); }

}  // namespace kiln
