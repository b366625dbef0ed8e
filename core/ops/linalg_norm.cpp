// kiln::linalg's compositions: norm (reductions, or the singular values), pinv (the SVD or eigh)
// and cross (slices and products).
#include <cmath>
#include <limits>

#include "kiln/core/operand.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/linalg_decomp.h"
#include "kiln/core/ops/linalg_decomp_impl.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace detail::la {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_valid(const char* op, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "an operand is an empty (default-constructed) array");
}

// The norm's axes: given, or the whole of a 1-d or 2-d x.
Axes norm_axes(const Array& x, const Axes& axes, bool matrix_only) {
  if (axes.empty()) {
    if (x.ndim() == 1 && !matrix_only) return {0};
    if (x.ndim() == 2) return {0, 1};
    throw ShapeError::of("norm",
                         matrix_only ? "without axes, a matrix norm needs a 2-d input"
                                     : "without axes, an order needs a 1-d or 2-d input",
                         "got shape {}", shape_str(x.shape()));
  }
  Axes out;  // in the given order: (rows, columns) of a matrix norm
  for (int a : axes) out.push_back(normalize_axis("norm", a, x.ndim()));
  if (out.size() > 2 || (matrix_only && out.size() != 2))
    throw ShapeError::of("norm",
                         matrix_only ? "a matrix norm needs two axes" : "a norm needs one or two axes",
                         "got {}", fmt::join(axes, ", "));
  if (out.size() == 2 && out[0] == out[1])
    throw ShapeError::of("norm", "the two axes of a matrix norm must differ", "got {}",
                         fmt::join(axes, ", "));
  return out;
}

// y^(1/p) for the sums of a norm, with the gradient 0 (not NaN) where y is 0: the subgradient
// PyTorch gives a zero vector's norm.
Array root(const Array& y, double p, Stream s) {
  const Array zero = equal(y, 0.0, s);  // a NaN sum stays NaN
  const Array safe = where(zero, 1.0, y, s);
  return where(zero, 0.0, p == 2 ? sqrt(safe, s) : power(safe, 1.0 / p, s), s);
}

Array vector_norm(const Array& x, double ord, int axis, bool keepdims, Stream s) {
  const Axes ax{axis};
  if (ord == 2) return root(sum(square(x, s), ax, keepdims, s), 2, s);
  const Array a = abs(x, s);
  if (ord == kInf) return max(a, ax, keepdims, s);
  if (ord == -kInf) return min(a, ax, keepdims, s);
  if (ord == 0) return sum(astype(not_equal(x, 0.0, s), x.dtype(), s), ax, keepdims, s);
  if (ord == 1) return sum(a, ax, keepdims, s);
  return root(sum(power(a, ord, s), ax, keepdims, s), ord, s);
}

// The singular values of x over axes (r, c), as a (..., k) array with the other axes in order.
Array singular_values(const Array& x, int r, int c, Stream s) {
  const Array m = moveaxis(moveaxis(x, r, -1, s), c > r ? c - 1 : c, -1, s);  // (..., x[r], x[c])
  return std::get<1>(svd_matrices(m, false, s));
}

// Puts back axes r and c (as size 1) after a reduction over them.
Array keep_axes(const Array& y, int r, int c, bool keepdims, Stream s) {
  return keepdims ? expand_dims(y, {std::min(r, c), std::max(r, c)}, s) : y;
}

Array matrix_norm(const Array& x, double ord, int r, int c, bool keepdims, Stream s) {
  if (ord == 2 || ord == -2) {
    const Array sv = singular_values(x, r, c, s);
    const Array y = ord == 2 ? max(sv, -1, false, s) : min(sv, -1, false, s);
    return keep_axes(y, r, c, keepdims, s);
  }
  // 1: the largest column sum (over rows r), inf: the largest row sum (over columns c).
  int inner, outer;
  if (ord == 1 || ord == -1) {
    inner = r;
    outer = c;
  } else if (ord == kInf || ord == -kInf) {
    inner = c;
    outer = r;
  } else {
    throw ValueError::of("norm", "a matrix norm's order must be 1, -1, 2, -2, inf, -inf, 'fro' or 'nuc'",
                         "got {}", ord);
  }
  const Array sums = sum(abs(x, s), inner, true, s);
  Array y = ord > 0 ? max(sums, outer, true, s) : min(sums, outer, true, s);
  return keepdims ? y : squeeze(y, {r, c}, s);
}

}  // namespace
}  // namespace detail::la

