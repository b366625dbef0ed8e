// What one dependent dispatch costs the GPU, by the way the dependency is expressed: the floor under
// issue 9's dispatch target (kiln's replayed 1000-op chain, gpu_bench's chain_1000_replayed). Each
// benchmark records, once, 1000 dispatches of a one-line kernel (y = x * 0.999 + 0.001 on 1024
// floats, its buffers' addresses in push constants, one pipeline bound once) into a command
// buffer, each reading the previous one's output (a ring of three buffers), and submits that
// buffer again each iteration. No kiln graph, no recording in the timed loop: only the
// dispatches and what orders them. Arguments:
//   sync: 0 nothing (wrong results, the bound without a dependency), 1 a global memory barrier
//         (what vk::Recorder records), 2 an execution-only barrier (no memory barrier: too weak
//         for correctness, the cost of the wait alone), 3 a buffer memory barrier on the buffer
//         written, 4 an event set after each dispatch and waited on before the next,
//         5 a global memory barrier with VK_DEPENDENCY_BY_REGION_BIT
//   workgroup: invocations per workgroup (the 256 vec4s span 256 / workgroup groups)
//   secondary: 1 records into a secondary command buffer executed from the primary, as a
//              captured program (kiln's replay) is
//   fresh: 1 writes a new buffer each dispatch (1001 of them), as an unfused graph does, instead
//          of a ring of three
//   kernel: what the kernel adds (KernelBits): 1 coherent buffers under the Vulkan memory model
//           (then an execution-only barrier is a correct dependency), 2 two pipelines in turn,
//           4 the addend read from a buffer, 8 the index computed from gl_NumWorkGroups
// A correct ordering (sync 1, 3, 4, 5; 2 with coherent buffers) is checked once: its last output
// against the recurrence computed on the host.
// Counters: gpu_us/op from timestamps around the 1000 dispatches (what the GPU spends), us/op from
// the wall time of submit and wait.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/glsl_compiler.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/vulkan_api.h"

namespace {

namespace vk = kiln::detail::vk;

constexpr uint32_t kDispatches = 1000, kVectors = 256;

enum Sync : int64_t { none, memory, execution_only, buffer, event, by_region };

// Owns the Vulkan objects one benchmark makes; destroys them when it goes.
struct Chain {
  vk::Context& ctx;
  std::unique_ptr<vk::Frame> primary, secondary;
  VkQueryPool timestamps = VK_NULL_HANDLE;
  std::vector<VkEvent> events;
  std::vector<vk::BufferPtr> ring;
  vk::BufferPtr scalar;

  explicit Chain(vk::Context& c) : ctx(c) {}
  ~Chain() {
    const vk::VulkanApi& api = ctx.api();
    for (VkEvent e : events) api.vkDestroyEvent(ctx.device(), e, nullptr);
    if (timestamps) api.vkDestroyQueryPool(ctx.device(), timestamps, nullptr);
    if (secondary) ctx.destroy_frame(std::move(secondary));
    if (primary) ctx.release_frame(std::move(primary));
  }
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;
};

// What the kernel does beyond y = x * 0.999 + 0.001 (the `kernel` argument's bits).
enum KernelBits : int64_t {
  // Its buffers `coherent` under the Vulkan memory model: each store makes itself available and each
  // load makes what is available visible at queue-family scope, in the shader, so an execution
  // dependency alone orders two dispatches correctly.
  coherent = 1,
  // Two pipelines in turn (the second multiplies by 0.998), as an unfused chain of two ops binds.
  two_pipelines = 2,
  // The addend read from a buffer, as a 0-d operand is.
  scalar_operand = 4,
  // The index computed from gl_NumWorkGroups (as a grid split over x and y would be), which costs
  // NVIDIA's driver about 0.28 us a dispatch: why kiln's shaders never read it (common/grid.glsl).
  grid_size = 8,
};

const vk::ShaderCode& step_kernel(vk::Context& ctx, int64_t bits, const char* factor) {
  const bool coh = bits & coherent;
  return vk::compile_glsl("barrier_chain",
                          fmt::format(R"(#version 450
{}
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint kWorkgroupSize = 64;
layout(buffer_reference, std430, buffer_reference_align = 16) {} buffer Vecs {{ vec4 v[]; }};
layout(buffer_reference, std430, buffer_reference_align = 4) {} buffer Floats {{ float f[]; }};
layout(push_constant) uniform Push {{ uvec2 src; uvec2 dst; uvec2 scalar; uint vectors; }} p;
void main() {{
  const uint i = {};
  if (i < p.vectors) Vecs(p.dst).v[i] = Vecs(p.src).v[i] * {} + {};
}}
)",
                                      coh ? "#pragma use_vulkan_memory_model\n#extension "
                                            "GL_KHR_memory_scope_semantics : require"
                                          : "",
                                      coh ? "coherent" : "", coh ? "coherent readonly" : "readonly",
                                      bits & grid_size ? "(gl_WorkGroupID.y * gl_NumWorkGroups.x + "
                                                         "gl_WorkGroupID.x) * kWorkgroupSize + "
                                                         "gl_LocalInvocationID.x"
                                                       : "gl_GlobalInvocationID.x",
                                      factor, bits & scalar_operand ? "Floats(p.scalar).f[0]" : "0.001"),
                          ctx.options().cache_dir);
}

