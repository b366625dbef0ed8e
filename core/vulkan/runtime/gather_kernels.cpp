#include "kiln/core/vulkan/runtime/gather_kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// The radix kernels take `items` keys per invocation: one while that leaves at most
// kRadixTargetTiles tiles (short lists spread over more workgroups: each walks its tile in rounds),
// up to kRadixMaxItems for long ones, so the digit-major histogram that one workgroup scans stays
// near 256 * kRadixTargetTiles words.
constexpr int64_t kRadixTargetTiles = 64;
constexpr int64_t kRadixMaxItems = 16;
constexpr int64_t kRadixBins = 256;

struct MovePush {
  uint32_t n, rank, src_offset, dst_offset;
  std::array<uint32_t, kMaxStridedRank> shape;
  std::array<int32_t, kMaxStridedRank> src_strides, dst_strides;
};
struct IndexRowsPush {
  uint32_t total, rank, offset, n, bad_row, flags;
  std::array<uint32_t, kMaxStridedRank> shape;
  std::array<int32_t, kMaxStridedRank> strides;
};
struct GatherPush {
  uint32_t total, j_count, q_count, n, x_offset;
  int32_t p_stride, n_stride, q_stride;
};
struct RadixPush {
  uint32_t count, tiles, shift, first, items;
};
struct OffsetsPush {
  uint32_t count, n;
};
// x [P, N, Q] and a second block [P, J, Q] (the updates or values), with the output's size.
struct BlocksPush {
  uint32_t total, n, q_count, j_count, x_offset;
  int32_t x_p_stride, x_n_stride, x_q_stride;
  uint32_t v_offset;
  int32_t v_p_stride, v_j_stride, v_q_stride;
};
static_assert(sizeof(MovePush) == 112 && sizeof(IndexRowsPush) == 88 && sizeof(BlocksPush) == 48);

template <size_t M>
void fill(std::array<uint32_t, M>& dst, const Shape& src) {
  dst.fill(0);
  for (size_t i = 0; i < src.size(); ++i) dst[i] = u32(src[i]);
}
template <size_t M>
void fill(std::array<int32_t, M>& dst, const Strides& src) {
  dst.fill(0);
  for (size_t i = 0; i < src.size(); ++i) dst[i] = i32(src[i]);
}

Groups groups_for(int64_t invocations, uint32_t wg, const Context& ctx) {
  return Groups::linear(static_cast<uint64_t>((invocations + wg - 1) / wg), ctx);
}

// The shader variant suffix of a unit of `bytes`, after checking the device can store it.
const char* unit_suffix(int64_t bytes, const Context& ctx, const char* op) {
  if (bytes == 1 && !ctx.caps().storage8)
    throw NotImplemented::of(op, "the device lacks 8-bit storage buffers", "{}", ctx.caps().name);
  if (bytes == 2 && !ctx.caps().storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{}", ctx.caps().name);
  switch (bytes) {
    case 1:
      return "u8";
    case 2:
      return "u16";
    case 4:
      return "u32";
    case 8:
      return "u64";
    default:
      return "u128";
  }
}

// The factor m (a power of two with elem * m <= 16 bytes) by which a layout whose innermost dim
// is contiguous can move in wider units: that dim's size and every offset and outer stride in
// `multiples` divisible by m. Wide units turn a row copy into 16-byte loads and stores.
int64_t widen_factor(int64_t elem, int64_t inner, const std::vector<int64_t>& multiples) {
  for (int64_t m = 16 / elem; m > 1; m /= 2) {
    bool ok = inner % m == 0;
    for (int64_t v : multiples) ok = ok && v % m == 0;
    if (ok) return m;
  }
  return 1;
}

// The indices' dtype as gather_common.glsl numbers it (kIndexType).
uint32_t index_type(Dtype t, const char* op) {
  switch (t) {
    case int32:
      return 0;
    case uint32:
      return 1;
    case int64:
      return 2;
    case int8:
      return 3;
    case uint8:
      return 4;
    default:
      throw DtypeError::of(op, "indices must have an integer dtype", "got {}", dtype_name(t));
  }
}

void check_block(const GpuView& v, const char* what, const char* op) {
  if (v.shape.size() != 3)
    throw ShapeError::of(op, "expected a [P, N, Q] block", "{} of shape {}", what, v.shape);
}

BufferPtr allocate_words(Recorder& r, int64_t words) {
  return r.context().allocator().allocate(static_cast<size_t>(std::max<int64_t>(words, 1)) * 4);
}

}  // namespace

