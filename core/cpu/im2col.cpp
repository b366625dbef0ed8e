// Convolution as GEMM: the input's patches become columns (im2col), one GEMM per group multiplies
// them by the weights, and col2im is the adjoint used by the input gradient.
#include "kiln/core/cpu/im2col.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/gemm.h"
#include "kiln/core/cpu/parallel.h"

namespace kiln::detail {

int64_t conv_output_size(int64_t in, int64_t k, int stride, int padding, int dilation) {
  return (in + 2 * padding - static_cast<int64_t>(dilation) * (k - 1) - 1) / stride + 1;
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

// Samples per GEMM: small images are batched so that the GEMM has at least ~2048 columns.
int64_t samples_per_chunk(const ConvGeometry& g) {
  const int64_t l = std::max<int64_t>(g.oh * g.ow, 1);
  return std::clamp<int64_t>(2048 / l, 1, std::max<int64_t>(g.n, 1));
}

// A pointwise convolution's column matrix is the input block itself when its pixels are dense.
bool input_is_columns(const ConvGeometry& g, const Strides& xs) {
  return g.pointwise() && xs[3] == 1 && (g.h == 1 || xs[2] == g.w) &&
         (g.c_per_group() == 1 || xs[1] >= g.h * g.w);
}

// Copies gy[n0 + s, o0 + o, :] for s < nb, o < og into a dense (og, nb * l) matrix.
template <class T>
void gather_output_block(const T* gy, int64_t n0, int64_t nb, int64_t o0, const ConvGeometry& g, T* dst) {
  const int64_t l = g.oh * g.ow, og = g.o_per_group();
  parallel_for(og * nb, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(l, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t i = b; i < e; ++i) {
                   const int64_t o = i / nb, s = i % nb;
                   std::memcpy(dst + o * nb * l + s * l, gy + ((n0 + s) * g.o + o0 + o) * l,
                               static_cast<size_t>(l) * sizeof(T));
                 }
               });
}

template <class T>
void im2col_ld(const T* x, const std::array<int64_t, 3>& xs, const ConvGeometry& g, T* col, int64_t ldcol) {
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
                     if (sx == 1)
                       std::memcpy(out + vx.lo, src, static_cast<size_t>(vx.hi - vx.lo) * sizeof(T));
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
                       T* dst = plane + (oy * g.stride[0] + off_y) * g.w;
                       const T* src = row + oy * g.ow;
                       for (int64_t ox = vx.lo; ox < vx.hi; ++ox) dst[ox * g.stride[1] + off_x] += src[ox];
                     }
                   }
                 }
               });
}

template <class T>
void forward_impl(const Array& x, const Array& w, Array& y, const ConvGeometry& g) {
  y.allocate();
  const Array wd = dense_copy(w);
  const T* W = wd.strided_data<T>();
  const T* X = x.strided_data<T>();
  T* Y = y.strided_data<T>();
  const Strides& xs = x.strides();
  const int64_t l = g.oh * g.ow, r = g.col_rows(), og = g.o_per_group(), cg = g.c_per_group();
  const int64_t nb = samples_per_chunk(g);
  const bool direct = nb == 1 && input_is_columns(g, xs);
  std::vector<T> col(direct ? 0 : static_cast<size_t>(r * nb * l));
  std::vector<T> tmp(nb > 1 ? static_cast<size_t>(og * nb * l) : 0);
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t cnt = std::min(nb, g.n - n0);
    for (int grp = 0; grp < g.groups; ++grp) {
      const T* B = col.data();
      int64_t ldb = cnt * l;
      if (direct) {
        B = X + n0 * xs[0] + grp * cg * xs[1];
        ldb = cg == 1 ? l : xs[1];
      } else {
        for (int64_t s = 0; s < cnt; ++s)
          im2col_ld(X + (n0 + s) * xs[0] + grp * cg * xs[1], {xs[1], xs[2], xs[3]}, g, col.data() + s * l,
                    cnt * l);
      }
      const T* A = W + grp * og * r;
      if (nb == 1) {
        gemm(false, false, og, l, r, T(1), A, r, B, ldb, T(0), Y + (n0 * g.o + grp * og) * l, l);
        continue;
      }
      gemm(false, false, og, cnt * l, r, T(1), A, r, B, ldb, T(0), tmp.data(), cnt * l);
      for (int64_t s = 0; s < cnt; ++s)
        for (int64_t o = 0; o < og; ++o)
          std::memcpy(Y + ((n0 + s) * g.o + grp * og + o) * l, tmp.data() + o * cnt * l + s * l,
                      static_cast<size_t>(l) * sizeof(T));
    }
  }
}

