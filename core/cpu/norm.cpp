#include "kiln/core/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/math.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/simd.h"
#include "kiln/core/half.h"

namespace kiln::detail {
namespace {

// Reductions keep this many partial results: GCC vectorizes the loops (it may not reorder one
// serial sum), and each partial sums n / 16 terms, which also bounds the rounding error.
constexpr int kLanes = 16;

// The sum of f(i) for i in [0, n), each f(i) called once and in order.
template <class A, class F>
inline A lane_sum(int64_t n, F&& f) {
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  A tail = 0;
  for (; i < n; ++i) tail += f(i);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0] + tail;
}

// The largest element; NaN is skipped (a NaN row still comes out NaN: exp(NaN - m) is in the sum).
template <class A>
inline A row_max(const A* x, int64_t n) {
  constexpr A kLow = -std::numeric_limits<A>::infinity();
  A acc[kLanes];
  std::fill(acc, acc + kLanes, kLow);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  A m = kLow;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int j = 0; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

template <class A>
inline A exp_of(A v) {
  if constexpr (std::is_same_v<A, float>)
    return exp_f32(v);
  else
    return std::exp(v);
}

// ---- one row, in the compute type A (x and y may not alias)

// Plain loops, each of which GCC vectorizes (exp included); the row stays in cache between them.
template <class A>
inline void softmax_row(const A* __restrict x, A* __restrict y, int64_t n, bool log) {
  const A m = row_max(x, n);
  // As the composite, log_softmax shifts by 0 when the max is infinite, so -inf entries stay -inf.
  const A shift = log && std::isinf(m) ? A(0) : m;
  for (int64_t i = 0; i < n; ++i) y[i] = exp_of(x[i] - shift);
  const A s = lane_sum<A>(n, [&](int64_t i) { return y[i]; });
  if (log) {
    const A log_s = std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - shift) - log_s;
    return;
  }
  const A inv = A(1) / s;
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// A row's statistics. The mean is kept as shift + delta, shift = x[0]: x - shift is exact for the
// elements near it and their sum small, so a row far from zero (mean 1e4, spread 1) loses nothing
// to float32 accumulation, nor to rounding the mean itself. rms_norm has shift = delta = 0.
template <class A>
struct RowStats {
  A shift = 0, delta = 0, r = 0;  // r = 1 / sqrt(var + eps), var the mean of squares for rms_norm
  A centered(A v) const { return (v - shift) - delta; }
};

template <class A>
inline RowStats<A> norm_stats(bool centered, const A* x, int64_t n, A eps) {
  RowStats<A> st;
  if (centered) {
    st.shift = x[0];
    st.delta = lane_sum<A>(n, [&](int64_t i) { return x[i] - st.shift; }) / A(n);
  }
  const A var = lane_sum<A>(n,
                            [&](int64_t i) {
                              const A d = st.centered(x[i]);
                              return d * d;
                            }) /
                A(n);
  st.r = A(1) / std::sqrt(var + eps);
  return st;
}

template <class A>
inline void norm_row(bool centered, const A* x, A* y, int64_t n, A eps, const A* w, const A* b) {
  const RowStats<A> st = norm_stats(centered, x, n, eps);
  const A r = st.r;
  if (w && b) {
    for (int64_t i = 0; i < n; ++i) y[i] = st.centered(x[i]) * r * w[i] + b[i];
  } else if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = st.centered(x[i]) * r * w[i];
  } else if (b) {
    for (int64_t i = 0; i < n; ++i) y[i] = st.centered(x[i]) * r + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = st.centered(x[i]) * r;
  }
}

template <class A>
inline void softmax_vjp_row(const A* y, const A* g, A* dx, int64_t n, bool log) {
  if (log) {
    const A s = lane_sum<A>(n, [&](int64_t i) { return g[i]; });
    for (int64_t i = 0; i < n; ++i) dx[i] = g[i] - exp_of(y[i]) * s;
    return;
  }
  const A s = lane_sum<A>(n, [&](int64_t i) { return g[i] * y[i]; });
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
}

template <class A>
inline void norm_vjp_row(bool centered, const A* x, const A* g, A* dx, A* gxhat, int64_t n, A eps,
                         const A* w) {
  const RowStats<A> st = norm_stats(centered, x, n, eps);
  const auto gw = [&](int64_t i) { return w ? g[i] * w[i] : g[i]; };
  const auto xhat = [&](int64_t i) { return st.centered(x[i]) * st.r; };
  const A inv_n = A(1) / A(n);
  const A a = centered ? lane_sum<A>(n, gw) * inv_n : A(0);
  const A c = lane_sum<A>(n, [&](int64_t i) { return gw(i) * xhat(i); }) * inv_n;
  for (int64_t i = 0; i < n; ++i) dx[i] = st.r * (gw(i) - a - xhat(i) * c);
  if (gxhat)
    for (int64_t i = 0; i < n; ++i) gxhat[i] = g[i] * xhat(i);
}

// One row of either pass, built per instruction set (exp and the reductions vectorize).
template <class A>
KILN_SIMD_CLONES void forward_row(RowNorm kind, A eps, const A* x, A* y, int64_t n, const A* w, const A* b) {
  if (kind == RowNorm::softmax || kind == RowNorm::log_softmax)
    softmax_row(x, y, n, kind == RowNorm::log_softmax);
  else
    norm_row(kind == RowNorm::layer_norm, x, y, n, eps, w, b);
}

template <class A>
KILN_SIMD_CLONES void backward_row(RowNorm kind, A eps, const A* x, const A* g, A* dx, A* gxhat, int64_t n,
                                   const A* w) {
  if (kind == RowNorm::softmax || kind == RowNorm::log_softmax)
    softmax_vjp_row(x, g, dx, n, kind == RowNorm::log_softmax);
  else
    norm_vjp_row(kind == RowNorm::layer_norm, x, g, dx, gxhat, n, eps, w);
}

// A row of T as the compute type A: the data itself when T is A, else a converted copy in `buf`.
template <class T, class A = compute_t<T>>
const A* load_row(const T* src, std::vector<A>& buf, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    return src;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = static_cast<A>(src[i]);
    return buf.data();
  }
}
// Where a row of T is computed: in place when T is A, else in `buf` (store_row converts it).
template <class T, class A = compute_t<T>>
A* out_row(T* dst, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>)
    return dst;
  else
    return buf.data();
}
template <class T, class A = compute_t<T>>
void store_row(const std::vector<A>& buf, T* dst, int64_t n) {
  if constexpr (!std::is_same_v<T, A>)
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(buf[static_cast<size_t>(i)]);
}

