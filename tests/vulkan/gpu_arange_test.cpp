// arange (the Range primitive's generated elementwise shader) on the GPU against the CPU: integer
// dtypes, whose shader once failed to compile ("'j' : undeclared identifier"), at odd lengths and
// negative starts and steps, and the attention's causal positions built from it on the GPU.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuArange : public detail::vk::testing::VulkanTest {};

TEST_F(GpuArange, IntegerRangesMatchTheCpu) {
  struct Case {
    double start, stop, step;
  };
  const Case cases[] = {{0, 1, 1}, {0, 7, 1}, {-5, 1000, 1}, {3, 1025, 2}, {10, -10, -3}, {-3, 40, 0.75}};
  for (Dtype t : {int32, uint32, int8, uint8, int64, float32, float64}) {
    if ((t == int64 && !ctx().caps().int64) || (t == float64 && !ctx().caps().float64)) continue;
    for (const Case& c : cases) {
      if (!is_floating(t) && (c.start < 0 || c.stop < 0) && (t == uint32 || t == uint8)) continue;
      if ((t == int8 || t == uint8) && c.stop > 127) continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(c.start) + ":" + std::to_string(c.stop) +
                   ":" + std::to_string(c.step));
      const Array gpu = arange(c.start, c.stop, c.step, t, Device::gpu);
      const Array cpu = arange(c.start, c.stop, c.step, t, Device::cpu);
      ASSERT_EQ(gpu.shape(), cpu.shape());
      test::expect_close(gpu, cpu, 0, 0);
    }
  }
}

TEST_F(GpuArange, CausalPositionsOnTheGpu) {
  // The causal limit as core/ops/attention.cpp builds it: key j hidden from query i when
  // j > i + lk - lq, all on the GPU.
  const int64_t lq = 5, lk = 9;
  auto hidden = [&](Device d) {
    const Array qpos =
        reshape(arange(static_cast<double>(lk - lq), static_cast<double>(lk), 1, int32, d), {lq, 1}, d);
    const Array kpos = reshape(arange(0, static_cast<double>(lk), 1, int32, d), {1, lk}, d);
    return astype(greater(kpos, qpos, d), int32, d);
  };
  test::expect_close(hidden(Device::gpu), hidden(Device::cpu), 0, 0);
}

}  // namespace
}  // namespace kiln
