// Max pooling: one primitive with two modes, so the forward pass and its gradient are one pass
// over the input each and the argmax is recomputed on the fly (no index tensor):
//   gather   inputs x[, src]: out[n,c,i,j] = src[n,c, argmax of x over window (i,j)]
//   scatter  inputs x, g:     out has x's shape, out[n,c, argmax of window (i,j)] += g[n,c,i,j]
// The forward pass is gather with src = x, passed once. Both modes are linear in src/g and
// piecewise constant in x, so the rules close over the two modes and grad-of-grad works to any order:
//   y = gather(x)        dx = scatter(x, ct)                 ty = gather(x, tx)
//   y = gather(x, src)   dx = 0, dsrc = scatter(x, ct)       ty = gather(x, tsrc)
//   y = scatter(x, g)    dx = 0, dg = gather(x, ct)          ty = scatter(x, tg)
#include "kiln/core/ops/pooling.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <ostream>
#include <vector>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu_pool.h"

namespace kiln {
namespace detail {
namespace {

using Pair = std::array<int, 2>;
using Size2 = std::array<int64_t, 2>;

struct PoolParams {
  Pair kernel, stride, padding, dilation;
  Size2 out_hw;
};

enum class PoolMode { gather, scatter };
std::ostream& operator<<(std::ostream& os, PoolMode m) {
  return os << (m == PoolMode::gather ? "gather" : "scatter");
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// The window taps of one output index along one axis that fall inside the input: taps [lo, hi)
// at input position start + t * dilation.
struct Span {
  int64_t start;
  int lo, hi;
};
std::vector<Span> spans(int64_t out, int64_t in, int k, int s, int p, int d) {
  std::vector<Span> v(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const int64_t start = i * s - p;
    const int64_t lo = std::min<int64_t>(k, start < 0 ? ceil_div(-start, d) : 0);
    const int64_t hi = std::max(lo, start < in ? std::min<int64_t>(k, ceil_div(in - start, d)) : 0);
    v[i] = {start, static_cast<int>(lo), static_cast<int>(hi)};
  }
  return v;
}

struct Plan {
  int64_t planes, h, w, oh, ow;
  int kh, kw, dh, dw;
  std::vector<Span> rows, cols;
};
Plan plan(const Shape& x, const PoolParams& p) {
  Plan g{x[0] * x[1], x[2],          x[3],          p.out_hw[0], p.out_hw[1], p.kernel[0],
         p.kernel[1], p.dilation[0], p.dilation[1], {},          {}};
  g.rows = spans(g.oh, g.h, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0]);
  g.cols = spans(g.ow, g.w, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1]);
  return g;
}

// A window clipped to the input is a rectangle of taps: offsets first + a * row_step + b * col_step
// in the plane, a < nh, b < nw.
template <class I>
struct Window {
  I first, row_step, col_step;
  int nh, nw;
};

// `mask` hidden from the optimizer: GCC turns a select on a coin-flip condition back into a
// branch, which mispredicts on every other tap of random data (2x slower windows).
template <class I>
inline I opaque(I mask) {
#if defined(__GNUC__)
  asm("" : "+r"(mask));
#endif
  return mask;
}

// The offset of the window's first maximum (taps in row-major order, only a greater value
// replaces the maximum), and its value in m; with kValueOnly just m (the forward pass needs no
// offset). Branch-free. NaN compares false and is skipped here; `nan` says the window may hold
// one (its sum is NaN: a NaN, or +inf and -inf, which window_argmax_nan handles exactly too),
// which costs one add per tap where `v != v` cost three instructions. KH, KW > 0 fix the size at
// compile time (the common 2x2 and 3x3 windows, fully unrolled).
template <bool kValueOnly, int KH, int KW, class T, class I>
inline I window_argmax(const T* x, const Window<I>& w, compute_t<T>& m, bool& nan) {
  using C = compute_t<T>;
  const int nh = KH > 0 ? KH : w.nh, nw = KW > 0 ? KW : w.nw;
  I best = w.first;
  m = static_cast<C>(x[best]);
  C sum = 0;
  for (int a = 0; a < nh; ++a)
    for (int b = 0; b < nw; ++b) {
      const I off = w.first + a * w.row_step + b * w.col_step;
      const C v = static_cast<C>(x[off]);
      sum += v;
      if constexpr (!kValueOnly) best ^= (best ^ off) & opaque(-static_cast<I>(v > m));
      m = std::max(m, v);
    }
  nan = sum != sum;
  return best;
}

// PyTorch's rule, for windows holding a NaN: `val > maxval || isnan(val)`, so the last NaN wins.
template <class T, class I>
I window_argmax_nan(const T* x, const Window<I>& w) {
  using C = compute_t<T>;
  I best = w.first;
  C m = static_cast<C>(x[best]);
  for (int a = 0; a < w.nh; ++a)
    for (int b = 0; b < w.nw; ++b) {
      const I off = w.first + a * w.row_step + b * w.col_step;
      const C v = static_cast<C>(x[off]);
      if (v > m || v != v) {
        m = v;
        best = off;
      }
    }
  return best;
}

// Calls emit(o, at, m) for each output o of the plane at x: at is the offset of the window's
// maximum m, or -1 (and m = -inf) for a window without input elements.
template <bool kValueOnly, int KH, int KW, class T, class I, class Emit>
void plane_argmax(const T* x, const Plan& g, Emit&& emit) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < g.oh; ++i) {
    const Span& r = g.rows[i];
    for (int64_t j = 0; j < g.ow; ++j) {
      const Span& c = g.cols[j];
      const Window<I> w{
          static_cast<I>((r.start + int64_t{r.lo} * g.dh) * g.w + c.start + int64_t{c.lo} * g.dw),
          static_cast<I>(int64_t{g.dh} * g.w), static_cast<I>(g.dw), r.hi - r.lo, c.hi - c.lo};
      if (w.nh <= 0 || w.nw <= 0) {
        emit(i * g.ow + j, I(-1), -std::numeric_limits<C>::infinity());
        continue;
      }
      C m;
      bool nan = false;
      I at = KH > 0 && w.nh == KH && w.nw == KW ? window_argmax<kValueOnly, KH, KW>(x, w, m, nan)
                                                : window_argmax<kValueOnly, 0, 0>(x, w, m, nan);
      if (nan) {
        at = window_argmax_nan(x, w);
        m = static_cast<C>(x[at]);
      }
      emit(i * g.ow + j, at, m);
    }
  }
}