void begin(const vk::VulkanApi& api, VkCommandBuffer cmd, bool secondary) {
  VkCommandBufferBeginInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  VkCommandBufferInheritanceInfo inheritance{};
  inheritance.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO;
  if (secondary) info.pInheritanceInfo = &inheritance;
  vk::check(api.vkBeginCommandBuffer(cmd, &info), "vkBeginCommandBuffer");
}

// Records what orders dispatch i after dispatch i - 1, which wrote `written`.
void record_dependency(Chain& c, VkCommandBuffer cmd, Sync sync, uint32_t i,
                       const vk::DeviceBuffer& written) {
  const vk::VulkanApi& api = c.ctx.api();
  constexpr VkPipelineStageFlags compute = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  switch (sync) {
    case none:
      break;
    case memory:
    case by_region:
      api.vkCmdPipelineBarrier(cmd, compute, compute, sync == by_region ? VK_DEPENDENCY_BY_REGION_BIT : 0, 1,
                               &mb, 0, nullptr, 0, nullptr);
      break;
    case execution_only:
      api.vkCmdPipelineBarrier(cmd, compute, compute, 0, 0, nullptr, 0, nullptr, 0, nullptr);
      break;
    case buffer: {
      VkBufferMemoryBarrier bb{};
      bb.sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER;
      bb.srcAccessMask = mb.srcAccessMask;
      bb.dstAccessMask = mb.dstAccessMask;
      bb.srcQueueFamilyIndex = bb.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
      bb.buffer = written.buffer();
      bb.offset = written.offset();
      bb.size = written.capacity();
      api.vkCmdPipelineBarrier(cmd, compute, compute, 0, 0, nullptr, 1, &bb, 0, nullptr);
      break;
    }
    case event:
      api.vkCmdWaitEvents(cmd, 1, &c.events[i - 1], compute, compute, 1, &mb, 0, nullptr, 0, nullptr);
      break;
  }
}

