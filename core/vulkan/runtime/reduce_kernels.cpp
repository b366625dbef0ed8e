#include "kiln/core/vulkan/runtime/reduce_kernels.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

struct ReducePush {
  uint32_t rows, cols, row_stride, col_stride, in_offset, out_offset, splits, chunk, threads_per_row, count;
  uint32_t inner = 0;  // columns: K
};
struct WidenPush {
  uint32_t n, rank, src_offset;
  std::array<uint32_t, kMaxStridedRank> shape;
  std::array<int32_t, kMaxStridedRank> strides;
};
struct ArgReducePush {
  uint32_t rows, cols, row_stride, col_stride, in_offset, out_offset, threads_per_row;
};

// Rows at least this long are split into chunks when there are too few rows to fill the device:
// a 10^7-element row then takes ~600 workgroups in the first pass instead of one.
constexpr int64_t kSplitCols = 65536;
constexpr int64_t kSplitMaxRows = 128;
constexpr int64_t kChunk = 16384;

// Column reductions: workgroups enough to fill a large GPU (an H200 has 132 SMs), each invocation
// folding at least kColumnFold rows of its column before the split's partials are joined.
constexpr int64_t kColumnGroups = 1024;
constexpr int64_t kColumnFold = 16;
constexpr uint32_t kColumnWidth = 64;  // neighbouring columns per workgroup: 256-byte float rows

std::atomic<bool> g_subgroups{true};

// The name of a kernel's variant, the subgroup one (suffix _sg) where the device has subgroup
// arithmetic; int64 has none (subgroup operations on 64-bit integers are a further feature).
std::string variant_name(const Context& ctx, const char* base, Dtype in_t) {
  const bool sg =
      g_subgroups.load(std::memory_order_relaxed) && ctx.caps().subgroup_arithmetic && in_t != int64;
  return sg ? std::string(base) + "_sg" : std::string(base);
}

struct Layout {
  uint32_t wg, tpr;
};

// A power-of-two workgroup; rows shorter than it share one (tpr invocations per row, about
// kItemsPerInvocation elements each up to the workgroup). One element per invocation left most of
// a wide GPU's time to the reduction's joins: attention's logsumexp over 16384 rows of 128 took
// 19 us on the H200 with 128 invocations a row, 9.7 with 32.
constexpr int64_t kItemsPerInvocation = 4;
Layout layout(const Context& ctx, int64_t cols) {
  const uint32_t wg = std::bit_floor(workgroup_size(ctx));
  const int64_t want = (std::max<int64_t>(cols, 1) + kItemsPerInvocation - 1) / kItemsPerInvocation;
  return {wg, std::min(wg, std::bit_ceil(static_cast<uint32_t>(std::min<int64_t>(want, wg))))};
}

Groups groups_for(const Context& ctx, int64_t rows, Layout l) {
  const int64_t per_group = l.wg / l.tpr;
  return Groups::linear(static_cast<uint64_t>((rows + per_group - 1) / per_group), ctx);
}

// The checks both kernels share; returns the row stride.
int64_t check_rows(const GpuView& x, const GpuView& out, const char* op, bool strided_cols = false) {
  check_view(x, op);
  check_view(out, op);
  if (x.shape.size() != 2) throw ShapeError::of(op, "needs a [rows, cols] view", "{}", x.shape);
  check_contiguous_out(out, {x.shape[0]}, op);
  if (x.shape[1] > 1 && (strided_cols ? x.strides[1] < 0 : x.strides[1] != 1))
    throw NotImplemented::of(op, "the reduced axis must be contiguous", "strides {}", x.strides);
  if (x.shape[0] > 1 && x.strides[0] < 0)
    throw NotImplemented::of(op, "negative row strides", "strides {}", x.strides);
  return x.shape[0] > 1 ? x.strides[0] : x.shape[1];
}

// Throws unless the device has what the kernels for t need (16-bit storage, shaderFloat64,
// shaderInt64).
void need_features(const Context& ctx, Dtype t, const char* op) {
  const DeviceCaps& c = ctx.caps();
  if (size_of(t) == 2 && !c.storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(t),
                             c.name);
  if (t == float64 && !c.float64)
    throw NotImplemented::of(op, "float64 needs the device feature shaderFloat64", "{} lacks it", c.name);
  if (t == int64 && !c.int64)
    throw NotImplemented::of(op, "int64 needs the device feature shaderInt64", "{} lacks it", c.name);
}

// The variants of reduce_rows.comp for an input dtype: the single pass, and the first and second
// pass of a split whose partials have dtype `partial`.
struct ReduceVariants {
  const char *single, *first, *second;
  Dtype partial;
};

