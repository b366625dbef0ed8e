// The fused normalizations (core/ops/fused_norm.h) against the composites they replace, on the
// CPU, for a (4096, 1024) float32 input: layer_norm, rms_norm and softmax forward, and layer_norm
// and softmax forward + backward. The composites are the formulas nn::LayerNorm/RMSNorm and
// kiln::softmax used before (mean, var, rsqrt, ... as separate passes over memory).
#include <benchmark/benchmark.h>
#include <kiln/core/ops/fused_norm.h>
#include <kiln/kiln.h>

namespace {

using kiln::Array;
constexpr int64_t kRows = 4096, kCols = 1024;
const kiln::StreamOrDevice kCpu = kiln::Device::cpu;

Array input(const kiln::Shape& shape, uint64_t seed) {
  Array a = kiln::random::normal(shape, kiln::random::key(seed), 0.0, 1.0, kiln::float32, kCpu);
  a = kiln::astype(a, kiln::float32, kCpu);
  a.eval();
  return a;
}

void set_bytes(benchmark::State& st, int64_t passes) {
  st.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(passes * kRows * kCols * 4),
                         benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::OneK::kIs1000);
}

Array layer_norm_composite(const Array& x, const Array& w, const Array& b) {
  const Array mu = kiln::mean(x, -1, true, kCpu);
  const Array y = kiln::multiply(
      kiln::subtract(x, mu, kCpu),
      kiln::rsqrt(kiln::add(kiln::var(x, kiln::Axes{-1}, true, 0, kCpu), 1e-5, kCpu), kCpu), kCpu);
  return kiln::add(kiln::multiply(y, w, kCpu), b, kCpu);
}

Array rms_norm_composite(const Array& x, const Array& w) {
  const Array ms = kiln::mean(kiln::square(x, kCpu), -1, true, kCpu);
  return kiln::multiply(kiln::multiply(x, kiln::rsqrt(kiln::add(ms, 1e-5, kCpu), kCpu), kCpu), w, kCpu);
}

// kiln::softmax's composite: exp(x - max) / sum.
Array softmax_composite(const Array& x) {
  const Array e =
      kiln::exp(kiln::subtract(x, kiln::stop_gradient(kiln::max(x, -1, true, kCpu), kCpu), kCpu), kCpu);
  return kiln::divide(e, kiln::sum(e, -1, true, kCpu), kCpu);
}

void BM_layer_norm_fused(benchmark::State& st) {
  const Array x = input({kRows, kCols}, 1), w = input({kCols}, 2), b = input({kCols}, 3);
  for (auto _ : st) kiln::eval(kiln::layer_norm(x, w, b, 1e-5, kCpu));
  set_bytes(st, 2);
}
void BM_layer_norm_composite(benchmark::State& st) {
  const Array x = input({kRows, kCols}, 1), w = input({kCols}, 2), b = input({kCols}, 3);
  for (auto _ : st) kiln::eval(layer_norm_composite(x, w, b));
  set_bytes(st, 2);
}

void BM_rms_norm_fused(benchmark::State& st) {
  const Array x = input({kRows, kCols}, 4), w = input({kCols}, 5);
  for (auto _ : st) kiln::eval(kiln::rms_norm(x, w, 1e-5, kCpu));
  set_bytes(st, 2);
}
void BM_rms_norm_composite(benchmark::State& st) {
  const Array x = input({kRows, kCols}, 4), w = input({kCols}, 5);
  for (auto _ : st) kiln::eval(rms_norm_composite(x, w));
  set_bytes(st, 2);
}

void BM_softmax_fused(benchmark::State& st) {
  const Array x = input({kRows, kCols}, 6);
  for (auto _ : st) kiln::eval(kiln::softmax(x, -1, kCpu));
  set_bytes(st, 2);
}
void BM_softmax_composite(benchmark::State& st) {
  const Array x = input({kRows, kCols}, 6);
  for (auto _ : st) kiln::eval(softmax_composite(x));
  set_bytes(st, 2);
}

// Forward and backward: the gradients of sum(f(x) * c) with respect to x (and the parameters).
template <class F>
void forward_backward(benchmark::State& st, F f, int n_params) {
  const Array x = input({kRows, kCols}, 7), c = input({kRows, kCols}, 8);
  const Array w = input({kCols}, 9), b = input({kCols}, 10);
  std::vector<int> argnums{0};
  for (int i = 1; i <= n_params; ++i) argnums.push_back(i);
  const auto g = kiln::grad(
      [&](const std::vector<Array>& a) {
        return std::vector<Array>{kiln::sum(kiln::multiply(f(a[0], a[1], a[2]), c, kCpu), false, kCpu)};
      },
      argnums);
  for (auto _ : st) kiln::eval(g({x, w, b}));
  set_bytes(st, 5);
}
void BM_layer_norm_grad_fused(benchmark::State& st) {
  forward_backward(
      st,
      [](const Array& x, const Array& w, const Array& b) { return kiln::layer_norm(x, w, b, 1e-5, kCpu); },
      2);
}
void BM_layer_norm_grad_composite(benchmark::State& st) { forward_backward(st, layer_norm_composite, 2); }
void BM_softmax_grad_fused(benchmark::State& st) {
  forward_backward(
      st, [](const Array& x, const Array&, const Array&) { return kiln::softmax(x, -1, kCpu); }, 0);
}
void BM_softmax_grad_composite(benchmark::State& st) {
  forward_backward(
      st, [](const Array& x, const Array&, const Array&) { return softmax_composite(x); }, 0);
}

}  // namespace

BENCHMARK(BM_layer_norm_fused)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_norm_composite)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_rms_norm_fused)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_rms_norm_composite)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax_fused)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax_composite)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_norm_grad_fused)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_norm_grad_composite)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax_grad_fused)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax_grad_composite)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
