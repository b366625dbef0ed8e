// compile on the GPU: a fused elementwise chain becomes one generated kernel. Differential tests:
// every fused result against the same graph unfused on the GPU and against the CPU, on random
// inputs with fixed seeds, in float32, float16, int32 and mixed chains (comparisons, selects,
// casts), with broadcast scalars and strided inputs, and a chain with more inputs than one kernel
// binds (run member by member). Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuCompile : public detail::vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    set_default_device(Device::gpu);
  }
  void TearDown() override { set_default_device(Device::cpu); }
};

Array random_array(const Shape& shape, uint64_t seed, Dtype t = float32, double lo = -2.0, double hi = 2.0) {
  std::vector<double> v = test::random_values(shape_size(shape), seed, lo, hi);
  if (!is_floating(t))
    for (double& x : v) x = std::round(x);
  return astype(Array(v, shape, float64), t, Device::cpu);
}

void expect_close(const Array& got, const Array& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> g = test::values(got), w = test::values(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], atol + rtol * std::abs(w[i])) << what << " at " << i;
  }
}

// The fused GPU result, the unfused GPU result and the CPU's agree; the compiled output is one
// FusedElementwise node.
void check_chain(const ArrayFn& fn, const std::vector<Array>& inputs, double rtol, double atol,
                 const std::string& what, bool expect_fused = true) {
  auto compiled = compile(fn);
  const Array fused = compiled(inputs)[0];
  if (expect_fused) {
    ASSERT_TRUE(fused.has_primitive()) << what;
    EXPECT_STREQ(fused.primitive()->name(), "FusedElementwise") << what;
  }
  fused.eval();
  const Array unfused = fn(inputs)[0];
  set_default_device(Device::cpu);
  const Array cpu = fn(inputs)[0];
  set_default_device(Device::gpu);
  expect_close(fused, unfused, rtol, atol, what + ": fused vs unfused on the GPU");
  expect_close(fused, cpu, rtol, atol, what + ": GPU vs CPU");
}

Array gelu_like(const Array& x) {
  const Array inner = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh(inner));
}

TEST_F(GpuCompile, FloatChainsFuseIntoOneKernel) {
  const ArrayFn gelu = [](const std::vector<Array>& a) { return std::vector<Array>{gelu_like(a[0])}; };
  for (Dtype t : {float32, float16, bfloat16}) {
    const double tol = t == float32 ? 1e-5 : 1e-2;
    check_chain(gelu, {random_array({7, 33}, 1, t)}, tol, tol, fmt::format("gelu {}", dtype_name(t)));
    check_chain(gelu, {random_array({100003}, 2, t)}, tol, tol, fmt::format("gelu long {}", dtype_name(t)));
  }
  // A value read several times inside the chain, and exp/log/sqrt members.
  const ArrayFn nested = [](const std::vector<Array>& a) {
    const Array h = gelu_like(a[0]) * 1.1f - 0.2f;
    return std::vector<Array>{sqrt(exp(gelu_like(h)) + log(abs(h) + 1.0f))};
  };
  check_chain(nested, {random_array({4097}, 3)}, 1e-5, 1e-5, "nested");
}

TEST_F(GpuCompile, BroadcastScalarsAndStridedInputs) {
  const ArrayFn fn = [](const std::vector<Array>& a) {
    return std::vector<Array>{exp(a[0] * a[1] + 1.0f) - a[1] / (a[2] + 3.0f)};
  };
  const Array x = transpose(random_array({50, 40}, 4)), b = random_array({50}, 5), c = random_array({}, 6);
  check_chain(fn, {x, b, c}, 1e-5, 1e-5, "strided and broadcast");
  check_chain(fn, {random_array({3, 1, 5}, 7), random_array({4, 1}, 8), random_array({5}, 9)}, 1e-5, 1e-5,
              "outer broadcast");
}

TEST_F(GpuCompile, MixedDtypeChainsWithComparisonsAndSelects) {
  // relu-like selects, comparisons producing bools, casts between dtypes inside one chain.
  const ArrayFn fn = [](const std::vector<Array>& a) {
    const Array mask = greater(a[0], a[1]);
    const Array picked = where(mask, a[0] * 2.0f, a[1] - 1.0f);
    const Array count = astype(logical_and(mask, less(a[0], 1.0f)), int32) + astype(a[2], int32);
    return std::vector<Array>{picked + astype(count, float32) * 0.5f};
  };
  check_chain(fn, {random_array({1000}, 10), random_array({1000}, 11), random_array({1000}, 12, int32)}, 1e-6,
              1e-6, "mixed");
  // Integer chains: wrap-around and integer division as on the CPU.
  const ArrayFn ints = [](const std::vector<Array>& a) {
    return std::vector<Array>{floor_divide(a[0] * a[0] + 7, a[1]) - remainder(a[0], a[1]) * 3};
  };
  Array divisor = random_array({777}, 14, int32, 1, 9);
  check_chain(ints, {random_array({777}, 13, int32, -1000, 1000), divisor}, 0, 0, "int32");
  check_chain(ints, {random_array({777}, 15, uint8, 0, 255), astype(divisor, uint8)}, 0, 0, "uint8");
}

TEST_F(GpuCompile, ChainsWithMoreInputsThanOneKernelBindsRunMemberByMember) {
  const ArrayFn fn = [](const std::vector<Array>& a) {
    Array acc = a[0];
    for (size_t i = 1; i < a.size(); ++i) acc = acc * 0.5f + tanh(a[i]);
    return std::vector<Array>{acc};
  };
  std::vector<Array> inputs;
  for (uint64_t i = 0; i < 14; ++i) inputs.push_back(random_array({300}, 20 + i));
  check_chain(fn, inputs, 1e-5, 1e-5, "14 inputs");
}

TEST_F(GpuCompile, GradientsOfACompiledStepOnTheGpu) {
  const ArrayFn loss = [](const std::vector<Array>& a) {
    return std::vector<Array>{sum(gelu_like(a[0] * a[1]) + square(a[1]))};
  };
  const std::vector<Array> in{random_array({64, 8}, 40), random_array({64, 8}, 41)};
  const auto step = compile(grad(loss, {0, 1}));
  const auto g = step(in);
  set_default_device(Device::cpu);
  const auto c = grad(loss, {0, 1})(in);
  set_default_device(Device::gpu);
  for (size_t i = 0; i < 2; ++i) expect_close(g[i], c[i], 1e-4, 1e-5, "gradient " + std::to_string(i));
}

}  // namespace
}  // namespace kiln
