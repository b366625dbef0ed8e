// Cumulative sums, products, maxima, minima and logsumexps: one Scan primitive parameterized by
// (kind, axis, reverse, inclusive).
#include "kiln/core/ops/scan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/reduce.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu_scan.h"

namespace kiln {
namespace detail {

// The combine of a scan: + and * (cumsum, cumprod), the running max and min (cummax, cummin) and
// logaddexp (logcumsumexp).
enum class ScanKind : uint8_t { sum, prod, max, min, logaddexp };
std::ostream& operator<<(std::ostream& os, ScanKind k) {
  constexpr const char* kNames[] = {"sum", "prod", "max", "min", "logaddexp"};
  return os << kNames[static_cast<int>(k)];
}

namespace {

constexpr int64_t kScanTile = 256;  // inner columns one task carries
constexpr int64_t kScanRows = 8;    // rows one task scans together when the axis is the last
constexpr int64_t kScanChunk = 64;  // elements of one row scanned before moving to the next row

template <class T>
constexpr bool kHalf = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

// Float sums, products and logaddexps run in double (float for the halves): a scan is
// memory-bound, so the wider accumulator is free and long scans stay accurate. Integer sums and
// products wrap in the unsigned type of the output's width. max and min compare in the input's
// type (the halves widened to float, which is exact).
template <ScanKind K, class T, class Out>
auto scan_acc_tag() {
  if constexpr (kHalf<T>)
    return TypeTag<float>{};
  else if constexpr (K == ScanKind::max || K == ScanKind::min)
    return TypeTag<T>{};
  else if constexpr (std::is_floating_point_v<T>)
    return TypeTag<double>{};
  else
    return TypeTag<std::make_unsigned_t<Out>>{};
}

// What an exclusive scan starts from: 0, 1, the lowest value (-inf for floats, false for bool),
// the highest, -inf.
template <ScanKind K, class Acc>
Acc scan_identity() {
  using L = std::numeric_limits<Acc>;
  if constexpr (K == ScanKind::sum)
    return Acc(0);
  else if constexpr (K == ScanKind::prod)
    return Acc(1);
  else if constexpr (K == ScanKind::max)
    return L::has_infinity ? -L::infinity() : L::lowest();
  else if constexpr (K == ScanKind::min)
    return L::has_infinity ? L::infinity() : L::max();
  else
    return -L::infinity();
}

// a (everything before) combined with b (the next element). max/min keep the earlier of equal
// values and propagate NaN, as the maximum/minimum ops; logaddexp is LogAddExp::apply
// (binary.cpp), exact at -inf (the identity) and at equal infinities.
template <ScanKind K, class Acc>
Acc scan_combine(Acc a, Acc b) {
  if constexpr (K == ScanKind::sum) {
    return static_cast<Acc>(a + b);
  } else if constexpr (K == ScanKind::prod) {
    return static_cast<Acc>(a * b);
  } else if constexpr (K == ScanKind::max || K == ScanKind::min) {
    if constexpr (std::is_floating_point_v<Acc>)
      if (std::isnan(a) || std::isnan(b)) return a + b;
    if constexpr (K == ScanKind::max)
      return a >= b ? a : b;
    else
      return a <= b ? a : b;
  } else {
    if (std::isnan(a) || std::isnan(b)) return a + b;
    if (a == b) return a + static_cast<Acc>(0.693147180559945309417);  // also equal infinities
    return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b)));
  }
}

// in and out are dense [outer, n, inner]. Each task carries a set of independent lanes: up to
// kScanTile inner columns, or (inner == 1) kScanRows rows scanned together, so the combines of
// different rows overlap instead of waiting on one another.
template <ScanKind K, class T, class Out>
void scan_dense(const T* in, Out* out, int64_t outer, int64_t n, int64_t inner, bool reverse,
                bool inclusive) {
  using Acc = typename decltype(scan_acc_tag<K, T, Out>())::type;
  const auto step = [&](Acc& acc, int64_t at) {
    const Acc next = scan_combine<K, Acc>(acc, static_cast<Acc>(in[at]));
    out[at] = static_cast<Out>(inclusive ? next : acc);
    acc = next;
  };
  if (inner == 1) {
    const int64_t groups = (outer + kScanRows - 1) / kScanRows;
    parallel_for(groups, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, n * kScanRows)),
                 [&](int64_t b, int64_t e) {
                   Acc acc[kScanRows];
                   for (int64_t g = b; g < e; ++g) {
                     const int64_t o0 = g * kScanRows, m = std::min(kScanRows, outer - o0);
                     std::fill(acc, acc + m, scan_identity<K, Acc>());
                     for (int64_t k0 = 0; k0 < n; k0 += kScanChunk) {
                       const int64_t k1 = std::min(n, k0 + kScanChunk);
                       for (int64_t q = 0; q < m; ++q)
                         for (int64_t k = k0; k < k1; ++k)
                           step(acc[q], (o0 + q) * n + (reverse ? n - 1 - k : k));
                     }
                   }
                 });
    return;
  }
  const int64_t tiles = (inner + kScanTile - 1) / kScanTile;
  const int64_t per_unit = std::max<int64_t>(1, n * std::min(inner, kScanTile));
  parallel_for(outer * tiles, std::max<int64_t>(1, kElementwiseGrain / per_unit), [&](int64_t b, int64_t e) {
    Acc acc[kScanTile];
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / tiles, j0 = (u % tiles) * kScanTile, w = std::min(kScanTile, inner - j0);
      std::fill(acc, acc + w, scan_identity<K, Acc>());
      for (int64_t k = 0; k < n; ++k) {
        const int64_t off = (o * n + (reverse ? n - 1 - k : k)) * inner + j0;
        for (int64_t j = 0; j < w; ++j) step(acc[j], off + j);
      }
    }
  });
}

