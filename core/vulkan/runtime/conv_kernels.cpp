#include "kiln/core/vulkan/runtime/conv_kernels.h"

#include <algorithm>
#include <bit>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// shaders/conv/conv_common.glsl's push constants.
struct ConvPush {
  uint32_t n, c, h, w, o, kh, kw, groups, oh, ow;
  int32_t sh, sw, ph, pw, dh, dw;
  std::array<int32_t, 4> a_strides;
  int32_t a_offset;
  std::array<int32_t, 4> b_strides;
  int32_t b_offset;
  uint32_t out_offset, k_chunk;
};
static_assert(sizeof(ConvPush) == 112);
struct SumPush {
  uint32_t n, splits, out_offset;
};

// conv_gemm.comp's tile step along the reduction, and its workgroup size.
constexpr int64_t kStepK = 8;
constexpr uint32_t kGemmInvocations = 256;
// A group's GEMM with fewer rows than this runs the direct kernel: even a 16-row block would be
// mostly zeros (depthwise convolutions have one row per group). grad_weight's GEMM needs
// kMinWeightGemm rows and columns: below that its direct kernel (a workgroup per weight element)
// was faster on lavapipe (LeNet's first layer: 86 ms against 230 ms for the best block).
constexpr int64_t kMinGemmRows = 4;
constexpr int64_t kMinWeightGemm = 16;
// Workgroups that fill a large GPU (an H200 has 132 SMs): 128-wide tiles are used only when there
// are at least this many, and grad_weight splits its reduction until there are.
constexpr int64_t kFillGroups = 256;
// grad_weight's splits each reduce at least this many (sample, pixel) positions, and are at most
// kMaxSplits (their partial sums cost splits times the weight's size in memory).
constexpr int64_t kMinSplitK = 512;
constexpr int64_t kMaxSplits = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t output_size(int64_t in, int64_t k, int stride, int padding, int dilation) {
  return (in + 2 * int64_t{padding} - int64_t{dilation} * (k - 1) - 1) / stride + 1;
}

// The GEMM of `pass` for one group: rows M, columns N, reduction K (see conv_gemm.comp).
struct GemmShape {
  int64_t m, n, k;
};
GemmShape gemm_shape(ConvPass pass, const ConvDims& d) {
  const int64_t groups = std::max(d.groups, 1);  // record_pass rejects groups < 1 before this
  const int64_t cg = d.c / groups, og = d.o / groups;
  switch (pass) {
    case ConvPass::forward:
      return {og, d.n * d.oh * d.ow, cg * d.kh * d.kw};
    case ConvPass::grad_input:
      return {cg, d.n * d.h * d.w, og * d.kh * d.kw};
    case ConvPass::grad_weight:
      break;
  }
  return {og, cg * d.kh * d.kw, d.n * d.oh * d.ow};
}

// The output block of a GEMM kernel and its name's suffix (conv_gemm.comp's variants).
struct Block {
  int64_t rows, cols;
  const char* suffix;
};
Block block_of(ConvKernel k) {
  switch (k) {
    case ConvKernel::gemm128x128:
      return {128, 128, "_128x128"};
    case ConvKernel::gemm32x128:
      return {32, 128, "_32x128"};
    case ConvKernel::gemm16x256:
      return {16, 256, "_16x256"};
    default:
      return {64, 64, "_64x64"};
  }
}

int64_t gemm_tiles(const GemmShape& s, ConvKernel k, int groups) {
  const Block b = block_of(k);
  return ceil_div(s.m, b.rows) * ceil_div(s.n, b.cols) * groups;
}

void check_dims(const ConvDims& d, const char* op) {
  if (d.groups < 1) throw ValueError::of(op, "groups must be >= 1", "got {}", d.groups);
  for (int i = 0; i < 2; ++i)
    if (d.stride[i] < 1 || d.dilation[i] < 1 || d.padding[i] < 0)
      throw ValueError::of(op, "bad stride, padding or dilation",
                           "stride ({},{}), padding ({},{}), dilation ({},{})", d.stride[0], d.stride[1],
                           d.padding[0], d.padding[1], d.dilation[0], d.dilation[1]);
  for (int64_t v : {d.n, d.c, d.h, d.w, d.o, d.kh, d.kw, d.oh, d.ow})
    if (v < 0 || v > kMaxIndex)
      throw ShapeError::of(op, "sizes must lie in [0, 2^31)", "x ({},{},{},{}), weight ({},{},{},{})", d.n,
                           d.c, d.h, d.w, d.o, d.c / d.groups, d.kh, d.kw);
  if (d.c % d.groups != 0 || d.o % d.groups != 0 || d.kh < 1 || d.kw < 1)
    throw ShapeError::of(op, "channels must divide into groups and the kernel be non-empty",
                         "{} input, {} output channels, {} groups, kernel {}x{}", d.c, d.o, d.groups, d.kh,
                         d.kw);
  if (d.oh != output_size(d.h, d.kh, d.stride[0], d.padding[0], d.dilation[0]) ||
      d.ow != output_size(d.w, d.kw, d.stride[1], d.padding[1], d.dilation[1]) || d.oh < 1 || d.ow < 1)
    throw ShapeError::of(op, "the output size does not follow from the input, kernel and parameters",
                         "input {}x{}, kernel {}x{}, output {}x{}", d.h, d.w, d.kh, d.kw, d.oh, d.ow);
}

