#include "kiln/core/vulkan/runtime/scan_kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

constexpr const char* kOp = "gpu scan";

// Elements one invocation of scan_rows.comp scans per tile (KILN_ITEMS there).
constexpr int64_t kScanItems = 8;
// Workgroups (logical rows) and invocations (logical columns) that keep an H200's 132 SMs busy:
// with fewer, a long enough axis is split into pieces (three passes instead of one).
constexpr int64_t kFillRows = 1024;
constexpr int64_t kFillColumns = int64_t{1} << 17;
// The shortest pieces of a split, below which the extra passes cost more than they gain.
constexpr int64_t kMinRowChunk = 4096;
constexpr int64_t kMinColChunk = 64;

struct RowsPush {
  uint32_t rows, n, splits, chunk, tpr, tiles;
  int32_t in_offset, row_stride, col_stride;
  uint32_t out_offset;
};
struct ColsPush {
  uint32_t columns, n, inner, splits, chunk;
  int32_t in_offset, outer_stride, axis_stride, inner_stride;
  uint32_t out_offset;
};

// A kernel variant: the shaders' name suffix, how the input is decoded (kInType) and the result
// encoded (kOutType), and the accumulator's dtype (of the totals and carries of a split).
struct Variant {
  const char* family = "f32";  // f32, f32d, f32_h16, u32, i32, f64, u64, i64
  uint32_t in_type = 0, out_type = 0;
  Dtype acc = float32;
};

