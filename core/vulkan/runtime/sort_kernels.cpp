#include "kiln/core/vulkan/runtime/sort_kernels.h"

#include <algorithm>
#include <array>
#include <bit>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// Rank of the rows' index space after merging dims (KILN_SORT_RANK in shaders/sort/sort_common.glsl).
constexpr int kMaxSortRank = 8;
// The largest tile by default: 32 KiB of shared memory for 4-byte keys, which leaves room for two
// workgroups per multiprocessor on current GPUs.
constexpr uint32_t kDefaultTileLimit = 4096;

// Flags of sort_tile.comp.
constexpr uint32_t kFromScratch = 1, kToOutput = 2, kStoreKeys = 4, kValues = 8;

struct TilePush {
  uint32_t rows, n, log2_len, tile, k, flags;
  int32_t x_offset, axis_stride;
  uint32_t out_len, inner, rank;
  std::array<uint32_t, kMaxSortRank> shape;
  std::array<int32_t, kMaxSortRank> strides;
};
struct StepPush {
  uint32_t pairs, log2_len, k, j;
};
struct WritePush {
  uint32_t words, total, log2_len, out_len, inner;
  int32_t x_offset, axis_stride;
  uint32_t rank;
  std::array<uint32_t, kMaxSortRank> shape;
  std::array<int32_t, kMaxSortRank> strides;
};
static_assert(sizeof(TilePush) == 108 && sizeof(WritePush) == 96);

// The dtype as the shaders number it (KILN_SORT_* in shaders/sort/sort_common.glsl).
uint32_t sort_dtype(Dtype t) {
  switch (t) {
    case bool_:
      return 0;
    case uint8:
      return 1;
    case int8:
      return 2;
    case int32:
      return 3;
    case uint32:
      return 4;
    case float16:
      return 5;
    case bfloat16:
      return 6;
    case float32:
      return 7;
    case int64:
      return 8;
    case float64:
      return 9;
    case int16:
      return 10;
    case uint16:
      return 11;
    case uint64:
      return 12;
  }
  throw NotImplemented::of("gpu sort", "no GPU sort for this dtype", "{}", dtype_name(t));
}

// The rows of x along `axis`: the other dims merged where their strides allow, row-major.
struct Rows {
  int64_t count = 1, inner = 1;
  Shape shape;
  Strides strides;
};
Rows rows_of(const GpuView& x, int axis, const char* op) {
  Rows r;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (static_cast<int>(d) == axis) continue;
    r.shape.push_back(x.shape[d]);
    r.strides.push_back(x.strides[d]);
    r.count *= x.shape[d];
    if (static_cast<int>(d) > axis) r.inner *= x.shape[d];
  }
  collapse(r.shape, std::array<Strides*, 1>{&r.strides});
  if (r.shape.size() > static_cast<size_t>(kMaxSortRank))
    throw NotImplemented::of(op, "too many dimensions for the GPU sort", "{} after merging, at most {}",
                             r.shape.size(), kMaxSortRank);
  return r;
}

template <class Push>
void fill_rows(Push& p, const Rows& rows) {
  p.rank = static_cast<uint32_t>(rows.shape.size());
  p.shape.fill(1);
  p.strides.fill(0);
  for (size_t d = 0; d < rows.shape.size(); ++d) {
    p.shape[d] = static_cast<uint32_t>(rows.shape[d]);
    p.strides[d] = static_cast<int32_t>(rows.strides[d]);
  }
}

uint32_t log2_of(int64_t len) { return static_cast<uint32_t>(std::countr_zero(static_cast<uint64_t>(len))); }

}  // namespace

