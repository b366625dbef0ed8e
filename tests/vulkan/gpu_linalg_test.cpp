// The GEMM-backed primitives and the fused optimizer step on the GPU against the CPU: Linear (bias
// fused into the GEMM's epilogue, any leading dims, strided inputs) and its gradients, AddMM with
// alpha, beta and a broadcast addend, FusedAdamStep in both lerp forms and with amsgrad, and the
// creation primitives Range and Eye. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/optim/fused_adam_impl.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuLinalg : public detail::vk::testing::VulkanTest {
 protected:
  void TearDown() override { set_default_device(Device::cpu); }
};

Array random_array(const Shape& shape, uint64_t seed, Dtype t = float32) {
  return astype(Array(test::random_values(shape_size(shape), seed, -1.0, 1.0), shape, float64), t);
}

void expect_close(const Array& gpu, const Array& cpu, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const std::vector<double> g = test::values(gpu), c = test::values(cpu);
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], c[i], atol + rtol * std::abs(c[i])) << what << " at " << i;
}

TEST_F(GpuLinalg, LinearMatchesTheCpuWithAndWithoutBias) {
  struct Case {
    Shape x;
    int64_t units;
  };
  for (const Case& c : {Case{{1, 5}, 3}, Case{{33, 70}, 65}, Case{{2, 3, 17}, 129}, Case{{4, 0}, 6}}) {
    const int64_t in = c.x.back();
    const Array x = random_array(c.x, 1), w = random_array({c.units, in}, 2), b = random_array({c.units}, 3);
    const std::string what = "linear " + shape_str(c.x) + " units " + std::to_string(c.units);
    expect_close(linear(x, w, b, Device::gpu), linear(x, w, b, Device::cpu), 1e-5, 1e-5, what + " with bias");
    expect_close(linear(x, w, Array(), Device::gpu), linear(x, w, Array(), Device::cpu), 1e-5, 1e-5, what);
  }
  // Strided operands: a transposed x and a sliced weight.
  const Array xt = transpose(random_array({40, 24}, 4)), big_w = random_array({30, 80}, 5);
  const Array w = slice(big_w, {0, 0}, {30, 80}, {2, 2});  // (15, 40), strides (160, 2)
  expect_close(linear(xt, w, random_array({15}, 6), Device::gpu),
               linear(xt, w, random_array({15}, 6), Device::cpu), 1e-5, 1e-5, "strided");
}

TEST_F(GpuLinalg, LinearGradientsMatchTheCpu) {
  const Array x = random_array({9, 31}, 7), w = random_array({12, 31}, 8), b = random_array({12}, 9);
  auto loss = [](Device d) {
    return [d](const std::vector<Array>& in) -> std::vector<Array> {
      return {sum(square(tanh(linear(in[0], in[1], in[2], d), d), d), {0, 1}, false, d)};
    };
  };
  const auto g = grad(loss(Device::gpu), {0, 1, 2})({x, w, b});
  const auto c = grad(loss(Device::cpu), {0, 1, 2})({x, w, b});
  for (size_t i = 0; i < 3; ++i) expect_close(g[i], c[i], 1e-4, 1e-5, "gradient " + std::to_string(i));
}

TEST_F(GpuLinalg, BatchedMatmulOfAttentionLayoutViews) {
  // [batch, heads, tokens, dim] views of [batch, tokens, heads, dim] arrays: batch dims that do not
  // merge into one, as attention makes them.
  const Array q = swapaxes(random_array({2, 5, 3, 4}, 13), 1, 2),
              k = swapaxes(random_array({2, 5, 3, 4}, 14), 1, 2);
  const Array kt = swapaxes(k, -1, -2);
  expect_close(matmul(q, kt, Device::gpu), matmul(q, kt, Device::cpu), 1e-5, 1e-6, "q @ k^T");
  const Array b = random_array({3, 4, 6}, 15);  // broadcast over the leading batch dim
  expect_close(matmul(q, b, Device::gpu), matmul(q, b, Device::cpu), 1e-5, 1e-6, "broadcast batch");
}

