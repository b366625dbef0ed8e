// One GPT training step (forward, backward, AdamW update, evaluation of the new parameters and
// state): 4 layers, d_model 256, 4 heads, context 128, batch 32, a 65-token vocabulary (character
// level). bench/gpt_vs_pytorch.py sets the figure beside PyTorch's on the same model and threads.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>

namespace {

using kiln::Array;

void BM_kiln_gpt_adamw_step(benchmark::State& st) {
  kiln::random::seed(0);
  kiln::models::Gpt model({.vocab_size = 65, .context = 128, .d_model = 256, .heads = 4, .layers = 4});
  const Array x = kiln::random::randint({32, 128}, kiln::random::key(1), 0, 65);
  const Array y = kiln::random::randint({32, 128}, kiln::random::key(2), 0, 65);
  kiln::eval(x, y);
  kiln::optim::AdamW opt({.lr = 3e-4});
  auto step = kiln::nn::value_and_grad(model, [&](const Array& in, const Array& t) {
    return kiln::nn::cross_entropy(kiln::reshape(model(in), {-1, 65}), kiln::reshape(t, {-1}));
  });
  auto one = [&] {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    kiln::nn::eval({&params, &opt.state()});
    loss.eval();
  };
  for (int i = 0; i < 2; ++i) one();  // allocator cache warm, AdamW state created
  for (auto _ : st) one();
}

}  // namespace

BENCHMARK(BM_kiln_gpt_adamw_step)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_MAIN();