// Runs f(planes lo, hi, plane function) on the pool, in chunks of about kElementwiseGrain
// elements of work, with the plane function chosen for the window size and the narrowest offset
// type (32-bit offsets keep the selects in 32-bit registers).
template <class T, bool kValueOnly, class F>
void for_planes(const Plan& g, F&& f) {
  const int64_t work = std::max<int64_t>(1, std::max(g.h * g.w, g.oh * g.ow * g.kh * g.kw));
  auto run = [&](auto kh, auto kw, auto offset) {
    using I = typename decltype(offset)::type;
    parallel_for(g.planes, std::max<int64_t>(1, kElementwiseGrain / work), [&](int64_t lo, int64_t hi) {
      f(lo, hi, [&](const T* x, auto&& emit) { plane_argmax<kValueOnly, kh(), kw(), T, I>(x, g, emit); });
    });
  };
  auto with_size = [&](auto offset) {
    using K2 = std::integral_constant<int, 2>;
    using K3 = std::integral_constant<int, 3>;
    using K0 = std::integral_constant<int, 0>;
    if (g.kh == 2 && g.kw == 2)
      run(K2{}, K2{}, offset);
    else if (g.kh == 3 && g.kw == 3)
      run(K3{}, K3{}, offset);
    else
      run(K0{}, K0{}, offset);
  };
  if (g.h * g.w <= std::numeric_limits<int32_t>::max())
    with_size(TypeTag<int32_t>{});
  else
    with_size(TypeTag<int64_t>{});
}

// src == nullptr: the forward pass (src is x; an empty window is -inf). Otherwise an empty
// window's output is 0 (the derivative of the constant -inf).
template <class T>
void gather_kernel(const T* x, const T* src, T* out, const Plan& g) {
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  if (!src) {
    for_planes<T, true>(g, [&](int64_t lo, int64_t hi, auto&& argmax) {
      for (int64_t n = lo; n < hi; ++n) {
        T* op = out + n * ohw;
        argmax(x + n * hw, [&](int64_t o, auto, auto m) { op[o] = static_cast<T>(m); });
      }
    });
    return;
  }
  for_planes<T, false>(g, [&](int64_t lo, int64_t hi, auto&& argmax) {
    for (int64_t n = lo; n < hi; ++n) {
      T* op = out + n * ohw;
      const T* sp = src + n * hw;
      argmax(x + n * hw, [&](int64_t o, auto at, auto) { op[o] = at >= 0 ? sp[at] : T(0.0f); });
    }
  });
}

