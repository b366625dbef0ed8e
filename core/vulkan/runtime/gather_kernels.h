#pragma once
// Recording helpers for the gather kernels (shaders/gather/*.comp): take and gather by rows, their
// scatter-adds through a stable radix sort of the rows, put_along_axis, and raw moves between
// strided views (concatenate, pad, slice_update). They never submit. Blocks are 3-D views
// [P, N, Q] (dims before the indexed ones, the indexed ones, the dims after), any strides.
#include <cstdint>
#include <span>

#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// dst = src for views of one shape and one element size, any strides both (0 and negative too),
/// moving raw bits in the widest unit (up to 16 bytes) the layout allows; a contiguous pair is a
/// buffer copy. Up to kMaxStridedRank dims after merging. Throws ShapeError, ValueError (element
/// sizes differ), NotImplemented (too many dims; 1- or 2-byte units without 8- or 16-bit storage).
void record_move(Recorder& r, const GpuView& src, const GpuView& dst);

/// A new buffer of uint32 rows: rows[i] = flat row number that `indices` (k arrays of one shape,
/// any integer dtype and strides, negative ones counting from the end) pick from dims of `sizes`
/// (k sizes), in row-major order over the indices' shape. A row with an index outside [-n, n) is
/// the product of `sizes` (which no valid row reaches). Empty when the indices are. Throws
/// ShapeError, DtypeError (non-integer indices), NotImplemented (too many dims or rows).
BufferPtr record_index_rows(Recorder& r, std::span<const GpuView> indices, std::span<const int64_t> sizes);

/// out[p, j, q] = x[p, rows[j], q] (x a [P, N, Q] block; out contiguous [P, J, Q]); rows >= N read 0.
/// Any dtype (1-byte ones need 8-bit storage unless rows widen, 2-byte ones 16-bit storage).
void record_gather_rows(Recorder& r, const GpuView& x, const BufferPtr& rows, int64_t j_count,
                        const GpuView& out);

/// The positions of `count` rows (uint32 in [0, n]) stably sorted by row: `order` lists them,
/// row r's being order[offsets[r] .. offsets[r + 1]) in increasing position. A radix sort of 8-bit
/// digits (one pass per byte of n), deterministic; n + 1 offsets.
struct SortedRows {
  BufferPtr order, offsets;
  int64_t count = 0, n = 0;
};
SortedRows record_sort_rows(Recorder& r, const BufferPtr& rows, int64_t count, int64_t n);

/// out[p, r, q] = x[p, r, q] + the updates upd[p, j, q] of the j in row r's segment, added in order
/// of j as the CPU does (deterministic, no atomics). x [P, N, Q] and upd [P, J, Q] blocks, out
/// contiguous [P, N, Q]; N and J those of `sorted`. Numeric dtypes (float64 needs the device's
/// float64, 1- and 2-byte ones 8- and 16-bit storage). Throws ShapeError, ValueError, NotImplemented.
void record_scatter_add_rows(Recorder& r, const GpuView& x, const SortedRows& sorted, const GpuView& upd,
                             const GpuView& out);

/// How record_scatter_reduce_rows combines (gpu::ScatterOp's order): the last update in index
/// order, or the max, min or product of the old value and all updates.
enum class RowCombine { set, max, min, prod };

/// out[p, r, q] = x[p, r, q] combined by `op` with the updates upd[p, j, q] of the j in row r's
/// segment, walked in order of j as the CPU does (deterministic, no atomics); otherwise as
/// record_scatter_add_rows. set: any dtype of 1 to 8 bytes (moved as bits); max, min, prod:
/// numeric dtypes (max and min keep NaN). Throws ShapeError, ValueError, NotImplemented.
void record_scatter_reduce_rows(Recorder& r, const GpuView& x, const SortedRows& sorted, const GpuView& upd,
                                RowCombine op, const GpuView& out);

/// out[p, r, q] = vals[p, j, q] for the last j with rows[(p * J + j) * Q + q] == r, else x[p, r, q]
/// (put_along_axis). x [P, N, Q] and vals [P, J, Q] blocks, rows dense [P, J, Q] (rows >= N match
/// nothing), out contiguous [P, N, Q]. Any dtype of 1 to 8 bytes.
void record_put_rows(Recorder& r, const GpuView& x, const BufferPtr& rows, const GpuView& vals,
                     const GpuView& out);

}  // namespace kiln::detail::vk