// Runs the scan of kind K over x (dense) into y: sums and products in sum's result dtypes, the
// others in x's dtype (logaddexp: floats only).
template <ScanKind K>
void scan_typed(const Array& x, Array& y, int64_t outer, int64_t n, int64_t inner, bool reverse,
                bool inclusive, const char* name) {
  constexpr DtypeSet kTypes = K == ScanKind::logaddexp ? kFloatTypes : kAllTypes;
  visit_dtype<kTypes>(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<K == ScanKind::sum || K == ScanKind::prod, sum_result_t<T>, T>;
    scan_dense<K>(x.strided_data<T>(), y.strided_data<Out>(), outer, n, inner, reverse, inclusive);
  });
}

class Scan final : public PrimitiveWithParams<Scan> {
 public:
  Scan(Stream s, ScanKind kind, int axis, bool reverse, bool inclusive)
      : PrimitiveWithParams(s), kind_(kind), axis_(axis), reverse_(reverse), inclusive_(inclusive) {}
  const char* name() const override {
    constexpr const char* kNames[] = {"CumSum", "CumProd", "CumMax", "CumMin", "LogCumSumExp"};
    return kNames[static_cast<int>(kind_)];
  }
  auto params() const { return std::tie(kind_, axis_, reverse_, inclusive_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Array& y = out[0];
    y.allocate();
    if (y.size() == 0) return;
    Array x = in[0];
    if (!x.row_contiguous()) {
      Array dense = Array::empty_available(x.shape(), x.dtype());
      Axes identity(x.ndim());
      std::iota(identity.begin(), identity.end(), 0);
      copy_permuted(x, identity, dense.raw_data());
      x = dense;
    }
    const Shape& sh = x.shape();
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= sh[d];
    for (int d = axis_ + 1; d < x.ndim(); ++d) inner *= sh[d];
    const int64_t n = sh[axis_];
    const auto run = [&]<ScanKind K>() {
      scan_typed<K>(x, y, outer, n, inner, reverse_, inclusive_, name());
    };
    switch (kind_) {
      case ScanKind::sum:
        return run.operator()<ScanKind::sum>();
      case ScanKind::prod:
        return run.operator()<ScanKind::prod>();
      case ScanKind::max:
        return run.operator()<ScanKind::max>();
      case ScanKind::min:
        return run.operator()<ScanKind::min>();
      case ScanKind::logaddexp:
        return run.operator()<ScanKind::logaddexp>();
    }
  }

  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    constexpr gpu::ScanKind kGpu[] = {gpu::ScanKind::sum, gpu::ScanKind::prod, gpu::ScanKind::max,
                                      gpu::ScanKind::min, gpu::ScanKind::logaddexp};
    gpu::scan(kGpu[static_cast<int>(kind_)], in[0], axis_, reverse_, inclusive_, out[0]);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    const int axis = b >= 0 && axis_ >= b ? axis_ + 1 : axis_;
    return {{make(kind_, a.inputs[0], axis, reverse_, inclusive_, stream())}, {b}};
  }

  // Sums and products in reduce_out_dtype's dtypes (int32 for bool/int8, ...), the others in x's.
  static Dtype out_dtype(ScanKind kind, Dtype x) {
    return kind == ScanKind::sum || kind == ScanKind::prod ? reduce_out_dtype(ReduceKind::sum, x) : x;
  }
  static Array make(ScanKind kind, const Array& x, int axis, bool reverse, bool inclusive, Stream s) {
    return Array::make(x.shape(), out_dtype(kind, x.dtype()),
                       std::make_shared<Scan>(s, kind, axis, reverse, inclusive), {x});
  }