// Half types accumulate in a float plane, since overlapping windows may add several values into
// one position.
template <class T>
void scatter_kernel(const T* x, const T* grad, T* out, const Plan& g) {
  using C = compute_t<T>;
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  for_planes<T, false>(g, [&](int64_t lo, int64_t hi, auto&& argmax) {
    std::vector<C> scratch(std::is_same_v<C, T> ? 0 : static_cast<size_t>(hw));
    for (int64_t n = lo; n < hi; ++n) {
      T* op = out + n * hw;
      C* acc;
      if constexpr (std::is_same_v<C, T>)
        acc = op;
      else
        acc = scratch.data();
      std::fill(acc, acc + hw, C(0));
      const T* gp = grad + n * ohw;
      argmax(x + n * hw, [&](int64_t o, auto at, auto) {
        if (at >= 0) acc[at] += static_cast<C>(gp[o]);
      });
      if constexpr (!std::is_same_v<C, T>)
        for (int64_t k = 0; k < hw; ++k) op[k] = static_cast<T>(acc[k]);
    }
  });
}

// The common 2x2 window with stride 2 and no padding: windows tile the plane without overlap, so
// the gradient writes each input position at most once (no accumulation). PyTorch's rule:
// a later tap wins when greater or NaN. float32/float64 only (half types take the general path).
bool is_pool2x2(const Plan& g, const PoolParams& p) {
  return p.kernel == Pair{2, 2} && p.stride == Pair{2, 2} && p.padding == Pair{0, 0} &&
         p.dilation == Pair{1, 1} && g.oh == g.h / 2 && g.ow == g.w / 2;
}
// Row loops over the windows of two input rows, written with bit masks so that GCC vectorizes them
// across windows (a per-window select chain, or a branch on a coin-flip comparison, ran the
// windows one by one and was a quarter of a CNN's training step).
template <class T>
using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
template <class T>
inline Bits<T> later_wins(T v, T m) {  // all ones where a later tap replaces the maximum m
  return static_cast<Bits<T>>(-static_cast<Bits<T>>((v > m) | (v != v)));
}
template <class T>
inline T pick(Bits<T> mask, T a, T b) {  // mask ? a : b
  return std::bit_cast<T>((std::bit_cast<Bits<T>>(a) & mask) | (std::bit_cast<Bits<T>>(b) & ~mask));
}
template <class T>
void pool2x2_row_max(const T* r0, const T* r1, T* out, int64_t ow) {
  for (int64_t j = 0; j < ow; ++j) {
    const T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
    const T m1 = pick(later_wins(b, a), b, a);
    const T m2 = pick(later_wins(c, m1), c, m1);
    out[j] = pick(later_wins(d, m2), d, m2);
  }
}
// g[j] to the maximum of window j (taps a b / c d), 0 to its other three taps.
template <class T>
void pool2x2_row_grad(const T* r0, const T* r1, const T* g, T* d0, T* d1, int64_t ow) {
  for (int64_t j = 0; j < ow; ++j) {
    const T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
    const Bits<T> tb = later_wins(b, a);
    const T m1 = pick(tb, b, a);
    const Bits<T> tc = later_wins(c, m1);
    const Bits<T> td = later_wins(d, pick(tc, c, m1));
    const Bits<T> gv = std::bit_cast<Bits<T>>(g[j]);
    d1[2 * j + 1] = std::bit_cast<T>(gv & td);
    d1[2 * j] = std::bit_cast<T>(gv & ~td & tc);
    d0[2 * j + 1] = std::bit_cast<T>(gv & ~td & ~tc & tb);
    d0[2 * j] = std::bit_cast<T>(gv & ~td & ~tc & ~tb);
  }
}
// grad == nullptr: out = max of each window (the forward pass); else out (x's shape) = grad routed
// to each window's maximum, 0 elsewhere (an odd last row or column is in no window).
template <class T>
void pool2x2(const T* x, const T* grad, T* out, const Plan& g) {
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  parallel_for(g.planes, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(hw, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t n = lo; n < hi; ++n) {
                   const T* xp = x + n * hw;
                   for (int64_t i = 0; i < g.oh; ++i) {
                     const T* r0 = xp + 2 * i * g.w;
                     if (!grad) {
                       pool2x2_row_max(r0, r0 + g.w, out + n * ohw + i * g.ow, g.ow);
                       continue;
                     }
                     T* d0 = out + n * hw + 2 * i * g.w;
                     pool2x2_row_grad(r0, r0 + g.w, grad + n * ohw + i * g.ow, d0, d0 + g.w, g.ow);
                     if (g.w % 2 != 0) d0[g.w - 1] = d0[2 * g.w - 1] = T(0);
                   }
                   if (grad && g.h % 2 != 0) std::fill(out + (n + 1) * hw - g.w, out + (n + 1) * hw, T(0));
                 }
               });
}

