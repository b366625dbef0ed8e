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
  // Leading dims that do not merge into rows (a [tokens, batch, features] view of a
  // [batch, tokens, features] array), in float32 and float64 (the 8-byte copy path).
  for (Dtype t : {float32, float64}) {
    if (t == float64 && !ctx().caps().float64) continue;
    const Array xs = swapaxes(random_array({5, 3, 40}, 10, t), 0, 1), ws = random_array({15, 40}, 11, t);
    expect_close(linear(xs, ws, random_array({15}, 12, t), Device::gpu),
                 linear(xs, ws, random_array({15}, 12, t), Device::cpu), 1e-5, 1e-5,
                 "unmergeable rows " + std::string(dtype_name(t)));
  }
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
    // start + i * step: a driver may fuse it into one fma (NVIDIA's does), an ulp off the CPU.
    expect_close(linspace(-1.0, 1.0, 101, t, Device::gpu), linspace(-1.0, 1.0, 101, t, Device::cpu),
                 t == float64 ? 0x1p-52 : 0x1p-23, 1e-15, "linspace " + what);
    for (int k : {-2, 0, 3})
      expect_close(eye(5, 7, k, t, Device::gpu), eye(5, 7, k, t, Device::cpu), 0, 0,
                   fmt::format("eye k {} {}", k, what));
  }
  expect_close(eye(3, 3, 0, bool_, Device::gpu), eye(3, 3, 0, bool_, Device::cpu), 0, 0, "eye bool");
  EXPECT_EQ(arange(0.0, 0.0, 1.0, float32, Device::gpu).size(), 0);
}

TEST_F(GpuLinalg, Float64MatmulMatchesTheCpu) {
  if (!ctx().caps().float64) {
    const Array a = random_array({3, 4}, 40, float64), b = random_array({4, 2}, 41, float64);
    EXPECT_THROW(eval(matmul(a, b, Device::gpu)), NotImplemented);
    GTEST_SKIP() << "the device lacks shaderFloat64";
  }
  struct Case {
    Shape a, b;
  };
  // Odd sizes, sizes past one 64-wide tile, K not a multiple of the kernel's step, batches (one
  // broadcast), a vector product and an empty K.
  for (const Case& c : {Case{{1, 1}, {1, 1}}, Case{{7, 13}, {13, 5}}, Case{{65, 130}, {130, 67}},
                        Case{{3, 20, 17}, {3, 17, 9}}, Case{{2, 33, 8}, {8, 70}}, Case{{1, 300}, {300, 1}},
                        Case{{4, 0}, {0, 6}}}) {
    const Array a = random_array(c.a, 42, float64), b = random_array(c.b, 43, float64);
    expect_close(matmul(a, b, Device::gpu), matmul(a, b, Device::cpu), 1e-13, 1e-13,
                 "matmul " + shape_str(c.a) + " @ " + shape_str(c.b));
  }
  // Transposed operands, attention-layout views whose batch dims do not merge (copied first).
  const Array at = transpose(random_array({31, 12}, 44, float64)), b = random_array({31, 10}, 45, float64);
  expect_close(matmul(at, b, Device::gpu), matmul(at, b, Device::cpu), 1e-13, 1e-13, "transposed");
  const Array q = swapaxes(random_array({2, 5, 3, 4}, 46, float64), 1, 2),
              k = swapaxes(random_array({2, 5, 3, 4}, 47, float64), 1, 2);
  const Array kt = swapaxes(k, -1, -2);
  expect_close(matmul(q, kt, Device::gpu), matmul(q, kt, Device::cpu), 1e-13, 1e-13, "attention q @ k^T");
}

TEST_F(GpuLinalg, Float64LinearAddmmAndGradientsMatchTheCpu) {
  if (!ctx().caps().float64) GTEST_SKIP() << "the device lacks shaderFloat64";
  const Array x = random_array({2, 9, 23}, 50, float64), w = random_array({70, 23}, 51, float64),
              bias = random_array({70}, 52, float64);
  expect_close(linear(x, w, bias, Device::gpu), linear(x, w, bias, Device::cpu), 1e-13, 1e-13, "linear");
  expect_close(linear(x, w, Array(), Device::gpu), linear(x, w, Array(), Device::cpu), 1e-13, 1e-13,
               "linear without bias");
  // alpha and beta exact in float32: the facade passes them as float (gpu.h).
  const Array a = random_array({3, 20, 11}, 53, float64), b = random_array({3, 11, 14}, 54, float64);
  for (const Shape& cs : std::vector<Shape>{{3, 20, 14}, {14}, {20, 1}})
    expect_close(addmm(random_array(cs, 55, float64), a, b, 0.75, -1.5, Device::gpu),
                 addmm(random_array(cs, 55, float64), a, b, 0.75, -1.5, Device::cpu), 1e-13, 1e-13,
                 "addmm c " + shape_str(cs));
  // Gradients through vjp with a given cotangent: every step a GEMM or an elementwise kernel (the
  // bias's gradient, a float64 Sum, is the reductions' to test).
  auto f = [](Device d) {
    return [d](const std::vector<Array>& in) -> std::vector<Array> {
      return {matmul(tanh(linear(in[0], in[1], Array(), d), d), in[2], d)};
    };
  };
  const std::vector<Array> primals{random_array({9, 31}, 56, float64), random_array({12, 31}, 57, float64),
                                   random_array({12, 5}, 58, float64)};
  const std::vector<Array> ct{random_array({9, 5}, 59, float64)};
  const auto g = vjp(f(Device::gpu), primals, ct).second;
  const auto c = vjp(f(Device::cpu), primals, ct).second;
  ASSERT_EQ(g.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_close(g[i], c[i], 1e-12, 1e-12, "gradient " + std::to_string(i));
}

TEST_F(GpuLinalg, MatmulOfNegativeStrideViews) {
  // Flipped views (negative strides) are copied to dense temporaries before the GEMM.
  std::vector<Dtype> dtypes{float32};
  if (ctx().caps().float64) dtypes.push_back(float64);
  for (Dtype t : dtypes) {
    const double tol = t == float32 ? 1e-5 : 1e-13;
    const Array a = slice(random_array({6, 9}, 60, t), {Slice{std::nullopt, std::nullopt, -1}});
    const Array b = slice(random_array({9, 4}, 61, t), {Slice{}, Slice{std::nullopt, std::nullopt, -1}});
    const Array c = slice(random_array({6, 4}, 62, t), {Slice{std::nullopt, std::nullopt, -1}});
    const std::string what(dtype_name(t));
    expect_close(matmul(a, b, Device::gpu), matmul(a, b, Device::cpu), tol, tol, what + " flipped operands");
    expect_close(addmm(c, a, b, 1.0, 1.0, Device::gpu), addmm(c, a, b, 1.0, 1.0, Device::cpu), tol, tol,
                 what + " flipped addend");
    const Array batched = slice(random_array({3, 6, 9}, 63, t), {Slice{std::nullopt, std::nullopt, -1}});
    expect_close(matmul(batched, b, Device::gpu), matmul(batched, b, Device::cpu), tol, tol,
                 what + " flipped batch");
  }
}

}  // namespace
}  // namespace kiln