// As on the CPU, float32 sums, products and logaddexps accumulate in float64 where the device has
// it (a scan is memory-bound: the wider accumulator costs nothing, and a float32 product of 10^4
// factors near 1 drifts by ~1e-4 through rounding alone); float16 and bfloat16 accumulate in
// float32. max and min compare in float32 (exact), and signed integers as signed.
Variant variant_for(Dtype in, ScanOp op, const ScanFeatures& f) {
  const bool extreme = op == ScanOp::max || op == ScanOp::min;
  if (op == ScanOp::logaddexp && !is_floating(in))
    throw ValueError::of(kOp, "logaddexp scans take floats", "{}", dtype_name(in));
  switch (in) {
    case float32:
      return f.float64 && !extreme ? Variant{"f32d", 0, 0, float64} : Variant{"f32", 0, 0, float32};
    case float16:
      return {"f32_h16", 1, 0, float32};
    case bfloat16:
      return {"f32_h16", 2, 1, float32};
    case bool_:
    case uint8:
      return {"u32", 3, 0, uint32};
    case int8:
      return extreme ? Variant{"i32", 4, 0, int32} : Variant{"u32", 4, 0, uint32};
    case int32:
      return extreme ? Variant{"i32", 0, 0, int32} : Variant{"u32", 0, 0, uint32};
    case uint32:
      return {"u32", 0, 0, uint32};
    case int64:
      return extreme ? Variant{"i64", 0, 0, int64} : Variant{"u64", 0, 0, int64};
    case float64:
      return {"f64", 0, 0, float64};
    case int16:
    case uint16:
    case uint64:
      break;  // gpu::scan widens or reinterprets them first (dtype_adapter.h)
  }
  throw NotImplemented::of(kOp, "no scan kernel for this dtype", "{}", dtype_name(in));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const ShaderCode& scan_shader(const char* layout, const char* family) {
  return builtin_shader(fmt::format("scan_{}_{}", layout, family));
}

// What one dispatch does besides the scan itself: write each piece's total, or start each piece
// from a carry.
struct Pass {
  bool totals = false;
  BufferPtr carry = nullptr;
};

// The spec constants of scan_common.glsl.
std::array<uint32_t, 8> spec(uint32_t wg, const Variant& v, const ScanParams& sp, const Pass& pass) {
  return {wg,
          static_cast<uint32_t>(sp.op),
          v.in_type,
          v.out_type,
          pass.totals ? 1u : 0u,
          pass.carry ? 1u : 0u,
          sp.inclusive ? 1u : 0u,
          sp.reverse ? 1u : 0u};
}

// scan_rows.comp's workgroup: a power of two whose tile fits the device's shared memory.
uint32_t rows_workgroup(const Context& ctx, Dtype acc) {
  uint32_t wg = std::bit_floor(workgroup_size(ctx));
  const auto bytes = [&](uint32_t w) {
    return static_cast<uint64_t>(w * kScanItems + w * kScanItems / 32 + w) * size_of(acc);
  };
  while (wg > 1 && bytes(wg) > ctx.caps().max_shared_memory) wg /= 2;
  return wg;
}

// x is [rows, n]; `splits` pieces of `chunk` columns per row.
void dispatch_rows(Recorder& r, const Variant& v, const ScanParams& sp, const GpuView& x, int64_t splits,
                   int64_t chunk, const BufferPtr& out, int64_t out_offset, const Pass& pass) {
  Context& ctx = r.context();
  const int64_t rows = x.shape[0], n = x.shape[1];
  const uint32_t wg = rows_workgroup(ctx, v.acc);
  const int64_t len = std::min(chunk, n);
  const uint32_t tpr = std::min(wg, std::bit_ceil(u32(std::max<int64_t>(1, ceil_div(len, kScanItems)))));
  const int64_t span = tpr * kScanItems;
  const RowsPush p{
      u32(rows * splits),       u32(n),        u32(splits),       u32(chunk),        tpr,
      u32(ceil_div(len, span)), i32(x.offset), i32(x.strides[0]), i32(x.strides[1]), u32(out_offset)};
  const auto sc = spec(wg, v, sp, pass);
  const Binding binds[] = {
      {x.buffer, Access::read}, {out, Access::write}, {pass.carry ? pass.carry : x.buffer, Access::read}};
  r.dispatch(scan_shader("rows", v.family), sc, binds, std::as_bytes(std::span<const RowsPush>(&p, 1)),
             Groups::linear(static_cast<uint64_t>(ceil_div(rows * splits, wg / tpr)), ctx));
}

// x is [outer, n, inner]; `splits` pieces of `chunk` along n.
void dispatch_cols(Recorder& r, const Variant& v, const ScanParams& sp, const GpuView& x, int64_t splits,
                   int64_t chunk, const BufferPtr& out, int64_t out_offset, const Pass& pass) {
  Context& ctx = r.context();
  const int64_t columns = x.shape[0] * splits * x.shape[2];
  const uint32_t wg = workgroup_size(ctx);
  const ColsPush p{u32(columns),  u32(x.shape[1]),   u32(x.shape[2]),   u32(splits),       u32(chunk),
                   i32(x.offset), i32(x.strides[0]), i32(x.strides[1]), i32(x.strides[2]), u32(out_offset)};
  const auto sc = spec(wg, v, sp, pass);
  const Binding binds[] = {
      {x.buffer, Access::read}, {out, Access::write}, {pass.carry ? pass.carry : x.buffer, Access::read}};
  r.dispatch(scan_shader("cols", v.family), sc, binds, std::as_bytes(std::span<const ColsPush>(&p, 1)),
             Groups::linear(static_cast<uint64_t>(ceil_div(columns, wg)), ctx));
}

void scan_block(Recorder& r, const ScanFeatures& f, const Variant& v, const ScanParams& sp, const GpuView& x,
                const BufferPtr& out, int64_t out_offset);

// A split: each piece's total, an exclusive scan of the totals along the pieces (in the same
// direction), then each piece scanned from its carry. `totals_shape` is the totals' block.
template <class Dispatch>
void three_passes(Recorder& r, const ScanFeatures& f, const Variant& v, const ScanParams& sp,
                  const Shape& totals_shape, const Dispatch& dispatch) {
  const int64_t count = numel(totals_shape);
  DeviceAllocator& alloc = r.context().allocator();
  const BufferPtr totals = alloc.allocate(static_cast<size_t>(count) * size_of(v.acc));
  const BufferPtr carries = alloc.allocate(static_cast<size_t>(count) * size_of(v.acc));
  dispatch(totals, Pass{.totals = true});
  scan_block(r, f, variant_for(v.acc, sp.op, f), {sp.op, sp.reverse, false},
             GpuView::contiguous(totals, v.acc, totals_shape), carries, 0);
  dispatch(nullptr, Pass{.carry = carries});
}

// x is [outer, n, inner]; out holds its row-major result from out_offset.
void scan_block(Recorder& r, const ScanFeatures& f, const Variant& v, const ScanParams& sp, const GpuView& x,
                const BufferPtr& out, int64_t out_offset) {
  const int64_t outer = x.shape[0], n = x.shape[1], inner = x.shape[2];
  if (inner == 1) {
    GpuView rows = x;
    rows.shape = {outer, n};
    rows.strides = {x.strides[0], x.strides[1]};
    int64_t splits = 1, chunk = n;
    if (outer < kFillRows && n >= 2 * kMinRowChunk) {
      // Pieces a whole number of the widest tiles long.
      const int64_t span = rows_workgroup(r.context(), v.acc) * kScanItems;
      splits = std::min(ceil_div(n, kMinRowChunk), ceil_div(kFillRows, outer));
      chunk = ceil_div(ceil_div(n, splits), span) * span;
      splits = ceil_div(n, chunk);
    }
    if (splits == 1) return dispatch_rows(r, v, sp, rows, 1, n, out, out_offset, {});
    three_passes(r, f, v, sp, {outer, splits, 1}, [&](const BufferPtr& dst, const Pass& pass) {
      dispatch_rows(r, v, sp, rows, splits, chunk, dst ? dst : out, dst ? 0 : out_offset, pass);
    });
    return;
  }
  int64_t splits = 1, chunk = n;
  if (outer * inner < kFillColumns && n >= 2 * kMinColChunk) {
    splits = std::min(ceil_div(n, kMinColChunk), ceil_div(kFillColumns, outer * inner));
    chunk = ceil_div(n, splits);
    splits = ceil_div(n, chunk);
  }
  if (splits == 1) return dispatch_cols(r, v, sp, x, 1, n, out, out_offset, {});
  three_passes(r, f, v, sp, {outer, splits, inner}, [&](const BufferPtr& dst, const Pass& pass) {
    dispatch_cols(r, v, sp, x, splits, chunk, dst ? dst : out, dst ? 0 : out_offset, pass);
  });
}

}  // namespace

