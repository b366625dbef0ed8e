#pragma once
// Recording helpers for the built-in kernels: each validates its views, picks the shader variant
// and the specialisation, packs the push constants and records one dispatch. They are the layer
// the primitives' eval_gpu will call (through the gpu facade, STYLE.md R9); they never submit.
#include <cstdint>
#include <string>

#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace kiln::detail::vk {

/// Rank the strided kernels take after adjacent dimensions are merged (shaders' KILN_MAX_RANK).
inline constexpr int kMaxStridedRank = 8;

/// A strided view of a device buffer, as an evaluated Array is: shape, strides and offset in
/// elements of `dtype`. Every element a view reaches must lie inside its buffer (checked).
struct GpuView {
  BufferPtr buffer;
  Dtype dtype = float32;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  /// A row-major contiguous view of a whole buffer.
  static GpuView contiguous(BufferPtr buffer, Dtype dtype, Shape shape, int64_t offset = 0);
};

/// dst = src converted to dst's dtype, elementwise over their common shape; either view may be
/// strided. Types: same-type copies of 2- and 4-byte dtypes, and casts among float32, float16
/// and int32 (float to int truncates). Throws ShapeError, NotImplemented (other dtypes, float16
/// without 16-bit storage, more than kMaxStridedRank dims that do not merge).
void record_copy(Recorder& r, const GpuView& src, const GpuView& dst);

/// out[..] = sum of x[.., :] over x's last axis (float32). x's last axis must have stride 1 and its
/// other dims must merge into one; out is contiguous with x's shape less the last axis.
void record_sum_last_axis(Recorder& r, const GpuView& x, const GpuView& out);

}  // namespace kiln::detail::vk

// The GEMM (record_matmul and its options) lives in its own header, which needs GpuView above.
#include "kiln/core/vulkan/runtime/matmul_kernels.h"  // IWYU pragma: export