Array gather_node(const Array& x, const Array* src, const PoolParams& p, Stream s);
Array scatter_node(const Array& x, const Array& g, const PoolParams& p, Stream s);

// vmap: the batch axis of every input goes to the front (unbatched inputs are broadcast) and is
// folded into N; the primitive runs once on (B * N, C, H, W).
Array fold_batch(const Array& v, int axis, int64_t b, Stream s) {
  const Array f = batch_front(v, axis, b, s);
  return reshape(f, {b * f.shape(1), f.shape(2), f.shape(3), f.shape(4)}, s);
}
Array unfold_batch(const Array& y, int64_t b, Stream s) {
  const Shape& sh = y.shape();
  return reshape(y, {b, sh[0] / b, sh[1], sh[2], sh[3]}, s);
}

class MaxPool2d final : public PrimitiveWithParams<MaxPool2d> {
 public:
  MaxPool2d(Stream s, PoolParams p, PoolMode mode) : PrimitiveWithParams(s), p_(p), mode_(mode) {}
  const char* name() const override { return mode_ == PoolMode::gather ? "MaxPool2d" : "MaxPool2dScatter"; }
  auto params() const { return std::tie(p_.kernel, p_.stride, p_.padding, p_.dilation, p_.out_hw, mode_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    const Shape& x = in[0].shape();
    if (mode_ == PoolMode::scatter) return {x};
    return {{x[0], x[1], p_.out_hw[0], p_.out_hw[1]}};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array x = dense_copy(in[0]);
    const Array other = in.size() > 1 ? dense_copy(in[1]) : Array();
    const Plan g = plan(x.shape(), p_);
    out[0].allocate();
    visit_dtype<kFloatTypes>(x.dtype(), "max_pool2d", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const bool forward = mode_ == PoolMode::gather && !other.valid();
        if ((forward || mode_ == PoolMode::scatter) && is_pool2x2(g, p_)) {
          pool2x2<T>(x.strided_data<T>(), forward ? nullptr : other.strided_data<T>(),
                     out[0].strided_data<T>(), g);
          return;
        }
      }
      if (mode_ == PoolMode::gather)
        gather_kernel<T>(x.strided_data<T>(), other.valid() ? other.strided_data<T>() : nullptr,
                         out[0].strided_data<T>(), g);
      else
        scatter_kernel<T>(x.strided_data<T>(), other.strided_data<T>(), out[0].strided_data<T>(), g);
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const gpu::PoolOptions o{p_.kernel, p_.stride, p_.padding, p_.dilation};
    if (mode_ == PoolMode::gather)
      gpu::max_pool2d(in[0], in.size() > 1 ? &in[1] : nullptr, o, out[0]);
    else
      gpu::max_pool2d_scatter(in[0], in[1], o, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &ct = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0 && a.primals.size() > 1)
        out.push_back(zeros_like(x, stream()));  // the argmax is piecewise constant in x
      else if (mode_ == PoolMode::gather)
        out.push_back(scatter_node(x, ct, p_, stream()));
      else
        out.push_back(gather_node(x, &ct, p_, stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Array& x = a.primals[0];
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      if (a.argnums[i] == 0 && a.primals.size() > 1) continue;
      const Array& t = a.tangents[i];
      return {mode_ == PoolMode::gather ? gather_node(x, &t, p_, stream())
                                        : scatter_node(x, t, p_, stream())};
    }
    const Shape shape = output_shapes(a.primals)[0];
    return {zeros(shape, x.dtype(), stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const int64_t b = batch_size(a.inputs, a.axes);
    const Array x = fold_batch(a.inputs[0], a.axes[0], b, s);
    Array y;
    if (a.inputs.size() == 1) {
      y = gather_node(x, nullptr, p_, s);
    } else {
      const Array other = fold_batch(a.inputs[1], a.axes[1], b, s);
      y = mode_ == PoolMode::gather ? gather_node(x, &other, p_, s) : scatter_node(x, other, p_, s);
    }
    return {{unfold_batch(y, b, s)}, {0}};
  }

 private:
  PoolParams p_;
  PoolMode mode_;
};

Array gather_node(const Array& x, const Array* src, const PoolParams& p, Stream s) {
  Shape shape{x.shape(0), x.shape(1), p.out_hw[0], p.out_hw[1]};
  std::vector<Array> inputs{x};
  if (src) inputs.push_back(astype(*src, x.dtype(), s));
  return Array::make(std::move(shape), x.dtype(), std::make_shared<MaxPool2d>(s, p, PoolMode::gather),
                     std::move(inputs));
}
Array scatter_node(const Array& x, const Array& g, const PoolParams& p, Stream s) {
  return Array::make(x.shape(), x.dtype(), std::make_shared<MaxPool2d>(s, p, PoolMode::scatter),
                     {x, astype(g, x.dtype(), s)});
}

// PyTorch's checks and output size; `output_size` entries of -1 are replaced by the default.
PoolParams validate(const Array& x, Pair k, Pair s, Pair p, Pair d, Size2 output_size) {
  const char* op = "max_pool2d";
  check_array(op, x);
  if (x.ndim() != 4)
    throw ShapeError::of(op, "input must be 4-d (N, C, H, W)", "got {}", shape_str(x.shape()));
  if (!is_floating(x.dtype()))
    throw DtypeError::of(op, "input must be floating-point", "got {}", dtype_name(x.dtype()));
  for (int i = 0; i < 2; ++i) {
    if (k[i] < 1) throw ValueError::of(op, "kernel size must be >= 1", "got ({}, {})", k[0], k[1]);
    if (s[i] < 1) throw ValueError::of(op, "stride must be >= 1", "got ({}, {})", s[0], s[1]);
    if (d[i] < 1) throw ValueError::of(op, "dilation must be >= 1", "got ({}, {})", d[0], d[1]);
    if (p[i] < 0) throw ValueError::of(op, "padding must be >= 0", "got ({}, {})", p[0], p[1]);
    if (p[i] > (int64_t{k[i] - 1} * d[i] + 1) / 2)
      throw ValueError::of(op, "padding must be at most half of the (dilated) kernel size",
                           "padding ({}, {}), kernel ({}, {}), dilation ({}, {})", p[0], p[1], k[0], k[1],
                           d[0], d[1]);
  }
  PoolParams out{k, s, p, d, {}};
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.shape(2 + i);
    const int64_t span = in + 2 * int64_t{p[i]} - int64_t{d[i]} * (k[i] - 1) - 1;
    const int64_t o = output_size[i];
    if (o == -1) {
      out.out_hw[i] = floor_div(span, s[i]) + 1;
      continue;
    }
    if (o < 1)
      throw ValueError::of(op, "output_size entries must be >= 1 (or -1 for the default)", "got ({}, {})",
                           output_size[0], output_size[1]);
    if ((o - 1) * s[i] >= in + 2 * int64_t{p[i]})
      throw ValueError::of(op, "output_size is too large: its last window starts past the padded input",
                           "input {}, output_size ({}, {}), stride ({}, {}), padding ({}, {})",
                           shape_str(x.shape()), output_size[0], output_size[1], s[0], s[1], p[0], p[1]);
    out.out_hw[i] = o;
  }
  if (out.out_hw[0] < 1 || out.out_hw[1] < 1)
    throw ShapeError::of(op, "output size would be < 1",
                         "input {}, kernel ({}, {}), padding ({}, {}), dilation ({}, {}), output ({}, {})",
                         shape_str(x.shape()), k[0], k[1], p[0], p[1], d[0], d[1], out.out_hw[0],
                         out.out_hw[1]);
  return out;
}

}  // namespace
}  // namespace detail

Array max_pool2d(const Array& x, std::array<int, 2> kernel, std::array<int, 2> stride,
                 std::array<int, 2> padding, std::array<int, 2> dilation, std::array<int64_t, 2> output_size,
                 StreamOrDevice s) {
  const detail::PoolParams p = detail::validate(x, kernel, stride, padding, dilation, output_size);
  return detail::gather_node(x, nullptr, p, to_stream(s));
}

}  // namespace kiln
