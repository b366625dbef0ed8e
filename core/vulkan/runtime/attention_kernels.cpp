#include "kiln/core/vulkan/runtime/attention_kernels.h"

#include <bit>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// The shaders' KILN_MAX_D and KILN_T (attention_common.glsl), and each variant's KILN_BR.
constexpr int64_t kMaxHeadDim = 128;
constexpr uint32_t kThreadsPerRow = 4;

struct Operand {
  int32_t off, s0, s1, row;
};
struct MaskOperand {
  int32_t off, s0, s1, row, col;
};
struct Header {
  uint32_t lq, lk, dims, n1, groups;
};
struct ForwardPush {
  Header h;
  Operand q, k, v;
  MaskOperand m;
  uint32_t out_off, lse_off;
  uint32_t scale_lo, scale_hi;
};
struct BackwardPush {
  Header h;
  Operand q, k, v, g;
  MaskOperand m;
  uint32_t offs[4];
  uint32_t scale_lo, scale_hi;
};
static_assert(sizeof(BackwardPush) <= Context::kPushConstantBytes);

Operand operand(const GpuView& v) {
  return {i32(v.offset), i32(v.strides[0]), i32(v.strides[1]), i32(v.strides[2])};
}

MaskOperand mask_operand(const GpuView* m) {
  if (!m) return {};
  return {i32(m->offset), i32(m->strides[0]), i32(m->strides[1]), i32(m->strides[2]), i32(m->strides[3])};
}

// Rows a workgroup owns (the variants' KILN_BR): float64 tiles are half as tall to fit shared memory.
uint32_t block_rows(Dtype t) { return t == float64 ? 8u : 16u; }

// Checks the operands and returns the variant suffix.
const char* check(const Context& ctx, const AttentionOperands& a, const char* op) {
  for (const GpuView* v : {&a.q, &a.k, &a.v}) {
    check_view(*v, op);
    if (v->shape.size() != 4 || v->strides[3] != 1)
      throw ShapeError::of(op, "operands must be (N0, N1, L, X) views with unit stride along X", "{} {}",
                           v->shape, v->strides);
    if (v->dtype != a.q.dtype) throw ValueError::of(op, "q, k and v must share one dtype");
  }
  const Shape& q = a.q.shape;
  const Shape& k = a.k.shape;
  const Shape& v = a.v.shape;
  if (k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1] || k[3] != q[3] || v[2] != k[2])
    throw ShapeError::of(op, "mismatched operands", "q {}, k {}, v {}", q, k, v);
  if (q[3] > kMaxHeadDim || v[3] > kMaxHeadDim)
    throw NotImplemented::of(op, "head dims above 128 are not supported by the GPU kernel", "D {}, Dv {}",
                             q[3], v[3]);
  const Dtype c = a.q.dtype == float64 ? float64 : float32;
  if (a.mask) {
    check_view(*a.mask, op);
    if (a.mask->shape != Shape{q[0], q[1], q[2], k[2]} || a.mask->dtype != c)
      throw ShapeError::of(op, "the mask must be (N0, N1, Lq, Lk) of the compute dtype", "{} {}",
                           dtype_name(a.mask->dtype), a.mask->shape);
  }
  const char* suffix = float_variant(a.q.dtype);
  if (!suffix) throw ValueError::of(op, "needs a float dtype", "{}", dtype_name(a.q.dtype));
  const DeviceCaps& caps = ctx.caps();
  if (a.q.dtype == float64 && !caps.float64)
    throw NotImplemented::of(op, "float64 needs the device feature shaderFloat64", "{} lacks it", caps.name);
  if (size_of(a.q.dtype) == 2 && !caps.storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(a.q.dtype),
                             caps.name);
  return suffix;
}

Header header(const AttentionOperands& a, uint64_t groups) {
  const Shape& q = a.q.shape;
  return {u32(q[2]), u32(a.k.shape[2]), u32(q[3] | (a.v.shape[3] << 16)), u32(q[1]),
          u32(static_cast<int64_t>(groups))};
}

// scale as the shaders read it: float bits, or a double's two halves.
void set_scale(double scale, Dtype t, uint32_t& lo, uint32_t& hi) {
  if (t == float64) {
    const auto bits = std::bit_cast<uint64_t>(scale);
    lo = static_cast<uint32_t>(bits);
    hi = static_cast<uint32_t>(bits >> 32);
  } else {
    lo = std::bit_cast<uint32_t>(static_cast<float>(scale));
    hi = 0;
  }
}

uint64_t block_groups(int64_t pairs, int64_t rows, uint32_t br) {
  return static_cast<uint64_t>(pairs) * static_cast<uint64_t>((rows + br - 1) / br);
}

}  // namespace

