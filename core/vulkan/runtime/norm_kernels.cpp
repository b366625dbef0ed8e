#include "kiln/core/vulkan/runtime/norm_kernels.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// Elements an invocation aims at: rows up to half a workgroup times this share one. 8 rather
// than 4: on the H200 a layer norm of the GPT's [4096, 256] took 8.4 us of GPU time instead of
// 12.3, its vjp 30.9 instead of 36.7 (16: 9.4 and 31.2). KILN_VULKAN_NORM_ITEMS (1 to 16; other
// values keep 8) sets it instead, for tuning.
int64_t items_per_invocation() {
  static const int64_t items = [] {
    const char* v = std::getenv("KILN_VULKAN_NORM_ITEMS");
    const int64_t n = v ? std::atoll(v) : 0;
    return n >= 1 && n <= 16 ? n : int64_t{8};
  }();
  return items;
}

struct ForwardPush {
  uint32_t rows, n, tpr;
  int32_t x_offset, x_row_stride, x_col_stride;
  int32_t w_offset, w_stride, b_offset, b_stride;
  uint32_t out_offset;
  float eps;
  uint32_t eps_lo, eps_hi;
};
struct VjpPush {
  uint32_t rows, n, tpr;
  int32_t x_offset, x_row_stride, x_col_stride;
  int32_t w_offset, w_stride;
  int32_t g_offset, g_row_stride, g_col_stride;
  uint32_t dx_offset, gxhat_offset;
  float eps;
  uint32_t eps_lo, eps_hi;
};

// Checks x ([rows, n] of a float dtype the device can take) and the operands every kernel shares;
// returns the shader variant's suffix.
const char* check_rows(const Context& ctx, RowNorm kind, const GpuView& x, const GpuView* w, const char* op) {
  check_view(x, op);
  if (x.shape.size() != 2) throw ShapeError::of(op, "needs a [rows, n] view", "{}", x.shape);
  const char* suffix = float_variant(x.dtype);
  if (!suffix) throw ValueError::of(op, "needs a float dtype", "{}", dtype_name(x.dtype));
  const DeviceCaps& c = ctx.caps();
  if (x.dtype == float64 && !c.float64)
    throw NotImplemented::of(op, "float64 needs the device feature shaderFloat64", "{} lacks it", c.name);
  if (size_of(x.dtype) == 2 && !c.storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(x.dtype),
                             c.name);
  if (w) {
    if (kind == RowNorm::softmax || kind == RowNorm::log_softmax)
      throw ValueError::of(op, "softmax takes no weight or bias");
    check_view(*w, op);
    if (w->shape != Shape{x.shape[1]} || w->dtype != norm_compute_dtype(x.dtype))
      throw ShapeError::of(op, "weight and bias must be [n] of the compute dtype", "{} {} for rows {}",
                           dtype_name(w->dtype), w->shape, x.shape);
  }
  return suffix;
}

void check_out(const GpuView& out, const GpuView& x, Dtype t, const char* op) {
  check_view(out, op);
  check_contiguous_out(out, x.shape, op);
  if (out.dtype != t)
    throw ValueError::of(op, "wrong output dtype", "{}, expected {}", dtype_name(out.dtype), dtype_name(t));
}

// tpr invocations per row: a power of two up to the workgroup, about items_per_invocation() elements each.
struct Layout {
  uint32_t wg, tpr;
};
Layout layout(const Context& ctx, int64_t n) {
  const uint32_t wg = std::bit_floor(workgroup_size(ctx));
  const int64_t items = items_per_invocation();
  const int64_t want = std::max<int64_t>(1, (n + items - 1) / items);
  return {wg, std::min(wg, std::bit_ceil(u32(std::min<int64_t>(want, wg))))};
}

Groups groups(const Context& ctx, int64_t rows, const Layout& l) {
  const int64_t per_group = l.wg / l.tpr;
  return Groups::linear(static_cast<uint64_t>((rows + per_group - 1) / per_group), ctx);
}

// eps as the shaders read it: a float, and a double's bits.
void set_eps(double eps, float& f, uint32_t& lo, uint32_t& hi) {
  f = static_cast<float>(eps);
  const auto bits = std::bit_cast<uint64_t>(eps);
  lo = static_cast<uint32_t>(bits);
  hi = static_cast<uint32_t>(bits >> 32);
}

}  // namespace

