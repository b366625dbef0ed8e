// Per-example gradients of a small MLP (32-64-64-10, 64 examples): vmap(grad(loss of one
// example)) against a loop that takes grad once per example (the peer: what one writes without
// vmap). Both give the same 64 stacked gradients of every parameter.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

namespace {

using kiln::Array;

constexpr int64_t kBatch = 64;

struct Problem {
  std::vector<Array> params;  // w1, b1, w2, b2, w3, b3
  Array x, labels;
  Problem() {
    const int64_t sizes[] = {32, 64, 64, 10};
    for (int i = 0; i < 3; ++i) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[i]));
      params.push_back(
          kiln::random::uniform({sizes[i], sizes[i + 1]}, kiln::random::key(10 + i), -bound, bound));
      params.push_back(kiln::random::uniform({sizes[i + 1]}, kiln::random::key(20 + i), -bound, bound));
    }
    x = kiln::random::normal({kBatch, sizes[0]}, kiln::random::key(1));
    labels = kiln::random::randint({kBatch}, kiln::random::key(2), 0, 10);
    kiln::eval(params);
    kiln::eval(x, labels);
  }
};

// Cross-entropy of one example: inputs are w1, b1, w2, b2, w3, b3, x (features), label (scalar).
std::vector<Array> example_loss(const std::vector<Array>& a) {
  Array h = kiln::tanh(kiln::matmul(a[6], a[0]) + a[1]);
  h = kiln::tanh(kiln::matmul(h, a[2]) + a[3]);
  const Array logits = kiln::matmul(h, a[4]) + a[5];
  return {kiln::logsumexp(logits, -1) - kiln::take(logits, a[7], -1)};
}

const std::vector<int> kParams = {0, 1, 2, 3, 4, 5};

void BM_per_example_grads_loop(benchmark::State& st) {
  const Problem p;
  const auto grad = kiln::grad(example_loss, kParams);
  for (auto _ : st) {
    std::vector<std::vector<Array>> per_param(kParams.size());
    for (int64_t i = 0; i < kBatch; ++i) {
      std::vector<Array> args = p.params;
      args.push_back(kiln::take(p.x, Array(static_cast<int32_t>(i)), 0));
      args.push_back(kiln::take(p.labels, Array(static_cast<int32_t>(i)), 0));
      const auto g = grad(args);
      for (size_t k = 0; k < g.size(); ++k) per_param[k].push_back(g[k]);
    }
    std::vector<Array> stacked;
    for (auto& gs : per_param) stacked.push_back(kiln::stack(gs, 0));
    kiln::eval(stacked);
  }
  st.SetItemsProcessed(st.iterations() * kBatch);
}

void BM_per_example_grads_vmap(benchmark::State& st) {
  const Problem p;
  // Parameters shared (unbatched, -1); features and labels batched along axis 0.
  const auto per_example = kiln::vmap(kiln::grad(example_loss, kParams), {-1, -1, -1, -1, -1, -1, 0, 0});
  for (auto _ : st) {
    std::vector<Array> args = p.params;
    args.push_back(p.x);
    args.push_back(p.labels);
    kiln::eval(per_example(args));
  }
  st.SetItemsProcessed(st.iterations() * kBatch);
}

}  // namespace

BENCHMARK(BM_per_example_grads_loop)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_per_example_grads_vmap)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