TEST_F(GpuLinalg, AddmmMatchesTheCpu) {
  const Array a = random_array({3, 20, 11}, 10), b = random_array({3, 11, 14}, 11);
  for (const Shape& cs : std::vector<Shape>{{3, 20, 14}, {14}, {20, 1}, {}}) {
    const Array c = random_array(cs, 12);
    for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, {0.5f, -2.0f}, {2.0f, 0.0f}}) {
      const std::string what = fmt::format("addmm c {} alpha {} beta {}", shape_str(cs), alpha, beta);
      expect_close(addmm(c, a, b, alpha, beta, Device::gpu), addmm(c, a, b, alpha, beta, Device::cpu), 1e-5,
                   1e-5, what);
    }
  }
}

TEST_F(GpuLinalg, FusedAdamStepMatchesTheCpu) {
  const Shape shape{257, 3};
  for (Dtype t : {float32, float64}) {
    if (t == float64 && !ctx().caps().float64) continue;
    for (double beta1 : {0.9, 0.3}) {
      for (bool amsgrad : {false, true}) {
        const optim::detail::AdamConstants k{beta1, 0.999, 1e-8, amsgrad};
        const Array p = random_array(shape, 20, t), g = random_array(shape, 21, t),
                    m = random_array(shape, 22, t);
        const Array v = abs(random_array(shape, 23, t)), vmax = abs(random_array(shape, 24, t));
        const std::optional<Array> vm = amsgrad ? std::optional<Array>(vmax) : std::nullopt;
        set_default_device(Device::gpu);
        const std::vector<Array> on_gpu = optim::detail::adam_update(k, p, g, m, v, vm, 1e-3, 0.5);
        eval(on_gpu);
        set_default_device(Device::cpu);
        const std::vector<Array> on_cpu = optim::detail::adam_update(k, p, g, m, v, vm, 1e-3, 0.5);
        ASSERT_EQ(on_gpu.size(), amsgrad ? 4u : 3u);
        ASSERT_EQ(on_gpu.size(), on_cpu.size());
        const double rtol = t == float32 ? 2e-6 : 1e-14;
        for (size_t i = 0; i < on_gpu.size(); ++i)
          expect_close(on_gpu[i], on_cpu[i], rtol, rtol,
                       fmt::format("{} beta1 {} amsgrad {} output {}", dtype_name(t), beta1, amsgrad, i));
      }
    }
  }
}

TEST_F(GpuLinalg, AdamTrainingStepRunsOnTheGpu) {
  // A few optimizer steps of a tiny model with the GPU as default device give the CPU's weights.
  auto train = [](Device d) {
    set_default_device(d);
    random::seed(4);
    nn::Linear layer(6, 3);
    optim::Adam opt(optim::AdamOptions{.lr = 1e-2});
    const Array x = random_array({16, 6}, 30), y = random_array({16, 3}, 31);
    auto step =
        nn::value_and_grad(layer, [&](const Array& in) { return mean(square(subtract(layer(in), y))); });
    for (int i = 0; i < 5; ++i) opt.update(layer, step(x).second);
    Array w = layer.parameters().at("weight");
    w.eval();
    set_default_device(Device::cpu);
    return w;
  };
  expect_close(train(Device::gpu), train(Device::cpu), 1e-5, 1e-6, "weights after 5 steps");
}

TEST_F(GpuLinalg, RangeAndEyeMatchTheCpu) {
  for (Dtype t : {float32, float16, int32, uint8, int64, float64}) {
    if ((t == int64 && !ctx().caps().int64) || (t == float64 && !ctx().caps().float64)) continue;
    const std::string what(dtype_name(t));
    expect_close(arange(-3.0, 40.0, 0.75, t, Device::gpu), arange(-3.0, 40.0, 0.75, t, Device::cpu), 0, 0,
                 "arange " + what);
    expect_close(arange(0.0, 200.0, 1.0, t, Device::gpu), arange(0.0, 200.0, 1.0, t, Device::cpu), 0, 0,
                 "arange " + what);
    expect_close(linspace(-1.0, 1.0, 101, t, Device::gpu), linspace(-1.0, 1.0, 101, t, Device::cpu), 0, 0,
                 "linspace " + what);
    for (int k : {-2, 0, 3})
      expect_close(eye(5, 7, k, t, Device::gpu), eye(5, 7, k, t, Device::cpu), 0, 0,
                   fmt::format("eye k {} {}", k, what));
  }
  expect_close(eye(3, 3, 0, bool_, Device::gpu), eye(3, 3, 0, bool_, Device::cpu), 0, 0, "eye bool");
  EXPECT_EQ(arange(0.0, 0.0, 1.0, float32, Device::gpu).size(), 0);
}

}  // namespace
}  // namespace kiln
