#pragma once
// Recording helpers for the scan kernels (shaders/scan/scan_rows.comp, scan_cols.comp): they
// validate the views, pick the variant and the layout (invocations per row, a three-pass split
// of long axes that would leave the device idle) and record the dispatches; they never submit.
#include <cstdint>

#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

struct DeviceCaps;

/// The combine (scan_common.glsl's kOp: the values are the shaders').
enum class ScanOp : uint8_t { sum, prod, max, min, logaddexp };

struct ScanParams {
  ScanOp op = ScanOp::sum;
  bool reverse = false;   ///< accumulate from the end of the axis
  bool inclusive = true;  ///< out[k] includes x[k]; else it holds what precedes it (the identity first)
};

/// Device features the scan kernels may use: 16-bit stores (else float16/bfloat16 results go
/// through a float32 buffer and a conversion kernel), int64 and float64 (else those dtypes throw,
/// and float32 accumulates in float32).
struct ScanFeatures {
  bool storage16 = false, int64 = false, float64 = false;
  static ScanFeatures of(const DeviceCaps& caps);
};

/// The dtype of a scan's result for input t, as on the CPU (reduce_out_dtype of a sum): int32
/// for bool, int8 and int16, uint32 for uint8 and uint16, t otherwise.
Dtype scan_out_dtype(Dtype t);
/// The dtype of a scan's result by op: scan_out_dtype(t) for sums and products, t for the others.
Dtype scan_out_dtype(ScanOp op, Dtype t);

/// out[o, k, i] = the sum, product, max, min or logaddexp of x[o, j, i] over j <= k (j >= k when
/// reverse; j < k or j > k when exclusive) for x an [outer, n, inner] view with any strides, out
/// contiguous with x's shape and dtype scan_out_dtype(op, x.dtype). Every dtype (logaddexp: the
/// floats): integer (and bool) sums and products wrap in the unsigned type of the output's width,
/// max and min compare signed integers as signed and propagate NaN (bool, int8 and uint8 results go
/// through a 32-bit buffer and a conversion kernel), float32 sums, products and logaddexps
/// accumulate in float64 as on the CPU (float32 on a device without float64), float16 and
/// bfloat16 in float32. Throws ShapeError or ValueError (views, dtypes) and NotImplemented
/// (int64/float64 on a device without them, past 2^31 elements).
void record_scan(Recorder& r, const ScanParams& params, const GpuView& x, const GpuView& out);

/// The same with features chosen by the caller; they must be a subset of the device's (tests use
/// it to force the float32 path of 16-bit results and the errors of missing features). Throws
/// ValueError otherwise.
void record_scan(Recorder& r, const ScanParams& params, const GpuView& x, const GpuView& out,
                 const ScanFeatures& features);

}  // namespace kiln::detail::vk
