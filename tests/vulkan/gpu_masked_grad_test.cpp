// The core GPU ops under a masked attention's gradient, each against the CPU in float64: the vjp
// of broadcast_to (the mask's cotangent summed over the batch and head axes), logsumexp of scores
// plus a broadcast mask under grad, and the batched matmuls of the unfused graph at one query
// and one key (K = 1, M = 1, N = 1). A bug in any of them once made the masked attention's dq on
// the GPU nonzero where it must be zero (tests/vulkan/gpu_attention_test.cpp checks that case).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <utility>
#include <vector>

#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuMaskedGrad : public detail::vk::testing::VulkanTest {};

// The lengths (Lq, Lk) of the attention tests: one, odd, past a workgroup.
const std::pair<int64_t, int64_t> kLengths[] = {{1, 1}, {7, 12}, {130, 130}};

// f's gradients on the GPU in float32 and on the CPU in float64.
std::pair<std::vector<Array>, std::vector<Array>> both(
    const std::function<Array(const std::vector<Array>&, Device)>& f, const std::vector<Array>& x,
    const std::vector<int>& argnums) {
  auto on = [&](Device d, Dtype t) {
    std::vector<Array> xs;
    for (const Array& a : x) xs.push_back(astype(a, t, d));
    return grad([&, d](const std::vector<Array>& in) { return std::vector<Array>{f(in, d)}; }, argnums)(xs);
  };
  return {on(Device::gpu, float32), on(Device::cpu, float64)};
}

TEST_F(GpuMaskedGrad, BroadcastToSumsTheCotangentOverLeadingAxes) {
  for (auto [lq, lk] : kLengths) {
    SCOPED_TRACE(testing::Message() << "lq " << lq << " lk " << lk);
    const Array m = test::random_array({lq, lk}, float32, 1),
                w = test::random_array({2, 2, lq, lk}, float32, 2);
    const auto [gpu, cpu] = both(
        [&](const std::vector<Array>& x, Device d) {
          return sum(multiply(broadcast_to(x[0], {2, 2, lq, lk}, d), x[1], d), false, d);
        },
        {m, w}, {0, 1});
    test::expect_close(gpu[0], cpu[0], 1e-5, 1e-5);
    test::expect_close(gpu[1], cpu[1], 1e-5, 1e-5);
    test::expect_close(sum(w, Axes{0, 1}, false, Device::gpu),
                       sum(astype(w, float64), Axes{0, 1}, false, Device::cpu), 1e-5, 1e-5);
  }
}

TEST_F(GpuMaskedGrad, LogsumexpOfScoresPlusABroadcastMask) {
  for (auto [lq, lk] : kLengths) {
    SCOPED_TRACE(testing::Message() << "lq " << lq << " lk " << lk);
    const Array m = test::random_array({lq, lk}, float32, 3),
                s = test::random_array({2, 2, lq, lk}, float32, 4);
    const Array u = test::random_array({2, 2, lq, 1}, float32, 5);
    const auto [gpu, cpu] = both(
        [&](const std::vector<Array>& x, Device d) {
          const Array scores = add(x[1], broadcast_to(x[0], {2, 2, lq, lk}, d), d);
          return sum(multiply(logsumexp(scores, -1, true, d), astype(u, x[0].dtype(), d), d), false, d);
        },
        {m, s}, {0, 1});
    test::expect_close(gpu[0], cpu[0], 1e-5, 1e-5);
    test::expect_close(gpu[1], cpu[1], 1e-5, 1e-5);
  }
}

TEST_F(GpuMaskedGrad, BatchedMatmulsAtOneQueryAndOneKey) {
  // (2, 2, M, K) x (2, 2, N, K)^T (a transposed view, as q k^T) for the unfused graph's shapes at Lq = Lk = 1
  // and around them.
  const int64_t shapes[][3] = {{1, 16, 1}, {1, 1, 16}, {1, 1, 1}, {7, 16, 12}, {7, 12, 16}, {12, 7, 16}};
  uint64_t seed = 10;
  for (const auto& sh : shapes) {
    const int64_t m = sh[0], k = sh[1], n = sh[2];
    SCOPED_TRACE(testing::Message() << "m " << m << " k " << k << " n " << n);
    const Array a = test::random_array({2, 2, m, k}, float32, seed++),
                b = test::random_array({2, 2, n, k}, float32, seed++);
    const Array u = test::random_array({2, 2, m, n}, float32, seed++);
    const auto [gpu, cpu] = both(
        [&](const std::vector<Array>& x, Device d) {
          return sum(multiply(matmul(x[0], swapaxes(x[1], -1, -2, d), d), astype(u, x[0].dtype(), d), d),
                     false, d);
        },
        {a, b}, {0, 1});
    test::expect_close(gpu[0], cpu[0], 1e-5, 1e-5);
    test::expect_close(gpu[1], cpu[1], 1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace kiln