SortPlan plan_sort(uint32_t max_shared, uint32_t max_workgroup, int64_t rows, int64_t n, int key_words,
                   uint32_t tile_limit) {
  constexpr const char* op = "gpu sort";
  SortPlan s;
  s.rows = rows;
  s.n = n;
  s.key_words = key_words;
  s.len = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(n, 1))));
  if (rows > 0 && s.len > (int64_t{1} << 31) / rows)
    throw NotImplemented::of(op, "more than 2^31 elements after padding rows to a power of two",
                             "{} rows of {}", rows, n);
  // Shared memory per element: the key words and the column.
  const uint32_t per_element = 4u * static_cast<uint32_t>(key_words + 1);
  const uint32_t fits = std::bit_floor(max_shared / per_element);
  if (fits < 2)
    throw NotImplemented::of(op, "the device's shared memory is too small", "{} bytes", max_shared);
  s.max_tile = std::min(std::bit_floor(tile_limit ? std::max(tile_limit, 2u) : kDefaultTileLimit), fits);
  if (s.len <= s.max_tile) {
    // Whole rows per tile; a small input takes one tile no larger than it needs.
    const auto total = static_cast<uint64_t>(std::max<int64_t>(rows * s.len, 1));
    s.tile = static_cast<uint32_t>(std::max<uint64_t>(static_cast<uint64_t>(s.len),
                                                      std::min<uint64_t>(s.max_tile, std::bit_ceil(total))));
  } else {
    s.tile = s.max_tile;
    // Merges of blocks k = 2 tile .. len: the distances j = k/2 .. tile go through global passes.
    for (int64_t k = 2 * int64_t{s.tile}; k <= s.len; k *= 2) {
      s.global_passes += std::countr_zero(static_cast<uint64_t>(k)) - std::countr_zero(uint64_t{s.tile});
      ++s.merges;
    }
  }
  // One workgroup size for every tile, so that a dtype needs two pipelines (ascending and
  // descending), not one per tile size; invocations past a small tile's pairs idle.
  s.workgroup = std::bit_floor(std::max(max_workgroup, 1u));
  return s;
}