void BM_dependent_dispatch(benchmark::State& st) {
  if (!kiln::is_available(kiln::Device::gpu))
    return st.SkipWithError("no GPU (KILN_VULKAN_ALLOW_CPU=1 for lavapipe)");
  vk::Context& ctx = vk::context();
  if (!ctx.caps().buffer_device_address) return st.SkipWithError("the device has no buffer device addresses");
  if (ctx.caps().timestamp_period <= 0) return st.SkipWithError("the queue writes no timestamps");
  const auto sync = static_cast<Sync>(st.range(0));
  const auto workgroup = static_cast<uint32_t>(st.range(1));
  const bool use_secondary = st.range(2) != 0, fresh = st.range(3) != 0;
  const int64_t bits = st.range(4);
  if ((bits & coherent) && !ctx.caps().vulkan_memory_model)
    return st.SkipWithError("the device has no Vulkan memory model");
  const vk::VulkanApi& api = ctx.api();

  Chain c(ctx);
  for (uint32_t i = 0; i < (fresh ? kDispatches + 1 : 3); ++i)
    c.ring.push_back(ctx.allocator().allocate(kVectors * 16));
  if (sync == event) {
    c.events.resize(kDispatches);
    VkEventCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_EVENT_CREATE_INFO;
    for (VkEvent& e : c.events)
      vk::check(api.vkCreateEvent(ctx.device(), &info, nullptr, &e), "vkCreateEvent");
  }
  VkQueryPoolCreateInfo qinfo{};
  qinfo.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
  qinfo.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qinfo.queryCount = 2;
  vk::check(api.vkCreateQueryPool(ctx.device(), &qinfo, nullptr, &c.timestamps), "vkCreateQueryPool");

  const uint32_t spec[] = {workgroup};
  const vk::Pipeline* pipelines[] = {&ctx.pipelines().get({&step_kernel(ctx, bits, "0.999"), spec, 0}),
                                     &ctx.pipelines().get({&step_kernel(ctx, bits, "0.998"), spec, 0})};
  c.scalar = ctx.allocator().allocate(16);
  const float addend = 0.001f;
  vk::upload(ctx, c.scalar, &addend, sizeof addend);
  c.primary = ctx.acquire_frame();
  if (use_secondary) c.secondary = ctx.create_secondary_frame();
  const VkCommandBuffer body = use_secondary ? c.secondary->cmd : c.primary->cmd;

  begin(api, c.primary->cmd, false);
  api.vkCmdResetQueryPool(c.primary->cmd, c.timestamps, 0, 2);
  api.vkCmdWriteTimestamp(c.primary->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, c.timestamps, 0);
  if (use_secondary) begin(api, body, true);
  for (uint32_t i = 0; i < kDispatches; ++i) {
    const vk::Pipeline& pipeline = *pipelines[(bits & two_pipelines) ? i % 2 : 0];
    if (i == 0 || (bits & two_pipelines))
      api.vkCmdBindPipeline(body, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.pipeline);
    const size_t n = c.ring.size();
    const vk::DeviceBuffer &from = *c.ring[i % n], &to = *c.ring[(i + 1) % n];
    if (i > 0) record_dependency(c, body, sync, i, from);
    const uint64_t a = from.address(), b = to.address(), k = c.scalar->address();
    const uint32_t push[] = {static_cast<uint32_t>(a),
                             static_cast<uint32_t>(a >> 32),
                             static_cast<uint32_t>(b),
                             static_cast<uint32_t>(b >> 32),
                             static_cast<uint32_t>(k),
                             static_cast<uint32_t>(k >> 32),
                             kVectors};
    api.vkCmdPushConstants(body, pipeline.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, push);
    api.vkCmdDispatch(body, (kVectors + workgroup - 1) / workgroup, 1, 1);
    if (sync == event) api.vkCmdSetEvent(body, c.events[i], VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT);
  }
  if (use_secondary) {
    vk::check(api.vkEndCommandBuffer(body), "vkEndCommandBuffer");
    api.vkCmdExecuteCommands(c.primary->cmd, 1, &body);
  }
  api.vkCmdWriteTimestamp(c.primary->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c.timestamps, 1);
  vk::check(api.vkEndCommandBuffer(c.primary->cmd), "vkEndCommandBuffer");

  double gpu_s = 0;
  auto run = [&] {
    for (VkEvent e : c.events) vk::check(api.vkResetEvent(ctx.device(), e), "vkResetEvent");
    ctx.wait(ctx.submit(c.primary->cmd));
    std::array<uint64_t, 2> ticks{};
    vk::check(api.vkGetQueryPoolResults(ctx.device(), c.timestamps, 0, 2, sizeof ticks, ticks.data(),
                                        sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults");
    return static_cast<double>(ticks[1] - ticks[0]) * ctx.caps().timestamp_period * 1e-9;
  };
  // The first run, from a known input, checked where the dependency is a correct one (the others
  // are bounds, not orderings): the last output against the recurrence computed here.
  const std::vector<float> start(kVectors * 4, 0.5f);
  vk::upload(ctx, c.ring[0], start.data(), start.size() * sizeof(float));
  run();
  const bool ordered = sync == memory || sync == buffer || sync == event || sync == by_region ||
                       (sync == execution_only && (bits & coherent));
  if (ordered) {
    float expect = 0.5f;
    for (uint32_t i = 0; i < kDispatches; ++i)
      expect = expect * ((bits & two_pipelines) && i % 2 ? 0.998f : 0.999f) + 0.001f;
    std::vector<float> last(start.size());
    vk::readback(ctx, c.ring[kDispatches % c.ring.size()], last.data(), last.size() * sizeof(float));
    for (float v : last)
      if (std::abs(v - expect) > 1e-4f * std::abs(expect))
        return st.SkipWithError(fmt::format("wrong result: {} where {} was expected", v, expect).c_str());
  }
  for (auto _ : st) gpu_s += run();
  const double n = static_cast<double>(st.iterations()) * kDispatches;
  st.counters["gpu_us/op"] = gpu_s * 1e6 / n;
  st.counters["us/op"] =
      benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void arguments(benchmark::internal::Benchmark* b) {
  b->ArgNames({"sync", "workgroup", "secondary", "fresh", "kernel"});
  for (int64_t sync : {none, memory, execution_only, buffer, event, by_region})
    for (int64_t workgroup : {32, 64, 256}) b->Args({sync, workgroup, 0, 0, 0});
  for (int64_t sync : {memory, execution_only}) {
    b->Args({sync, 256, 1, 0, 0});
    b->Args({sync, 256, 0, 1, 0});
    for (int64_t bits : {coherent, two_pipelines, scalar_operand, grid_size})
      b->Args({sync, 256, 0, 0, bits});
    // As kiln's replayed chain: a captured program, fresh outputs, two ops in turn, a 0-d operand.
    b->Args({sync, 256, 1, 1, two_pipelines | scalar_operand});
    b->Args({sync, 256, 1, 1, coherent | two_pipelines | scalar_operand});
  }
}

}  // namespace

BENCHMARK(BM_dependent_dispatch)->Apply(arguments)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