 private:
  std::vector<Array> extreme_vjp(const VjpArgs& a) const;
  std::vector<Array> extreme_jvp(const JvpArgs& a) const;
  std::vector<Array> logcumsumexp_vjp(const VjpArgs& a) const;
  std::vector<Array> logcumsumexp_jvp(const JvpArgs& a) const;

  const ScanKind kind_;
  const int axis_;
  const bool reverse_, inclusive_;
};

// Pieces of cumprod's zero-safe derivatives along the scan direction, as float 0/1 masks (each
// bool node feeds one astype, so vjp accumulates float cotangents only). `before`: no zero at or
// before this element; `first`: the first zero; `safe_x`: x where `before`, else 1 (a divisor);
// `y_skip`: the cumprod with the first zero replaced by 1 (the product of the others there).
struct CumprodParts {
  Array zero, before, first, safe_x, y_skip;
};
CumprodParts cumprod_parts(const Array& x, int axis, bool reverse, bool inclusive, Stream s) {
  const Dtype t = x.dtype();
  const Array zero = stop_gradient(astype(equal(x, 0.0, s), t, s), s);
  const Array zeros_so_far = Scan::make(ScanKind::sum, zero, axis, reverse, true, s);
  const Array before = astype(equal(zeros_so_far, 0.0, s), t, s);
  const Array first = multiply(zero, astype(equal(zeros_so_far, 1.0, s), t, s), s);
  const Array safe_x = add(multiply(before, x, s), subtract(1.0, before, s), s);
  // x + first * (1 - x): 1 at the first zero, with no derivative there (y_skip does not depend on it).
  const Array skipped = add(x, multiply(first, subtract(1.0, x, s), s), s);
  const Array y_skip = Scan::make(ScanKind::prod, skipped, axis, reverse, inclusive, s);
  return {zero, before, first, safe_x, y_skip};
}

// cumsum: the cotangent scanned the other way. cumprod: dx_j = sum over outputs i that include x_j
// of g_i * (product of the other factors of y_i). Before the first zero that is
// cumsum_rev(g * y)_j / x_j; at the first zero it is cumsum_rev(g * y_skip)_j; after it, 0 (PyTorch's
// rule). Exact with zeros; differentiating it again is exact away from zeros, but at an exact zero
// it misses the terms of the branches the (constant) masks switch off. An exact rule to every order
// needs a linear-recurrence scan (JAX differentiates its associative scan); none exists yet.
std::vector<Array> Scan::vjp(const VjpArgs& a) const {
  const Array &x = a.primals[0], &g = a.cotangents[0];
  const Stream s = stream();
  if (!is_floating(x.dtype())) return {zeros_like(x, s)};
  if (kind_ == ScanKind::max || kind_ == ScanKind::min) return extreme_vjp(a);
  if (kind_ == ScanKind::logaddexp) return logcumsumexp_vjp(a);
  if (kind_ == ScanKind::sum) return {make(ScanKind::sum, g, axis_, !reverse_, inclusive_, s)};
  const CumprodParts p = cumprod_parts(x, axis_, reverse_, inclusive_, s);
  const Array at_before =
      divide(make(ScanKind::sum, multiply(g, a.outputs[0], s), axis_, !reverse_, inclusive_, s), p.safe_x, s);
  const Array at_first = make(ScanKind::sum, multiply(g, p.y_skip, s), axis_, !reverse_, inclusive_, s);
  return {add(multiply(p.before, at_before, s), multiply(p.first, at_first, s), s)};
}

// cumprod: dy_i = sum over j in y_i's factors of t_j * (product of the others). While y_i has no
// zero factor that is y_i * cumsum(t / x)_i; past the first zero only that zero's term survives:
// t_first * y_skip_i.
std::vector<Array> Scan::jvp(const JvpArgs& a) const {
  const Array &x = a.primals[0], &t = a.tangents[0];
  const Stream s = stream();
  if (!is_floating(x.dtype())) return {zeros(x.shape(), out_dtype(kind_, x.dtype()), s)};
  if (kind_ == ScanKind::max || kind_ == ScanKind::min) return extreme_jvp(a);
  if (kind_ == ScanKind::logaddexp) return logcumsumexp_jvp(a);
  if (kind_ == ScanKind::sum) return {make(ScanKind::sum, t, axis_, reverse_, inclusive_, s)};
  const CumprodParts p = cumprod_parts(x, axis_, reverse_, inclusive_, s);
  // Which outputs have no zero among their factors (differs from `before` for exclusive scans).
  const Array clean_out =
      inclusive_
          ? p.before
          : astype(equal(make(ScanKind::sum, p.zero, axis_, reverse_, false, s), 0.0, s), x.dtype(), s);
  const Array y = make(ScanKind::prod, x, axis_, reverse_, inclusive_, s);
  const Array ratio = multiply(p.before, divide(t, p.safe_x, s), s);
  const Array clean = multiply(y, make(ScanKind::sum, ratio, axis_, reverse_, inclusive_, s), s);
  const Array t_first = make(ScanKind::sum, multiply(p.first, t, s), axis_, reverse_, inclusive_, s);
  return {add(multiply(clean_out, clean, s),
              multiply(subtract(1.0, clean_out, s), multiply(t_first, p.y_skip, s), s), s)};
}

