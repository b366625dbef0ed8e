// The fused attention (core/ops/attention.h) on the GPU through the ordinary API, against the same
// op on the CPU and the unfused graph on the GPU: every dtype, odd lengths (1, 7, 130), head dims
// 16 to 128, causal with Lk != Lq, masks, the GPT's transposed head views, gradients computed on the
// GPU, and the kernels' checks. Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kiln/core/ops/attention.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The unfused graph (nn::MultiHeadAttention's composite path) on stream s.
Array composite(const Array& q, const Array& k, const Array& v, double scale, bool causal, const Array& mask,
                StreamOrDevice s) {
  Array scores = matmul(multiply(q, scale, s), swapaxes(k, -1, -2, s), s);
  if (mask.valid()) scores = add(scores, mask, s);
  if (causal) {
    const int64_t lq = q.shape(-2), lk = k.shape(-2);
    const Array qpos =
        reshape(arange(static_cast<double>(lk - lq), static_cast<double>(lk), 1, int32, s), {lq, 1}, s);
    const Array kpos = reshape(arange(0, static_cast<double>(lk), 1, int32, s), {1, lk}, s);
    scores = where(greater(kpos, qpos, s), -kInf, scores, s);
  }
  return matmul(softmax(scores, -1, s), v, s);
}

// The fused GPU kernels run only when asked for (core/ops/attention.cpp says why); these tests
// are about them.
class GpuAttention : public detail::vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    setenv("KILN_VULKAN_FUSED_ATTENTION", "1", 1);
  }
  void TearDown() override { unsetenv("KILN_VULKAN_FUSED_ATTENTION"); }
  bool can(Dtype t) {
    if (t == float64) return ctx().caps().float64;
    if (t == float16 || t == bfloat16) return ctx().caps().storage16;
    return true;
  }
  static double tol(Dtype t) {
    return t == float64 ? 1e-10 : t == float32 ? 2e-5 : t == float16 ? 4e-3 : 3e-2;
  }
};

TEST_F(GpuAttention, MatchesTheCpuForEveryDtypeLengthAndHeadDim) {
  struct Case {
    int64_t lq, lk, d;
    bool causal;
  };
  const Case cases[] = {{1, 1, 16, false}, {7, 7, 64, true},  {130, 130, 80, true}, {7, 130, 128, false},
                        {5, 12, 64, true}, {12, 5, 16, true}, {130, 7, 16, false}};
  for (Dtype t : {float32, float64, float16, bfloat16}) {
    if (!can(t)) continue;
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " lq " << c.lq << " lk " << c.lk << " d " << c.d);
      const Array q = test::random_array({2, 2, c.lq, c.d}, t, 1),
                  k = test::random_array({2, 2, c.lk, c.d}, t, 2);
      const Array v = test::random_array({2, 2, c.lk, c.d}, t, 3);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      const Array gpu = scaled_dot_product_attention(q, k, v, scale, c.causal, Array(), Device::gpu);
      const Array cpu = scaled_dot_product_attention(q, k, v, scale, c.causal, Array(), Device::cpu);
      ASSERT_EQ(gpu.dtype(), t);
      test::expect_close(gpu, cpu, tol(t), tol(t));
    }
  }
}

TEST_F(GpuAttention, MasksAndNanRows) {
  const Array q = test::random_array({2, 3, 9, 16}, float32, 4),
              k = test::random_array({2, 3, 11, 16}, float32, 5);
  const Array v = test::random_array({2, 3, 11, 8}, float32, 6);
  const Array fmask = test::random_array({3, 1, 11}, float32, 7, -2, 2);
  const Array bmask = greater(test::random_array({9, 11}, float32, 8), 0.5);
  for (const Array& m : {fmask, bmask})
    for (bool causal : {false, true}) {
      const Array gpu = scaled_dot_product_attention(q, k, v, 0.3, causal, m, Device::gpu);
      const Array cpu = scaled_dot_product_attention(q, k, v, 0.3, causal, m, Device::cpu);
      test::expect_close(gpu, cpu, 2e-5, 2e-5);  // NaN rows (bool rows all true) must match too
    }
}

TEST_F(GpuAttention, TransposedHeadViewsAsTheGpt) {
  const int64_t b = 2, t = 33, h = 4, d = 64;
  auto heads = [&](uint64_t seed) {
    return transpose(test::random_array({b, t, h, d}, float32, seed), {0, 2, 1, 3});
  };
  const Array q = heads(9), k = heads(10), v = heads(11);
  const Array gpu = scaled_dot_product_attention(q, k, v, 0.125, true, Array(), Device::gpu);
  test::expect_close(gpu, composite(q, k, v, 0.125, true, Array(), Device::gpu), 2e-5, 2e-5);
  test::expect_close(gpu, scaled_dot_product_attention(q, k, v, 0.125, true, Array(), Device::cpu), 2e-5,
                     2e-5);
}

