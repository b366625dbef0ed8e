// Forward + backward of a 784-512-512-10 MLP with cross-entropy at batch 128 (the figure that
// bench/mlp_vs_pytorch.py sets beside PyTorch's on the same shapes and threads).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

namespace {

using kiln::Array;

struct Mlp {
  std::vector<Array> params;  // w1, b1, w2, b2, w3, b3
  explicit Mlp(uint64_t seed) {
    const int64_t sizes[] = {784, 512, 512, 10};
    const Array keys = kiln::random::split(kiln::random::key(seed), 3);
    for (int i = 0; i < 3; ++i) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[i]));
      params.push_back(
          kiln::random::uniform({sizes[i], sizes[i + 1]}, kiln::take(keys, Array(i), 0), -bound, bound));
      params.push_back(kiln::zeros({sizes[i + 1]}));
    }
    kiln::eval(params);
  }
};

Array loss(const std::vector<Array>& p, const Array& x, const Array& labels) {
  Array h = kiln::maximum(kiln::addmm(p[1], x, p[0]), 0.0f);
  h = kiln::maximum(kiln::addmm(p[3], h, p[2]), 0.0f);
  const Array logits = kiln::addmm(p[5], h, p[4]);
  const Array picked = kiln::take_along_axis(logits, kiln::expand_dims(labels, -1), -1);
  return kiln::mean(kiln::logsumexp(logits, -1) - kiln::squeeze(picked, kiln::Axes{-1}));
}

void BM_kiln_mlp_forward_backward(benchmark::State& st) {
  const int64_t batch = 128;
  Mlp mlp(0);
  const Array x = kiln::random::normal({batch, 784}, kiln::random::key(1));
  const Array labels = kiln::random::randint({batch}, kiln::random::key(2), 0, 10);
  kiln::eval(x, labels);
  std::vector<int> argnums = {0, 1, 2, 3, 4, 5};
  auto step = kiln::value_and_grad(
      [&](const std::vector<Array>& p) { return std::vector<Array>{loss(p, x, labels)}; }, argnums);
  for (auto _ : st) {
    auto [values, grads] = step(mlp.params);
    grads.push_back(values[0]);
    kiln::eval(grads);
  }
}

void BM_kiln_mlp_forward(benchmark::State& st) {
  const int64_t batch = 128;
  Mlp mlp(0);
  const Array x = kiln::random::normal({batch, 784}, kiln::random::key(1));
  const Array labels = kiln::random::randint({batch}, kiln::random::key(2), 0, 10);
  kiln::eval(x, labels);
  for (auto _ : st) loss(mlp.params, x, labels).eval();
}

}  // namespace

BENCHMARK(BM_kiln_mlp_forward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kiln_mlp_forward_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
