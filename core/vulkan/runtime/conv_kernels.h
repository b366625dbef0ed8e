#pragma once
// Recording helpers for the convolution kernels (shaders/conv/): each validates its views, picks
// the kernel (choose_conv_kernel), packs the push constants and records the dispatches; they never
// submit. Layouts are PyTorch's: x (n, c, h, w), weight (o, c / groups, kh, kw), y (n, o, oh, ow).
// Inputs may have any strides (transposed and sliced views are read in place); outputs are
// contiguous. Every view of one call has the same dtype: float32; float16 and bfloat16 (stored so,
// computed in float32; need 16-bit storage buffers); float64 (needs shaderFloat64).
#include <array>
#include <cstdint>
#include <optional>

#include "kiln/core/dtype.h"
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// Sizes and parameters of one 2-d convolution; oh, ow must be the output sizes they imply.
struct ConvDims {
  int64_t n = 0, c = 0, h = 0, w = 0;  // x
  int64_t o = 0, kh = 0, kw = 0;       // weight (its channel dim is c / groups)
  int64_t oh = 0, ow = 0;              // y
  std::array<int, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int groups = 1;
};

/// Which product of the convolution a dispatch computes (the shaders' kPass).
enum class ConvPass : uint32_t { forward = 0, grad_input = 1, grad_weight = 2 };

/// The kernel a pass runs: the tiled implicit GEMM (conv_gemm.comp) with blocks of rows x columns
/// of the output, or the direct one (conv_direct*.comp: float64, and groups whose GEMM has too few
/// rows for any block, such as depthwise convolutions').
enum class ConvKernel { gemm64x64, gemm128x128, gemm32x128, gemm16x256, direct };
ConvKernel choose_conv_kernel(ConvPass pass, const ConvDims& d, Dtype t);

/// Splits of grad_weight's reduction over (sample, output pixel) for the GEMM kernel (1: none), so
/// that a small weight gradient of a large batch still fills the device.
int64_t conv_weight_splits(const ConvDims& d, ConvKernel k);

/// y = conv(x, w). `kernel` overrides choose_conv_kernel (for tests; the GEMM takes no float64).
/// Throws ShapeError (views that do not fit `d`), ValueError (mixed dtypes, a strided y, a GEMM
/// forced on float64), NotImplemented (another dtype, or one the device lacks; views past 2^31
/// elements).
void record_conv_forward(Recorder& r, const ConvDims& d, const GpuView& x, const GpuView& w, const GpuView& y,
                         std::optional<ConvKernel> kernel = std::nullopt);
/// dx = the adjoint of conv in its input applied to gy (n, o, oh, ow); dx is (n, c, h, w).
/// Throws like record_conv_forward.
void record_conv_grad_input(Recorder& r, const ConvDims& d, const GpuView& gy, const GpuView& w,
                            const GpuView& dx, std::optional<ConvKernel> kernel = std::nullopt);
/// dw = the adjoint of conv in its weight: the sum over samples of gy times x's patches; dw is
/// (o, c / groups, kh, kw). Throws like record_conv_forward.
void record_conv_grad_weight(Recorder& r, const ConvDims& d, const GpuView& x, const GpuView& gy,
                             const GpuView& dw, std::optional<ConvKernel> kernel = std::nullopt);

}  // namespace kiln::detail::vk