void record_move(Recorder& r, const GpuView& src, const GpuView& dst) {
  constexpr const char* op = "gpu move";
  check_view(src, op);
  check_view(dst, op);
  if (src.shape != dst.shape) throw ShapeError::of(op, "shapes differ", "{} vs {}", src.shape, dst.shape);
  if (size_of(src.dtype) != size_of(dst.dtype))
    throw ValueError::of(op, "element sizes differ", "{} to {}", dtype_name(src.dtype),
                         dtype_name(dst.dtype));
  const int64_t n = numel(src.shape), elem = size_of(src.dtype);
  if (n == 0) return;
  Shape shape = src.shape;
  Strides ss = src.strides, ds = dst.strides;
  collapse<2>(shape, {&ss, &ds});
  int64_t so = src.offset, dof = dst.offset;
  if (is_linear(shape, ss) && is_linear(shape, ds)) {
    r.copy(src.buffer, static_cast<size_t>(so * elem), dst.buffer, static_cast<size_t>(dof * elem),
           static_cast<size_t>(n * elem));
    return;
  }
  int64_t unit = elem;
  if (!shape.empty() && ss.back() == 1 && ds.back() == 1) {
    std::vector<int64_t> multiples{so, dof};
    for (size_t d = 0; d + 1 < shape.size(); ++d) multiples.insert(multiples.end(), {ss[d], ds[d]});
    const int64_t m = widen_factor(elem, shape.back(), multiples);
    shape.back() /= m;
    for (size_t d = 0; d + 1 < shape.size(); ++d) {
      ss[d] /= m;
      ds[d] /= m;
    }
    so /= m;
    dof /= m;
    unit *= m;
  }
  check_rank(shape, op);
  Context& ctx = r.context();
  const std::string name = fmt::format("move_units_{}", unit_suffix(unit, ctx, op));
  const int64_t units = numel(shape);
  MovePush p{u32(units), u32(shape.size()), u32(so), u32(dof), {}, {}, {}};
  fill(p.shape, shape);
  fill(p.src_strides, ss);
  fill(p.dst_strides, ds);
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(name), {wg}, {{src.buffer, Access::read}, {dst.buffer, Access::write}}, p,
             groups_for(units, wg, ctx));
}

BufferPtr record_index_rows(Recorder& r, std::span<const GpuView> indices, std::span<const int64_t> sizes) {
  constexpr const char* op = "gpu gather indices";
  if (indices.empty() || indices.size() != sizes.size())
    throw ValueError::of(op, "needs one size per index array", "{} arrays, {} sizes", indices.size(),
                         sizes.size());
  int64_t rows_total = 1;
  for (int64_t s : sizes) {
    if (s < 0) throw ShapeError::of(op, "negative size", "{}", s);
    rows_total *= s;
    if (rows_total > kMaxIndex)
      throw NotImplemented::of(op, "more than 2^31 rows are not supported on the GPU yet", "sizes {}",
                               Shape(sizes.begin(), sizes.end()));
  }
  const Shape& shape = indices[0].shape;
  for (const GpuView& v : indices) {
    check_view(v, op);
    if (v.shape != shape)
      throw ShapeError::of(op, "index arrays differ in shape", "{} vs {}", v.shape, shape);
  }
  const int64_t count = numel(shape);
  BufferPtr rows = allocate_words(r, count);
  if (count == 0) return rows;
  Context& ctx = r.context();
  const uint32_t wg = workgroup_size(ctx);
  for (size_t k = 0; k < indices.size(); ++k) {
    const GpuView& v = indices[k];
    const uint32_t itype = index_type(v.dtype, op);
    Shape s = v.shape;
    Strides st = v.strides;
    collapse<1>(s, {&st});
    check_rank(s, op);
    const uint32_t flags = (k == 0 ? 1u : 0u) | (k + 1 == indices.size() ? 2u : 0u);
    IndexRowsPush p{u32(count), u32(s.size()), u32(v.offset), u32(sizes[k]), u32(rows_total), flags, {}, {}};
    fill(p.shape, s);
    fill(p.strides, st);
    r.dispatch(builtin_shader("index_rows"), {wg, itype},
               {{v.buffer, Access::read}, {rows, k == 0 ? Access::write : Access::read_write}}, p,
               groups_for(count, wg, ctx));
  }
  return rows;
}

