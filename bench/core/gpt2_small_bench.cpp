// Issue 31's GPT-2-small figures (124M parameters: vocabulary 50257, context 1024, d_model 768,
// 12 heads, 12 layers, tanh GELU, tied embeddings), kiln's side of bench/gpt2_small_vs_pytorch.py:
// - train_step: forward, backward and AdamW on a batch of 8 sequences of 256 tokens, with the new
//   parameters and state evaluated;
// - decode/<p>: one greedy token (batch 1) after p cached positions, the KV cache written in place
//   (models::GptCache); 32 tokens a run from p, so p = 0 and p = 960 bracket a 1k-token
//   generation and equal figures mean tokens/s stays flat.
// KILN_DEVICE=gpu runs both on the GPU.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>

#include <memory>
#include <vector>

namespace {

using kiln::Array;
namespace models = kiln::models;

constexpr int64_t kVocab = 50257;

models::GptConfig gpt2_small() {
  return {.vocab_size = kVocab,
          .context = 1024,
          .d_model = 768,
          .heads = 12,
          .layers = 12,
          .activation = models::GptActivation::gelu_tanh,
          .tie_embeddings = true,
          .key = kiln::random::key(0)};
}

void BM_kiln_gpt2_small_train_step(benchmark::State& st) {
  models::Gpt model(gpt2_small());
  const Array x = kiln::random::randint({8, 256}, kiln::random::key(1), 0, kVocab);
  const Array y = kiln::random::randint({8, 256}, kiln::random::key(2), 0, kVocab);
  kiln::eval(x, y);
  kiln::optim::AdamW opt({.lr = 3e-4});
  auto step = kiln::nn::value_and_grad(model, [&](const Array& in, const Array& t) {
    return kiln::nn::cross_entropy(kiln::reshape(model(in), {-1, kVocab}), kiln::reshape(t, {-1}));
  });
  auto one = [&] {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    kiln::nn::eval({&params, &opt.state()});
    loss.eval();
  };
  one();  // AdamW state created, allocator cache warm
  kiln::reset_peak_memory();
  for (auto _ : st) one();
  st.counters["peak_host_gb"] = kiln::memory_stats().peak_bytes / 1e9;
  st.counters["tokens_per_s"] = benchmark::Counter(8 * 256, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_kiln_gpt2_small_train_step)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

const models::Gpt& decoder() {
  static const std::unique_ptr<models::Gpt> model = [] {
    auto m = std::make_unique<models::Gpt>(gpt2_small());
    m->eval_mode();
    kiln::nn::eval(m->parameters());  // the initialization runs here, not in the first token's time
    return m;
  }();
  return *model;
}

void BM_kiln_gpt2_small_decode(benchmark::State& st) {
  const models::Gpt& model = decoder();
  const int64_t start = st.range(0);
  models::GptCache cache;
  Array next = kiln::random::randint({1, 1}, kiln::random::key(3), 0, kVocab);
  auto step = [&](const Array& tokens) {
    const Array logits = model.forward(tokens, cache);
    const int64_t t = logits.shape(1);
    next = kiln::astype(kiln::argmax(kiln::slice(logits, {kiln::Slice{}, kiln::Slice{t - 1, t}}), -1),
                        kiln::int32);
    std::vector<Array> ready = cache.storage();
    ready.push_back(next);
    kiln::eval(ready);
  };
  if (start > 0) step(kiln::random::randint({1, start}, kiln::random::key(4), 0, kVocab));
  for (auto _ : st) step(next);
  st.counters["tokens_per_s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_kiln_gpt2_small_decode)
    ->Arg(0)
    ->Arg(256)
    ->Arg(512)
    ->Arg(768)
    ->Arg(960)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(32);

}  // namespace

BENCHMARK_MAIN();
