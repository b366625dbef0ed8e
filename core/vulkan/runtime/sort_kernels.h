#pragma once
// Recording helpers for the sort kernels (shaders/sort/*.comp): rows along the sorted axis,
// padded to a power of two, sorted by a bitonic network of (key, column) pairs: in shared memory
// for rows that fit a tile, with global passes (sort_step.comp) between shared-memory merges for
// longer ones. They never submit.
#include <cstdint>

#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// What record_sort_along_axis writes.
enum class SortOutput : uint8_t { values, indices };

/// How one sort is laid out (plan_sort).
struct SortPlan {
  int64_t rows = 0, n = 0;
  int64_t len = 1;         ///< n padded to a power of two
  uint32_t tile = 1;       ///< elements one workgroup sorts in shared memory (a power of two)
  uint32_t max_tile = 1;   ///< the shared arrays' size: the largest tile for this key width
  uint32_t workgroup = 1;  ///< invocations of the tile kernel (the same for every tile)
  int key_words = 1;       ///< 32-bit words per key (2 for 8-byte dtypes)
  int global_passes = 0;   ///< sort_step dispatches (rows longer than a tile)
  int merges = 0;          ///< shared-memory merges after global passes
};

/// The layout for `rows` rows of `n` elements with keys of `key_words` words on a device with
/// `max_shared` bytes of shared memory and workgroups of up to `max_workgroup` invocations;
/// tiles hold at most `tile_limit` elements (0: 4096). Pure; throws NotImplemented when rows times
/// the padded length passes 2^31 or the device's shared memory holds fewer than 2 elements.
SortPlan plan_sort(uint32_t max_shared, uint32_t max_workgroup, int64_t rows, int64_t n, int key_words,
                   uint32_t tile_limit = 0);

/// Sorts x along `axis`: ascending with NaNs last and ties in order of position (the CPU's stable
/// sort), or, when `descending`, descending with NaNs first and ties by lower position (the CPU's
/// top-k). out is contiguous (offset 0) with x's shape except along the axis, where it holds the
/// first out.shape[axis] <= n of each sorted row: the values (out dtype x's) or their positions
/// along the axis (int32). x: any strides and any dtype (bool, uint8, int8, int16, uint16, int32, uint32,
/// float16, bfloat16, float32, int64, float64; no 8-, 16- or 64-bit device features needed).
/// `tile_limit` caps the tile (tests use it to reach the multi-pass path with short rows).
/// Throws ShapeError, ValueError, NotImplemented (more than 2^31 padded elements, too many dims).
void record_sort_along_axis(Recorder& r, const GpuView& x, int axis, bool descending, SortOutput what,
                            const GpuView& out, uint32_t tile_limit = 0);

}  // namespace kiln::detail::vk
