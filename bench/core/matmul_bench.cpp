// kiln's matmul against cblas_sgemm called directly on the same sizes (STYLE.md R18), and the
// Linear layer's forward (addmm with a transposed weight) against the equivalent BLAS calls.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

void set_flops(benchmark::State& st, double flops_per_iter) {
  st.counters["FLOP/s"] = benchmark::Counter(flops_per_iter, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::OneK::kIs1000);
}

kiln::Array normal(const kiln::Shape& shape, uint64_t seed) {
  auto a = kiln::random::normal(shape, kiln::random::key(seed));
  a.eval();
  return a;
}

// The peer runs OpenBLAS's own threads (OPENBLAS_NUM_THREADS, else every core). kiln puts OpenBLAS
// back on one thread at its next GEMM and splits products over its pool instead.
void peer_blas_threads() {
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  const int n =
      env && std::atoi(env) > 0 ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency());
  openblas_set_num_threads(std::max(n, 1));
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void BM_kiln_matmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({n, n}, 1), b = normal({n, n}, 2);
  for (auto _ : st) kiln::matmul(a, b).eval();
  set_flops(st, 2.0 * n * n * n);
}

void BM_cblas_sgemm(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  const auto a = random_floats(size_t(n) * n, 1), b = random_floats(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  peer_blas_threads();
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(st, 2.0 * n * n * n);
}

// Linear forward: x (batch, tokens, in) @ W^T + bias, W of shape (out, in); in = out = n.
constexpr int64_t kRows = 512;

void BM_kiln_linear(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto x = normal({4, kRows / 4, n}, 3), w = normal({n, n}, 4), bias = normal({n}, 5);
  for (auto _ : st) kiln::addmm(bias, x, kiln::transpose(w)).eval();
  set_flops(st, 2.0 * kRows * n * n);
}

void BM_cblas_linear(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  const auto x = random_floats(size_t(kRows) * n, 3), w = random_floats(size_t(n) * n, 4),
             bias = random_floats(size_t(n), 5);
  std::vector<float> y(size_t(kRows) * n);
  peer_blas_threads();
  for (auto _ : st) {
    for (int64_t r = 0; r < kRows; ++r) std::memcpy(y.data() + r * n, bias.data(), size_t(n) * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kRows, n, n, 1.0f, x.data(), n, w.data(), n, 1.0f,
                y.data(), n);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_flops(st, 2.0 * kRows * n * n);
}

}  // namespace

BENCHMARK(BM_kiln_matmul)->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
BENCHMARK(BM_cblas_sgemm)->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
BENCHMARK(BM_kiln_linear)->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
BENCHMARK(BM_cblas_linear)->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();

BENCHMARK_MAIN();
