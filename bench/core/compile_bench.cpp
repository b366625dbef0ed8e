// A 20-op elementwise chain (two GELU-like blocks) on 4M float32: eager vs compiled (fused).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

namespace {

using kiln::Array;

Array gelu_like(const Array& x) {  // 9 ops
  const Array inner = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + kiln::tanh(inner));
}

std::vector<Array> chain(const std::vector<Array>& a) {  // 20 ops
  const Array y = gelu_like(a[0]);
  return {gelu_like(y * 1.1f - 0.2f)};
}

Array input() {
  Array x = kiln::random::normal({int64_t{1} << 22}, kiln::random::key(0));
  x.eval();
  return x;
}

void BM_kiln_chain_eager(benchmark::State& st) {
  const Array x = input();
  for (auto _ : st) chain({x})[0].eval();
}

void BM_kiln_chain_compiled(benchmark::State& st) {
  const Array x = input();
  auto f = kiln::compile(chain);
  f({x})[0].eval();
  for (auto _ : st) f({x})[0].eval();
}

// The memory floor of a fused chain: two cheap ops, one read and one write of 4M floats.
void BM_kiln_affine_compiled(benchmark::State& st) {
  const Array x = input();
  auto f = kiln::compile([](const std::vector<Array>& a) { return std::vector<Array>{a[0] * 1.1f - 0.2f}; });
  f({x})[0].eval();
  for (auto _ : st) f({x})[0].eval();
}

// tanh alone over 4M floats (eager: one vector loop).
void BM_kiln_tanh_eager(benchmark::State& st) {
  const Array x = input();
  for (auto _ : st) kiln::tanh(x).eval();
}

}  // namespace

BENCHMARK(BM_kiln_affine_compiled)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kiln_tanh_eager)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kiln_chain_eager)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kiln_chain_compiled)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
