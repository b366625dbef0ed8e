// Convolution as GEMM: the input's patches become columns (im2col), one GEMM per group multiplies
// them by the weights, and col2im is the adjoint used by the input gradient.
#include "kiln/core/cpu/im2col.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/gemm.h"
#include "kiln/core/cpu/parallel.h"

namespace kiln::detail {

int64_t conv_output_size(int64_t in, int64_t k, int stride, int padding, int dilation) {
  // The last window's start; negative when the dilated kernel overhangs the padded input, which
  // must give no output (C++ division would round -1 / 2 up to a window of 0).
  const int64_t last = in + 2 * padding - static_cast<int64_t>(dilation) * (k - 1) - 1;
  return last < 0 ? 0 : last / stride + 1;
}

namespace {

// Output positions o in [lo, hi) read input position o * stride + offset inside [0, size).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_range(int64_t offset, int stride, int64_t size, int64_t out) {
  // smallest o with o * stride + offset >= 0, and one past the largest with ... <= size - 1
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = size - 1 - offset;
  const int64_t hi = last < 0 ? 0 : last / stride + 1;
  return {std::min(lo, out), std::clamp(hi, std::min(lo, out), out)};
}

// Samples are split into blocks, one task each: every block runs im2col, its GEMMs (on one
// thread inside a task) and col2im for its own samples, so a small convolution is one parallel
// region instead of a dozen, and each sample's column matrix stays in cache. The block count
// depends only on n and the pool's size, never on which thread runs a block: results are
// deterministic. A single sample (one block) parallelizes inside im2col and the GEMM instead.
int64_t sample_blocks(int64_t n) {
  return std::clamp<int64_t>(4 * num_threads(), 1, std::max<int64_t>(n, 1));
}
template <class F>
void for_sample_blocks(int64_t n, F&& per_block) {
  const int64_t blocks = sample_blocks(n);
  parallel_for(blocks, 1, [&](int64_t bb, int64_t be) {
    for (int64_t b = bb; b < be; ++b) per_block(b, n * b / blocks, n * (b + 1) / blocks);
  });
}

// A pointwise convolution's column matrix is the input block itself when its pixels are dense.
bool input_is_columns(const ConvGeometry& g, const Strides& xs) {
  return g.pointwise() && xs[3] == 1 && (g.h == 1 || xs[2] == g.w) &&
         (g.c_per_group() == 1 || xs[1] >= g.h * g.w);
}

// Unit stride: every row of the column matrix is oh runs of ow consecutive input pixels. The
// input is copied once into a zero-padded block (when padded or not dense along rows), after which
// rows are plain copies with no bounds to check: the per-run bookkeeping was most of im2col's time
// on small images.
template <class T>
void im2col_unit_stride(const T* x, const std::array<int64_t, 3>& xs, const ConvGeometry& g, T* col,
                        int64_t ldcol) {
  const int64_t l = g.oh * g.ow, kk = g.kh * g.kw, cg = g.c_per_group();
  const T* src = x;
  int64_t cs = xs[0], rs = xs[1];
  std::vector<T> padded;
  if (g.padding[0] != 0 || g.padding[1] != 0 || xs[2] != 1) {
    const int64_t hp = g.h + 2 * g.padding[0], wp = g.w + 2 * g.padding[1];
    padded.assign(static_cast<size_t>(cg * hp * wp), T(0));
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t iy = 0; iy < g.h; ++iy) {
        const T* in = x + ci * xs[0] + iy * xs[1];
        T* out = padded.data() + (ci * hp + iy + g.padding[0]) * wp + g.padding[1];
        for (int64_t ix = 0; ix < g.w; ++ix) out[ix] = in[ix * xs[2]];
      }
    src = padded.data();
    cs = hp * wp;
    rs = wp;
  }
  parallel_for(g.col_rows(), std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(l, 1)),
               [&](int64_t rb, int64_t re) {
                 for (int64_t r = rb; r < re; ++r) {
                   const int64_t ci = r / kk, ki = (r % kk) / g.kw, kj = r % g.kw;
                   const T* base = src + ci * cs + ki * g.dilation[0] * rs + kj * g.dilation[1];
                   T* row = col + r * ldcol;
                   for (int64_t oy = 0; oy < g.oh; ++oy) {
                     const T* in = base + oy * rs;
                     T* out = row + oy * g.ow;
                     for (int64_t ox = 0; ox < g.ow; ++ox) out[ox] = in[ox];
                   }
                 }
               });
}

