#include "kiln/core/vulkan/runtime/pool_kernels.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// The push constants of shaders/pool/pool_common.glsl.
struct PoolPush {
  uint32_t n, c, h, w, oh, ow;
  int32_t kh, kw, sh, sw, ph, pw, dh, dw;
  std::array<int32_t, 4> x_strides;
  int32_t x_offset;
  std::array<int32_t, 4> s_strides;
  int32_t s_offset;
  uint32_t out_offset;
};
static_assert(sizeof(PoolPush) == 100 && sizeof(PoolPush) <= Context::kPushConstantBytes);

// The variant suffix of the views' dtype, after checking that the device has it.
std::string dtype_suffix(Dtype t, const Context& ctx, const char* op) {
  switch (t) {
    case float32:
      return "f32";
    case float16:
    case bfloat16:
      if (!ctx.caps().storage16)
        throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{}", ctx.caps().name);
      return "h16";
    case float64:
      if (!ctx.caps().float64)
        throw NotImplemented::of(op, "the device lacks float64 (shaderFloat64)", "{}", ctx.caps().name);
      return "f64";
    default:
      throw NotImplemented::of(op, "max pooling on the GPU takes float32, float64, float16 or bfloat16", "{}",
                               dtype_name(t));
  }
}

void check_dims(const PoolDims& d, const char* op) {
  for (int i = 0; i < 2; ++i)
    if (d.kernel[i] < 1 || d.stride[i] < 1 || d.dilation[i] < 1 || d.padding[i] < 0)
      throw ValueError::of(op, "kernel, stride and dilation must be >= 1 and padding >= 0",
                           "kernel ({}, {}), stride ({}, {}), padding ({}, {}), dilation ({}, {})",
                           d.kernel[0], d.kernel[1], d.stride[0], d.stride[1], d.padding[0], d.padding[1],
                           d.dilation[0], d.dilation[1]);
  // Pooled sizes >= 1 (as max_pool2d makes them): every input element then has windows to sum.
  if (d.n < 0 || d.c < 0 || d.h < 0 || d.w < 0 || d.oh < 1 || d.ow < 1)
    throw ShapeError::of(op, "sizes must be >= 0 and pooled sizes >= 1",
                         "x ({}, {}, {}, {}), pooled ({}, {})", d.n, d.c, d.h, d.w, d.oh, d.ow);
}

void check_shape(const GpuView& v, const Shape& expect, const char* what, const char* op) {
  if (v.shape != expect)
    throw ShapeError::of(op, "a view does not fit", "{} is {}, expected {}", what, v.shape, expect);
}

PoolPush push_of(const PoolDims& d, const GpuView& x, const GpuView* s) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  PoolPush p{u(d.n),
             u(d.c),
             u(d.h),
             u(d.w),
             u(d.oh),
             u(d.ow),
             d.kernel[0],
             d.kernel[1],
             d.stride[0],
             d.stride[1],
             d.padding[0],
             d.padding[1],
             d.dilation[0],
             d.dilation[1],
             {},
             0,
             {},
             0,
             0};
  for (size_t i = 0; i < 4; ++i) p.x_strides[i] = static_cast<int32_t>(x.strides[i]);
  p.x_offset = static_cast<int32_t>(x.offset);
  if (s) {
    for (size_t i = 0; i < 4; ++i) p.s_strides[i] = static_cast<int32_t>(s->strides[i]);
    p.s_offset = static_cast<int32_t>(s->offset);
  }
  return p;
}

// x as the kernels bind it: an empty x (every window all padding) has no elements to read, and
// binds the output's buffer instead.
GpuView input_or(const GpuView& x, const GpuView& fallback) {
  if (numel(x.shape) > 0) return x;
  GpuView v = fallback;
  v.shape = x.shape;
  v.strides = Strides(x.shape.size(), 0);
  return v;
}

}  // namespace