// An exclusive scan's output k is the inclusive one's output k - 1 in scan order (k + 1 along
// the axis when reverse). shift_later moves values one step later in scan order, shift_earlier one
// step earlier; the position left over is zero.
Array shift_along(const Array& a, int axis, bool later, Stream s) {
  const int64_t n = a.shape(axis);
  std::vector<std::pair<int64_t, int64_t>> widths(a.ndim(), {0, 0});
  Shape start(a.ndim(), 0), stop = a.shape();
  if (later) {
    stop[axis] = n - 1;
    widths[axis] = {1, 0};
  } else {
    start[axis] = 1;
    widths[axis] = {0, 1};
  }
  return pad(slice(a, start, stop, {}, s), widths, 0, s);
}
Array shift_later(const Array& a, int axis, bool reverse, Stream s) {
  return shift_along(a, axis, !reverse, s);
}
Array shift_earlier(const Array& a, int axis, bool reverse, Stream s) {
  return shift_along(a, axis, reverse, s);
}

// For an inclusive cummax (cummin) of x: the index along the axis of the element each output
// takes its value from, int32 of x's shape. It is the first element in scan order to reach the
// running extreme (the first NaN, once there is one): the last "record" at or before each
// position, a record being an element strictly beyond everything before it (or the first NaN).
// Positions before any record (a run of -inf for cummax) take the first element.
Array extreme_source(ScanKind kind, const Array& x, int axis, bool reverse, Stream s) {
  const int64_t n = x.shape(axis);
  const Array x0 = stop_gradient(x, s);
  const Array before = Scan::make(kind, x0, axis, reverse, false, s);
  const Array beyond = kind == ScanKind::max ? greater(x0, before, s) : less(x0, before, s);
  const Array record = logical_or(beyond, logical_and(isnan(x0, s), logical_not(isnan(before, s), s), s), s);
  Shape along(x.ndim(), 1);
  along[axis] = n;
  const Array index = reshape(arange(0, static_cast<double>(n), 1, int32, s), along, s);
  // Positions in scan order, so that the latest record is the running maximum of the marks.
  const Array order = reverse ? subtract(static_cast<int32_t>(n - 1), index, s) : index;
  const Array marks = where(record, order, static_cast<int32_t>(-1), s);
  const Array latest = maximum(Scan::make(ScanKind::max, marks, axis, reverse, true, s), 0, s);
  return reverse ? subtract(static_cast<int32_t>(n - 1), latest, s) : latest;
}

// cummax/cummin are y = take_along_axis(x, source): the tangent is gathered from the source
// positions, the cotangent added back there (a scatter-add over the flattened array, so that one
// source can take the cotangents of many outputs). Exclusive outputs are the inclusive ones shifted
// by one; the first is the identity, with no derivative.
std::vector<Array> Scan::extreme_vjp(const VjpArgs& a) const {
  const Array &x = a.primals[0], &g = a.cotangents[0];
  const Stream s = stream();
  if (x.size() == 0) return {zeros_like(x, s)};
  const Array g_incl = inclusive_ ? g : shift_earlier(g, axis_, reverse_, s);
  const Array source = extreme_source(kind_, x, axis_, reverse_, s);
  const int64_t size = x.size();
  const Array flat = reshape(arange(0, static_cast<double>(size), 1, int32, s), x.shape(), s);
  const Array targets = reshape(take_along_axis(flat, source, axis_, s), {size}, s);
  const Array dx = scatter_add(zeros({size}, g.dtype(), s), targets, reshape(g_incl, {size}, s), 0, s);
  return {reshape(dx, x.shape(), s)};
}
std::vector<Array> Scan::extreme_jvp(const JvpArgs& a) const {
  const Array &x = a.primals[0], &t = a.tangents[0];
  const Stream s = stream();
  if (x.size() == 0) return {zeros_like(t, s)};
  const Array ty = take_along_axis(t, extreme_source(kind_, x, axis_, reverse_, s), axis_, s);
  return {inclusive_ ? ty : shift_later(ty, axis_, reverse_, s)};
}

