// kiln's GPU figures for issue 9's targets, on the default GPU (KILN_VULKAN_ALLOW_CPU=1 lets it
// run on lavapipe, with KILN_GPU_BENCH_SMALL=1 for sizes a CPU device finishes): GEMM 4096^3
// float32 and float16 (float32 accumulation), elementwise add of 1 GiB, the dispatch cost per primitive
// in a 1000-op chain evaluated as one submit (and the same chain captured once and replayed), and training
// steps of the MLP (784-512-512-10, Adam, batch 128) and the small GPT (4 layers, d 256, 4 heads, context
// 128, batch 32, AdamW). bench/gpu_vs_pytorch.sh runs it beside bench/gpu_peer.py (PyTorch on the same GPU)
// and prints one table.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>
#include <kiln/models/mlp.h>
#include <kiln/nn/value_and_grad.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/vulkan/gpu_capture.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/glsl_compiler.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/profile.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace {

using kiln::Array;
using kiln::Device;

bool small() {
  const char* v = std::getenv("KILN_GPU_BENCH_SMALL");
  return v && std::strcmp(v, "1") == 0;
}

// Skips the benchmark when there is no GPU; makes it the default device otherwise.
bool use_gpu(benchmark::State& st) {
  if (!kiln::is_available(Device::gpu)) {
    st.SkipWithError("no GPU (set KILN_VULKAN_ALLOW_CPU=1 for lavapipe)");
    return false;
  }
  kiln::set_default_device(Device::gpu);
  return true;
}

// With KILN_VULKAN_PROFILE=1, a "gpu_us" counter: the GPU time of the timed loop's dispatches per
// iteration (timestamps around each dispatch, or around a replayed program captured untimed, as
// chain_1000_replayed's is: kiln/core/vulkan/runtime/profile.h), without the
// submit and wait that the wall time includes: the figure to set beside a peer's CUDA-event time.
void start_gpu_time() {
  if (kiln::detail::vk::profiling()) kiln::detail::vk::profile_clear();
}
void report_gpu_time(benchmark::State& st) {
  if (!kiln::detail::vk::profiling() || st.iterations() == 0) return;
  const std::string report = kiln::detail::vk::profile_report();
  const size_t at = report.find("): ");
  if (at == std::string::npos) return;
  const double ms = std::atof(report.c_str() + at + 3);
  st.counters["gpu_us"] = ms * 1e3 / static_cast<double>(st.iterations());
}

// Host time of a training step's phases: building its lazy graph (the forward, gradient and
// update calls, or CompiledStep's call: graph_us), recording and submitting it (detail::eval_nowait:
// record_us) and completing it (the wait for the GPU, then publishing the results: wait_us). The
// first two are host work the GPU does not overlap in a step-by-step loop.
using Clock = std::chrono::steady_clock;
struct StepPhases {
  double graph_s = 0, record_s = 0, wait_s = 0;
  // Builds the step's graph with `build` and evaluates what it returns, timing each phase.
  template <class Build>
  void run(Build&& build) {
    const auto t0 = Clock::now();
    const std::vector<Array> out = build();
    const auto t1 = Clock::now();
    kiln::detail::eval_nowait(out);
    const auto t2 = Clock::now();
    kiln::eval(out);
    const auto t3 = Clock::now();
    graph_s += std::chrono::duration<double>(t1 - t0).count();
    record_s += std::chrono::duration<double>(t2 - t1).count();
    wait_s += std::chrono::duration<double>(t3 - t2).count();
  }
  void report(benchmark::State& st) const {
    if (st.iterations() == 0) return;
    const auto per_step = [&](double s) { return s * 1e6 / static_cast<double>(st.iterations()); };
    st.counters["graph_us"] = per_step(graph_s);
    st.counters["record_us"] = per_step(record_s);
    st.counters["wait_us"] = per_step(wait_s);
  }
};