ReduceVariants reduce_variants(Dtype in_t, bool out_bool, const char* op) {
  switch (in_t) {
    case float32:
      return {"reduce_rows_f32", "reduce_rows_f32", "reduce_rows_f32", float32};
    case float64:
      return {"reduce_rows_f64", "reduce_rows_f64", "reduce_rows_f64", float64};
    case float16:
      return {"reduce_rows_f16", "reduce_rows_f16_f32", out_bool ? "reduce_rows_f32" : "reduce_rows_f32_f16",
              float32};
    case bfloat16:
      return {"reduce_rows_bf16", "reduce_rows_bf16_f32",
              out_bool ? "reduce_rows_f32" : "reduce_rows_f32_bf16", float32};
    case int32:
      return {"reduce_rows_i32", "reduce_rows_i32", "reduce_rows_i32", int32};
    case uint32:
      return {"reduce_rows_u32", "reduce_rows_u32", "reduce_rows_u32", uint32};
    case int64:
      return {"reduce_rows_i64", "reduce_rows_i64", "reduce_rows_i64", int64};
    case bool_:
    case uint8:
      return {"reduce_rows_b8_i32", "reduce_rows_b8_i32", "reduce_rows_i32", int32};
    case int8:
      return {"reduce_rows_s8_i32", "reduce_rows_s8_i32", "reduce_rows_i32", int32};
    default:
      throw NotImplemented::of(op, "no GPU reduction kernel for this dtype", "{}", dtype_name(in_t));
  }
}

// Whether out_t is what reduce_rows writes for `kind` of int32 values widened from bytes
// (record_widen_bytes): the byte dtype itself for max/min, uint32 for sum/prod of uint8 (the same
// bits as the int32 result).
bool widened_out(ReduceKind kind, Dtype out_t) {
  if (kind == ReduceKind::max || kind == ReduceKind::min)
    return out_t == bool_ || out_t == uint8 || out_t == int8;
  return (kind == ReduceKind::sum || kind == ReduceKind::prod) && out_t == uint32;
}

// One pass of reduce_rows.comp over rows.
void dispatch_reduce(Recorder& r, const char* shader, Dtype in_t, ReduceKind kind, uint32_t out_bytes,
                     const BufferPtr& in, const BufferPtr& out, const ReducePush& p, int64_t logical_rows,
                     int64_t cols) {
  const Context& ctx = r.context();
  const Layout l = layout(ctx, cols);
  ReducePush push = p;
  push.threads_per_row = l.tpr;
  r.dispatch(builtin_shader(variant_name(ctx, shader, in_t)),
             {l.wg, static_cast<uint32_t>(kind), out_bytes, 0u}, {{in, Access::read}, {out, Access::write}},
             push, groups_for(ctx, logical_rows, l));
}

// One pass of reduce_rows.comp over columns: p.rows blocks of p.cols rows of p.inner columns, in
// p.splits splits. The tree runs over a workgroup's rows (subgroups span its columns).
void dispatch_columns(Recorder& r, const char* shader, ReduceKind kind, uint32_t out_bytes,
                      const BufferPtr& in, const BufferPtr& out, const ReducePush& p) {
  const Context& ctx = r.context();
  const uint32_t wg = std::bit_floor(workgroup_size(ctx));
  ReducePush push = p;
  push.threads_per_row = std::min(wg, p.inner >= kColumnWidth ? kColumnWidth : std::bit_ceil(p.inner));
  const uint64_t blocks = (p.inner + push.threads_per_row - 1) / push.threads_per_row;
  r.dispatch(builtin_shader(shader), {wg, static_cast<uint32_t>(kind), out_bytes, 1u},
             {{in, Access::read}, {out, Access::write}}, push,
             Groups::linear(uint64_t{p.rows} * p.splits * blocks, ctx));
}

}  // namespace

namespace {

// The checks of the output dtype and the device, the variants and the byte-output mode.
struct ReducePlan {
  ReduceVariants v;
  uint32_t out_bytes;
};
ReducePlan plan_reduce(const Context& ctx, ReduceKind kind, Dtype in_t, Dtype out_t, const char* op) {
  if (out_t != reduce_out_dtype(kind, in_t) && !(in_t == int32 && widened_out(kind, out_t)))
    throw ValueError::of(op, "wrong output dtype", "{} for {} of {}", dtype_name(out_t),
                         static_cast<int>(kind), dtype_name(in_t));
  if (kind == ReduceKind::mean && !is_floating(in_t))
    throw NotImplemented::of(op, "mean takes float inputs only", "{}", dtype_name(in_t));
  // Byte outputs are written through atomics on words: bools as 0/1, int8/uint8 as the low byte.
  const bool out_bool = out_t == bool_;
  const uint32_t out_bytes = out_bool ? 1u : size_of(out_t) == 1 ? 2u : 0u;
  const ReduceVariants v = reduce_variants(in_t, out_bool, op);
  need_features(ctx, in_t, op);
  return {v, out_bytes};
}

}  // namespace

