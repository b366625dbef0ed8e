#pragma once
// Transposed, 3-d and general convolutions in PyTorch's layout (channels first), built on the
// 2-d convolution primitives of core/ops/conv.cpp, so they run on both devices and have vjp, jvp
// and vmap. Errors: ShapeError for operands of the wrong rank, channels that do not fit the
// groups or an empty output; ValueError for stride/dilation < 1, padding < 0, groups < 1 or an
// output_padding that is not smaller than stride or dilation; DtypeError for integer operands.
// float16/bfloat16 compute in float32.
#include <array>
#include <vector>

#include "kiln/core/array.h"

namespace kiln {

/// 3-d convolution (cross-correlation): input (N, C, D, H, W), weight (O, C/groups, kD, kH, kW),
/// output (N, O, OD, OH, OW) with OD = (D + 2 pad - dil (kD - 1) - 1) / stride + 1 (and so on).
Array conv3d(const Array& input, const Array& weight, std::array<int, 3> stride = {1, 1, 1},
             std::array<int, 3> padding = {0, 0, 0}, std::array<int, 3> dilation = {1, 1, 1}, int groups = 1,
             StreamOrDevice s = {});

/// torch.nn.functional.conv_transpose1d (the adjoint of conv1d in its input): input (N, Cin, W),
/// weight (Cin, Cout/groups, kW), output (N, Cout, Wout) with
/// Wout = (W - 1) stride - 2 padding + dilation (kW - 1) + output_padding + 1.
Array conv_transpose1d(const Array& input, const Array& weight, int stride = 1, int padding = 0,
                       int output_padding = 0, int dilation = 1, int groups = 1, StreamOrDevice s = {});
/// torch.nn.functional.conv_transpose2d: input (N, Cin, H, W), weight (Cin, Cout/groups, kH, kW);
/// sizes per axis as conv_transpose1d.
Array conv_transpose2d(const Array& input, const Array& weight, std::array<int, 2> stride = {1, 1},
                       std::array<int, 2> padding = {0, 0}, std::array<int, 2> output_padding = {0, 0},
                       std::array<int, 2> dilation = {1, 1}, int groups = 1, StreamOrDevice s = {});
/// torch.nn.functional.conv_transpose3d: input (N, Cin, D, H, W), weight (Cin, Cout/groups, kD,
/// kH, kW); sizes per axis as conv_transpose1d.
Array conv_transpose3d(const Array& input, const Array& weight, std::array<int, 3> stride = {1, 1, 1},
                       std::array<int, 3> padding = {0, 0, 0}, std::array<int, 3> output_padding = {0, 0, 0},
                       std::array<int, 3> dilation = {1, 1, 1}, int groups = 1, StreamOrDevice s = {});

/// MLX's conv_general in PyTorch's layout: input (N, C, spatial...) with 1 to 3 spatial axes,
/// weight (O, C/groups, k...). The input is dilated first (input_dilation - 1 zeros between
/// elements), then padded by padding_lo/padding_hi per axis, then convolved with the kernel
/// dilated by kernel_dilation at `stride`; flip reverses the kernel's spatial axes (a true
/// convolution rather than a cross-correlation). Each list is empty (the default: 1, or 0 for
/// padding), one value for every axis, or one per axis (ValueError otherwise). Input dilation
/// multiplies through its zeros; conv_transpose*d do not go this way.
Array conv_general(const Array& input, const Array& weight, std::vector<int> stride = {},
                   std::vector<int> padding_lo = {}, std::vector<int> padding_hi = {},
                   std::vector<int> kernel_dilation = {}, std::vector<int> input_dilation = {},
                   int groups = 1, bool flip = false, StreamOrDevice s = {});

}  // namespace kiln