// A training step's outputs: the loss, the parameters and the optimizer's state.
std::vector<Array> step_outputs(const Array& loss, const kiln::nn::Module& model,
                                const kiln::optim::Optimizer& opt) {
  std::vector<Array> out{loss};
  const kiln::nn::ParamTree params = model.parameters();
  for (const kiln::nn::ParamTree* tree : {&params, &opt.state()})
    for (const auto& [key, a] : *tree)
      if (a.valid()) out.push_back(a);
  return out;
}

Array device_random(const kiln::Shape& shape, uint64_t seed) {
  Array x = kiln::random::uniform(shape, kiln::random::key(seed), -1.0, 1.0);
  x.eval();
  return x;
}

void BM_gpu_matmul_f32(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t n = small() ? 512 : 4096;
  const Array a = device_random({n, n}, 1), b = device_random({n, n}, 2);
  for (int i = 0; i < 2; ++i) kiln::matmul(a, b).eval();
  start_gpu_time();
  for (auto _ : st) kiln::matmul(a, b).eval();
  report_gpu_time(st);
  st.counters["TFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * n * n) * 1e-12,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("{}^3", n));
}

// float16 operands, float32 accumulation: tensor cores where the device has VK_NV_cooperative_matrix
// (KILN_VULKAN_DISABLE_COOPMAT=1 forces the plain kernel). The peer is cuBLAS's float16 GEMM.
void BM_gpu_matmul_f16(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t n = small() ? 512 : 4096;
  const Array a = kiln::astype(device_random({n, n}, 1), kiln::float16);
  const Array b = kiln::astype(device_random({n, n}, 2), kiln::float16);
  kiln::eval(a, b);
  for (int i = 0; i < 2; ++i) kiln::matmul(a, b).eval();
  start_gpu_time();
  for (auto _ : st) kiln::matmul(a, b).eval();
  report_gpu_time(st);
  st.counters["TFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * n * n) * 1e-12,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("{}^3", n));
}

// The float16 GEMM with each tensor-core tile and fragment shape of shaders/linalg/matmul_f16_coopmat.comp
// (through KILN_VULKAN_COOPMAT_TILE / _SHAPE), to pick kiln's defaults on a new GPU (registered
// below when KILN_GPU_BENCH_TILES=1). A pair the device lacks reports an error; a device without
// cooperative matrices runs the plain kernel each time.
void BM_gpu_matmul_f16_tile(benchmark::State& st, const char* tile, const char* shape) {
  setenv("KILN_VULKAN_COOPMAT_TILE", tile, 1);
  setenv("KILN_VULKAN_COOPMAT_SHAPE", shape, 1);
  try {
    BM_gpu_matmul_f16(st);
  } catch (const kiln::Error& e) {
    st.SkipWithError(e.what());
  }
  unsetenv("KILN_VULKAN_COOPMAT_TILE");
  unsetenv("KILN_VULKAN_COOPMAT_SHAPE");
}

// One GEMM of st.range: M, N, K, batch, and layout bits: 1 when a is the transposed view of a [K, M]
// array (as x^T in a weight gradient is), 2 when b is that of an [N, K] one (as a Linear's weight
// is in x @ w^T), 4 when b is one of attention's heads, 8 when a is: the [B, 4, rows, cols] view of a
// [B, rows, 4, cols] array (batch = 4 B), as the heads of a [B, T, C] activation are (float32).
void BM_gpu_matmul_shape(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2), batch = st.range(3);
  const bool any_heads = (st.range(4) & 12) != 0;
  if (any_heads && batch % 4 != 0) return st.SkipWithError("heads need a batch that 4 divides");
  // A [rows, cols] operand (batched when batch > 1; as [B, 4] with heads), or the transposed view of
  // a [cols, rows] one.
  auto operand = [batch, any_heads](int64_t rows, int64_t cols, uint64_t seed, bool transposed, bool heads) {
    if (transposed) std::swap(rows, cols);
    kiln::Shape shape = any_heads   ? kiln::Shape{batch / 4, 4}
                        : batch > 1 ? kiln::Shape{batch}
                                    : kiln::Shape{};
    shape.insert(shape.end(), {rows, cols});
    const Array v = heads ? kiln::swapaxes(device_random({batch / 4, rows, 4, cols}, seed), 1, 2)
                          : device_random(shape, seed);
    return transposed ? kiln::swapaxes(v, -1, -2) : v;
  };
  const Array a = operand(m, k, 11, (st.range(4) & 1) != 0, (st.range(4) & 8) != 0),
              b = operand(k, n, 12, (st.range(4) & 2) != 0, (st.range(4) & 4) != 0);
  for (int i = 0; i < 2; ++i) kiln::matmul(a, b).eval();
  start_gpu_time();
  for (auto _ : st) kiln::matmul(a, b).eval();
  report_gpu_time(st);
  st.counters["TFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(batch * m * n * k) * 1e-12,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// BM_gpu_matmul_shape with the float32 GEMM's tile and K slices forced (KILN_VULKAN_MATMUL_TILE /
// _SPLITK; "" and 0 leave kiln's choice), to pick the plan's thresholds on a new GPU (registered
// below when KILN_GPU_BENCH_TILES=1).
void BM_gpu_matmul_shape_tile(benchmark::State& st, const char* tile, int splits) {
  if (*tile) setenv("KILN_VULKAN_MATMUL_TILE", tile, 1);
  const std::string s = std::to_string(splits);
  if (splits > 0) setenv("KILN_VULKAN_MATMUL_SPLITK", s.c_str(), 1);
  try {
    BM_gpu_matmul_shape(st);
  } catch (const kiln::Error& e) {
    st.SkipWithError(e.what());
  }
  unsetenv("KILN_VULKAN_MATMUL_TILE");
  unsetenv("KILN_VULKAN_MATMUL_SPLITK");
}

// Bytes moved per element: two reads and a write. The peer is PyTorch's device-to-device copy of
// 1 GiB (bench/gpu_peer.py), the bandwidth the GPU reaches.
void BM_gpu_add_1gib(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t n = (small() ? (int64_t{1} << 24) : (int64_t{1} << 30)) / 4;
  const Array a = device_random({n}, 3), b = device_random({n}, 4);
  for (int i = 0; i < 2; ++i) kiln::add(a, b).eval();
  for (auto _ : st) kiln::add(a, b).eval();
  st.counters["GB/s"] =
      benchmark::Counter(12.0 * static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The floats of the chains' arrays.
constexpr int64_t kChainFloats = 1024;

// 1000 dependent elementwise ops (alternately + 0.001 and * 0.999) on x, not evaluated.
Array dependent_chain(const Array& x) {
  Array y = x;
  for (int i = 0; i < 1000; ++i) y = (i % 2) ? kiln::multiply(y, 0.999f) : kiln::add(y, 0.001f);
  return y;
}
// Seconds per iteration / 1000 ops, in microseconds.
void report_us_per_op(benchmark::State& st) {
  st.counters["us/op"] =
      benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Runs `chain` (1000 dispatches) once to warm up, then times it: GPU time and us per op.
template <class Chain>
void time_chain(benchmark::State& st, const Chain& chain) {
  chain();
  start_gpu_time();
  for (auto _ : st) chain();
  report_gpu_time(st);
  report_us_per_op(st);
}

// 1000 dependent elementwise ops on a small array, evaluated together: one command buffer, one
// submit; the time per op is the recording and dispatch overhead.
void BM_gpu_chain_1000(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const Array x = device_random({kChainFloats}, 6);
  StepPhases phases;
  auto chain = [&] { phases.run([&] { return std::vector<Array>{dependent_chain(x)}; }); };
  chain();
  phases = {};
  for (auto _ : st) chain();
  phases.report(st);
  report_us_per_op(st);
}

// The same chain recorded once, unfused, into a captured program (detail::capture_eval: the Vulkan
// analogue of a CUDA graph) and replayed alone: the GPU's cost per dependent dispatch, with no
// recording at all.
void BM_gpu_chain_1000_replayed(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const Array x = device_random({kChainFloats}, 6);
  // Captured untimed, so that with KILN_VULKAN_PROFILE=1 gpu_us is the program's GPU time as a
  // whole (a timestamp pair around it), not its dispatches each bracketed by timestamps.
  const bool profile = kiln::detail::vk::profiling();
  kiln::detail::vk::set_profiling(false);
  const auto program = kiln::detail::capture_eval(std::vector<Array>{dependent_chain(x)});
  kiln::detail::vk::set_profiling(profile);
  time_chain(st, [&] { kiln::gpu::replay_and_wait(program); });
}

// 1000 dispatches of y = x * 0.999 + 0.001 on 1024 floats recorded through vk::Recorder directly,
// without kiln's graph. Dependent (st.range(0) = 1): a ring of three buffers, each dispatch reading
// the previous one's output; independent (0): each reads one input and writes the next of 64
// buffers, so a barrier every 64. `dispatch(r, from, to)` records one.
template <class Dispatch>
void recorder_chain(benchmark::State& st, const Dispatch& dispatch) {
  namespace vk = kiln::detail::vk;
  vk::Context& ctx = vk::context();
  const bool dependent = st.range(0) != 0;
  std::vector<vk::BufferPtr> ring(dependent ? 3 : 65);
  for (auto& b : ring) b = ctx.allocator().allocate(kChainFloats * 4);
  const size_t outs = ring.size() - (dependent ? 0 : 1);
  time_chain(st, [&] {
    vk::Recorder r(ctx);
    for (size_t i = 0; i < 1000; ++i) {
      const size_t from = dependent ? i % outs : outs, to = dependent ? (i + 1) % outs : i % outs;
      dispatch(r, ring[from], ring[to]);
    }
    r.submit_and_wait();
  });
}

// The elementwise kernel (record_elementwise, as kiln's ops record it): what a replayed recording
// costs per primitive (recording + GPU), the floor under BM_gpu_chain_1000; independent, the cost
// of the barriers.
void BM_gpu_recorder_chain_1000(benchmark::State& st) {
  if (!use_gpu(st)) return;
  namespace vk = kiln::detail::vk;
  const vk::ElementwiseKernel step{.inputs = {kiln::float32},
                                   .compute = kiln::float32,
                                   .out = kiln::float32,
                                   .expr = "x0 * 0.999 + 0.001"};
  recorder_chain(st, [&](vk::Recorder& r, const vk::BufferPtr& from, const vk::BufferPtr& to) {
    const vk::GpuView in = vk::GpuView::contiguous(from, kiln::float32, {kChainFloats});
    vk::record_elementwise(r, step, std::span<const vk::GpuView>(&in, 1),
                           vk::GpuView::contiguous(to, kiln::float32, {kChainFloats}));
  });
}

// A minimal kernel reaching its buffers through device addresses in its push constants: the
// dispatch records push constants and the dispatch alone, no descriptors. st.range(1) adds what
// kiln's chain has besides: 1, two pipelines in turn (x * 0.999 + 0.001, x * 0.998 + 0.002);
// 2, the addend read from a third buffer (as a 0-d array operand is).
void BM_gpu_recorder_chain_1000_addressed(benchmark::State& st) {
  if (!use_gpu(st)) return;
  namespace vk = kiln::detail::vk;
  vk::Context& ctx = vk::context();
  if (!ctx.caps().buffer_device_address) return st.SkipWithError("the device has no buffer device addresses");
  const int64_t variant = st.range(1);
  auto kernel = [&](const char* name, const char* value) -> const vk::ShaderCode& {
    return vk::compile_glsl(name,
                            fmt::format(R"(#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
layout(local_size_x_id = 0) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vecs {{ vec4 v[]; }};
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats {{ float f[]; }};
layout(push_constant) uniform Push {{ uvec2 src; uvec2 dst; uvec2 scalar; uint vectors; }} p;
void main() {{
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.vectors) Vecs(p.dst).v[i] = {};
}}
)",
                                        value),
                            ctx.options().cache_dir);
  };
  const vk::ShaderCode& first =
      kernel("chain_addressed", variant == 2 ? "Vecs(p.src).v[i] * 0.999 + Floats(p.scalar).f[0]"
                                             : "Vecs(p.src).v[i] * 0.999 + 0.001");
  const vk::ShaderCode& second =
      variant == 1 ? kernel("chain_addressed", "Vecs(p.src).v[i] * 0.998 + 0.002") : first;
  const vk::BufferPtr scalar = ctx.allocator().allocate(16);
  const float addend = 0.001f;
  vk::upload(ctx, scalar, &addend, sizeof addend);
  const uint32_t wg = 256, spec[] = {wg}, vectors = kChainFloats / 4;
  bool odd = false;
  recorder_chain(st, [&](vk::Recorder& r, const vk::BufferPtr& from, const vk::BufferPtr& to) {
    const uint64_t a = from->address(), b = to->address(), c = scalar->address();
    const uint32_t push[] = {static_cast<uint32_t>(a),
                             static_cast<uint32_t>(a >> 32),
                             static_cast<uint32_t>(b),
                             static_cast<uint32_t>(b >> 32),
                             static_cast<uint32_t>(c),
                             static_cast<uint32_t>(c >> 32),
                             vectors};
    const vk::Binding reached[] = {
        {from, vk::Access::read}, {to, vk::Access::write}, {scalar, vk::Access::read}};
    r.dispatch((odd = !odd) ? first : second, spec, {}, std::as_bytes(std::span<const uint32_t>(push)),
               vk::Groups{(vectors + wg - 1) / wg}, reached);
  });
}

// The training steps, eager (every kernel recorded each step) or compiled (optim::CompiledStep:
// loss, gradients and the optimizer's update captured once and replayed).
// kHostBatches: a new batch of host arrays each step (8 made up front, in turn), as a data loader
// gives them, instead of one batch on the device.
template <bool kCompiled, bool kHostBatches = false>
void BM_gpu_mlp_adam_step(benchmark::State& st) {
  if (!use_gpu(st)) return;
  kiln::random::seed(0);
  kiln::models::Mlp model({.in_features = 784, .hidden = {512, 512}, .out_features = 10});
  Array x = device_random({128, 784}, 7);
  Array y = kiln::random::randint({128}, kiln::random::key(8), 0, 10);
  std::vector<Array> host_x, host_y;
  for (uint64_t i = 0; kHostBatches && i < 8; ++i) {
    host_x.push_back(kiln::random::uniform({128, 784}, kiln::random::key(100 + i), 0.0, 1.0, kiln::float32,
                                           kiln::Device::cpu));
    host_y.push_back(
        kiln::random::randint({128}, kiln::random::key(200 + i), 0, 10, kiln::int32, kiln::Device::cpu));
  }
  kiln::eval(host_x);
  kiln::eval(host_y);
  size_t turn = 0;
  kiln::optim::Adam opt({.lr = 1e-3});
  auto loss = [&](const Array& in, const Array& t) { return kiln::nn::cross_entropy(model(in), t); };
  auto grad_fn = kiln::nn::value_and_grad(model, loss);
  kiln::optim::CompiledStep compiled(model, opt,
                                     [&](const std::vector<Array>& b) { return loss(b[0], b[1]); });
  StepPhases phases;
  auto one = [&] {
    if constexpr (kHostBatches) {
      x = host_x[turn % 8];
      y = host_y[turn++ % 8];
    }
    phases.run([&] {
      if constexpr (kCompiled) return step_outputs(compiled({x, y}), model, opt);
      auto [value, grads] = grad_fn(x, y);
      opt.update(model, grads);
      return step_outputs(value, model, opt);
    });
  };
  for (int i = 0; i < 3; ++i) one();
  phases = {};
  start_gpu_time();
  for (auto _ : st) one();
  report_gpu_time(st);
  phases.report(st);
}

template <bool kCompiled>
void BM_gpu_gpt_adamw_step(benchmark::State& st) {
  if (!use_gpu(st)) return;
  kiln::random::seed(0);
  const int64_t batch = small() ? 4 : 32, context = small() ? 32 : 128;
  kiln::models::Gpt model({.vocab_size = 65, .context = context, .d_model = 256, .heads = 4, .layers = 4});
  const Array x = kiln::random::randint({batch, context}, kiln::random::key(1), 0, 65);
  const Array y = kiln::random::randint({batch, context}, kiln::random::key(2), 0, 65);
  kiln::eval(x, y);
  kiln::optim::AdamW opt({.lr = 3e-4});
  auto loss = [&](const Array& in, const Array& t) {
    return kiln::nn::cross_entropy(kiln::reshape(model(in), {-1, 65}), kiln::reshape(t, {-1}));
  };
  auto grad_fn = kiln::nn::value_and_grad(model, loss);
  kiln::optim::CompiledStep compiled(model, opt,
                                     [&](const std::vector<Array>& b) { return loss(b[0], b[1]); });
  StepPhases phases;
  auto one = [&] {
    phases.run([&] {
      if constexpr (kCompiled) return step_outputs(compiled({x, y}), model, opt);
      auto [value, grads] = grad_fn(x, y);
      opt.update(model, grads);
      return step_outputs(value, model, opt);
    });
  };
  for (int i = 0; i < 2; ++i) one();
  phases = {};
  start_gpu_time();
  for (auto _ : st) one();
  report_gpu_time(st);
  phases.report(st);
}

// With KILN_GPU_BENCH_TILES=1, one BM_gpu_matmul_f16_tile/<tile>/<shape> per tensor-core tile and
// fragment shape.
[[maybe_unused]] const bool kTileBenchmarks = [] {
  const char* v = std::getenv("KILN_GPU_BENCH_TILES");
  if (!v || std::strcmp(v, "1") != 0) return false;
  for (const char* tile :
       {"128x128", "128x128_w64x32", "128x256", "128x256_k32", "64x64", "128x128_w64x32_s1"})
    for (const char* shape : {"16x8x16", "16x16x16", "16x8x8"})
      benchmark::RegisterBenchmark(
          fmt::format("BM_gpu_matmul_f16_tile/{}/{}", tile, shape).c_str(),
          [tile, shape](benchmark::State& st) { BM_gpu_matmul_f16_tile(st, tile, shape); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  // The float32 tiles on the GPT's shapes and 4096^3 (M, N, K, batch, a transposed), then split-K
  // counts on the long-K ones.
  const std::vector<std::vector<int64_t>> shapes = {
      {4096, 768, 256, 1, 0},   {4096, 256, 256, 1, 0},  {4096, 1024, 256, 1, 0}, {4096, 256, 1024, 1, 0},
      {256, 768, 4096, 1, 1},   {1024, 256, 4096, 1, 1}, {128, 128, 64, 128, 0},  {128, 64, 128, 128, 0},
      {4096, 4096, 4096, 1, 0}, {4096, 768, 256, 1, 2},  {4096, 1024, 256, 1, 2}, {4096, 4096, 4096, 1, 2}};
  for (const char* tile : {"", "128", "128k16", "128x64", "64x128", "64", "64w", "32", "128wk16"})
    for (const auto& args : shapes)
      benchmark::RegisterBenchmark(
          fmt::format("BM_gpu_matmul_shape_tile/{}/auto", *tile ? tile : "auto").c_str(),
          [tile](benchmark::State& st) { BM_gpu_matmul_shape_tile(st, tile, 0); })
          ->Args(args)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  auto sweep_splits = [](std::initializer_list<const char*> tiles, std::initializer_list<int> counts,
                         const std::vector<std::vector<int64_t>>& on) {
    for (const char* tile : tiles)
      for (int splits : counts)
        for (const auto& args : on)
          benchmark::RegisterBenchmark(
              fmt::format("BM_gpu_matmul_shape_tile/{}/{}", tile, splits).c_str(),
              [tile, splits](benchmark::State& st) { BM_gpu_matmul_shape_tile(st, tile, splits); })
              ->Args(args)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
  };
  // The MLP's (784-512-512-10, batch 128): few output tiles, K 512 or 784.
  sweep_splits({"64", "64w", "32"}, {1, 2, 4, 8}, {{128, 512, 784, 1, 0}, {128, 512, 512, 1, 0}});
  sweep_splits({"128x64", "64", "64w", "32"}, {1, 2, 4, 8, 16}, {shapes[4], shapes[5]});
  // The GPT's weight gradients (K 4096).
  sweep_splits({"64w"}, {4, 6, 7, 8, 9, 10, 12, 16},
               {{1024, 256, 4096, 1, 1},
                {256, 1024, 4096, 1, 1},
                {768, 256, 4096, 1, 1},
                {256, 256, 4096, 1, 1},
                {65, 256, 4096, 1, 1}});
  // The GPT's narrow products (4096 x 256: 256 tiles, two per compute unit) at K 256 and 1024,
  // and the same as 32 batches of 128 rows (a linear layer on (B, T, C) with a broadcast weight).
  sweep_splits({"64w", "64"}, {2, 3, 4, 6, 8},
               {shapes[1], shapes[3], {128, 256, 256, 32, 0}, {128, 256, 1024, 32, 0}, shapes[0], shapes[2]});
  return true;
}();

}  // namespace

BENCHMARK(BM_gpu_matmul_f32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpu_matmul_f16)->Unit(benchmark::kMillisecond)->UseRealTime();
// The products of the small GPT's training step (d 256, context 128, batch 32: 4096 tokens; st.range(5)
// is how many a step has), to tune the GEMM's plan and to set beside cuBLAS's on the same shapes
// (bench/gpu_gemm_vs_pytorch.py): forward x @ W^T (W (out, in), as nn::Linear's), the input gradient
// g @ W, the weight gradient g^T @ x (K = 4096, g transposed), the head's (65 outputs) and attention's
// per-head products (128 of [128, 64] heads, read in place from [B, T, H, D] rows: scores q @ k^T and
// their gradient g @ v^T, both operands heads; then p @ v, ds @ k, p^T @ g and ds^T @ q, b a head).
BENCHMARK(BM_gpu_matmul_shape)
    ->Args({4096, 768, 256, 1, 2, 4})
    ->Args({4096, 256, 256, 1, 2, 4})
    ->Args({4096, 1024, 256, 1, 2, 4})
    ->Args({4096, 256, 1024, 1, 2, 4})
    ->Args({4096, 65, 256, 1, 2, 1})
    ->Args({4096, 256, 768, 1, 0, 4})
    ->Args({4096, 256, 256, 1, 0, 4})
    ->Args({4096, 256, 1024, 1, 0, 4})
    ->Args({4096, 1024, 256, 1, 0, 4})
    ->Args({4096, 256, 65, 1, 0, 1})
    ->Args({768, 256, 4096, 1, 1, 4})
    ->Args({256, 256, 4096, 1, 1, 4})
    ->Args({1024, 256, 4096, 1, 1, 4})
    ->Args({256, 1024, 4096, 1, 1, 4})
    ->Args({65, 256, 4096, 1, 1, 1})
    ->Args({128, 128, 64, 128, 14, 8})
    ->Args({128, 64, 128, 128, 4, 8})
    ->Args({128, 64, 128, 128, 5, 8})
    // The same on contiguous heads (not the step's: count 0).
    ->Args({128, 128, 64, 128, 2, 0})
    ->Args({128, 64, 128, 128, 0, 0})
    ->Args({128, 64, 128, 128, 1, 0})
    // The MLP's (not the GPT's: count 0): forward (and the input gradient) at K 784 and 512, weight
    // gradients at K 128.
    ->Args({128, 512, 784, 1, 0, 0})
    ->Args({128, 512, 512, 1, 0, 0})
    ->Args({784, 512, 128, 1, 1, 0})
    ->Args({512, 512, 128, 1, 1, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_add_1gib)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpu_chain_1000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpu_chain_1000_replayed)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpu_recorder_chain_1000)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpu_recorder_chain_1000_addressed)
    ->ArgsProduct({{1, 0}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_mlp_adam_step<false>)
    ->Name("BM_gpu_mlp_adam_step")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_gpt_adamw_step<false>)
    ->Name("BM_gpu_gpt_adamw_step")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_mlp_adam_step<true>)
    ->Name("BM_gpu_mlp_adam_step_compiled")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_mlp_adam_step<false, true>)
    ->Name("BM_gpu_mlp_adam_step_hostbatch")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_mlp_adam_step<true, true>)
    ->Name("BM_gpu_mlp_adam_step_compiled_hostbatch")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpu_gpt_adamw_step<true>)
    ->Name("BM_gpu_gpt_adamw_step_compiled")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