void set_reduce_subgroups(bool enabled) { g_subgroups.store(enabled, std::memory_order_relaxed); }

void record_reduce_cols(Recorder& r, ReduceKind kind, const GpuView& x, const GpuView& out) {
  constexpr const char* op = "gpu reduce";
  check_view(x, op);
  check_view(out, op);
  if (x.shape.size() != 3) throw ShapeError::of(op, "needs a [blocks, rows, cols] view", "{}", x.shape);
  const int64_t blocks = x.shape[0], rows = x.shape[1], cols = x.shape[2];
  check_contiguous_out(out, {blocks * cols}, op);
  if (cols > 1 && x.strides[2] != 1)
    throw NotImplemented::of(op, "the kept columns must be contiguous", "strides {}", x.strides);
  if (x.strides[0] < 0 || x.strides[1] < 0)
    throw NotImplemented::of(op, "negative strides", "strides {}", x.strides);
  Context& ctx = r.context();
  const ReducePlan plan = plan_reduce(ctx, kind, x.dtype, out.dtype, op);
  if (blocks == 0 || cols == 0) return;
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const uint32_t wg = std::bit_floor(workgroup_size(ctx));
  const int64_t width = std::min<int64_t>(wg, cols >= kColumnWidth ? kColumnWidth : std::bit_ceil(u(cols)));
  const int64_t per_group = blocks * ((cols + width - 1) / width), fold_rows = (wg / width) * kColumnFold;
  int64_t splits = std::clamp<int64_t>(
      std::min((kColumnGroups + per_group - 1) / per_group, rows / fold_rows), 1, std::max<int64_t>(rows, 1));
  const int64_t chunk = splits > 1 ? (rows + splits - 1) / splits : rows;
  splits = splits > 1 ? (rows + chunk - 1) / chunk : 1;
  const ReducePush single{u(blocks),
                          u(rows),
                          u(x.strides[0]),
                          u(x.strides[1]),
                          u(x.offset),
                          u(out.offset),
                          1,
                          u(std::max<int64_t>(rows, 1)),
                          0,
                          u(rows),
                          u(cols)};
  if (splits == 1) {
    dispatch_columns(r, plan.v.single, kind, plan.out_bytes, x.buffer, out.buffer, single);
    return;
  }
  // Partials [blocks, splits, cols]; mean: the first pass sums, the second divides by rows.
  const BufferPtr partials =
      ctx.allocator().allocate(static_cast<size_t>(blocks * splits * cols) * size_of(plan.v.partial));
  ReducePush first = single;
  first.out_offset = 0;
  first.splits = u(splits);
  first.chunk = u(chunk);
  dispatch_columns(r, plan.v.first, kind == ReduceKind::mean ? ReduceKind::sum : kind, 0, x.buffer, partials,
                   first);
  dispatch_columns(
      r, plan.v.second, kind, plan.out_bytes, partials, out.buffer,
      {u(blocks), u(splits), u(splits * cols), u(cols), 0, u(out.offset), 1, u(splits), 0, u(rows), u(cols)});
}

