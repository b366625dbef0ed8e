// Issue 10's training loops, synchronous against asynchronous: steps per second of the
// Fashion-MNIST MLP (784-512-512-10, Adam, batch 128) and the small GPT (4 layers, d 256, 4 heads,
// context 128, batch 32, AdamW), each step on a fresh host batch as a data loader gives it.
//   sync:  eval the step's outputs (parameters, optimizer state, loss), then read the loss.
//   async: async_eval them and read the previous step's loss, so step n + 1 is built (and its
//          batch made) while step n runs.
// Each with optim::CompiledStep (compiled) and with nn::value_and_grad + Optimizer::update (eager).
// Counters: steps_per_s (wall clock), h2d_bytes_per_step and d2h_bytes_per_step (MemoryStats's
// transfer counters; zeros on the CPU). KILN_BENCH_DEVICE=cpu|gpu picks the device (default cpu),
// so one binary runs on the CPU here and on a GPU; KILN_VULKAN_ALLOW_CPU=1 lets gpu be lavapipe,
// and KILN_BENCH_SMALL=1 shrinks the GPT (batch 4, context 32) to what lavapipe finishes.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>
#include <kiln/models/mlp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using kiln::Array;
using kiln::Device;

bool small() {
  const char* v = std::getenv("KILN_BENCH_SMALL");
  return v && std::strcmp(v, "1") == 0;
}

// The device of KILN_BENCH_DEVICE made the default; false (the benchmark skipped, saying why) when
// the value is not cpu or gpu or the device is missing.
bool use_bench_device(benchmark::State& st) {
  const char* v = std::getenv("KILN_BENCH_DEVICE");
  const std::string name = v && *v ? v : "cpu";
  if (name != "cpu" && name != "gpu") {
    st.SkipWithError(("KILN_BENCH_DEVICE must be cpu or gpu, not '" + name + "'").c_str());
    return false;
  }
  const Device d = name == "gpu" ? Device::gpu : Device::cpu;
  if (!kiln::is_available(d)) {
    st.SkipWithError("no GPU (set KILN_VULKAN_ALLOW_CPU=1 for lavapipe)");
    return false;
  }
  kiln::set_default_device(d);
  st.SetLabel(name);
  return true;
}

// A data loader's batches: kPool random batches made up front (fixed seeds), handed out in turn,
// each as new host arrays (a copy, as a loader's gather from its dataset makes), so every step's
// batch is a host array the device has not seen. X is float (MLP pixels) or int32 (GPT tokens).
template <class X>
class HostBatches {
 public:
  static constexpr int kPool = 8;
  HostBatches(kiln::Shape x_shape, kiln::Shape y_shape, int32_t classes, uint64_t seed)
      : x_shape_(std::move(x_shape)), y_shape_(std::move(y_shape)) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    std::uniform_int_distribution<int32_t> label(0, classes - 1);
    for (int i = 0; i < kPool; ++i) {
      std::vector<X> x(static_cast<size_t>(kiln::shape_size(x_shape_)));
      for (X& e : x) {
        if constexpr (std::is_floating_point_v<X>)
          e = pixel(rng);
        else
          e = label(rng);
      }
      std::vector<int32_t> y(static_cast<size_t>(kiln::shape_size(y_shape_)));
      for (int32_t& e : y) e = label(rng);
      xs_.push_back(std::move(x));
      ys_.push_back(std::move(y));
    }
  }
  std::pair<Array, Array> next() {
    const size_t i = turn_++ % kPool;
    return {Array(xs_[i], x_shape_), Array(ys_[i], y_shape_)};
  }

 private:
  kiln::Shape x_shape_, y_shape_;
  std::vector<std::vector<X>> xs_;
  std::vector<std::vector<int32_t>> ys_;
  size_t turn_ = 0;
};

using LossFn = std::function<Array(const Array& x, const Array& y)>;