void record_gather_rows(Recorder& r, const GpuView& x, const BufferPtr& rows, int64_t j_count,
                        const GpuView& out) {
  constexpr const char* op = "gpu take";
  check_view(x, op);
  check_view(out, op);
  check_block(x, "x", op);
  const int64_t P = x.shape[0], N = x.shape[1], Q = x.shape[2];
  check_contiguous_out(out, {P, j_count, Q}, op);
  if (out.offset != 0) throw ValueError::of(op, "the output must start its buffer", "offset {}", out.offset);
  if (size_of(out.dtype) != size_of(x.dtype))
    throw ValueError::of(op, "element sizes differ", "{} to {}", dtype_name(x.dtype), dtype_name(out.dtype));
  if (P * j_count * Q == 0) return;
  if (!rows || rows->capacity() < static_cast<size_t>(j_count) * 4)
    throw ValueError::of(op, "the rows buffer is too small", "{} rows", j_count);
  const int64_t elem = size_of(x.dtype);
  int64_t q = Q, xo = x.offset, ps = x.strides[0], ns = x.strides[1], qs = Q == 1 ? 1 : x.strides[2];
  int64_t m = 1;
  if (qs == 1) m = widen_factor(elem, Q, {xo, ps, ns});
  q /= m;
  xo /= m;
  ps /= m;
  ns /= m;
  Context& ctx = r.context();
  const std::string name = fmt::format("gather_rows_{}", unit_suffix(elem * m, ctx, op));
  const int64_t total = P * j_count * q;
  const GatherPush p{u32(total), u32(j_count), u32(q), u32(N), u32(xo), i32(ps), i32(ns), i32(qs)};
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(name), {wg},
             {{x.buffer, Access::read}, {rows, Access::read}, {out.buffer, Access::write}}, p,
             groups_for(total, wg, ctx));
}

