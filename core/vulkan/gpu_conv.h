#pragma once
// The convolution calls of the gpu facade (core/vulkan/gpu.h, STYLE.md R9), for the eval_gpu of
// Conv, ConvGradInput and ConvGradWeight (core/ops/conv.cpp). core/vulkan/runtime/conv_facade.cpp
// implements them on the kernels of shaders/conv/; without Vulkan, runtime/disabled_conv.cpp
// throws DeviceError. Layouts are PyTorch's: x (N, C, H, W), weight (O, C / groups, KH, KW),
// y (N, O, OH, OW); 1-d convolutions arrive as 2-d ones with H = 1.
#include <array>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// Stride, padding and dilation per spatial axis (height, width), and the channel groups.
struct ConvOptions {
  std::array<int, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int groups = 1;
};

/// y = the 2-d convolution (cross-correlation) of x with w; y's shape is set, storage is given
/// here. x and w may be any views and must share y's dtype: float32, float64 (where the device has
/// shaderFloat64), float16 or bfloat16 (16-bit storage; float32 accumulation). Throws ShapeError
/// for shapes that do not fit, NotImplemented for other dtypes or ones the device lacks.
void conv2d(const Array& x, const Array& w, const ConvOptions& o, Array& y);
/// dx = the adjoint of conv2d in x applied to gy (N, O, OH, OW); dx's shape (N, C, H, W) is set.
/// Throws as conv2d.
void conv2d_grad_input(const Array& gy, const Array& w, const ConvOptions& o, Array& dx);
/// dw = the adjoint of conv2d in w: the sum over samples of gy times x's patches; dw's shape
/// (O, C / groups, KH, KW) is set. Throws as conv2d.
void conv2d_grad_weight(const Array& x, const Array& gy, const ConvOptions& o, Array& dw);

}  // namespace kiln::gpu