// The dtype's kernel variant suffix; throws NotImplemented when the device lacks the type.
const char* variant(Dtype t, const Context& ctx, const char* op) {
  switch (t) {
    case float32:
      return "f32";
    case float16:
    case bfloat16:
      if (!ctx.caps().storage16)
        throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(t),
                                 ctx.caps().name);
      return "h16";
    case float64:
      if (!ctx.caps().float64)
        throw NotImplemented::of(op, "the device lacks float64 (shaderFloat64)", "{}", ctx.caps().name);
      return "f64";
    default:
      throw NotImplemented::of(op, "convolutions on the GPU take float32, float16, bfloat16 or float64", "{}",
                               dtype_name(t));
  }
}

// One operand: its shape must be `shape`, its dtype `t`. Strides of size-1 dims are zeroed (they
// are never stepped, and the shaders multiply them by 0 in int32).
std::array<int32_t, 4> operand_strides(const GpuView& v, const Shape& shape, Dtype t, const char* what,
                                       const char* op) {
  if (v.shape != shape)
    throw ShapeError::of(op, "an operand's shape does not fit the convolution", "{} is {}, expected {}", what,
                         v.shape, shape);
  if (v.dtype != t)
    throw ValueError::of(op, "operands must have one dtype", "{} is {}, the output {}", what,
                         dtype_name(v.dtype), dtype_name(t));
  check_view(v, op);
  std::array<int32_t, 4> s{};
  for (size_t i = 0; i < 4; ++i) s[i] = shape[i] == 1 ? 0 : static_cast<int32_t>(v.strides[i]);
  return s;
}

ConvPush base_push(const ConvDims& d) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  return {.n = u(d.n),
          .c = u(d.c),
          .h = u(d.h),
          .w = u(d.w),
          .o = u(d.o),
          .kh = u(d.kh),
          .kw = u(d.kw),
          .groups = u(d.groups),
          .oh = u(d.oh),
          .ow = u(d.ow),
          .sh = d.stride[0],
          .sw = d.stride[1],
          .ph = d.padding[0],
          .pw = d.padding[1],
          .dh = d.dilation[0],
          .dw = d.dilation[1],
          .a_strides = {},
          .a_offset = 0,
          .b_strides = {},
          .b_offset = 0,
          .out_offset = 0,
          .k_chunk = 0};
}

// How grad_weight's GEMM splits its reduction: `splits` chunks of `chunk` positions (whole steps
// of the kernel; the last may be shorter).
struct SplitPlan {
  int64_t splits, chunk;
};
SplitPlan split_plan(const ConvDims& d, ConvKernel k) {
  const GemmShape s = gemm_shape(ConvPass::grad_weight, d);
  const int64_t tiles = gemm_tiles(s, k, d.groups);
  const int64_t wanted = tiles >= kFillGroups ? 1 : std::min(ceil_div(kFillGroups, tiles), s.k / kMinSplitK);
  const int64_t splits = std::clamp(wanted, int64_t{1}, kMaxSplits);
  const int64_t chunk = std::max(kStepK, ceil_div(ceil_div(s.k, splits), kStepK) * kStepK);
  return {std::max<int64_t>(ceil_div(s.k, chunk), 1), chunk};
}