namespace {

// sum over one axis of a float32 [rows, cols] array (st.range: rows, cols, axis): axis 0 is a bias
// gradient's sum over the batch (columns of the row-major array), axis 1 sums each row. GB/s counts
// the bytes read.
void BM_gpu_reduce_sum(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t rows = small() ? std::min<int64_t>(st.range(0), 4096) : st.range(0), cols = st.range(1);
  const int axis = static_cast<int>(st.range(2));
  const Array x = device_random({rows, cols}, 9);
  for (int i = 0; i < 2; ++i) kiln::sum(x, kiln::Axes{axis}).eval();
  for (auto _ : st) kiln::sum(x, kiln::Axes{axis}).eval();
  st.counters["GB/s"] = benchmark::Counter(4.0 * static_cast<double>(rows * cols) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
}

// Layer norm of the GPT's activations ([4096, 256], with weight and bias): st.range(0) = 0 the
// forward kernel, 1 its vjp (dx, and the weight's and bias's gradients: the norm_rows_vjp kernel and
// two column sums). GB/s counts the float32 bytes the row kernels must move (forward: x in, y out;
// backward: x and the cotangent in, dx out).
void BM_gpu_layer_norm(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t rows = 4096, cols = 256;
  const bool backward = st.range(0) != 0;
  const Array x = device_random({rows, cols}, 13), w = device_random({cols}, 14),
              b = device_random({cols}, 15);
  const Array g = device_random({rows, cols}, 16);
  auto one = [&] {
    if (!backward) return kiln::eval(kiln::layer_norm(x, w, b, 1e-5));
    const auto [out, grads] = kiln::vjp(
        [](const std::vector<Array>& in) {
          return std::vector<Array>{kiln::layer_norm(in[0], in[1], in[2], 1e-5)};
        },
        {x, w, b}, {g});
    kiln::eval(grads);
  };
  for (int i = 0; i < 2; ++i) one();
  start_gpu_time();
  for (auto _ : st) one();
  report_gpu_time(st);
  st.counters["GB/s"] = benchmark::Counter((backward ? 12.0 : 8.0) * static_cast<double>(rows * cols) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
}

// BM_gpu_add_1gib on views one element into their buffers: offsets not a multiple of 16 bytes, so
// the kernel reads and writes element by element instead of in 16-byte vectors.
void BM_gpu_add_1gib_unaligned(benchmark::State& st) {
  if (!use_gpu(st)) return;
  const int64_t n = (small() ? (int64_t{1} << 24) : (int64_t{1} << 30)) / 4;
  const Array a = kiln::slice(device_random({n + 1}, 3), {1}, {n + 1});
  const Array b = kiln::slice(device_random({n + 1}, 4), {1}, {n + 1});
  for (int i = 0; i < 2; ++i) kiln::add(a, b).eval();
  for (auto _ : st) kiln::add(a, b).eval();
  st.counters["GB/s"] =
      benchmark::Counter(12.0 * static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_gpu_add_1gib_unaligned)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpu_layer_norm)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_gpu_reduce_sum)
    ->Args({4096, 768, 0})
    ->Args({4096, 768, 1})
    ->Args({262144, 1024, 0})
    ->Args({262144, 1024, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_MAIN();