namespace linalg {

using namespace detail::la;

Array norm(const Array& x, StreamOrDevice sd) {
  check_valid("norm", x);
  const Stream s = to_stream(sd);
  const Array v = to_compute(x, s);
  return to_result(root(sum(square(v, s), false, s), 2, s), x.dtype(), s);
}

Array norm(const Array& x, double ord, const Axes& axes, bool keepdims, StreamOrDevice sd) {
  check_valid("norm", x);
  const Axes ax = norm_axes(x, axes, false);
  const Stream s = to_stream(sd);
  const Array v = to_compute(x, s);
  if (std::isnan(ord)) throw ValueError::of("norm", "the order is NaN");
  const Array y = ax.size() == 1 ? vector_norm(v, ord, ax[0], keepdims, s)
                                 : matrix_norm(v, ord, ax[0], ax[1], keepdims, s);
  return to_result(y, x.dtype(), s);
}

Array norm(const Array& x, std::string_view ord, const Axes& axes, bool keepdims, StreamOrDevice sd) {
  check_valid("norm", x);
  if (ord != "fro" && ord != "nuc")
    throw ValueError::of("norm", "a matrix norm's name must be 'fro' or 'nuc'", "got '{}'", ord);
  const Axes ax = norm_axes(x, axes, true);
  const Stream s = to_stream(sd);
  const Array v = to_compute(x, s);
  const Array y = ord == "fro" ? root(sum(square(v, s), ax, keepdims, s), 2, s)
                               : keep_axes(sum(singular_values(v, ax[0], ax[1], s), -1, false, s), ax[0],
                                           ax[1], keepdims, s);
  return to_result(y, x.dtype(), s);
}

Array pinv(const Array& a, std::optional<double> atol, std::optional<double> rtol, bool hermitian,
           StreamOrDevice sd) {
  check_matrix("pinv", a, hermitian);
  if ((atol && !(*atol >= 0)) || (rtol && !(*rtol >= 0)))
    throw ValueError::of("pinv", "tolerances must be non-negative", "atol {}, rtol {}", atol.value_or(0),
                         rtol.value_or(0));
  const Stream s = to_stream(sd);
  const Array x = to_compute(a, s);
  const int64_t m = a.shape(-2), n = a.shape(-1);
  const double eps = x.dtype() == float64 ? std::numeric_limits<double>::epsilon()
                                          : static_cast<double>(std::numeric_limits<float>::epsilon());
  const double abs_tol = atol.value_or(0.0);
  const double rel_tol = rtol ? *rtol : abs_tol > 0 ? 0.0 : eps * static_cast<double>(std::max(m, n));
  Shape out_shape = a.shape();
  std::swap(out_shape[out_shape.size() - 1], out_shape[out_shape.size() - 2]);
  if (std::min(m, n) == 0) return to_result(zeros(out_shape, x.dtype(), s), a.dtype(), s);
  Array out;
  if (hermitian) {
    const auto [w, v] = eigh_lower(x, s);
    const Array aw = abs(w, s);
    const Array keep = greater(aw, maximum(multiply(max(aw, -1, true, s), rel_tol, s), abs_tol, s), s);
    out = matmul(multiply(v, expand_dims(safe_reciprocal(w, keep, s), -2, s), s), mT(v, s), s);
  } else {
    const auto [u, sv, vh] = svd_matrices(x, false, s);
    const Array keep = greater(sv, maximum(multiply(max(sv, -1, true, s), rel_tol, s), abs_tol, s), s);
    out = matmul(multiply(mT(vh, s), expand_dims(safe_reciprocal(sv, keep, s), -2, s), s), mT(u, s), s);
  }
  return to_result(out, a.dtype(), s);
}

Array cross(const Array& a, const Array& b, int axis, StreamOrDevice sd) {
  check_valid("cross", a);
  check_valid("cross", b);
  const Operand oa(a), ob(b);
  const Dtype t = result_type({&oa, &ob});
  if (t == bool_) throw DtypeError::of("cross", "needs numbers, not bool");
  const Shape shape = broadcast_shapes("cross", a.shape(), b.shape());
  const int ax = normalize_axis("cross", axis, static_cast<int>(shape.size()));
  for (const Array* x : {&a, &b}) {
    const int own = ax - (static_cast<int>(shape.size()) - x->ndim());  // x's own dim at that axis
    if (own < 0 || x->shape(own) != 3)
      throw ShapeError::of("cross", "both inputs need 3 elements along the axis", "axis {} of {} and {}",
                           axis, shape_str(a.shape()), shape_str(b.shape()));
  }
  const Stream s = to_stream(sd);
  const Array x = broadcast_to(astype(a, t, s), shape, s), y = broadcast_to(astype(b, t, s), shape, s);
  auto part = [&](const Array& v, int64_t i) {
    std::vector<Slice> sl(ax);
    sl.push_back(Slice{i, i + 1, 1});
    return slice(v, sl, s);
  };
  const Array x0 = part(x, 0), x1 = part(x, 1), x2 = part(x, 2);
  const Array y0 = part(y, 0), y1 = part(y, 1), y2 = part(y, 2);
  return concatenate({subtract(multiply(x1, y2, s), multiply(x2, y1, s), s),
                      subtract(multiply(x2, y0, s), multiply(x0, y2, s), s),
                      subtract(multiply(x0, y1, s), multiply(x1, y0, s), s)},
                     ax, s);
}

}  // namespace linalg
}  // namespace kiln