// Rows per task: about kElementwiseGrain elements.
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, n)); }

void check_dense(const Array& a, const char* what) {
  if (a.valid() && !a.row_contiguous())
    throw ValueError::of("norm_rows", "operands must be dense", "{} is not row-contiguous", what);
}

}  // namespace

void norm_rows(RowNorm kind, double eps, const Array& x, const Array& w, const Array& b, Array& out) {
  check_dense(x, "x");
  check_dense(w, "weight");
  check_dense(b, "bias");
  if (x.size() == 0) return;
  const int64_t n = x.shape(-1), rows = x.size() / n;
  visit_dtype<kFloatTypes>(x.dtype(), "norm_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const T* xs = x.strided_data<T>();
    T* ys = out.strided_data<T>();
    const A* ws = w.valid() ? w.strided_data<A>() : nullptr;
    const A* bs = b.valid() ? b.strided_data<A>() : nullptr;
    parallel_for(rows, row_grain(n), [&](int64_t lo, int64_t hi) {
      const size_t buf = std::is_same_v<T, A> ? 0 : static_cast<size_t>(n);
      std::vector<A> xb(buf), yb(buf);
      for (int64_t r = lo; r < hi; ++r) {
        const A* xr = load_row(xs + r * n, xb, n);
        forward_row<A>(kind, static_cast<A>(eps), xr, out_row(ys + r * n, yb), n, ws, bs);
        store_row(yb, ys + r * n, n);
      }
    });
  });
}

void norm_rows_vjp(RowNorm kind, double eps, const Array& x, const Array& w, const Array& g, Array& dx,
                   Array* gxhat) {
  check_dense(x, "x");
  check_dense(w, "weight");
  check_dense(g, "cotangent");
  if (x.size() == 0) return;
  const int64_t n = x.shape(-1), rows = x.size() / n;
  visit_dtype<kFloatTypes>(x.dtype(), "norm_rows_vjp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const T* xs = x.strided_data<T>();
    const T* gs = g.strided_data<T>();
    T* ds = dx.strided_data<T>();
    const A* ws = w.valid() ? w.strided_data<A>() : nullptr;
    A* gx = gxhat ? gxhat->strided_data<A>() : nullptr;
    parallel_for(rows, row_grain(n), [&](int64_t lo, int64_t hi) {
      const size_t buf = std::is_same_v<T, A> ? 0 : static_cast<size_t>(n);
      std::vector<A> xb(buf), gb(buf), db(buf);
      for (int64_t r = lo; r < hi; ++r) {
        const A* xr = load_row(xs + r * n, xb, n);
        const A* gr = load_row(gs + r * n, gb, n);
        backward_row<A>(kind, static_cast<A>(eps), xr, gr, out_row(ds + r * n, db), gx ? gx + r * n : nullptr,
                        n, ws);
        store_row(db, ds + r * n, n);
      }
    });
  });
}

}  // namespace kiln::detail
