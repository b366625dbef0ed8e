// Cumulative sums and products: one Scan primitive parameterized by (kind, axis, reverse, inclusive).
#include "kiln/core/ops/scan.h"

#include <algorithm>
#include <numeric>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/reduce.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu_scan.h"

namespace kiln {
namespace detail {

enum class ScanKind : uint8_t { sum, prod };
std::ostream& operator<<(std::ostream& os, ScanKind k) { return os << (k == ScanKind::sum ? "sum" : "prod"); }

namespace {

constexpr int64_t kScanTile = 256;  // inner columns one task carries
constexpr int64_t kScanRows = 8;    // rows one task scans together when the axis is the last
constexpr int64_t kScanChunk = 64;  // elements of one row scanned before moving to the next row

// Float scans run in double (float for the halves): a scan is memory-bound, so the wider
// accumulator is free and long cumulative sums stay accurate. Integer scans wrap in the unsigned
// type of the output's width.
template <class T, class Out>
auto scan_acc_tag() {
  if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>)
    return TypeTag<float>{};
  else if constexpr (std::is_floating_point_v<T>)
    return TypeTag<double>{};
  else
    return TypeTag<std::make_unsigned_t<Out>>{};
}

// in and out are dense [outer, n, inner]. Each task carries a set of independent lanes: up to
// kScanTile inner columns, or (inner == 1) kScanRows rows scanned together, so the additions of
// different rows overlap instead of waiting on one another.
template <bool kProd, class T, class Out>
void scan_dense(const T* in, Out* out, int64_t outer, int64_t n, int64_t inner, bool reverse,
                bool inclusive) {
  using Acc = typename decltype(scan_acc_tag<T, Out>())::type;
  const auto step = [&](Acc& acc, int64_t at) {
    const Acc v = static_cast<Acc>(in[at]);
    const Acc next = kProd ? static_cast<Acc>(acc * v) : static_cast<Acc>(acc + v);
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
                     std::fill(acc, acc + m, Acc(kProd ? 1 : 0));
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
      std::fill(acc, acc + w, Acc(kProd ? 1 : 0));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t off = (o * n + (reverse ? n - 1 - k : k)) * inner + j0;
        for (int64_t j = 0; j < w; ++j) step(acc[j], off + j);
      }
    }
  });
}

class Scan final : public PrimitiveWithParams<Scan> {
 public:
  Scan(Stream s, ScanKind kind, int axis, bool reverse, bool inclusive)
      : PrimitiveWithParams(s), kind_(kind), axis_(axis), reverse_(reverse), inclusive_(inclusive) {}
  const char* name() const override { return kind_ == ScanKind::sum ? "CumSum" : "CumProd"; }
  auto params() const { return std::tie(kind_, axis_, reverse_, inclusive_); }
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
    visit_dtype<kAllTypes>(x.dtype(), name(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Out = sum_result_t<T>;
      const T* src = x.strided_data<T>();
      Out* dst = y.strided_data<Out>();
      if (kind_ == ScanKind::sum)
        scan_dense<false>(src, dst, outer, n, inner, reverse_, inclusive_);
      else
        scan_dense<true>(src, dst, outer, n, inner, reverse_, inclusive_);
    });
  }

  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::scan(kind_ == ScanKind::sum ? gpu::ScanKind::sum : gpu::ScanKind::prod, in[0], axis_, reverse_,
              inclusive_, out[0]);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    const int axis = b >= 0 && axis_ >= b ? axis_ + 1 : axis_;
    return {{make(kind_, a.inputs[0], axis, reverse_, inclusive_, stream())}, {b}};
  }

  static Array make(ScanKind kind, const Array& x, int axis, bool reverse, bool inclusive, Stream s) {
    const Dtype t = reduce_out_dtype(kind == ScanKind::sum ? ReduceKind::sum : ReduceKind::prod, x.dtype());
    return Array::make(x.shape(), t, std::make_shared<Scan>(s, kind, axis, reverse, inclusive), {x});
  }

 private:
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
  if (!is_floating(x.dtype())) return {zeros(x.shape(), reduce_out_dtype(ReduceKind::sum, x.dtype()), s)};
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

}  // namespace kiln
