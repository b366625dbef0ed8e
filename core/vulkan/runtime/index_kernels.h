#pragma once
// Recording helpers for the along-axis indexing kernels (shaders/index/take_along_axis.comp,
// scatter_add_along_axis.comp). They never submit.
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// Rank the along-axis kernels take after merging the dims around the axis (KILN_INDEX_RANK).
inline constexpr int kMaxIndexRank = 6;

/// out[.., j, ..] = x[.., idx[.., j, ..], ..] along `axis`. idx and out have one shape, x has it
/// except along the axis; x and idx any strides, out contiguous. Values: any 8- or 4-byte dtype
/// (moved as bits: float64 and int64 need no 64-bit device feature), 2-byte ones with 16-bit
/// storage. Indices int32, uint32 or int64; negative ones count from the end, and
/// any still outside [0, n) reads 0 (the caller checks indices it can see). Throws ShapeError,
/// NotImplemented (other dtypes, too many dims).
void record_take_along_axis(Recorder& r, const GpuView& x, const GpuView& idx, int axis, const GpuView& out);

/// out = x, then out[.., idx[.., j, ..], ..] += upd[.., j, ..] along `axis` for every j, duplicates
/// accumulating in order of j (deterministic). idx and upd have one shape, x (and out) have it
/// except along the axis; out contiguous. Values float32, int32, uint32, int64 (added as words with
/// a carry: no shaderInt64 needed) or float64 (needs shaderFloat64), indices as for
/// record_take_along_axis; updates at indices outside [-n, n) are dropped.
void record_scatter_add_along_axis(Recorder& r, const GpuView& x, const GpuView& idx, const GpuView& upd,
                                   int axis, const GpuView& out);

}  // namespace kiln::detail::vk
