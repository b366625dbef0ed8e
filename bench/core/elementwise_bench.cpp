// Elementwise throughput on 16M float32 against a plain memcpy of the same bytes (read + write).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

#include <cstring>
#include <vector>

namespace {

constexpr int64_t kN = int64_t{1} << 24;

void set_bytes(benchmark::State& st, int64_t bytes_per_iter) {
  st.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes_per_iter), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
}

kiln::Array input(uint64_t seed) {
  auto a = kiln::random::uniform({kN}, kiln::random::key(seed));
  a.eval();
  return a;
}

void BM_memcpy(benchmark::State& st) {
  std::vector<float> src(kN, 1.0f), dst(kN);
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), kN * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2 * kN * 4);
}

void BM_kiln_add(benchmark::State& st) {
  const auto a = input(1), b = input(2);
  for (auto _ : st) kiln::eval(kiln::add(a, b));
  set_bytes(st, 3 * kN * 4);
}

void BM_kiln_multiply(benchmark::State& st) {
  const auto a = input(1), b = input(2);
  for (auto _ : st) kiln::eval(kiln::multiply(a, b));
  set_bytes(st, 3 * kN * 4);
}

void BM_kiln_exp(benchmark::State& st) {
  const auto a = input(3);
  for (auto _ : st) kiln::eval(kiln::exp(a));
  set_bytes(st, 2 * kN * 4);
}

void BM_kiln_scalar_multiply(benchmark::State& st) {
  const auto a = input(4);
  for (auto _ : st) kiln::eval(a * 2.0f);
  set_bytes(st, 2 * kN * 4);
}

}  // namespace

BENCHMARK(BM_memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_add)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_multiply)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_exp)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_scalar_multiply)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