SortedRows record_sort_rows(Recorder& r, const BufferPtr& rows, int64_t count, int64_t n) {
  constexpr const char* op = "gpu sort rows";
  if (count < 0 || n < 0 || count > kMaxIndex || n >= kMaxIndex)
    throw NotImplemented::of(op, "sizes past 2^31 are not supported on the GPU yet", "{} rows of {}", count,
                             n);
  if (!rows || rows->capacity() < static_cast<size_t>(count) * 4)
    throw ValueError::of(op, "the rows buffer is too small", "{} rows", count);
  Context& ctx = r.context();
  const uint32_t wg = workgroup_size(ctx);
  const int64_t items =
      std::clamp<int64_t>((count + wg * kRadixTargetTiles - 1) / (wg * kRadixTargetTiles), 1, kRadixMaxItems);
  const int64_t tile = wg * items, tiles = (count + tile - 1) / tile;
  // Keys lie in [0, n]: one pass per 8 bits of n.
  const int passes =
      count == 0 ? 0 : std::max(1, (static_cast<int>(std::bit_width(static_cast<uint64_t>(n))) + 7) / 8);
  BufferPtr keys = rows, vals = rows;
  if (passes > 0) {
    BufferPtr next_keys = allocate_words(r, count), next_vals = allocate_words(r, count);
    BufferPtr spare_keys = allocate_words(r, count), spare_vals = allocate_words(r, count);
    BufferPtr hist = allocate_words(r, kRadixBins * tiles);
    const Groups tile_groups = Groups::linear(static_cast<uint64_t>(tiles), ctx);
    for (int pass = 0; pass < passes; ++pass) {
      const RadixPush p{u32(count), u32(tiles), u32(8 * pass), pass == 0 ? 1u : 0u, u32(items)};
      r.dispatch(builtin_shader("radix_histogram"), {wg}, {{keys, Access::read}, {hist, Access::write}}, p,
                 tile_groups);
      r.dispatch(builtin_shader("radix_scan"), {wg}, {{hist, Access::read_write}}, u32(kRadixBins * tiles),
                 Groups{1, 1, 1});
      r.dispatch(builtin_shader("radix_scatter"), {wg},
                 {{keys, Access::read},
                  {vals, Access::read},
                  {hist, Access::read},
                  {next_keys, Access::write},
                  {next_vals, Access::write}},
                 p, tile_groups);
      keys = next_keys;
      vals = next_vals;
      std::swap(next_keys, spare_keys);
      std::swap(next_vals, spare_vals);
    }
  }
  BufferPtr offsets = allocate_words(r, n + 1);
  const OffsetsPush p{u32(count), u32(n)};
  r.dispatch(builtin_shader("segment_offsets"), {wg}, {{keys, Access::read}, {offsets, Access::write}}, p,
             groups_for(n + 1, wg, ctx));
  return {vals, offsets, count, n};
}

namespace {

// The shader suffix of a row kernel (scatter-add, or set/max/min/prod) for `t`, after checking that
// the device can run it. Modular adds need no sign (one kernel for int32 and uint32); the
// combining kernels compare, so signed types have their own.
const char* row_variant(Dtype t, const DeviceCaps& caps, const char* op, bool signed_kernels) {
  const char* variant = nullptr;
  bool supported = true;
  switch (t) {
    case float32:
      variant = "f32";
      break;
    case float16:
      variant = "f16";
      supported = caps.storage16;
      break;
    case bfloat16:
      variant = "bf16";
      supported = caps.storage16;
      break;
    case float64:
      variant = "f64";
      supported = caps.float64;
      break;
    case int32:
      variant = signed_kernels ? "i32" : "u32";
      break;
    case uint32:
      variant = "u32";
      break;
    case int64:
      variant = signed_kernels ? "i64" : "u64";
      break;
    case int8:
      variant = signed_kernels ? "i8" : "u8";
      supported = caps.storage8;
      break;
    case uint8:
      variant = "u8";
      supported = caps.storage8;
      break;
    default:
      throw NotImplemented::of(op, "no GPU kernel for this dtype", "{}", dtype_name(t));
  }
  if (!supported)
    throw NotImplemented::of(op, "the device lacks the storage or arithmetic this dtype needs", "{} on {}",
                             dtype_name(t), caps.name);
  return variant;
}

// The row scatters' shared body: checks, then one dispatch of `shader(ctx)` over the [P, N, Q]
// output, each element walking its sorted updates.
template <class Shader>
void record_row_scatter(Recorder& r, const char* op, const GpuView& x, const SortedRows& sorted,
                        const GpuView& upd, const GpuView& out, Shader&& shader) {
  check_view(x, op);
  check_view(upd, op);
  check_view(out, op);
  check_block(x, "x", op);
  check_block(upd, "updates", op);
  const int64_t P = x.shape[0], N = x.shape[1], Q = x.shape[2];
  if (upd.shape != Shape{P, sorted.count, Q} || sorted.n != N)
    throw ShapeError::of(op, "updates do not fit", "{} for x {} and {} rows", upd.shape, x.shape,
                         sorted.count);
  check_contiguous_out(out, x.shape, op);
  if (out.offset != 0) throw ValueError::of(op, "the output must start its buffer", "offset {}", out.offset);
  if (upd.dtype != x.dtype || out.dtype != x.dtype)
    throw ValueError::of(op, "dtypes differ", "{}, {} into {}", dtype_name(x.dtype), dtype_name(upd.dtype),
                         dtype_name(out.dtype));
  Context& ctx = r.context();
  const std::string name = shader(ctx);
  const int64_t total = P * N * Q;
  if (total == 0) return;
  const BlocksPush p{u32(total),
                     u32(N),
                     u32(Q),
                     u32(sorted.count),
                     u32(x.offset),
                     i32(x.strides[0]),
                     i32(x.strides[1]),
                     i32(x.strides[2]),
                     u32(upd.offset),
                     i32(upd.strides[0]),
                     i32(upd.strides[1]),
                     i32(upd.strides[2])};
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(name), {wg},
             {{x.buffer, Access::read},
              {upd.buffer, Access::read},
              {sorted.offsets, Access::read},
              {sorted.order, Access::read},
              {out.buffer, Access::write}},
             p, groups_for(total, wg, ctx));
}

}  // namespace

