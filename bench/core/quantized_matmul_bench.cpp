// quantized_matmul (int8 and int4 weights, groups of 64) against the float32 product on the same
// 4096 x 4096 weight, stored (out, in) as a Linear's: OpenBLAS's cblas_sgemm called directly on
// the same threads (the peer), and kiln's own float32 linear. At batch 1 the product is
// memory-bound: int4 reads an eighth of float32's bytes. At batch 64 it is compute-bound and the
// quantized product pays for dequantizing each block of W.
//   build/bench/bench/quantized_matmul_bench   (KILN_NUM_THREADS / OPENBLAS_NUM_THREADS: threads)
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <kiln/core/ops/quantized.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kIn = 4096, kOut = 4096;

kiln::Array normal(const kiln::Shape& shape, uint64_t seed) {
  kiln::Array a = kiln::random::normal(shape, kiln::random::key(seed)) * 0.02;
  a.eval();
  return a;
}

const kiln::Array& weight() {
  static const kiln::Array w = normal({kOut, kIn}, 1);
  return w;
}

void set_counters(benchmark::State& st, double weight_bytes) {
  st.counters["weight_GB/s"] = benchmark::Counter(weight_bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::OneK::kIs1000);
}

void BM_cblas_sgemm_f32(benchmark::State& st) {
  const int m = static_cast<int>(st.range(0));
  const kiln::Array x = normal({m, kIn}, 2);
  std::vector<float> y(static_cast<size_t>(m * kOut));
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  openblas_set_num_threads(env && std::atoi(env) > 0 ? std::atoi(env)
                                                     : static_cast<int>(std::thread::hardware_concurrency()));
  const float *xp = x.data<float>(), *wp = weight().data<float>();
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kOut, kIn, 1.0f, xp, kIn, wp, kIn, 0.0f, y.data(),
                kOut);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(st, 4.0 * kIn * kOut);
}
BENCHMARK(BM_cblas_sgemm_f32)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_kiln_linear_f32(benchmark::State& st) {
  const kiln::Array x = normal({st.range(0), kIn}, 2);
  for (auto _ : st) kiln::linear(x, weight()).eval();
  set_counters(st, 4.0 * kIn * kOut);
}
BENCHMARK(BM_kiln_linear_f32)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Args: batch, bits.
void BM_kiln_quantized_matmul(benchmark::State& st) {
  const kiln::Array x = normal({st.range(0), kIn}, 2);
  const int bits = static_cast<int>(st.range(1));
  const kiln::QuantizedWeight q = kiln::quantize(weight(), 64, bits);
  kiln::eval(q.weight, q.scales, q.biases);
  for (auto _ : st) kiln::quantized_matmul(x, q.weight, q.scales, q.biases, true, 64, bits).eval();
  // The packed words plus a float32 scale and bias for each group of 64.
  set_counters(st, kIn * kOut * (bits / 8.0 + 8.0 / 64));
}
BENCHMARK(BM_kiln_quantized_matmul)
    ->Args({1, 8})
    ->Args({1, 4})
    ->Args({64, 8})
    ->Args({64, 4})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
