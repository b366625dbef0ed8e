#pragma once
// 2-d convolution kernels on the CPU: im2col/col2im plus a GEMM per sample and group.
// Layouts follow PyTorch: input (N, C, H, W), weight (O, C/groups, kH, kW), output (N, O, OH, OW).
#include <array>
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln::detail {

/// Sizes of one 2-d convolution.
struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight (its channel dim is c / groups)
  int64_t oh, ow;      // output
  std::array<int, 2> stride, padding, dilation;
  int groups;

  int64_t c_per_group() const { return c / groups; }
  int64_t o_per_group() const { return o / groups; }
  /// Rows of the column matrix: one per (channel of a group, kernel row, kernel column).
  int64_t col_rows() const { return c_per_group() * kh * kw; }
  /// True when the column matrix equals the input itself (1x1 kernel, stride 1, no padding).
  bool pointwise() const {
    return kh == 1 && kw == 1 && stride[0] == 1 && stride[1] == 1 && padding[0] == 0 && padding[1] == 0;
  }
};

/// Output size of one spatial axis (may be <= 0 for inputs too small for the kernel).
int64_t conv_output_size(int64_t in, int64_t k, int stride, int padding, int dilation);

/// Writes the (col_rows, oh * ow) column matrix of channels [c0, c0 + c_per_group) of one sample.
/// `x` points at the sample's channel c0; xs are its channel, row and column strides.
template <class T>
void im2col(const T* x, const std::array<int64_t, 3>& xs, const ConvGeometry& g, T* col);
/// Adds the column matrix back onto a dense (c_per_group, h, w) block (the adjoint of im2col).
template <class T>
void col2im(const T* col, const ConvGeometry& g, T* dx);

/// y = conv(x, w). x, w may have any strides; y is allocated here. float32 and float64.
void conv2d_forward(const Array& x, const Array& w, Array& y, const ConvGeometry& g);
/// dx = the adjoint of conv in its input, applied to gy: (N, O, OH, OW) -> (N, C, H, W).
void conv2d_grad_input(const Array& gy, const Array& w, Array& dx, const ConvGeometry& g);
/// dw = the adjoint of conv in its weight: sum over samples of gy times the input's columns.
void conv2d_grad_weight(const Array& x, const Array& gy, Array& dw, const ConvGeometry& g);

}  // namespace kiln::detail
