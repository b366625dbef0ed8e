#include "kiln/core/vulkan/runtime/reduce_kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

struct ReducePush {
  uint32_t rows, cols, row_stride, col_stride, in_offset, out_offset, splits, chunk, threads_per_row;
  float divisor;
};
struct WidenPush {
  uint32_t n, rank, src_offset;
  std::array<uint32_t, kMaxStridedRank> shape;
  std::array<int32_t, kMaxStridedRank> strides;
};
struct ArgReducePush {
  uint32_t rows, cols, row_stride, in_offset, out_offset, threads_per_row;
};

// Rows at least this long are split into chunks when there are too few rows to fill the device:
// a 10^7-element row then takes ~600 workgroups in the first pass instead of one.
constexpr int64_t kSplitCols = 65536;
constexpr int64_t kSplitMaxRows = 128;
constexpr int64_t kChunk = 16384;

struct Layout {
  uint32_t wg, tpr;
};

// A power-of-two workgroup; rows shorter than it share one (tpr invocations per row).
Layout layout(const Context& ctx, int64_t cols) {
  const uint32_t wg = std::bit_floor(workgroup_size(ctx));
  const uint32_t tpr = cols >= wg ? wg : std::bit_ceil(static_cast<uint32_t>(std::max<int64_t>(cols, 1)));
  return {wg, tpr};
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

void need_storage16(const Context& ctx, Dtype t, const char* op) {
  if (size_of(t) == 2 && !ctx.caps().storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(t),
                             ctx.caps().name);
}

// One pass of reduce_rows.comp.
void dispatch_reduce(Recorder& r, const char* shader, ReduceKind kind, bool out_bool, const BufferPtr& in,
                     const BufferPtr& out, const ReducePush& p, int64_t logical_rows, int64_t cols) {
  const Context& ctx = r.context();
  const Layout l = layout(ctx, cols);
  ReducePush push = p;
  push.threads_per_row = l.tpr;
  r.dispatch(builtin_shader(shader), {l.wg, static_cast<uint32_t>(kind), out_bool ? 1u : 0u},
             {{in, Access::read}, {out, Access::write}}, push, groups_for(ctx, logical_rows, l));
}

}  // namespace

void record_reduce_rows(Recorder& r, ReduceKind kind, const GpuView& x, const GpuView& out) {
  constexpr const char* op = "gpu reduce";
  const int64_t row_stride = check_rows(x, out, op, x.dtype == bool_);
  const int64_t col_stride = x.shape[1] > 1 ? x.strides[1] : 1;
  const Dtype in_t = x.dtype;
  const bool widened =
      in_t == int32 && out.dtype == bool_ && (kind == ReduceKind::max || kind == ReduceKind::min);
  if (out.dtype != reduce_out_dtype(kind, in_t) && !widened)
    throw ValueError::of(op, "wrong output dtype", "{} for {} of {}", dtype_name(out.dtype),
                         static_cast<int>(kind), dtype_name(in_t));
  if (kind == ReduceKind::mean && !is_floating(in_t))
    throw NotImplemented::of(op, "mean takes float inputs only", "{}", dtype_name(in_t));
  const bool out_bool = out.dtype == bool_;
  // The single-pass variant, and the first and second pass of a split (partials in float32 for
  // float inputs, int32 otherwise).
  const char *single = nullptr, *first = nullptr, *second = nullptr;
  Dtype partial_t = float32;
  switch (in_t) {
    case float32:
      single = first = second = "reduce_rows_f32";
      break;
    case float16:
      single = "reduce_rows_f16";
      first = "reduce_rows_f16_f32";
      second = out_bool ? "reduce_rows_f32" : "reduce_rows_f32_f16";
      break;
    case int32:
      single = first = second = "reduce_rows_i32";
      partial_t = int32;
      break;
    case bool_:
      single = first = "reduce_rows_b8_i32";
      second = "reduce_rows_i32";
      partial_t = int32;
      break;
    default:
      throw NotImplemented::of(op, "no GPU reduction kernel for this dtype", "{}", dtype_name(in_t));
  }
  Context& ctx = r.context();
  need_storage16(ctx, in_t, op);
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return;
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const float divisor = static_cast<float>(cols);
  if (cols < kSplitCols || rows >= kSplitMaxRows) {
    dispatch_reduce(
        r, single, kind, out_bool, x.buffer, out.buffer,
        {u(rows), u(cols), u(row_stride), u(col_stride), u(x.offset), u(out.offset), 1, u(cols), 0, divisor},
        rows, cols);
    return;
  }
  const int64_t splits = (cols + kChunk - 1) / kChunk, chunk = (cols + splits - 1) / splits;
  const BufferPtr partials =
      ctx.allocator().allocate(static_cast<size_t>(rows * splits) * size_of(partial_t));
  // mean: the first pass sums, the second divides by the whole row's length.
  const ReduceKind first_kind = kind == ReduceKind::mean ? ReduceKind::sum : kind;
  dispatch_reduce(r, first, first_kind, false, x.buffer, partials,
                  {u(rows * splits), u(cols), u(row_stride), u(col_stride), u(x.offset), 0, u(splits),
                   u(chunk), 0, divisor},
                  rows * splits, chunk);
  dispatch_reduce(r, second, kind, out_bool, partials, out.buffer,
                  {u(rows), u(splits), u(splits), 1, 0, u(out.offset), 1, u(splits), 0, divisor}, rows,
                  splits);
}

void record_widen_bool(Recorder& r, const GpuView& src, const GpuView& dst) {
  constexpr const char* op = "gpu widen_bool";
  check_view(src, op);
  check_view(dst, op);
  if (src.dtype != bool_ || dst.dtype != int32)
    throw ValueError::of(op, "needs bool into int32", "{} into {}", dtype_name(src.dtype),
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
  r.dispatch(builtin_shader("widen_bool"), {wg}, {{src.buffer, Access::read}, {dst.buffer, Access::write}}, p,
             Groups::linear(static_cast<uint64_t>((n + wg - 1) / wg), ctx));
}

void record_arg_reduce_rows(Recorder& r, bool is_max, const GpuView& x, const GpuView& out) {
  constexpr const char* op = "gpu arg_reduce";
  const int64_t row_stride = check_rows(x, out, op);
  if (out.dtype != int32) throw ValueError::of(op, "the output must be int32", "{}", dtype_name(out.dtype));
  const char* shader = nullptr;
  switch (x.dtype) {
    case float32:
      shader = "arg_reduce_rows_f32";
      break;
    case float16:
      shader = "arg_reduce_rows_f16";
      break;
    case int32:
      shader = "arg_reduce_rows_i32";
      break;
    default:
      throw NotImplemented::of(op, "no GPU kernel for this dtype", "{}", dtype_name(x.dtype));
  }
  Context& ctx = r.context();
  need_storage16(ctx, x.dtype, op);
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return;
  if (cols == 0) throw ShapeError::of(op, "cannot reduce an empty axis", "{}", x.shape);
  const Layout l = layout(ctx, cols);
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const ArgReducePush p{u(rows), u(cols), u(row_stride), u(x.offset), u(out.offset), l.tpr};
  r.dispatch(builtin_shader(shader), {l.wg, is_max ? 1u : 0u},
             {{x.buffer, Access::read}, {out.buffer, Access::write}}, p, groups_for(ctx, rows, l));
}

}  // namespace kiln::detail::vk
