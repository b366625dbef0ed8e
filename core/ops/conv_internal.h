#pragma once
// For the convolutions built on conv.cpp's primitives (core/ops/conv_general.cpp).
#include <array>

#include "kiln/core/array.h"

namespace kiln::detail {

/// The transposed 2-d convolution (the ConvGradInput primitive, the adjoint of conv2d in its
/// input): x (N, O, H, W) and w (O, C / groups, KH, KW) give (N, C, out_hw). The caller validates;
/// conv_output_size of out_hw with these parameters must give back (H, W). float16/bfloat16
/// compute in float32.
Array conv2d_transpose(const Array& x, const Array& w, std::array<int, 2> stride, std::array<int, 2> padding,
                       std::array<int, 2> dilation, int groups, std::array<int64_t, 2> out_hw,
                       StreamOrDevice s);

}  // namespace kiln::detail
