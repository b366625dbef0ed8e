#pragma once
// The pooling calls of the gpu facade (core/vulkan/gpu.h, STYLE.md R9), for the eval_gpu of
// MaxPool2d and MaxPool2dScatter (core/ops/pooling.cpp). core/vulkan/runtime/pool_facade.cpp
// implements them on the kernels of shaders/pool/; without Vulkan, runtime/disabled_pool.cpp throws
// DeviceError. Layout is PyTorch's: x (N, C, H, W), pooled (N, C, OH, OW).
#include <array>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// Kernel size, stride, padding and dilation per spatial axis (height, width).
struct PoolOptions {
  std::array<int, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
};

/// out (N, C, OH, OW; its shape already set, storage given here) = for each window of x, its
/// maximum (src null; -inf for a window without input elements) or src's element at the window's
/// argmax (src with x's shape; 0 for an empty window). The argmax is the CPU's: the first maximum
/// in row-major window order, or the last NaN when the window holds one. x and src may be any
/// views of out's dtype: float32, float64 (shaderFloat64), float16 or bfloat16 (16-bit storage).
/// Throws ShapeError for shapes that do not fit, NotImplemented for other dtypes or ones the
/// device lacks.
void max_pool2d(const Array& x, const Array* src, const PoolOptions& o, Array& out);
/// out (x's shape) = g (N, C, OH, OW) routed to each window's argmax of x, values landing on one
/// position summed in row-major window order (accumulated in float32 for 16-bit types): the
/// CPU's result bit for bit. Throws as max_pool2d.
void max_pool2d_scatter(const Array& x, const Array& g, const PoolOptions& o, Array& out);

}  // namespace kiln::gpu