void record_reduce_rows(Recorder& r, ReduceKind kind, const GpuView& x, const GpuView& out) {
  constexpr const char* op = "gpu reduce";
  const int64_t row_stride = check_rows(x, out, op, size_of(x.dtype) == 1);
  const int64_t col_stride = x.shape[1] > 1 ? x.strides[1] : 1;
  const Dtype in_t = x.dtype;
  Context& ctx = r.context();
  const ReducePlan plan = plan_reduce(ctx, kind, in_t, out.dtype, op);
  const ReduceVariants& v = plan.v;
  const uint32_t out_bytes = plan.out_bytes;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return;
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  if (cols < kSplitCols || rows >= kSplitMaxRows) {
    dispatch_reduce(
        r, v.single, in_t, kind, out_bytes, x.buffer, out.buffer,
        {u(rows), u(cols), u(row_stride), u(col_stride), u(x.offset), u(out.offset), 1, u(cols), 0, u(cols)},
        rows, cols);
    return;
  }
  const int64_t splits = (cols + kChunk - 1) / kChunk, chunk = (cols + splits - 1) / splits;
  const BufferPtr partials =
      ctx.allocator().allocate(static_cast<size_t>(rows * splits) * size_of(v.partial));
  // mean: the first pass sums, the second divides by the whole row's length.
  const ReduceKind first_kind = kind == ReduceKind::mean ? ReduceKind::sum : kind;
  dispatch_reduce(r, v.first, in_t, first_kind, 0, x.buffer, partials,
                  {u(rows * splits), u(cols), u(row_stride), u(col_stride), u(x.offset), 0, u(splits),
                   u(chunk), 0, u(cols)},
                  rows * splits, chunk);
  dispatch_reduce(r, v.second, v.partial, kind, out_bytes, partials, out.buffer,
                  {u(rows), u(splits), u(splits), 1, 0, u(out.offset), 1, u(splits), 0, u(cols)}, rows,
                  splits);
}

void record_widen_bytes(Recorder& r, const GpuView& src, const GpuView& dst) {
  constexpr const char* op = "gpu widen_bytes";
  check_view(src, op);
  check_view(dst, op);
  if (size_of(src.dtype) != 1 || dst.dtype != int32)
    throw ValueError::of(op, "needs bool, uint8 or int8 into int32", "{} into {}", dtype_name(src.dtype),
                         dtype_name(dst.dtype));
  check_contiguous_out(dst, src.shape, op);
  const int64_t n = numel(src.shape);
  if (n == 0) return;
  Shape shape = src.shape;
  Strides ss = src.strides;
  for (int64_t s : ss)
    if (s < 0) throw NotImplemented::of(op, "negative strides", "{}", src.strides);
  collapse<1>(shape, {&ss});
  check_rank(shape, op);
  WidenPush p{static_cast<uint32_t>(n),
              static_cast<uint32_t>(shape.size()),
              static_cast<uint32_t>(src.offset),
              {},
              {}};
  for (size_t d = 0; d < shape.size(); ++d) {
    p.shape[d] = static_cast<uint32_t>(shape[d]);
    p.strides[d] = static_cast<int32_t>(ss[d]);
  }
  Context& ctx = r.context();
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(src.dtype == int8 ? "widen_int8" : "widen_bool"), {wg},
             {{src.buffer, Access::read}, {dst.buffer, Access::write}}, p,
             Groups::linear(static_cast<uint64_t>((n + wg - 1) / wg), ctx));
}

void record_arg_reduce_rows(Recorder& r, bool is_max, const GpuView& x, const GpuView& out) {
  constexpr const char* op = "gpu arg_reduce";
  const bool bytes = size_of(x.dtype) == 1;
  const int64_t row_stride = check_rows(x, out, op, bytes);
  const int64_t col_stride = x.shape[1] > 1 ? x.strides[1] : 1;
  if (out.dtype != int32) throw ValueError::of(op, "the output must be int32", "{}", dtype_name(out.dtype));
  const char* shader = nullptr;
  switch (x.dtype) {
    case float32:
      shader = "arg_reduce_rows_f32";
      break;
    case float64:
      shader = "arg_reduce_rows_f64";
      break;
    case float16:
      shader = "arg_reduce_rows_f16";
      break;
    case bfloat16:
      shader = "arg_reduce_rows_bf16";
      break;
    case int32:
      shader = "arg_reduce_rows_i32";
      break;
    case uint32:
      shader = "arg_reduce_rows_u32";
      break;
    case int64:
      shader = "arg_reduce_rows_i64";
      break;
    case bool_:
    case uint8:
      shader = "arg_reduce_rows_b8";
      break;
    case int8:
      shader = "arg_reduce_rows_s8";
      break;
    default:
      throw NotImplemented::of(op, "no GPU kernel for this dtype", "{}", dtype_name(x.dtype));
  }
  Context& ctx = r.context();
  need_features(ctx, x.dtype, op);
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return;
  if (cols == 0) throw ShapeError::of(op, "cannot reduce an empty axis", "{}", x.shape);
  const Layout l = layout(ctx, cols);
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const ArgReducePush p{u(rows), u(cols), u(row_stride), u(col_stride), u(x.offset), u(out.offset), l.tpr};
  r.dispatch(builtin_shader(variant_name(ctx, shader, x.dtype)), {l.wg, is_max ? 1u : 0u},
             {{x.buffer, Access::read}, {out.buffer, Access::write}}, p, groups_for(ctx, rows, l));
}

}  // namespace kiln::detail::vk