template <class T>
void im2col_ld(const T* x, const std::array<int64_t, 3>& xs, const ConvGeometry& g, T* col, int64_t ldcol) {
  if (g.stride[0] == 1 && g.stride[1] == 1) return im2col_unit_stride(x, xs, g, col, ldcol);
  const int64_t l = g.oh * g.ow, kk = g.kh * g.kw;
  parallel_for(g.col_rows(), std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(l, 1)),
               [&](int64_t rb, int64_t re) {
                 for (int64_t r = rb; r < re; ++r) {
                   const int64_t ci = r / kk, ki = (r % kk) / g.kw, kj = r % g.kw;
                   const int64_t off_y = ki * g.dilation[0] - g.padding[0];
                   const int64_t off_x = kj * g.dilation[1] - g.padding[1];
                   const ValidRange vx = valid_range(off_x, g.stride[1], g.w, g.ow);
                   const T* xc = x + ci * xs[0];
                   T* row = col + r * ldcol;
                   for (int64_t oy = 0; oy < g.oh; ++oy) {
                     T* out = row + oy * g.ow;
                     const int64_t iy = oy * g.stride[0] + off_y;
                     if (iy < 0 || iy >= g.h) {
                       std::fill(out, out + g.ow, T(0));
                       continue;
                     }
                     std::fill(out, out + vx.lo, T(0));
                     const T* xr = xc + iy * xs[1];
                     const int64_t sx = g.stride[1] * xs[2];
                     const T* src = xr + (vx.lo * g.stride[1] + off_x) * xs[2];
                     if (sx == 1)  // a plain loop: rows are short, a memcpy call per row costs more
                       for (int64_t ox = vx.lo; ox < vx.hi; ++ox) out[ox] = src[ox - vx.lo];
                     else
                       for (int64_t ox = vx.lo; ox < vx.hi; ++ox, src += sx) out[ox] = *src;
                     std::fill(out + vx.hi, out + g.ow, T(0));
                   }
                 }
               });
}

template <class T>
void col2im_ld(const T* col, int64_t ldcol, const ConvGeometry& g, T* dx) {
  const int64_t kk = g.kh * g.kw, hw = g.h * g.w;
  // One task per channel: the channel's rows write only its own (h, w) plane.
  parallel_for(g.c_per_group(), std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(hw * kk, 1)),
               [&](int64_t cb, int64_t ce) {
                 for (int64_t ci = cb; ci < ce; ++ci) {
                   T* plane = dx + ci * hw;
                   for (int64_t q = 0; q < kk; ++q) {
                     const int64_t ki = q / g.kw, kj = q % g.kw;
                     const int64_t off_y = ki * g.dilation[0] - g.padding[0];
                     const int64_t off_x = kj * g.dilation[1] - g.padding[1];
                     const ValidRange vy = valid_range(off_y, g.stride[0], g.h, g.oh);
                     const ValidRange vx = valid_range(off_x, g.stride[1], g.w, g.ow);
                     const T* row = col + (ci * kk + q) * ldcol;
                     for (int64_t oy = vy.lo; oy < vy.hi; ++oy) {
                       T* dst = plane + (oy * g.stride[0] + off_y) * g.w + off_x;
                       const T* src = row + oy * g.ow;
                       if (g.stride[1] == 1)  // unit stride: a loop the compiler vectorizes
                         for (int64_t ox = vx.lo; ox < vx.hi; ++ox) dst[ox] += src[ox];
                       else
                         for (int64_t ox = vx.lo; ox < vx.hi; ++ox) dst[ox * g.stride[1]] += src[ox];
                     }
                   }
                 }
               });
}

// The (col_rows, l) column matrix of sample s, group grp, and its leading dimension: the input
// itself when `direct` (see input_is_columns), else im2col written into `col`.
template <class T>
std::pair<const T*, int64_t> sample_columns(const T* x, const Strides& xs, const ConvGeometry& g, int64_t s,
                                            int grp, bool direct, std::vector<T>& col) {
  const int64_t cg = g.c_per_group(), l = g.oh * g.ow;
  const T* xg = x + s * xs[0] + grp * cg * xs[1];
  if (direct) return {xg, cg == 1 ? l : xs[1]};
  im2col_ld(xg, {xs[1], xs[2], xs[3]}, g, col.data(), l);
  return {col.data(), l};
}

template <class T>
void forward_impl(const Array& x, const Array& w, Array& y, const ConvGeometry& g) {
  y.allocate();
  const Array wd = dense_copy(w);
  const T* W = wd.strided_data<T>();
  const T* X = x.strided_data<T>();
  T* Y = y.strided_data<T>();
  const Strides& xs = x.strides();
  const int64_t l = g.oh * g.ow, r = g.col_rows(), og = g.o_per_group();
  const bool direct = input_is_columns(g, xs);
  for_sample_blocks(g.n, [&](int64_t, int64_t s0, int64_t s1) {
    std::vector<T> col(direct ? 0 : static_cast<size_t>(r * l));
    for (int64_t s = s0; s < s1; ++s)
      for (int grp = 0; grp < g.groups; ++grp) {
        const auto [B, ldb] = sample_columns(X, xs, g, s, grp, direct, col);
        gemm(false, false, og, l, r, T(1), W + grp * og * r, r, B, ldb, T(0), Y + (s * g.o + grp * og) * l,
             l);
      }
  });
}