void record_attention_forward(Recorder& r, const AttentionOperands& a, const GpuView& out,
                              const GpuView& lse) {
  constexpr const char* op = "gpu attention_forward";
  Context& ctx = r.context();
  const char* suffix = check(ctx, a, op);
  const int64_t pairs = a.q.shape[0] * a.q.shape[1], lq = a.q.shape[2];
  check_contiguous_out(out, {pairs * lq * a.v.shape[3]}, op);
  check_contiguous_out(lse, {pairs * lq}, op);
  if (pairs == 0 || lq == 0) return;
  const uint32_t br = block_rows(a.q.dtype);
  const uint64_t groups = block_groups(pairs, lq, br);
  ForwardPush p{};
  p.h = header(a, groups);
  p.q = operand(a.q);
  p.k = operand(a.k);
  p.v = operand(a.v);
  p.m = mask_operand(a.mask);
  p.out_off = u32(out.offset);
  p.lse_off = u32(lse.offset);
  set_scale(a.scale, a.q.dtype, p.scale_lo, p.scale_hi);
  // An absent mask binds q's buffer, which the shader then never reads.
  r.dispatch(builtin_shader(std::string("attention_forward_") + suffix),
             {br * kThreadsPerRow, a.causal ? 1u : 0u, a.mask ? 1u : 0u},
             {{a.q.buffer, Access::read},
              {a.k.buffer, Access::read},
              {a.v.buffer, Access::read},
              {a.mask ? a.mask->buffer : a.q.buffer, Access::read},
              {out.buffer, Access::write},
              {lse.buffer, Access::write}},
             p, Groups::linear(groups, ctx));
}

void record_attention_backward(Recorder& r, const AttentionOperands& a, const GpuView& g, const GpuView& out,
                               const GpuView& lse, const GpuView& dq, const GpuView& dk, const GpuView& dv) {
  constexpr const char* op = "gpu attention_backward";
  Context& ctx = r.context();
  const char* suffix = check(ctx, a, op);
  check_view(g, op);
  if (g.shape.size() != 4 || g.strides[3] != 1 || g.dtype != a.q.dtype ||
      g.shape != Shape{a.q.shape[0], a.q.shape[1], a.q.shape[2], a.v.shape[3]})
    throw ShapeError::of(op, "the cotangent must be a view as out", "{} {}", g.shape, g.strides);
  const int64_t pairs = a.q.shape[0] * a.q.shape[1], lq = a.q.shape[2], lk = a.k.shape[2];
  check_contiguous_out(out, {pairs * lq * a.v.shape[3]}, op);
  check_contiguous_out(lse, {pairs * lq}, op);
  check_contiguous_out(dq, {pairs * lq * a.q.shape[3]}, op);
  check_contiguous_out(dk, {pairs * lk * a.k.shape[3]}, op);
  check_contiguous_out(dv, {pairs * lk * a.v.shape[3]}, op);
  if (pairs == 0 || (lq == 0 && lk == 0)) return;
  // delta_i = dO_i . O_i, written by the dq kernel for the dk/dv one.
  const Dtype c = a.q.dtype == float64 ? float64 : float32;
  const GpuView delta = GpuView::contiguous(
      ctx.allocator().allocate(static_cast<size_t>(std::max<int64_t>(1, pairs * lq) * size_of(c))), c,
      {pairs * lq});
  const uint32_t br = block_rows(a.q.dtype);
  const Binding mask{a.mask ? a.mask->buffer : a.q.buffer, Access::read};
  BackwardPush p{};
  p.q = operand(a.q);
  p.k = operand(a.k);
  p.v = operand(a.v);
  p.g = operand(g);
  p.m = mask_operand(a.mask);
  set_scale(a.scale, a.q.dtype, p.scale_lo, p.scale_hi);
  const std::array<uint32_t, 3> spec{br * kThreadsPerRow, a.causal ? 1u : 0u, a.mask ? 1u : 0u};
  if (lq > 0) {
    const uint64_t groups = block_groups(pairs, lq, br);
    p.h = header(a, groups);
    p.offs[0] = u32(out.offset);
    p.offs[1] = u32(lse.offset);
    p.offs[2] = 0;
    p.offs[3] = u32(dq.offset);
    r.dispatch(builtin_shader(std::string("attention_dq_") + suffix), {spec[0], spec[1], spec[2]},
               {{a.q.buffer, Access::read},
                {a.k.buffer, Access::read},
                {a.v.buffer, Access::read},
                mask,
                {g.buffer, Access::read},
                {out.buffer, Access::read},
                {lse.buffer, Access::read},
                {delta.buffer, Access::write},
                {dq.buffer, Access::write}},
               p, Groups::linear(groups, ctx));
  }
  if (lk > 0) {
    const uint64_t groups = block_groups(pairs, lk, br);
    p.h = header(a, groups);
    p.offs[0] = u32(lse.offset);
    p.offs[1] = 0;
    p.offs[2] = u32(dk.offset);
    p.offs[3] = u32(dv.offset);
    r.dispatch(builtin_shader(std::string("attention_dkdv_") + suffix), {spec[0], spec[1], spec[2]},
               {{a.q.buffer, Access::read},
                {a.k.buffer, Access::read},
                {a.v.buffer, Access::read},
                mask,
                {g.buffer, Access::read},
                {lse.buffer, Access::read},
                {delta.buffer, Access::read},
                {dk.buffer, Access::write},
                {dv.buffer, Access::write}},
               p, Groups::linear(groups, ctx));
  }
}

}  // namespace kiln::detail::vk
