#pragma once
// Recording helpers for the max-pooling kernels (shaders/pool/): each validates its views, picks
// the dtype's variant, packs the push constants and records the dispatches; they never submit.
// Layout is PyTorch's: x (n, c, h, w), pooled (n, c, oh, ow). Inputs may have any strides
// (transposed, sliced and flipped views are read in place); outputs are contiguous. Every view of
// one call has the same dtype: float32, float64 (needs shaderFloat64), float16 or bfloat16 (need
// 16-bit storage buffers; compared and accumulated in float32).
#include <array>
#include <cstdint>

#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// Window sizes and parameters of one 2-d max pooling; oh, ow are the pooled sizes (any >= 1 whose
/// windows start inside the padded input, as max_pool2d's output_size allows).
struct PoolDims {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  std::array<int, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
};

/// y (n, c, oh, ow) = x's maximum over each window (src null; -inf for a window without input
/// elements) or src (x's shape) at the window's argmax (0 for an empty window). The argmax is the
/// CPU's: the first maximum in row-major window order, the last NaN when the window holds one.
/// Throws ShapeError (views that do not fit `d`), ValueError (mixed dtypes, a strided y),
/// NotImplemented (another dtype, or one the device lacks; views past 2^31 elements).
void record_max_pool(Recorder& r, const PoolDims& d, const GpuView& x, const GpuView* src, const GpuView& y);

/// dx (x's shape) = g (n, c, oh, ow) summed onto each window's argmax of x in row-major window
/// order (the CPU's sums bit for bit; no atomics): an argmax pass into an int32 temporary, then one
/// invocation per input element. Throws like record_max_pool.
void record_max_pool_scatter(Recorder& r, const PoolDims& d, const GpuView& x, const GpuView& g,
                             const GpuView& dx);

}  // namespace kiln::detail::vk