template <class T>
void grad_input_impl(const Array& gy, const Array& w, Array& dx, const ConvGeometry& g) {
  dx.allocate();
  T* DX = dx.strided_data<T>();
  std::fill(DX, DX + dx.size(), T(0));
  const Array wd = dense_copy(w), gd = dense_copy(gy);
  const T* W = wd.strided_data<T>();
  const T* GY = gd.strided_data<T>();
  const int64_t l = g.oh * g.ow, r = g.col_rows(), og = g.o_per_group(), cg = g.c_per_group(), hw = g.h * g.w;
  const int64_t nb = samples_per_chunk(g);
  std::vector<T> col(static_cast<size_t>(r * nb * l));
  std::vector<T> gblock(nb > 1 ? static_cast<size_t>(og * nb * l) : 0);
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t cnt = std::min(nb, g.n - n0);
    for (int grp = 0; grp < g.groups; ++grp) {
      const T* B = GY + (n0 * g.o + grp * og) * l;
      if (nb > 1) {
        gather_output_block(GY, n0, cnt, grp * og, g, gblock.data());
        B = gblock.data();
      }
      T* dxb = DX + (n0 * g.c + grp * cg) * hw;
      // col (r, cnt * l) = W_g^T (r, og) @ gy block (og, cnt * l)
      if (g.pointwise() && cnt == 1) {  // the column matrix is dx's block itself
        gemm(true, false, r, l, og, T(1), W + grp * og * r, r, B, l, T(0), dxb, l);
        continue;
      }
      gemm(true, false, r, cnt * l, og, T(1), W + grp * og * r, r, B, cnt * l, T(0), col.data(), cnt * l);
      for (int64_t s = 0; s < cnt; ++s) col2im_ld(col.data() + s * l, cnt * l, g, dxb + s * g.c * hw);
    }
  }
}

template <class T>
void grad_weight_impl(const Array& x, const Array& gy, Array& dw, const ConvGeometry& g) {
  dw.allocate();
  T* DW = dw.strided_data<T>();
  const Array gd = dense_copy(gy);
  const T* GY = gd.strided_data<T>();
  const T* X = x.strided_data<T>();
  const Strides& xs = x.strides();
  const int64_t l = g.oh * g.ow, r = g.col_rows(), og = g.o_per_group(), cg = g.c_per_group();
  const int64_t nb = samples_per_chunk(g);
  const bool direct = nb == 1 && input_is_columns(g, xs);
  std::vector<T> col(direct ? 0 : static_cast<size_t>(r * nb * l));
  std::vector<T> gblock(nb > 1 ? static_cast<size_t>(og * nb * l) : 0);
  if (g.n == 0) std::fill(DW, DW + dw.size(), T(0));
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t cnt = std::min(nb, g.n - n0);
    for (int grp = 0; grp < g.groups; ++grp) {
      const T* A = GY + (n0 * g.o + grp * og) * l;
      if (nb > 1) {
        gather_output_block(GY, n0, cnt, grp * og, g, gblock.data());
        A = gblock.data();
      }
      const T* B = col.data();
      int64_t ldb = cnt * l;
      if (direct) {
        B = X + n0 * xs[0] + grp * cg * xs[1];
        ldb = cg == 1 ? l : xs[1];
      } else {
        for (int64_t s = 0; s < cnt; ++s)
          im2col_ld(X + (n0 + s) * xs[0] + grp * cg * xs[1], {xs[1], xs[2], xs[3]}, g, col.data() + s * l,
                    cnt * l);
      }
      // dw_g (og, r) (+)= gy block (og, cnt * l) @ col^T (cnt * l, r)
      gemm(false, true, og, r, cnt * l, T(1), A, cnt * l, B, ldb, n0 == 0 ? T(0) : T(1), DW + grp * og * r,
           r);
    }
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