void record_scatter_add_rows(Recorder& r, const GpuView& x, const SortedRows& sorted, const GpuView& upd,
                             const GpuView& out) {
  constexpr const char* op = "gpu scatter_add";
  record_row_scatter(r, op, x, sorted, upd, out, [&](Context& ctx) {
    return fmt::format("scatter_add_rows_{}", row_variant(x.dtype, ctx.caps(), op, false));
  });
}

void record_scatter_reduce_rows(Recorder& r, const GpuView& x, const SortedRows& sorted, const GpuView& upd,
                                RowCombine op, const GpuView& out) {
  constexpr const char* name = "gpu scatter";
  record_row_scatter(r, name, x, sorted, upd, out, [&](Context& ctx) {
    if (op == RowCombine::set)
      return fmt::format("scatter_set_rows_{}", unit_suffix(size_of(x.dtype), ctx, name));
    const char* what = op == RowCombine::max ? "max" : op == RowCombine::min ? "min" : "prod";
    return fmt::format("scatter_{}_rows_{}", what, row_variant(x.dtype, ctx.caps(), name, true));
  });
}

void record_put_rows(Recorder& r, const GpuView& x, const BufferPtr& rows, const GpuView& vals,
                     const GpuView& out) {
  constexpr const char* op = "gpu put_along_axis";
  check_view(x, op);
  check_view(vals, op);
  check_view(out, op);
  check_block(x, "x", op);
  check_block(vals, "values", op);
  const int64_t P = x.shape[0], N = x.shape[1], Q = x.shape[2], J = vals.shape[1];
  if (vals.shape[0] != P || vals.shape[2] != Q)
    throw ShapeError::of(op, "values do not fit", "{} for x {}", vals.shape, x.shape);
  check_contiguous_out(out, x.shape, op);
  if (out.offset != 0) throw ValueError::of(op, "the output must start its buffer", "offset {}", out.offset);
  if (vals.dtype != x.dtype || out.dtype != x.dtype)
    throw ValueError::of(op, "dtypes differ", "{}, {} into {}", dtype_name(x.dtype), dtype_name(vals.dtype),
                         dtype_name(out.dtype));
  const int64_t total = P * N * Q;
  if (total == 0) return;
  if (!rows || rows->capacity() < static_cast<size_t>(P * J * Q) * 4)
    throw ValueError::of(op, "the rows buffer is too small", "{} indices", P * J * Q);
  Context& ctx = r.context();
  const std::string name = fmt::format("put_along_axis_{}", unit_suffix(size_of(x.dtype), ctx, op));
  const BlocksPush p{u32(total),
                     u32(N),
                     u32(Q),
                     u32(J),
                     u32(x.offset),
                     i32(x.strides[0]),
                     i32(x.strides[1]),
                     i32(x.strides[2]),
                     u32(vals.offset),
                     i32(vals.strides[0]),
                     i32(vals.strides[1]),
                     i32(vals.strides[2])};
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(name), {wg},
             {{x.buffer, Access::read},
              {rows, Access::read},
              {vals.buffer, Access::read},
              {out.buffer, Access::write}},
             p, groups_for(total, wg, ctx));
}

}  // namespace kiln::detail::vk
