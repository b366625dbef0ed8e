// The axpby example primitive (examples/extensions/axpby: one node, cblas_saxpby) against
// alpha * x + beta * y built from kiln ops (three nodes), on 4M float32, eager and compiled.
// cblas_saxpby on raw buffers (after copying y, which it overwrites) is the primitive's floor:
// OpenBLAS runs saxpby on one thread, while kiln's own elementwise loops use its CPU pool, which
// an outside primitive cannot reach (the pool is internal).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <kiln/kiln.h>

#include <cstring>

#include "axpby.h"

namespace {

using kiln::Array;

constexpr int64_t kSize = int64_t{1} << 22;
constexpr float kAlpha = 1.5f, kBeta = -0.5f;

Array input(uint64_t seed) {
  Array x = kiln::random::normal({kSize}, kiln::random::key(seed));
  x.eval();
  return x;
}

std::vector<Array> with_primitive(const std::vector<Array>& a) {
  return {axpby_ext::axpby(a[0], a[1], kAlpha, kBeta)};
}
std::vector<Array> with_ops(const std::vector<Array>& a) { return {kAlpha * a[0] + kBeta * a[1]}; }

void set_bytes(benchmark::State& st) {
  // Two reads and one write per element.
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * kSize * 3 * sizeof(float));
}

void BM_axpby_primitive(benchmark::State& st) {
  const Array x = input(1), y = input(2);
  for (auto _ : st) with_primitive({x, y})[0].eval();
  set_bytes(st);
}

void BM_ops_alpha_x_plus_beta_y(benchmark::State& st) {
  const Array x = input(1), y = input(2);
  for (auto _ : st) with_ops({x, y})[0].eval();
  set_bytes(st);
}

void BM_compiled_axpby_primitive(benchmark::State& st) {
  const Array x = input(1), y = input(2);
  const auto f = kiln::compile(with_primitive);
  f({x, y})[0].eval();
  for (auto _ : st) f({x, y})[0].eval();
  set_bytes(st);
}

void BM_compiled_alpha_x_plus_beta_y(benchmark::State& st) {
  const Array x = input(1), y = input(2);
  const auto f = kiln::compile(with_ops);
  f({x, y})[0].eval();
  for (auto _ : st) f({x, y})[0].eval();
  set_bytes(st);
}

void BM_cblas_saxpby(benchmark::State& st) {
  const Array x = input(1), y = input(2);
  std::vector<float> z(kSize);
  for (auto _ : st) {
    std::memcpy(z.data(), y.data<float>(), kSize * sizeof(float));
    cblas_saxpby(static_cast<blasint>(kSize), kAlpha, x.data<float>(), 1, kBeta, z.data(), 1);
    benchmark::DoNotOptimize(z.data());
  }
  set_bytes(st);
}

}  // namespace

BENCHMARK(BM_axpby_primitive)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ops_alpha_x_plus_beta_y)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_compiled_axpby_primitive)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_compiled_alpha_x_plus_beta_y)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_cblas_saxpby)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
