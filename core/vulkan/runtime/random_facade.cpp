// gpu::random_permutation (core/vulkan/gpu.h) on shaders/random/permutation.comp, and
// gpu::keyed_elementwise_inputs (core/vulkan/gpu_random.h). The other random primitives are
// generated elementwise kernels (gpu::keyed_elementwise in facade.cpp).
#include <fmt/format.h>

#include <string>
#include <vector>

#include "kiln/core/cpu/strided.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_random.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;

void random_permutation(const Array& keys, int64_t n, Array& out) {
  constexpr const char* op = "gpu permutation";
  allocate(out);
  if (out.size() == 0) return;
  if (out.size() > vk::kMaxIndex)
    throw NotImplemented::of(op, "outputs past 2^31 elements are not supported on the GPU", "{}",
                             shape_str(out.shape()));
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView ov = vk::array_out_view(out, out.shape());
  vk::GpuView kv = vk::array_view(keys);
  vk::check_view(kv, op);
  // The kernel reads the keys as contiguous pairs: a row-major copy when they are a strided view.
  if (!keys.row_contiguous()) {
    vk::GpuView dense = vk::GpuView::contiguous(
        r.context().allocator().allocate(static_cast<size_t>(keys.size()) * 4), uint32, kv.shape);
    vk::record_copy(r, kv, dense);
    kv = std::move(dense);
  }
  struct Push {
    uint32_t rows, n, keys_offset, fill, first, last;
  };
  const uint32_t rows = static_cast<uint32_t>(keys.size() / 2), n32 = static_cast<uint32_t>(n);
  const uint32_t wg = vk::workgroup_size(r.context());
  const std::initializer_list<vk::Binding> fill{{kv.buffer, vk::Access::read},
                                                {ov.buffer, vk::Access::write}};
  const std::initializer_list<vk::Binding> swap{{kv.buffer, vk::Access::read},
                                                {ov.buffer, vk::Access::read_write}};
  const vk::ShaderCode& shader = vk::builtin_shader("random_permutation");
  r.dispatch(shader, {wg}, fill, Push{rows, n32, static_cast<uint32_t>(kv.offset), 1, 0, 0},
             vk::Groups::linear((static_cast<uint64_t>(out.size()) + wg - 1) / wg, r.context()));
  // Swaps i = n-1 down to 1, kSwapsPerDispatch at a time (lavapipe ends an invocation after 65535
  // loop iterations); the recorder puts a barrier between dispatches writing the same buffer.
  constexpr uint32_t kSwapsPerDispatch = 16384;
  for (uint32_t first = n32 - 1; first > 0;) {
    const uint32_t last = first > kSwapsPerDispatch ? first - kSwapsPerDispatch : 0;
    r.dispatch(shader, {wg}, swap, Push{rows, n32, static_cast<uint32_t>(kv.offset), 0, first, last},
               vk::Groups::linear((rows + wg - 1) / wg, r.context()));
    first = last;
  }
}

void keyed_elementwise_inputs(std::string_view helpers, Dtype compute, const Array& keys, int64_t sample_size,
                              std::span<const Array> inputs, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  if (sample_size > vk::kMaxIndex)
    throw NotImplemented::of("gpu random", "samples past 2^31 elements are not supported on the GPU",
                             "{} elements", sample_size);
  // The keys' two words broadcast over each sample ((batch..., 1, ..., 1) views), as
  // keyed_elementwise does, then the inputs broadcast to out's shape.
  const vk::GpuView kv = vk::array_view(keys);
  const size_t batch = kv.shape.size() - 1, sample_rank = out.shape().size() - batch;
  vk::GpuView word0 = kv;
  word0.shape.pop_back();
  word0.strides.pop_back();
  word0.shape.insert(word0.shape.end(), sample_rank, 1);
  word0.strides.insert(word0.strides.end(), sample_rank, 0);
  vk::GpuView word1 = word0;
  word1.offset += kv.strides.back();
  std::vector<vk::GpuView> views{word0, word1};
  std::string args;
  for (const Array& x : inputs) {
    vk::GpuView v = vk::array_view(x);
    v.strides = detail::broadcast_strides(v.shape, v.strides, out.shape());
    v.shape = out.shape();
    args += fmt::format(", v{}", views.size());
    views.push_back(std::move(v));
  }
  vk::ElementwiseKernel k{.inputs = {},
                          .compute = compute,
                          .out = out.dtype(),
                          .expr = fmt::format("kiln_keyed(uvec2(v0, v1), {}{})",
                                              batch == 0 ? "j" : fmt::format("j % {}u", sample_size), args),
                          .helpers = fmt::format("#include \"common/random.glsl\"\n{}\n", helpers)};
  for (const vk::GpuView& v : views) k.inputs.push_back(v.dtype);
  vk::record_elementwise(vk::thread_recorder(), k, views, vk::array_out_view(out, out.shape()));
}

}  // namespace kiln::gpu