// The timed loop: one benchmark iteration is one training step of `model` with `opt` on the next
// batch of `data`.
template <class Model, class Batches>
void train_loop(benchmark::State& st, Model& model, kiln::optim::Optimizer& opt, const LossFn& loss,
                Batches& data, bool compiled, bool async) {
  auto grad_fn = kiln::nn::value_and_grad(model, loss);
  kiln::optim::CompiledStep compiled_step(model, opt,
                                          [&](const std::vector<Array>& b) { return loss(b[0], b[1]); });
  std::optional<Array> previous_loss;  // async: the step whose loss is read one step later
  float sink = 0;                      // the losses read, so that no read is optimized away
  auto one = [&] {
    const auto [x, y] = data.next();
    Array l;
    if (compiled) {
      l = compiled_step({x, y});
    } else {
      auto [value, grads] = grad_fn(x, y);
      opt.update(model, grads);
      l = value;
    }
    // The step's outputs, evaluated together (one graph walk, one submit on the GPU).
    std::vector<Array> outputs = model.parameters().values();
    for (const Array& s : opt.state().values()) outputs.push_back(s);
    outputs.push_back(l);
    if (async) {
      kiln::async_eval(outputs);
      if (previous_loss) sink += previous_loss->item<float>();
      previous_loss = l;
    } else {
      kiln::eval(outputs);
      sink += l.item<float>();
    }
  };
  auto drain = [&] {
    if (previous_loss) sink += previous_loss->item<float>();
    previous_loss.reset();
  };
  for (int i = 0; i < 3; ++i) one();  // traced and captured (compiled), optimizer state made, caches warm
  drain();

  const kiln::MemoryStats before = kiln::memory_stats();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : st) one();
  drain();  // the last step's wait belongs to the loop
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const kiln::MemoryStats after = kiln::memory_stats();
  benchmark::DoNotOptimize(sink);

  const auto steps = static_cast<double>(st.iterations());
  if (steps == 0) return;
  st.counters["steps_per_s"] = steps / seconds;
  st.counters["h2d_bytes_per_step"] =
      static_cast<double>(after.host_to_device_bytes - before.host_to_device_bytes) / steps;
  st.counters["d2h_bytes_per_step"] =
      static_cast<double>(after.device_to_host_bytes - before.device_to_host_bytes) / steps;
}

void BM_mlp_adam_loop(benchmark::State& st, bool compiled, bool async) {
  if (!use_bench_device(st)) return;
  kiln::random::seed(0);
  kiln::models::Mlp model({.in_features = 784, .hidden = {512, 512}, .out_features = 10});
  kiln::optim::Adam opt({.lr = 1e-3});
  HostBatches<float> data({128, 784}, {128}, 10, 1);
  train_loop(
      st, model, opt, [&](const Array& x, const Array& y) { return kiln::nn::cross_entropy(model(x), y); },
      data, compiled, async);
}

void BM_gpt_adamw_loop(benchmark::State& st, bool compiled, bool async) {
  if (!use_bench_device(st)) return;
  kiln::random::seed(0);
  const int64_t batch = small() ? 4 : 32, context = small() ? 32 : 128, vocab = 65;
  kiln::models::Gpt model({.vocab_size = vocab, .context = context, .d_model = 256, .heads = 4, .layers = 4});
  kiln::optim::AdamW opt({.lr = 3e-4});
  HostBatches<int32_t> data({batch, context}, {batch, context}, static_cast<int32_t>(vocab), 2);
  train_loop(
      st, model, opt,
      [&](const Array& x, const Array& y) {
        return kiln::nn::cross_entropy(kiln::reshape(model(x), {-1, vocab}), kiln::reshape(y, {-1}));
      },
      data, compiled, async);
}

}  // namespace

BENCHMARK_CAPTURE(BM_mlp_adam_loop, compiled_sync, true, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_mlp_adam_loop, compiled_async, true, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_mlp_adam_loop, eager_sync, false, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_mlp_adam_loop, eager_async, false, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_gpt_adamw_loop, compiled_sync, true, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gpt_adamw_loop, compiled_async, true, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gpt_adamw_loop, eager_sync, false, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_gpt_adamw_loop, eager_async, false, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
