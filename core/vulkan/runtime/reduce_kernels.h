#pragma once
// Recording helpers for the reduction kernels (shaders/reduce/reduce_rows.comp,
// arg_reduce_rows.comp): each validates its views, picks the variant and the layout (rows per
// workgroup, a two-pass split of long rows) and records the dispatches; they never submit.
#include "kiln/core/cpu/reduce.h"
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// out[r] = the reduction `kind` of x[r, :] for a 2-D view x [rows, cols] whose columns have
/// stride 1, or any positive stride for 1-byte dtypes (rows any non-negative stride; cols may be 0:
/// the identity, NaN for mean). out is contiguous [rows] of reduce_out_dtype(kind, x.dtype).
/// Inputs: every dtype; float16 and bfloat16 need 16-bit storage (and accumulate in float32),
/// float64 shaderFloat64, int64 shaderInt64; mean takes float inputs only, as on the CPU.
/// int32 input widened from bytes by record_widen_bytes may also write the byte dtype (max/min)
/// or uint32 (sum/prod of uint8).
/// Throws ShapeError, ValueError, NotImplemented (a device feature missing).
void record_reduce_rows(Recorder& r, ReduceKind kind, const GpuView& x, const GpuView& out);

/// out[b, k] = the reduction `kind` of x[b, :, k] for a 3-D view x [blocks, rows, cols] whose
/// columns have stride 1 (blocks and rows any non-negative strides; rows may be 0): the reduction
/// over a leading or middle axis (a bias gradient's sum over the batch), with coalesced loads of
/// neighbouring columns and no transposing copy. out is contiguous [blocks * cols]; dtypes, kinds
/// and errors as record_reduce_rows.
void record_reduce_cols(Recorder& r, ReduceKind kind, const GpuView& x, const GpuView& out);

/// Whether the reductions may use subgroup operations (the _sg variants) where the device has
/// subgroup arithmetic; on by default. Process-wide; tests turn it off to run the shared-memory
/// trees on a device that has subgroups.
void set_reduce_subgroups(bool enabled);

/// dst = src's bytes (bool, uint8: zero-extended; int8: sign-extended) as int32, src any
/// non-negative strides (merged to at most kMaxStridedRank dims), dst contiguous with src's shape:
/// what reductions of bytes whose axes do not merge read instead (record_copy moves no 1-byte
/// elements). Throws ShapeError, ValueError, NotImplemented.
void record_widen_bytes(Recorder& r, const GpuView& src, const GpuView& dst);

/// out[r] = column (int32) of the first largest (is_max) or smallest element of x[r, :], a NaN
/// counting as the extreme; x as for record_reduce_rows with cols > 0, every input dtype. Throws
/// like record_reduce_rows.
void record_arg_reduce_rows(Recorder& r, bool is_max, const GpuView& x, const GpuView& out);

}  // namespace kiln::detail::vk
