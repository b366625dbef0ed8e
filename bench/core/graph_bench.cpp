// Graph overhead: build and evaluate a chain of 1000 tiny ops (16 floats), forward only and
// forward + backward. Reported as microseconds per op (the counter "us/op").
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

namespace {

constexpr int kOps = 1000;

kiln::Array chain(const kiln::Array& x) {
  kiln::Array y = x;
  for (int i = 0; i < kOps / 2; ++i) y = kiln::sin(y * 1.0001f);  // 2 ops per iteration
  return y;
}

void BM_kiln_chain_forward(benchmark::State& st) {
  const kiln::Array x = kiln::random::uniform({16}, kiln::random::key(0));
  x.eval();
  for (auto _ : st) {
    kiln::Array y = chain(x);
    y.eval();
  }
  st.counters["us_per_op"] =
      benchmark::Counter(static_cast<double>(kOps) * 1e-6,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_kiln_chain_forward_backward(benchmark::State& st) {
  const kiln::Array x = kiln::random::uniform({16}, kiln::random::key(0));
  x.eval();
  auto f = kiln::value_and_grad([](const kiln::Array& a) { return kiln::sum(chain(a)); });
  for (auto _ : st) {
    auto [loss, g] = f(x);
    kiln::eval(loss, g);
  }
  // Ops counted as the forward chain's length, as in PyTorch's figure (forward ops of the chain).
  st.counters["us_per_op"] =
      benchmark::Counter(static_cast<double>(kOps) * 1e-6,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_kiln_chain_forward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_chain_forward_backward)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