void record_sort_along_axis(Recorder& r, const GpuView& x, int axis, bool descending, SortOutput what,
                            const GpuView& out, uint32_t tile_limit) {
  constexpr const char* op = "gpu sort";
  check_view(x, op);
  check_view(out, op);
  if (axis < 0 || static_cast<size_t>(axis) >= x.shape.size())
    throw ShapeError::of(op, "axis out of range", "axis {} for shape {}", axis, x.shape);
  const int64_t n = x.shape[static_cast<size_t>(axis)];
  bool same = out.shape.size() == x.shape.size();
  for (size_t d = 0; same && d < x.shape.size(); ++d)
    same = static_cast<int>(d) == axis ? out.shape[d] <= n : out.shape[d] == x.shape[d];
  if (!same)
    throw ShapeError::of(op, "the output must have the input's shape, at most as long along the axis",
                         "{} from {} along axis {}", out.shape, x.shape, axis);
  check_contiguous_out(out, out.shape, op);
  if (out.offset != 0) throw ValueError::of(op, "the output must start its buffer", "offset {}", out.offset);
  const bool values = what == SortOutput::values;
  if (out.dtype != (values ? x.dtype : int32))
    throw ValueError::of(op, "wrong output dtype", "{} for {} of {}", dtype_name(out.dtype),
                         values ? "values" : "indices", dtype_name(x.dtype));
  const uint32_t dtype = sort_dtype(x.dtype);
  const int64_t total = numel(out.shape);
  if (total == 0) return;

  Context& ctx = r.context();
  const Rows rows = rows_of(x, axis, op);
  const int key_words = size_of(x.dtype) == 8 ? 2 : 1;
  const SortPlan plan =
      plan_sort(ctx.caps().max_shared_memory, workgroup_size(ctx), rows.count, n, key_words, tile_limit);
  const bool global = plan.len > plan.tile;
  // The tile kernel writes indices and 4- and 8-byte values itself; narrower values are packed into
  // words by sort_write.comp, so that no two invocations store into one word.
  const bool direct = !values || size_of(x.dtype) >= 4;
  const auto padded = static_cast<size_t>(plan.rows * plan.len);
  // sort_write.comp stores whole words: the output's last one may pass its bytes.
  const auto out_words = (static_cast<uint64_t>(total) * static_cast<uint64_t>(size_of(out.dtype)) + 3) / 4;
  if (out_words * 4 > out.buffer->capacity())
    throw ValueError::of(op, "the output buffer does not hold whole words", "{} bytes",
                         out.buffer->capacity());
  const BufferPtr keys =
      global ? ctx.allocator().allocate(padded * 4u * static_cast<size_t>(key_words)) : x.buffer;
  const BufferPtr cols = global || !direct ? ctx.allocator().allocate(padded * 4u) : x.buffer;
  const uint32_t log2_len = log2_of(plan.len);
  const char* tile_shader = key_words == 1 ? "sort_tile_k32" : "sort_tile_k64";
  const char* step_shader = key_words == 1 ? "sort_step_k32" : "sort_step_k64";
  const std::initializer_list<uint32_t> tile_spec = {plan.workgroup, dtype, descending ? 1u : 0u,
                                                     plan.max_tile};

  TilePush tp{};
  tp.rows = static_cast<uint32_t>(plan.rows);
  tp.n = static_cast<uint32_t>(n);
  tp.log2_len = log2_len;
  tp.tile = plan.tile;
  tp.x_offset = static_cast<int32_t>(x.offset);
  tp.axis_stride = static_cast<int32_t>(x.strides[static_cast<size_t>(axis)]);
  tp.out_len = static_cast<uint32_t>(out.shape[static_cast<size_t>(axis)]);
  tp.inner = static_cast<uint32_t>(rows.inner);
  fill_rows(tp, rows);
  const Groups tiles = Groups::linear((padded + plan.tile - 1) / plan.tile, ctx);
  const uint32_t final_flags = direct ? kToOutput | (values ? kValues : 0u) : 0u;
  // Unused bindings hold x, read only, so that they add no hazards.
  const Binding unused{x.buffer, Access::read};

  // Tiles sorted (the whole rows when they fit).
  tp.k = 0;
  tp.flags = global ? kStoreKeys : final_flags;
  r.dispatch(builtin_shader(tile_shader), tile_spec,
             {{x.buffer, Access::read},
              global ? Binding{keys, Access::write} : unused,
              global || !direct ? Binding{cols, Access::write} : unused,
              !global && direct ? Binding{out.buffer, Access::write} : unused},
             tp, tiles);
  // Longer rows: the merges of blocks of k = 2 tile .. len, global passes for the distances of a tile
  // or more, then the rest in shared memory.
  for (int64_t k = 2 * int64_t{plan.tile}; global && k <= plan.len; k *= 2) {
    const uint32_t wg = workgroup_size(ctx);
    const StepPush sp0{static_cast<uint32_t>(padded / 2), log2_len, static_cast<uint32_t>(k), 0};
    for (int64_t j = k / 2; j >= plan.tile; j /= 2) {
      StepPush sp = sp0;
      sp.j = static_cast<uint32_t>(j);
      r.dispatch(builtin_shader(step_shader), {wg}, {{keys, Access::read_write}, {cols, Access::read_write}},
                 sp, Groups::linear((padded / 2 + wg - 1) / wg, ctx));
    }
    const bool last = k == plan.len;
    tp.k = static_cast<uint32_t>(k);
    tp.flags = kFromScratch | (last ? final_flags : kStoreKeys);
    r.dispatch(builtin_shader(tile_shader), tile_spec,
               {{x.buffer, Access::read},
                {keys, Access::read_write},
                {cols, Access::read_write},
                last && direct ? Binding{out.buffer, Access::write} : unused},
               tp, tiles);
  }
  if (direct) return;
  // Narrow values: gathered from x through the sorted columns, a word per invocation.
  WritePush wp{};
  wp.words = static_cast<uint32_t>(out_words);
  wp.total = static_cast<uint32_t>(total);
  wp.log2_len = log2_len;
  wp.out_len = tp.out_len;
  wp.inner = tp.inner;
  wp.x_offset = tp.x_offset;
  wp.axis_stride = tp.axis_stride;
  fill_rows(wp, rows);
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader("sort_write"), {wg, dtype, 0u},
             {{x.buffer, Access::read}, {cols, Access::read}, {out.buffer, Access::write}}, wp,
             Groups::linear((wp.words + wg - 1) / wg, ctx));
}

}  // namespace kiln::detail::vk