// logcumsumexp: dy_i/dx_j = exp(x_j - y_i) for every x_j output i takes in. Written with the scan
// itself so that nothing overflows (TensorFlow's and PyTorch's rule): with the cotangent split by
// sign, dx_j = exp(x_j + logcumsumexp_back(log g+ - y)_j) - (the same for g-), where
// logcumsumexp_back scans the other way (outputs taken in: those after j, and j itself when
// inclusive). A term of g = 0 is -inf (no term); y = -inf (an exclusive first output, or a run of
// -inf inputs) counts as 0, so that the rule has no -inf - -inf and those outputs pass nothing on
// (they take in no finite input). float16/bfloat16 gradients compute in float32.
struct SplitLog {
  Array pos, neg;  // log(v) where v > 0 (log(-v) where v < 0), -inf elsewhere
};
SplitLog split_log(const Array& v, Stream s) {
  const double inf = std::numeric_limits<double>::infinity();
  const Array p = greater(v, 0, s), n = less(v, 0, s);
  return {where(p, log(where(p, v, 1, s), s), -inf, s),
          where(n, log(where(n, negative(v, s), 1, s), s), -inf, s)};
}
Dtype rule_dtype(Dtype t) { return t == float16 || t == bfloat16 ? float32 : t; }
Array finite_or_zero(const Array& y, Stream s) {
  return where(equal(y, -std::numeric_limits<double>::infinity(), s), 0, y, s);
}

std::vector<Array> Scan::logcumsumexp_vjp(const VjpArgs& a) const {
  const Stream s = stream();
  const Dtype t = rule_dtype(a.primals[0].dtype());
  const Array x = astype(a.primals[0], t, s), g = astype(a.cotangents[0], t, s);
  const Array y = finite_or_zero(astype(a.outputs[0], t, s), s);
  const SplitLog lg = split_log(g, s);
  const auto part = [&](const Array& l) {
    return exp(add(make(ScanKind::logaddexp, subtract(l, y, s), axis_, !reverse_, inclusive_, s), x, s), s);
  };
  return {astype(subtract(part(lg.pos), part(lg.neg), s), a.primals[0].dtype(), s)};
}
// dy_i = sum over x_j taken in of t_j exp(x_j - y_i) = exp(logcumsumexp(log t+ + x)_i - y_i) - (t-).
std::vector<Array> Scan::logcumsumexp_jvp(const JvpArgs& a) const {
  const Stream s = stream();
  const Dtype dt = a.primals[0].dtype(), t = rule_dtype(dt);
  const Array x = astype(a.primals[0], t, s), tx = astype(a.tangents[0], t, s);
  const Array y = finite_or_zero(make(ScanKind::logaddexp, x, axis_, reverse_, inclusive_, s), s);
  const SplitLog lt = split_log(tx, s);
  const auto part = [&](const Array& l) {
    return exp(subtract(make(ScanKind::logaddexp, add(l, x, s), axis_, reverse_, inclusive_, s), y, s), s);
  };
  return {astype(subtract(part(lt.pos), part(lt.neg), s), dt, s)};
}

Array scan(ScanKind kind, const char* op, const Array& a, int axis, bool reverse, bool inclusive,
           StreamOrDevice s) {
  if (!a.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
  const int ax = normalize_axis(op, axis, a.ndim());
  return Scan::make(kind, a, ax, reverse, inclusive, to_stream(s));
}

}  // namespace
}  // namespace detail

Array cumsum(const Array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return detail::scan(detail::ScanKind::sum, "cumsum", a, axis, reverse, inclusive, s);
}
Array cumprod(const Array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return detail::scan(detail::ScanKind::prod, "cumprod", a, axis, reverse, inclusive, s);
}
Array cummax(const Array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return detail::scan(detail::ScanKind::max, "cummax", a, axis, reverse, inclusive, s);
}
Array cummin(const Array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return detail::scan(detail::ScanKind::min, "cummin", a, axis, reverse, inclusive, s);
}
Array logcumsumexp(const Array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  if (!a.valid()) throw ValueError::of("logcumsumexp", "the array is empty (default-constructed)");
  const Array x = is_floating(a.dtype()) ? a : astype(a, float32, s);
  return detail::scan(detail::ScanKind::logaddexp, "logcumsumexp", x, axis, reverse, inclusive, s);
}

}  // namespace kiln