// out = splits' partial sums (float32, `n` each) added and converted to out's dtype; zeros when
// splits is 0 (then `partials` is not read).
void record_sum_splits(Recorder& r, const BufferPtr& partials, int64_t n, int64_t splits,
                       const GpuView& out) {
  Context& ctx = r.context();
  const uint32_t wg = workgroup_size(ctx);
  const bool h16 = out.dtype != float32;
  const SumPush p{static_cast<uint32_t>(n), static_cast<uint32_t>(splits), static_cast<uint32_t>(out.offset)};
  r.dispatch(builtin_shader(h16 ? "conv_sum_splits_h16" : "conv_sum_splits_f32"),
             {wg, 0u, out.dtype == bfloat16 ? 1u : 0u},
             {{partials, Access::read}, {out.buffer, Access::write}}, p,
             Groups::linear(static_cast<uint64_t>(ceil_div(n, wg)), ctx));
}

void record_gemm(Recorder& r, ConvPass pass, const ConvDims& d, ConvKernel kernel, const GpuView& a,
                 const GpuView& b, const GpuView& out, ConvPush p, const char* op) {
  Context& ctx = r.context();
  if (ctx.caps().max_workgroup_invocations < kGemmInvocations)
    throw NotImplemented::of(op, "the convolution kernel needs 256 invocations per workgroup", "{}",
                             ctx.caps().name);
  const GemmShape s = gemm_shape(pass, d);
  const Block block = block_of(kernel);
  const SplitPlan plan =
      pass == ConvPass::grad_weight ? split_plan(d, kernel) : SplitPlan{1, std::max(kStepK, s.k)};
  const int64_t splits = plan.splits;
  p.k_chunk = static_cast<uint32_t>(plan.chunk);
  const int64_t z = d.groups * splits;
  if (z > ctx.caps().max_workgroup_count[2])
    throw NotImplemented::of(op, "too many groups for one dispatch", "{} groups", d.groups);
  Groups groups = Groups::linear(static_cast<uint64_t>(gemm_tiles(s, kernel, 1)), ctx);
  groups.z = static_cast<uint32_t>(z);
  const std::string shader =
      std::string("conv_gemm_") + (out.dtype == float32 ? "f32" : "h16") + block.suffix;
  const std::initializer_list<uint32_t> spec = {kGemmInvocations, static_cast<uint32_t>(pass),
                                                out.dtype == bfloat16 ? 1u : 0u};
  // The output itself when it is float32 and whole; else float32 partial sums (split-k) or
  // results (16-bit outputs) that record_sum_splits adds and converts.
  if (out.dtype == float32 && splits == 1) {
    p.out_offset = static_cast<uint32_t>(out.offset);
    r.dispatch(builtin_shader(shader), spec,
               {{a.buffer, Access::read}, {b.buffer, Access::read}, {out.buffer, Access::write}}, p, groups);
    return;
  }
  const int64_t n = numel(out.shape);
  const BufferPtr partials = ctx.allocator().allocate(static_cast<size_t>(splits * n) * sizeof(float));
  p.out_offset = 0;
  r.dispatch(builtin_shader(shader), spec,
             {{a.buffer, Access::read}, {b.buffer, Access::read}, {partials, Access::write}}, p, groups);
  record_sum_splits(r, partials, n, splits, out);
}

void record_direct(Recorder& r, ConvPass pass, const GpuView& a, const GpuView& b, const GpuView& out,
                   ConvPush p, const char* op) {
  Context& ctx = r.context();
  const std::string suffix = variant(out.dtype, ctx, op);
  const uint32_t bf = out.dtype == bfloat16 ? 1u : 0u;
  const int64_t n = numel(out.shape);
  p.out_offset = static_cast<uint32_t>(out.offset);
  const std::initializer_list<Binding> bindings = {
      {a.buffer, Access::read}, {b.buffer, Access::read}, {out.buffer, Access::write}};
  if (pass != ConvPass::grad_weight) {
    const uint32_t wg = workgroup_size(ctx);
    r.dispatch(builtin_shader("conv_direct_" + suffix), {wg, static_cast<uint32_t>(pass), bf}, bindings, p,
               Groups::linear(static_cast<uint64_t>(ceil_div(n, wg)), ctx));
    return;
  }
  // One workgroup per weight element, a power of two no wider than its reduction needs.
  const int64_t reduce = std::max<int64_t>(int64_t{p.n} * p.oh * p.ow, 1);
  const uint32_t wg = std::min(std::bit_floor(workgroup_size(ctx)),
                               std::bit_ceil(static_cast<uint32_t>(std::min<int64_t>(reduce, kMaxIndex))));
  r.dispatch(builtin_shader("conv_direct_wgrad_" + suffix), {wg, static_cast<uint32_t>(pass), bf}, bindings,
             p, Groups::linear(static_cast<uint64_t>(n), ctx));
}

