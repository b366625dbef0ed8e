// Issue 31's GPT-2-small figures (124M parameters: vocabulary 50257, context 1024, d_model 768,
// 12 heads, 12 layers, tanh GELU, tied embeddings), kiln's side of bench/gpt2_small_vs_pytorch.py:
// - train_step: forward, backward and AdamW on a batch of 8 sequences of 256 tokens, with the new
//   parameters and state evaluated;
// - decode/<p>: one greedy token (batch 1) after p cached positions, the KV cache written in place
//   (models::GptCache); 32 tokens a run from p, so p = 0 and p = 960 bracket a 1k-token
//   generation and equal figures mean tokens/s stays flat.
// - decode_quantized/<bits>/<p>: the same with the model quantized by nn::quantize (int8, int4;
//   32 is float32 again), its weights' size beside (weights_MB).
// KILN_DEVICE=gpu runs train_step and decode on the GPU.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>

#include <map>
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

// GPT-2 small in eval mode, float32 (bits 32) or quantized with nn::quantize (groups of 64), its
// initialization evaluated here rather than in the first token's time.
const models::Gpt& decoder(int bits = 32) {
  static std::map<int, std::unique_ptr<models::Gpt>> models;  // benchmarks run one at a time
  std::unique_ptr<models::Gpt>& m = models[bits];
  if (!m) {
    m = std::make_unique<models::Gpt>(gpt2_small());
    m->eval_mode();
    kiln::nn::eval(m->parameters());
    if (bits < 32) kiln::nn::quantize(*m, {.bits = bits, .group_size = 64});
  }
  return *m;
}

void decode(benchmark::State& st, const models::Gpt& model, int64_t start) {
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
  int64_t bytes = 0;
  for (const auto& [key, p] : model.parameters()) bytes += p.nbytes();
  st.counters["weights_MB"] = static_cast<double>(bytes) / 1e6;
}

void BM_kiln_gpt2_small_decode(benchmark::State& st) { decode(st, decoder(), st.range(0)); }
BENCHMARK(BM_kiln_gpt2_small_decode)
    ->Arg(0)
    ->Arg(256)
    ->Arg(512)
    ->Arg(768)
    ->Arg(960)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(32);

// Args: bits (32: the float32 model), start position. Issue 32: int8 and int4 beside float32.
void BM_kiln_gpt2_small_decode_quantized(benchmark::State& st) {
  decode(st, decoder(static_cast<int>(st.range(0))), st.range(1));
}
BENCHMARK(BM_kiln_gpt2_small_decode_quantized)
    ->Args({32, 0})
    ->Args({8, 0})
    ->Args({4, 0})
    ->Args({32, 512})
    ->Args({8, 512})
    ->Args({4, 512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(32);

}  // namespace

BENCHMARK_MAIN();
