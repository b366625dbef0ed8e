// MemoryStats's host<->device transfer counters (issue 10): host_to_device_bytes grows by an array's
// bytes when a GPU op first reads a host array, device_to_host_bytes by a GPU result's bytes when
// the host first reads it, and a compiled training step, once warmed up, moves only its batch and
// the optimizer's scalars up and its loss down. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1);
// with KILN_VULKAN_FORCE_STAGING=1 it checks the discrete-GPU paths (upload memory, staging).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <random>
#include <vector>

#include "kiln/models/mlp.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuTransferCounter : public detail::vk::testing::VulkanTest {
 protected:
  void TearDown() override { set_default_device(Device::cpu); }
  struct Moved {
    size_t up, down;
  };
  // What moved since `before`.
  static Moved since(const MemoryStats& before) {
    const MemoryStats now = memory_stats();
    return {now.host_to_device_bytes - before.host_to_device_bytes,
            now.device_to_host_bytes - before.device_to_host_bytes};
  }
};

// A small host array, and one past DeviceAllocator::kMaxPooledBytes: on a discrete GPU the first goes
// into mapped upload memory, the second into device memory through staging.
TEST_F(GpuTransferCounter, HostArrayReadByGpuOpsIsUploadedOnceAndCountedExactly) {
  for (const int64_t n : {int64_t{1000}, int64_t{(16 << 20) / 4 + 3}}) {
    const Array x = test::random_array({n}, float32, 7, -2.0, 2.0);
    const auto nbytes = static_cast<size_t>(x.nbytes());
    const MemoryStats before = memory_stats();
    // Two ops read x: its device copy is made once.
    const Array y = negative(x, Device::gpu), z = exp(x, Device::gpu);
    eval(y, z);
    const Moved up = since(before);
    EXPECT_EQ(up.up, nbytes) << n << " elements";
    EXPECT_EQ(up.down, 0u) << n << " elements";

    const MemoryStats read = memory_stats();
    const std::vector<float> got = y.to_vector<float>();
    EXPECT_EQ(since(read).down, nbytes) << n << " elements";
    EXPECT_EQ(since(read).up, 0u);
    // A second read finds the host copy.
    const MemoryStats again = memory_stats();
    EXPECT_EQ(y.to_vector<float>(), got);
    EXPECT_EQ(since(again).down, 0u);

    const std::vector<double> xs = test::values(x);
    for (size_t i = 0; i < xs.size(); i += 997) EXPECT_EQ(got[i], static_cast<float>(-xs[i])) << i;
  }
}

TEST_F(GpuTransferCounter, RuntimeUploadAndReadbackCountTheirRange) {
  const std::vector<float> values = detail::vk::testing::random_floats(300, -1.0f, 1.0f, 11);
  const MemoryStats before = memory_stats();
  const detail::vk::BufferPtr b = upload_vector(values);
  EXPECT_EQ(since(before).up, values.size() * sizeof(float));
  const MemoryStats read = memory_stats();
  std::vector<float> back(40);
  detail::vk::readback(ctx(), b, back.data(), back.size() * sizeof(float), 100 * sizeof(float));
  EXPECT_EQ(since(read).down, back.size() * sizeof(float));
  EXPECT_EQ(since(read).up, 0u);
  EXPECT_EQ(back, std::vector<float>(values.begin() + 100, values.begin() + 140));
}

TEST_F(GpuTransferCounter, CountersStayAtZeroForCpuWork) {
  const MemoryStats before = memory_stats();
  const Array x = test::random_array({64, 64}, float32, 12);
  const Array y = matmul(x, x, Device::cpu);
  const std::vector<float> got = y.to_vector<float>();
  EXPECT_EQ(since(before).up, 0u);
  EXPECT_EQ(since(before).down, 0u);
  EXPECT_TRUE(std::isfinite(got[0]));
}

// A data loader's batch: fresh host arrays of random inputs and labels (fixed seed).
std::pair<Array, Array> host_batch(std::mt19937_64& rng, int64_t rows, int64_t features, int64_t classes) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(classes) - 1);
  std::vector<float> x(static_cast<size_t>(rows * features));
  std::vector<int32_t> y(static_cast<size_t>(rows));
  for (float& v : x) v = u(rng);
  for (int32_t& v : y) v = label(rng);
  return {Array(x, {rows, features}), Array(y, {rows})};
}

// The figure: per step, the batch (x and y), Adam's two 0-d float32 scalars (step size and
// sqrt of the second bias correction, optim::Adam::step_scalars) up, and the 4-byte loss down.
// Parameters and optimizer state stay on the device; the replay's input copies and the kernels'
// work are device-side.
TEST_F(GpuTransferCounter, CompiledAdamStepMovesOnlyTheBatchScalarsAndLoss) {
  constexpr int64_t kRows = 64, kFeatures = 32, kClasses = 8;
  constexpr int kWarmUp = 3, kSteps = 6;
  set_default_device(Device::gpu);
  random::seed(5);
  models::Mlp model({.in_features = kFeatures, .hidden = {48, 48}, .out_features = kClasses});
  optim::Adam opt({.lr = 1e-2});
  optim::CompiledStep step(model, opt,
                           [&](const std::vector<Array>& b) { return nn::cross_entropy(model(b[0]), b[1]); });
  std::mt19937_64 rng(21);
  // The step as a training loop runs it: the new parameters and state evaluated, the loss read.
  auto one = [&](const Array& x, const Array& y) {
    const Array loss = step({x, y});
    const auto params = model.parameters();
    nn::eval({&params, &opt.state()});
    return loss.item<float>();
  };
  float first = 0;
  for (int i = 0; i < kWarmUp; ++i) {
    const auto [x, y] = host_batch(rng, kRows, kFeatures, kClasses);
    const float l = one(x, y);
    if (i == 0) first = l;
  }
  ASSERT_TRUE(step.compiled().has_value());

  const size_t batch_bytes = kRows * kFeatures * sizeof(float) + kRows * sizeof(int32_t);  // 8192 + 256
  const size_t scalar_bytes = 2 * sizeof(float);
  float last = 0;
  for (int i = 0; i < kSteps; ++i) {
    const auto [x, y] = host_batch(rng, kRows, kFeatures, kClasses);
    const MemoryStats before = memory_stats();
    last = one(x, y);
    const Moved m = since(before);
    EXPECT_EQ(m.up, batch_bytes + scalar_bytes) << "step " << i;
    EXPECT_EQ(m.down, sizeof(float)) << "step " << i;
  }
  EXPECT_TRUE(std::isfinite(first) && std::isfinite(last)) << first << " " << last;
  // Random labels: the loss stays near log(classes) while the model fits noise; a broken update
  // (NaN, a wrong sign blowing up) would leave this band.
  EXPECT_LT(last, 2.0f * std::log(static_cast<float>(kClasses))) << first << " -> " << last;
}

}  // namespace
}  // namespace kiln
