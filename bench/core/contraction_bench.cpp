// einsum against the matmuls it lowers to, on the same operands (STYLE.md R18: the peer is kiln's
// own matmul, so the ratio is what parsing, the greedy order and the transposes cost), and
// conv_transpose2d against the conv2d it is the adjoint of, at the same multiply-adds.
#include <benchmark/benchmark.h>
#include <kiln/core/ops/conv_general.h>
#include <kiln/core/ops/einsum.h>
#include <kiln/kiln.h>

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

// Batched matmul: "bij,bjk->bik" is one Matmul with no transpose.
constexpr int64_t kBatch = 8;
void BM_einsum_batch_matmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({kBatch, n, n}, 1), b = normal({kBatch, n, n}, 2);
  for (auto _ : st) kiln::einsum("bij,bjk->bik", {a, b}).eval();
  set_flops(st, 2.0 * kBatch * n * n * n);
}
void BM_matmul_batch_matmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({kBatch, n, n}, 1), b = normal({kBatch, n, n}, 2);
  for (auto _ : st) kiln::matmul(a, b).eval();
  set_flops(st, 2.0 * kBatch * n * n * n);
}

// Attention scores "bhqd,bhkd->bhqk": einsum copies k to (b*h, d, k); the peer multiplies by a
// transposed view.
void BM_einsum_attention_scores(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto q = normal({2, 8, n, 64}, 3), k = normal({2, 8, n, 64}, 4);
  for (auto _ : st) kiln::einsum("bhqd,bhkd->bhqk", {q, k}).eval();
  set_flops(st, 2.0 * 16 * n * n * 64);
}
void BM_matmul_attention_scores(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto q = normal({2, 8, n, 64}, 3), k = normal({2, 8, n, 64}, 4);
  for (auto _ : st) kiln::matmul(q, kiln::swapaxes(k, -1, -2)).eval();
  set_flops(st, 2.0 * 16 * n * n * 64);
}

// A chain of three: the greedy order contracts (b, c) first, as the peer does by hand.
void BM_einsum_chain(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({n, n}, 5), b = normal({n, n}, 6), c = normal({n, 16}, 7);
  for (auto _ : st) kiln::einsum("ij,jk,kl->il", {a, b, c}).eval();
  set_flops(st, 2.0 * 2 * n * n * 16);
}
void BM_matmul_chain(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({n, n}, 5), b = normal({n, n}, 6), c = normal({n, 16}, 7);
  for (auto _ : st) kiln::matmul(a, kiln::matmul(b, c)).eval();
  set_flops(st, 2.0 * 2 * n * n * 16);
}

// Row-wise dot products "bi,bi->b": a multiply and a sum (no GEMM per row), against the same
// written by hand.
void BM_einsum_row_dots(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({n, 64}, 10), b = normal({n, 64}, 11);
  for (auto _ : st) kiln::einsum("bi,bi->b", {a, b}).eval();
  set_flops(st, 2.0 * n * 64);
}
void BM_multiply_sum_row_dots(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto a = normal({n, 64}, 10), b = normal({n, 64}, 11);
  for (auto _ : st) kiln::sum(a * b, -1).eval();
  set_flops(st, 2.0 * n * 64);
}

// 3x3 kernels, C = O = channels, on 32 x 32 images: conv2d maps (N, C, 32, 32) to (N, O, 32, 32)
// at stride 1 (padding 1), or (N, C, 64, 64) to (N, O, 32, 32) at stride 2; conv_transpose2d with
// the same weight maps back, at the same multiply-adds.
constexpr int64_t kImages = 8, kSide = 32;
void BM_conv_transpose2d(benchmark::State& st) {
  const int64_t c = st.range(0);
  const int stride = static_cast<int>(st.range(1));
  const auto x = normal({kImages, c, kSide, kSide}, 8), w = normal({c, c, 3, 3}, 9);
  for (auto _ : st) kiln::conv_transpose2d(x, w, {stride, stride}, {1, 1}, {stride - 1, stride - 1}).eval();
  set_flops(st, 2.0 * kImages * c * c * 9 * kSide * kSide);
}
void BM_conv2d(benchmark::State& st) {
  const int64_t c = st.range(0), stride = st.range(1);
  const auto x = normal({kImages, c, kSide * stride, kSide * stride}, 8), w = normal({c, c, 3, 3}, 9);
  const int s = static_cast<int>(stride);
  for (auto _ : st) kiln::conv2d(x, w, {s, s}, {1, 1}).eval();
  set_flops(st, 2.0 * kImages * c * c * 9 * kSide * kSide);
}

}  // namespace

BENCHMARK(BM_einsum_batch_matmul)->RangeMultiplier(4)->Range(64, 256)->UseRealTime();
BENCHMARK(BM_matmul_batch_matmul)->RangeMultiplier(4)->Range(64, 256)->UseRealTime();
BENCHMARK(BM_einsum_attention_scores)->RangeMultiplier(4)->Range(64, 256)->UseRealTime();
BENCHMARK(BM_matmul_attention_scores)->RangeMultiplier(4)->Range(64, 256)->UseRealTime();
BENCHMARK(BM_einsum_chain)->RangeMultiplier(4)->Range(64, 1024)->UseRealTime();
BENCHMARK(BM_matmul_chain)->RangeMultiplier(4)->Range(64, 1024)->UseRealTime();

BENCHMARK(BM_einsum_row_dots)->Arg(4096)->Arg(65536)->UseRealTime();
BENCHMARK(BM_multiply_sum_row_dots)->Arg(4096)->Arg(65536)->UseRealTime();
BENCHMARK(BM_conv_transpose2d)->ArgsProduct({{16, 64}, {1, 2}})->UseRealTime();
BENCHMARK(BM_conv2d)->ArgsProduct({{16, 64}, {1, 2}})->UseRealTime();

BENCHMARK_MAIN();