ScanFeatures ScanFeatures::of(const DeviceCaps& caps) { return {caps.storage16, caps.int64, caps.float64}; }

Dtype scan_out_dtype(Dtype t) {
  if (t == bool_ || t == int8 || t == int16) return int32;
  if (t == uint8 || t == uint16) return uint32;
  return t;
}
Dtype scan_out_dtype(ScanOp op, Dtype t) {
  return op == ScanOp::sum || op == ScanOp::prod ? scan_out_dtype(t) : t;
}

void record_scan(Recorder& r, const ScanParams& params, const GpuView& x, const GpuView& out) {
  record_scan(r, params, x, out, ScanFeatures::of(r.context().caps()));
}

void record_scan(Recorder& r, const ScanParams& params, const GpuView& x, const GpuView& out,
                 const ScanFeatures& f) {
  const DeviceCaps& caps = r.context().caps();
  if ((f.storage16 && !caps.storage16) || (f.int64 && !caps.int64) || (f.float64 && !caps.float64))
    throw ValueError::of(kOp, "features asked for that the device lacks", "{}", caps.name);
  check_view(x, kOp);
  check_view(out, kOp);
  if (x.shape.size() != 3) throw ShapeError::of(kOp, "needs an [outer, n, inner] view", "{}", x.shape);
  check_contiguous_out(out, x.shape, kOp);
  if (out.dtype != scan_out_dtype(params.op, x.dtype))
    throw ValueError::of(kOp, "wrong output dtype", "{} for {} input, expected {}", dtype_name(out.dtype),
                         dtype_name(x.dtype), dtype_name(scan_out_dtype(params.op, x.dtype)));
  if (x.dtype == int64 && !f.int64)
    throw NotImplemented::of(kOp, "int64 needs the device feature shaderInt64", "{} lacks it", caps.name);
  if (x.dtype == float64 && !f.float64)
    throw NotImplemented::of(kOp, "float64 needs the device feature shaderFloat64", "{} lacks it", caps.name);
  Variant v = variant_for(x.dtype, params.op, f);
  const int64_t count = numel(x.shape);
  if (count == 0) return;
  // Results the kernels do not store: 8-bit ones (max and min of bool, uint8 and int8) and 16-bit
  // ones on a device without 16-bit stores. The scan goes into a 32-bit buffer, then a conversion
  // kernel rounds (16-bit: the CPU's rounding) or narrows into out. The values fit, except the
  // 32-bit identities that exclusive scans start with: clamped to the 8-bit type's range they are
  // its own (-128 and 127, 255; bool: nonzero is true).
  Dtype staged = out.dtype;
  std::string expr = "x0";
  if (out.dtype == bool_ || out.dtype == uint8) {
    staged = uint32;
    if (out.dtype == uint8) expr = "min(x0, 255u)";
  } else if (out.dtype == int8) {
    staged = int32;
    expr = "clamp(x0, -128, 127)";
  } else if (std::string_view(v.family) == "f32_h16" && !f.storage16) {
    staged = float32;
    v.family = "f32";
  }
  if (staged != out.dtype) {
    const BufferPtr tmp = r.context().allocator().allocate(static_cast<size_t>(count) * size_of(staged));
    scan_block(r, f, v, params, x, tmp, 0);
    const GpuView scanned = GpuView::contiguous(tmp, staged, x.shape);
    record_elementwise(r, {.inputs = {staged}, .compute = staged, .out = out.dtype, .expr = expr},
                       {&scanned, 1}, out);
    return;
  }
  scan_block(r, f, v, params, x, out.buffer, out.offset);
}

}  // namespace kiln::detail::vk