void record_max_pool(Recorder& r, const PoolDims& d, const GpuView& x_in, const GpuView* src,
                     const GpuView& y) {
  constexpr const char* op = "gpu max_pool2d";
  check_dims(d, op);
  const Shape xs{d.n, d.c, d.h, d.w}, ys{d.n, d.c, d.oh, d.ow};
  check_shape(x_in, xs, "x", op);
  if (src) check_shape(*src, xs, "src", op);
  check_view(y, op);
  check_contiguous_out(y, ys, op);
  if (numel(ys) == 0) return;
  const GpuView x = input_or(x_in, y);
  check_view(x, op);
  if (src && numel(xs) > 0) check_view(*src, op);
  if (x_in.dtype != y.dtype || (src && src->dtype != y.dtype))
    throw ValueError::of(op, "dtypes differ", "x {}, out {}", dtype_name(x_in.dtype), dtype_name(y.dtype));
  Context& ctx = r.context();
  const std::string suffix = dtype_suffix(y.dtype, ctx, op);
  PoolPush p = push_of(d, x, src && numel(xs) > 0 ? src : nullptr);
  p.out_offset = static_cast<uint32_t>(y.offset);
  const GpuView& s = src && numel(xs) > 0 ? *src : x;
  const uint32_t wg = workgroup_size(ctx);
  const int64_t total = numel(ys);
  r.dispatch(builtin_shader("max_pool_" + suffix), {wg, y.dtype == bfloat16 ? 1u : 0u, src ? 1u : 0u},
             {{x.buffer, Access::read}, {s.buffer, Access::read}, {y.buffer, Access::write}}, p,
             Groups::linear(static_cast<uint64_t>((total + wg - 1) / wg), ctx));
}

void record_max_pool_scatter(Recorder& r, const PoolDims& d, const GpuView& x, const GpuView& g,
                             const GpuView& dx) {
  constexpr const char* op = "gpu max_pool2d_scatter";
  check_dims(d, op);
  const Shape xs{d.n, d.c, d.h, d.w}, ys{d.n, d.c, d.oh, d.ow};
  check_shape(x, xs, "x", op);
  check_shape(g, ys, "g", op);
  check_view(dx, op);
  check_contiguous_out(dx, xs, op);
  const int64_t total = numel(xs), pooled = numel(ys);
  if (total == 0) return;
  check_view(x, op);
  if (x.dtype != dx.dtype || g.dtype != dx.dtype)
    throw ValueError::of(op, "dtypes differ", "x {}, g {}, out {}", dtype_name(x.dtype), dtype_name(g.dtype),
                         dtype_name(dx.dtype));
  Context& ctx = r.context();
  const std::string suffix = dtype_suffix(dx.dtype, ctx, op);
  const uint32_t wg = workgroup_size(ctx), bf = dx.dtype == bfloat16 ? 1u : 0u;
  check_view(g, op);
  // The argmax of every window into an int32 temporary (kept alive by the recorder).
  const GpuView idx =
      GpuView::contiguous(ctx.allocator().allocate(static_cast<size_t>(pooled) * sizeof(int32_t)), int32, ys);
  PoolPush p = push_of(d, x, &g);
  r.dispatch(builtin_shader("max_pool_argmax_" + suffix), {wg, bf},
             {{x.buffer, Access::read}, {idx.buffer, Access::write}}, p,
             Groups::linear(static_cast<uint64_t>((pooled + wg - 1) / wg), ctx));
  p.out_offset = static_cast<uint32_t>(dx.offset);
  r.dispatch(builtin_shader("max_pool_scatter_" + suffix), {wg, bf},
             {{x.buffer, Access::read},
              {g.buffer, Access::read},
              {idx.buffer, Access::read},
              {dx.buffer, Access::write}},
             p, Groups::linear(static_cast<uint64_t>((total + wg - 1) / wg), ctx));
}

}  // namespace kiln::detail::vk
