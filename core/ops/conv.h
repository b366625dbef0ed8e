#pragma once
// Convolutions in PyTorch's layout: input (N, C, [H,] W), weight (O, C/groups, [kH,] kW).
#include <array>

#include "kiln/core/array.h"

namespace kiln {

/// 1-d convolution (cross-correlation). Throws ShapeError for mismatched channels or groups or an
/// input smaller than the dilated kernel, ValueError for stride/dilation < 1 or padding < 0, and
/// DtypeError for integer operands; float16/bfloat16 compute in float32.
Array conv1d(const Array& input, const Array& weight, int stride = 1, int padding = 0, int dilation = 1,
             int groups = 1, StreamOrDevice s = {});
/// 2-d convolution (cross-correlation) with per-axis stride, padding and dilation; errors and
/// dtypes as conv1d.
Array conv2d(const Array& input, const Array& weight, std::array<int, 2> stride = {1, 1},
             std::array<int, 2> padding = {0, 0}, std::array<int, 2> dilation = {1, 1}, int groups = 1,
             StreamOrDevice s = {});

}  // namespace kiln