// The recording all three passes share: checks, then zeros (an empty reduction), the GEMM or the
// direct kernel. `a` and `b` are the shaders' operands A and B (conv_common.glsl).
void record_pass(Recorder& r, ConvPass pass, const ConvDims& d, const GpuView& a, const Shape& a_shape,
                 const char* a_name, const GpuView& b, const Shape& b_shape, const char* b_name,
                 const GpuView& out, const Shape& out_shape, std::optional<ConvKernel> forced,
                 const char* op) {
  check_dims(d, op);
  check_view(out, op);
  check_contiguous_out(out, out_shape, op);
  Context& ctx = r.context();
  variant(out.dtype, ctx, op);
  const int64_t n = numel(out_shape);
  if (n == 0) return;
  if (numel(a_shape) == 0 || numel(b_shape) == 0) {  // nothing to sum: zeros (the operands are not read)
    if (a.shape != a_shape || b.shape != b_shape)
      throw ShapeError::of(op, "an operand's shape does not fit the convolution", "{} is {}, {} is {}",
                           a_name, a.shape, b_name, b.shape);
    const BufferPtr unused = ctx.allocator().allocate(sizeof(float));
    return record_sum_splits(r, unused, n, 0, out);
  }
  ConvPush p = base_push(d);
  p.a_strides = operand_strides(a, a_shape, out.dtype, a_name, op);
  p.b_strides = operand_strides(b, b_shape, out.dtype, b_name, op);
  p.a_offset = static_cast<int32_t>(a.offset);
  p.b_offset = static_cast<int32_t>(b.offset);
  const ConvKernel kernel = forced.value_or(choose_conv_kernel(pass, d, out.dtype));
  if (kernel != ConvKernel::direct && out.dtype == float64)
    throw ValueError::of(op, "float64 has only the direct kernel", "{}", static_cast<int>(kernel));
  if (kernel == ConvKernel::direct) return record_direct(r, pass, a, b, out, p, op);
  record_gemm(r, pass, d, kernel, a, b, out, p, op);
}

Shape x_shape(const ConvDims& d) { return {d.n, d.c, d.h, d.w}; }
Shape w_shape(const ConvDims& d) { return {d.o, d.groups > 0 ? d.c / d.groups : 0, d.kh, d.kw}; }
Shape y_shape(const ConvDims& d) { return {d.n, d.o, d.oh, d.ow}; }

}  // namespace

ConvKernel choose_conv_kernel(ConvPass pass, const ConvDims& d, Dtype t) {
  if (t == float64) return ConvKernel::direct;
  const GemmShape s = gemm_shape(pass, d);
  const bool weight = pass == ConvPass::grad_weight;
  if (s.m < (weight ? kMinWeightGemm : kMinGemmRows) || (weight && s.n < kMinWeightGemm))
    return ConvKernel::direct;
  if (s.m <= 16) return ConvKernel::gemm16x256;
  if (s.m <= 32) return ConvKernel::gemm32x128;
  // grad_weight fills the device by splitting its reduction instead.
  const bool fills = weight || gemm_tiles(s, ConvKernel::gemm128x128, d.groups) >= kFillGroups;
  return s.m >= 128 && s.n >= 128 && fills ? ConvKernel::gemm128x128 : ConvKernel::gemm64x64;
}

int64_t conv_weight_splits(const ConvDims& d, ConvKernel k) {
  return k == ConvKernel::direct ? 1 : split_plan(d, k).splits;
}

void record_conv_forward(Recorder& r, const ConvDims& d, const GpuView& x, const GpuView& w, const GpuView& y,
                         std::optional<ConvKernel> kernel) {
  record_pass(r, ConvPass::forward, d, w, w_shape(d), "weight", x, x_shape(d), "input", y, y_shape(d), kernel,
              "gpu conv2d");
}

void record_conv_grad_input(Recorder& r, const ConvDims& d, const GpuView& gy, const GpuView& w,
                            const GpuView& dx, std::optional<ConvKernel> kernel) {
  record_pass(r, ConvPass::grad_input, d, w, w_shape(d), "weight", gy, y_shape(d), "output gradient", dx,
              x_shape(d), kernel, "gpu conv2d grad_input");
}

void record_conv_grad_weight(Recorder& r, const ConvDims& d, const GpuView& x, const GpuView& gy,
                             const GpuView& dw, std::optional<ConvKernel> kernel) {
  record_pass(r, ConvPass::grad_weight, d, gy, y_shape(d), "output gradient", x, x_shape(d), "input", dw,
              w_shape(d), kernel, "gpu conv2d grad_weight");
}

}  // namespace kiln::detail::vk