template <class T>
void grad_input_impl(const Array& gy, const Array& w, Array& dx, const ConvGeometry& g) {
  dx.allocate();
  T* DX = dx.strided_data<T>();
  const Array wd = dense_copy(w), gd = dense_copy(gy);
  const T* W = wd.strided_data<T>();
  const T* GY = gd.strided_data<T>();
  const int64_t l = g.oh * g.ow, r = g.col_rows(), og = g.o_per_group(), cg = g.c_per_group(), hw = g.h * g.w;
  const bool direct = g.pointwise();  // the column matrix is dx's block itself
  for_sample_blocks(g.n, [&](int64_t, int64_t s0, int64_t s1) {
    std::vector<T> col(direct ? 0 : static_cast<size_t>(r * l));
    if (!direct) std::fill(DX + s0 * g.c * hw, DX + s1 * g.c * hw, T(0));
    for (int64_t s = s0; s < s1; ++s)
      for (int grp = 0; grp < g.groups; ++grp) {
        const T* gyg = GY + (s * g.o + grp * og) * l;
        T* dxg = DX + (s * g.c + grp * cg) * hw;
        // col (r, l) = W_g^T (r, og) @ gy block (og, l)
        gemm(true, false, r, l, og, T(1), W + grp * og * r, r, gyg, l, T(0), direct ? dxg : col.data(), l);
        if (!direct) col2im_ld(col.data(), l, g, dxg);
      }
  });
}

template <class T>
void grad_weight_impl(const Array& x, const Array& gy, Array& dw, const ConvGeometry& g) {
  dw.allocate();
  T* DW = dw.strided_data<T>();
  const Array gd = dense_copy(gy);
  const T* GY = gd.strided_data<T>();
  const T* X = x.strided_data<T>();
  const Strides& xs = x.strides();
  const int64_t l = g.oh * g.ow, r = g.col_rows(), og = g.o_per_group();
  const bool direct = input_is_columns(g, xs);
  // Each block sums its samples into its own partial dw; the partials are added in block order.
  const int64_t blocks = sample_blocks(g.n), dw_size = dw.size();
  std::vector<T> partials(static_cast<size_t>((blocks - 1) * dw_size));
  auto partial = [&](int64_t b) { return b == 0 ? DW : partials.data() + (b - 1) * dw_size; };
  for_sample_blocks(g.n, [&](int64_t b, int64_t s0, int64_t s1) {
    T* acc = partial(b);
    if (s0 == s1) std::fill(acc, acc + dw_size, T(0));
    std::vector<T> col(direct ? 0 : static_cast<size_t>(r * l));
    for (int64_t s = s0; s < s1; ++s)
      for (int grp = 0; grp < g.groups; ++grp) {
        const auto [B, ldb] = sample_columns(X, xs, g, s, grp, direct, col);
        // dw_g (og, r) (+)= gy block (og, l) @ col^T (l, r)
        gemm(false, true, og, r, l, T(1), GY + (s * g.o + grp * og) * l, l, B, ldb, s == s0 ? T(0) : T(1),
             acc + grp * og * r, r);
      }
  });
  for (int64_t b = 1; b < blocks; ++b) {
    const T* p = partial(b);
    for (int64_t i = 0; i < dw_size; ++i) DW[i] += p[i];
  }
}

constexpr DtypeSet kConvTypes{float32, float64};

}  // namespace

template <class T>
void im2col(const T* x, const std::array<int64_t, 3>& xs, const ConvGeometry& g, T* col) {
  im2col_ld(x, xs, g, col, g.oh * g.ow);
}
template <class T>
void col2im(const T* col, const ConvGeometry& g, T* dx) {
  col2im_ld(col, g.oh * g.ow, g, dx);
}
template void im2col<float>(const float*, const std::array<int64_t, 3>&, const ConvGeometry&, float*);
template void im2col<double>(const double*, const std::array<int64_t, 3>&, const ConvGeometry&, double*);
template void col2im<float>(const float*, const ConvGeometry&, float*);
template void col2im<double>(const double*, const ConvGeometry&, double*);

void conv2d_forward(const Array& x, const Array& w, Array& y, const ConvGeometry& g) {
  visit_dtype<kConvTypes>(y.dtype(), "conv2d",
                          [&](auto tag) { forward_impl<typename decltype(tag)::type>(x, w, y, g); });
}
void conv2d_grad_input(const Array& gy, const Array& w, Array& dx, const ConvGeometry& g) {
  visit_dtype<kConvTypes>(dx.dtype(), "conv2d",
                          [&](auto tag) { grad_input_impl<typename decltype(tag)::type>(gy, w, dx, g); });
}
void conv2d_grad_weight(const Array& x, const Array& gy, Array& dw, const ConvGeometry& g) {
  visit_dtype<kConvTypes>(dw.dtype(), "conv2d",
                          [&](auto tag) { grad_weight_impl<typename decltype(tag)::type>(x, gy, dw, g); });
}

}  // namespace kiln::detail