TEST_F(GpuAttention, GradientsOnTheGpuMatchTheCpuAndTheUnfusedGraph) {
  for (bool causal : {false, true})
    for (int64_t lq : {1, 7, 130}) {
      SCOPED_TRACE(testing::Message() << "causal " << causal << " lq " << lq);
      const int64_t lk = lq == 7 ? 12 : lq, d = 16;
      const Array q = test::random_array({2, 2, lq, d}, float32, 12),
                  k = test::random_array({2, 2, lk, d}, float32, 13);
      const Array v = test::random_array({2, 2, lk, d}, float32, 14),
                  u = test::random_array({2, 2, lq, d}, float32, 15);
      const Array mask = test::random_array({lq, lk}, float32, 16);
      auto loss = [&](Device dev, bool fused) {
        return [=](const std::vector<Array>& x) {
          const Array o = fused ? scaled_dot_product_attention(x[0], x[1], x[2], 0.25, causal, x[3], dev)
                                : composite(x[0], x[1], x[2], 0.25, causal, x[3], dev);
          return std::vector<Array>{sum(multiply(o, u, dev), false, dev)};
        };
      };
      const auto gpu = grad(loss(Device::gpu, true), {0, 1, 2, 3})({q, k, v, mask});
      const auto cpu = grad(loss(Device::cpu, true), {0, 1, 2, 3})({q, k, v, mask});
      const auto unfused = grad(loss(Device::gpu, false), {0, 1, 2, 3})({q, k, v, mask});
      for (size_t i = 0; i < 4; ++i) {
        test::expect_close(gpu[i], cpu[i], 1e-4, 1e-4);
        test::expect_close(gpu[i], unfused[i], 1e-4, 1e-4);
      }
    }
}

// With one key the weights are 1 whatever q is, so dq is zero; with the mask differentiated too
// (its cotangent summed over a broadcast), fused and unfused. A GPU bug once made it nonzero.
TEST_F(GpuAttention, DqIsZeroWhenEachQuerySeesOneKey) {
  for (int64_t lq : {1, 5}) {
    SCOPED_TRACE(testing::Message() << "lq " << lq);
    const Array q = test::random_array({2, 2, lq, 16}, float32, 30),
                k = test::random_array({2, 2, 1, 16}, float32, 31);
    const Array v = test::random_array({2, 2, 1, 16}, float32, 32),
                u = test::random_array({2, 2, lq, 16}, float32, 33);
    const Array mask = test::random_array({lq, 1}, float32, 34);
    for (bool fused : {true, false}) {
      const auto g = grad(
          [&](const std::vector<Array>& x) {
            const Array o =
                fused ? scaled_dot_product_attention(x[0], x[1], x[2], 0.25, false, x[3], Device::gpu)
                      : composite(x[0], x[1], x[2], 0.25, false, x[3], Device::gpu);
            return std::vector<Array>{sum(multiply(o, u, Device::gpu), false, Device::gpu)};
          },
          {0, 1, 2, 3})({q, k, v, mask});
      test::expect_close(g[0], std::vector<double>(static_cast<size_t>(g[0].size()), 0.0), 0, 1e-6);
      test::expect_close(g[3], std::vector<double>(static_cast<size_t>(g[3].size()), 0.0), 0, 1e-6);
    }
  }
}

TEST_F(GpuAttention, GradientsOfEveryDtype) {
  for (Dtype t : {float32, float64, float16, bfloat16}) {
    if (!can(t)) continue;
    const Array q = test::random_array({1, 2, 9, 32}, t, 17), k = test::random_array({1, 2, 9, 32}, t, 18);
    const Array v = test::random_array({1, 2, 9, 32}, t, 19);
    auto loss = [&](Device dev) {
      return [=](const std::vector<Array>& x) {
        return std::vector<Array>{
            sum(astype(scaled_dot_product_attention(x[0], x[1], x[2], 0.2, true, Array(), dev), float32, dev),
                false, dev)};
      };
    };
    const auto gpu = grad(loss(Device::gpu), {0, 1, 2})({q, k, v});
    const auto cpu = grad(loss(Device::cpu), {0, 1, 2})({q, k, v});
    for (size_t i = 0; i < 3; ++i) test::expect_close(gpu[i], cpu[i], tol(t) * 4, tol(t) * 4);
  }
}

TEST_F(GpuAttention, WideHeadsTakeTheUnfusedGraph) {
  const Array q = test::random_array({1, 3, 160}, float32, 20),
              k = test::random_array({1, 4, 160}, float32, 21);
  const Array v = test::random_array({1, 4, 8}, float32, 22);
  test::expect_close(scaled_dot_product_attention(q, k, v, 0.1, false, Array(), Device::gpu),
                     scaled_dot_product_attention(q, k, v, 0.1, false, Array(), Device::cpu), 2e-5, 2e-5);
}

