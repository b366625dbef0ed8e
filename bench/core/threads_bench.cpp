// Throughput of N = 1, 2, 4 caller threads, each building and evaluating its own forward passes
// of a small MLP (batch 32, 256-256-256-10) over weights they share as materialized arrays.
// Reported as forward passes per second over all threads (items_per_second) and per thread. Two
// settings: OpenBLAS with its default threads (it then also splits each matmul across the cores),
// and one OpenBLAS thread per caller (the setting docs/threading.md gives for concurrent
// inference), where the callers are the parallelism. The machine has 2 cores, so 4 threads show
// what oversubscription costs.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <kiln/kiln.h>

#include <thread>

namespace {

using kiln::Array;

constexpr int kPassesPerThread = 40;

struct SharedWeights {
  std::vector<kiln::MaterializedArray> w;  // w1, b1, w2, b2, w3, b3
  SharedWeights() {
    const int64_t sizes[] = {256, 256, 256, 10};
    for (int i = 0; i < 3; ++i) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[i]));
      w.push_back(kiln::materialize(
          kiln::random::uniform({sizes[i], sizes[i + 1]}, kiln::random::key(10 + i), -bound, bound)));
      w.push_back(kiln::materialize(kiln::zeros({sizes[i + 1]})));
    }
  }
};

void forward_passes(const SharedWeights& w, uint64_t seed) {
  Array x = kiln::random::normal({32, 256}, kiln::random::key(seed));
  for (int i = 0; i < kPassesPerThread; ++i) {
    Array h = kiln::maximum(kiln::addmm(w.w[1], x, w.w[0]), 0.0f);
    h = kiln::maximum(kiln::addmm(w.w[3], h, w.w[2]), 0.0f);
    kiln::softmax(kiln::addmm(w.w[5], h, w.w[4]), -1).eval();
  }
}

void run(benchmark::State& st, int blas_threads) {
  static const SharedWeights weights;
  const int saved = openblas_get_num_threads();
  if (blas_threads > 0) openblas_set_num_threads(blas_threads);
  const int n = static_cast<int>(st.range(0));
  for (auto _ : st) {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back([&, t] { forward_passes(weights, 100 + t); });
    for (auto& t : threads) t.join();
  }
  openblas_set_num_threads(saved);
  st.SetItemsProcessed(st.iterations() * n * kPassesPerThread);
  st.counters["per_thread_per_s"] = benchmark::Counter(
      static_cast<double>(st.iterations() * kPassesPerThread), benchmark::Counter::kIsRate);
}

void BM_mlp_forward_threads_blas_default(benchmark::State& st) { run(st, 0); }
void BM_mlp_forward_threads_blas_one(benchmark::State& st) { run(st, 1); }

}  // namespace

BENCHMARK(BM_mlp_forward_threads_blas_default)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Arg(1)
    ->Arg(2)
    ->Arg(4);
BENCHMARK(BM_mlp_forward_threads_blas_one)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Arg(1)
    ->Arg(2)
    ->Arg(4);
BENCHMARK_MAIN();