void record_norm_rows(Recorder& r, RowNorm kind, double eps, const GpuView& x, const GpuView* w,
                      const GpuView* b, const GpuView& out) {
  constexpr const char* op = "gpu norm_rows";
  Context& ctx = r.context();
  const char* suffix = check_rows(ctx, kind, x, w, op);
  if (b) check_rows(ctx, kind, x, b, op);
  check_out(out, x, x.dtype, op);
  const int64_t rows = x.shape[0], n = x.shape[1];
  if (rows == 0 || n == 0) return;
  const Layout l = layout(ctx, n);
  ForwardPush p{};
  p.rows = u32(rows);
  p.n = u32(n);
  p.tpr = l.tpr;
  p.x_offset = i32(x.offset);
  p.x_row_stride = i32(x.strides[0]);
  p.x_col_stride = i32(x.strides[1]);
  if (w) {
    p.w_offset = i32(w->offset);
    p.w_stride = i32(w->strides[0]);
  }
  if (b) {
    p.b_offset = i32(b->offset);
    p.b_stride = i32(b->strides[0]);
  }
  p.out_offset = u32(out.offset);
  set_eps(eps, p.eps, p.eps_lo, p.eps_hi);
  // An absent weight or bias binds x's buffer, which the shader then never reads.
  r.dispatch(builtin_shader(std::string("norm_rows_") + suffix),
             {l.wg, static_cast<uint32_t>(kind), w ? 1u : 0u, b ? 1u : 0u},
             {{x.buffer, Access::read},
              {w ? w->buffer : x.buffer, Access::read},
              {b ? b->buffer : x.buffer, Access::read},
              {out.buffer, Access::write}},
             p, groups(ctx, rows, l));
}

void record_norm_rows_vjp(Recorder& r, RowNorm kind, double eps, const GpuView& x, const GpuView* w,
                          const GpuView& g, const GpuView& dx, const GpuView* gxhat) {
  constexpr const char* op = "gpu norm_rows_vjp";
  Context& ctx = r.context();
  const char* suffix = check_rows(ctx, kind, x, w, op);
  check_view(g, op);
  if (g.shape != x.shape || g.dtype != x.dtype)
    throw ShapeError::of(op, "the cotangent must have x's shape and dtype", "{} {} for {} {}",
                         dtype_name(g.dtype), g.shape, dtype_name(x.dtype), x.shape);
  check_out(dx, x, x.dtype, op);
  if (gxhat) {
    if (kind == RowNorm::softmax || kind == RowNorm::log_softmax)
      throw ValueError::of(op, "softmax has no weight gradient terms");
    check_out(*gxhat, x, norm_compute_dtype(x.dtype), op);
  }
  const int64_t rows = x.shape[0], n = x.shape[1];
  if (rows == 0 || n == 0) return;
  const Layout l = layout(ctx, n);
  VjpPush p{};
  p.rows = u32(rows);
  p.n = u32(n);
  p.tpr = l.tpr;
  p.x_offset = i32(x.offset);
  p.x_row_stride = i32(x.strides[0]);
  p.x_col_stride = i32(x.strides[1]);
  if (w) {
    p.w_offset = i32(w->offset);
    p.w_stride = i32(w->strides[0]);
  }
  p.g_offset = i32(g.offset);
  p.g_row_stride = i32(g.strides[0]);
  p.g_col_stride = i32(g.strides[1]);
  p.dx_offset = u32(dx.offset);
  p.gxhat_offset = gxhat ? u32(gxhat->offset) : 0u;
  set_eps(eps, p.eps, p.eps_lo, p.eps_hi);
  // Absent operands bind another buffer of the dispatch, which the shader then never touches.
  r.dispatch(builtin_shader(std::string("norm_rows_vjp_") + suffix),
             {l.wg, static_cast<uint32_t>(kind), w ? 1u : 0u, gxhat ? 1u : 0u},
             {{x.buffer, Access::read},
              {w ? w->buffer : x.buffer, Access::read},
              {g.buffer, Access::read},
              {dx.buffer, Access::write},
              {gxhat ? gxhat->buffer : dx.buffer, Access::write}},
             p, groups(ctx, rows, l));
}

}  // namespace kiln::detail::vk