TEST_F(GpuAttention, Float64WithoutDeviceSupportThrowsNotImplemented) {
  if (ctx().caps().float64) GTEST_SKIP() << "the device has shaderFloat64";
  const Array q = test::random_array({1, 3, 8}, float64, 23);
  EXPECT_THROW(eval(scaled_dot_product_attention(q, q, q, 1.0, false, Array(), Device::gpu)), NotImplemented);
}

// Without KILN_VULKAN_FUSED_ATTENTION (the GPU's default) the op is the unfused graph: the scores'
// GEMM, one fused softmax node and the GEMM with v, differentiated through the softmax's fused
// vjp. It matches the CPU's fused op, NaN rows (queries that see no key) included.
using GpuAttentionDefault = detail::vk::testing::VulkanTest;

TEST_F(GpuAttentionDefault, IsOneSoftmaxBetweenTwoGemmsAndMatchesTheCpu) {
  unsetenv("KILN_VULKAN_FUSED_ATTENTION");
  const Array q = test::random_array({2, 3, 9, 16}, float32, 30),
              k = test::random_array({2, 3, 11, 16}, float32, 31);
  const Array v = test::random_array({2, 3, 11, 8}, float32, 32);
  const Array out = scaled_dot_product_attention(q, k, v, 0.3, true, Array(), Device::gpu);
  ASSERT_FALSE(out.inputs().empty());
  ASSERT_NE(out.inputs()[0].primitive(), nullptr) << "the weights should be one softmax node";
  EXPECT_STREQ(out.inputs()[0].primitive()->name(), "Softmax") << "the weights should be one node";
  test::expect_close(out, scaled_dot_product_attention(q, k, v, 0.3, true, Array(), Device::cpu), 2e-5, 2e-5);
  const Array fmask = test::random_array({3, 1, 11}, float32, 33, -2, 2);
  const Array bmask = greater(test::random_array({9, 11}, float32, 34), 0.5);
  for (const Array& m : {fmask, bmask})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(testing::Message() << "bool mask " << (m.dtype() == bool_) << " causal " << causal);
      test::expect_close(scaled_dot_product_attention(q, k, v, 0.3, causal, m, Device::gpu),
                         scaled_dot_product_attention(q, k, v, 0.3, causal, m, Device::cpu), 2e-5, 2e-5);
    }
  // Causal with more queries than keys: the first 7 of 12 queries see no key (NaN rows).
  const Array q12 = test::random_array({2, 3, 12, 16}, float32, 40);
  const Array k5 = test::random_array({2, 3, 5, 16}, float32, 41),
              v5 = test::random_array({2, 3, 5, 8}, float32, 42);
  const Array gpu = scaled_dot_product_attention(q12, k5, v5, 0.3, true, Array(), Device::gpu);
  EXPECT_TRUE(std::isnan(slice(gpu, {Slice{0, 1}, Slice{0, 1}, Slice{0, 1}, Slice{0, 1}}).item<float>()));
  test::expect_close(gpu, scaled_dot_product_attention(q12, k5, v5, 0.3, true, Array(), Device::cpu), 2e-5,
                     2e-5);
}

TEST_F(GpuAttentionDefault, GradientsMatchTheCpuInFloat32AndFloat16) {
  unsetenv("KILN_VULKAN_FUSED_ATTENTION");
  for (Dtype t : {float32, float16}) {
    if (t == float16 && !ctx().caps().storage16) continue;
    for (bool causal : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " causal " << causal);
      const int64_t lq = 7, lk = 12, d = 16;
      const Array q = test::random_array({2, 2, lq, d}, t, 35), k = test::random_array({2, 2, lk, d}, t, 36);
      const Array v = test::random_array({2, 2, lk, d}, t, 37), u = test::random_array({2, 2, lq, d}, t, 38);
      const Array mask = test::random_array({lq, lk}, t, 39);
      auto loss = [&](Device dev) {
        return [=](const std::vector<Array>& x) {
          const Array o = scaled_dot_product_attention(x[0], x[1], x[2], 0.25, causal, x[3], dev);
          return std::vector<Array>{
              sum(multiply(astype(o, float32, dev), astype(u, float32, dev), dev), false, dev)};
        };
      };
      const auto gpu = grad(loss(Device::gpu), {0, 1, 2, 3})({q, k, v, mask});
      const auto cpu = grad(loss(Device::cpu), {0, 1, 2, 3})({q, k, v, mask});
      const double tol = t == float32 ? 1e-4 : 2e-2;
      for (size_t i = 0; i < 4; ++i) test::expect_close(gpu[i], cpu[i], tol, tol);
    }
  }
}

}  // namespace
}  // namespace kiln
