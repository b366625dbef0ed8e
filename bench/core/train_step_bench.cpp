// One training step (forward, backward, Adam update, evaluation of the new parameters and state)
// of the 784-512-512-10 MLP at batch 128 and of LeNet-5 at batch 128 on 28x28 images: the figures
// bench/train_vs_pytorch.py sets beside PyTorch's on the same shapes and threads.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <kiln/models/lenet.h>
#include <kiln/models/mlp.h>

namespace {

using kiln::Array;

template <class Model>
void train_steps(benchmark::State& st, Model& model, const Array& x, const Array& y) {
  kiln::optim::Adam opt({.lr = 1e-3});
  auto step = kiln::nn::value_and_grad(
      model, [&](const Array& in, const Array& t) { return kiln::nn::cross_entropy(model(in), t); });
  auto one = [&] {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    kiln::nn::eval({&params, &opt.state()});
    loss.eval();
  };
  for (int i = 0; i < 3; ++i) one();  // allocator cache warm, Adam state created
  for (auto _ : st) one();
}

void BM_kiln_mlp_adam_step(benchmark::State& st) {
  kiln::random::seed(0);
  kiln::models::Mlp model;
  const Array x = kiln::random::normal({128, 784}, kiln::random::key(1));
  const Array y = kiln::random::randint({128}, kiln::random::key(2), 0, 10);
  kiln::eval(x, y);
  train_steps(st, model, x, y);
}

void BM_kiln_lenet_adam_step(benchmark::State& st) {
  kiln::random::seed(0);
  kiln::models::LeNet model;
  const Array x = kiln::random::normal({128, 1, 28, 28}, kiln::random::key(1));
  const Array y = kiln::random::randint({128}, kiln::random::key(2), 0, 10);
  kiln::eval(x, y);
  train_steps(st, model, x, y);
}

}  // namespace

BENCHMARK(BM_kiln_mlp_adam_step)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kiln_lenet_adam_step)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
