// gpu::adam_step (core/vulkan/gpu.h) on shaders/optim/adam_step.comp.
#include <bit>

#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

struct AdamPush {
  uint32_t n, amsgrad, lerp_from_m, step_offset, bc2_offset;
  uint32_t offsets[5];
  uint32_t constants[5][2];
  uint32_t decay, decay_offset;
};
static_assert(sizeof(AdamPush) == 88);

// x as a dense view: itself when row-contiguous, else a copy recorded into a temporary.
vk::GpuView dense_view(vk::Recorder& r, const Array& x) {
  vk::GpuView v = vk::array_view(x);
  if (x.row_contiguous()) return v;
  vk::GpuView dense = vk::GpuView::contiguous(
      r.context().allocator().allocate(static_cast<size_t>(std::max<int64_t>(x.nbytes(), 1))), x.dtype(),
      v.shape);
  vk::record_copy(r, v, dense);
  return dense;
}

}  // namespace

void adam_step(std::span<const Array> in, std::span<Array> out, const AdamStepConstants& k) {
  constexpr const char* op = "gpu adam_step";
  const Dtype t = in[0].dtype();
  vk::Recorder& r = vk::thread_recorder();
  if (t == float64 && !r.context().caps().float64)
    throw NotImplemented::of(op, "float64 needs the device feature shaderFloat64", "{} lacks it",
                             r.context().caps().name);
  if (t != float32 && t != float64)
    throw NotImplemented::of(op, "float32 and float64 only", "{}", dtype_name(t));
  for (Array& o : out) allocate(o);
  const int64_t n = in[0].size();
  if (n == 0) return;
  if (n > vk::kMaxIndex) throw NotImplemented::of(op, "past 2^31 elements on the GPU", "{}", n);
  const size_t tensors = k.amsgrad ? 5 : 4;
  std::vector<vk::GpuView> views;
  for (size_t i = 0; i < tensors + (k.decay ? 3 : 2); ++i) views.push_back(dense_view(r, in[i]));
  AdamPush p{};
  p.n = static_cast<uint32_t>(n);
  p.amsgrad = k.amsgrad;
  p.lerp_from_m = k.lerp_from_m;
  p.step_offset = static_cast<uint32_t>(views[tensors].offset);
  p.bc2_offset = static_cast<uint32_t>(views[tensors + 1].offset);
  p.decay = k.decay;
  // Without decay, binding 11 is the step size's buffer, never read.
  const vk::GpuView& decay = views[k.decay ? tensors + 2 : tensors];
  p.decay_offset = static_cast<uint32_t>(decay.offset);
  for (size_t i = 0; i < tensors; ++i) p.offsets[i] = static_cast<uint32_t>(views[i].offset);
  const double constants[5] = {k.w, k.one_minus_w, k.b2, k.one_minus_b2, k.eps};
  for (int i = 0; i < 5; ++i) {
    if (t == float64) {
      const uint64_t b = std::bit_cast<uint64_t>(constants[i]);
      p.constants[i][0] = static_cast<uint32_t>(b);
      p.constants[i][1] = static_cast<uint32_t>(b >> 32);
    } else {
      p.constants[i][0] = std::bit_cast<uint32_t>(static_cast<float>(constants[i]));
    }
  }
  // Without amsgrad, vmax and vmax1 are bound to buffers the kernel never touches.
  const vk::GpuView& vmax = k.amsgrad ? views[4] : views[3];
  const vk::BufferPtr vmax1 = k.amsgrad ? out[3].node().buffer->device() : out[2].node().buffer->device();
  const uint32_t wg = vk::workgroup_size(r.context());
  r.dispatch(vk::builtin_shader(t == float64 ? "adam_step_f64" : "adam_step_f32"), {wg},
             {{views[0].buffer, vk::Access::read},
              {views[1].buffer, vk::Access::read},
              {views[2].buffer, vk::Access::read},
              {views[3].buffer, vk::Access::read},
              {vmax.buffer, vk::Access::read},
              {views[tensors].buffer, vk::Access::read},
              {views[tensors + 1].buffer, vk::Access::read},
              {out[0].node().buffer->device(), vk::Access::write},
              {out[1].node().buffer->device(), vk::Access::write},
              {out[2].node().buffer->device(), vk::Access::write},
              {vmax1, vk::Access::write},
              {decay.buffer, vk::Access::read}},
             p, vk::Groups::linear((static_cast<uint64_t>(n) + wg - 1) / wg, r.context()));
}

}  // namespace kiln::gpu
