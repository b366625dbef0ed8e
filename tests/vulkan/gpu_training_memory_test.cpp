// A training loop on the GPU keeps memory flat (issue 9): an MLP trained with Adam for 200 steps,
// the GPU the default device, must hold the same device and host memory after every step once
// warmed up: no buffer of a finished step stays alive, the caching suballocator reuses its blocks
// instead of reserving more, and no step reaches a higher peak than the early ones. Runs on
// lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <random>
#include <vector>

#include "kiln/models/mlp.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuTrainingMemory : public detail::vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    set_default_device(Device::gpu);
  }
  void TearDown() override { set_default_device(Device::cpu); }
};

// n points of `features` uniform values; the label is the argmax of a fixed random linear map, so
// the task is learnable and the loss falls.
std::pair<Array, Array> linear_task(int64_t n, int64_t features, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(features * classes), x(n * features);
  for (float& v : w) v = u(rng);
  for (float& v : x) v = u(rng);
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    float best = 0;
    for (int64_t c = 0; c < classes; ++c) {
      float s = 0;
      for (int64_t f = 0; f < features; ++f) s += x[i * features + f] * w[f * classes + c];
      if (c == 0 || s > best) best = s, labels[i] = static_cast<int32_t>(c);
    }
  }
  return {Array(x, {n, features}), Array(labels, {n})};
}

bool on_device(const Array& a) { return a.node().buffer && a.node().buffer->on_device(); }

TEST_F(GpuTrainingMemory, AdamMlpStepsKeepMemoryStatsFlatAfterWarmUp) {
  constexpr int kSteps = 200, kWarmUp = 20, kPeakWindow = 40;
  random::seed(3);
  models::Mlp model({.in_features = 16, .hidden = {32, 32}, .out_features = 4});
  optim::Adam opt({.lr = 1e-2});
  const auto [x, y] = linear_task(128, 16, 4, 5);
  auto step = nn::value_and_grad(
      model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });

  // One step; its loss, gradients and graph are gone when it returns, so that what is measured
  // between steps is the model and the optimizer state.
  auto train_step = [&] {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    nn::eval({&params, &opt.state()});
    return loss.item<float>();
  };
  MemoryStats warm{}, window{};
  float first = 0, last = 0;
  for (int i = 1; i <= kSteps; ++i) {
    (i == 1 ? first : last) = train_step();
    if (i == kWarmUp) {
      reset_peak_memory();
      warm = memory_stats();
    }
    if (i == kPeakWindow) window = memory_stats();
  }
  const MemoryStats end = memory_stats();

  EXPECT_LT(last, first / 2) << "loss " << first << " -> " << last;
  for (const auto& [key, p] : model.parameters()) EXPECT_TRUE(on_device(p)) << key;
  ASSERT_GT(warm.device_active_bytes, 0u) << "nothing ran on the GPU";
  EXPECT_EQ(end.device_active_bytes, warm.device_active_bytes);
  EXPECT_EQ(end.device_reserved_bytes, warm.device_reserved_bytes);
  EXPECT_EQ(end.device_cache_bytes, warm.device_cache_bytes);
  EXPECT_EQ(end.device_peak_bytes, window.device_peak_bytes);
  EXPECT_EQ(end.active_bytes, warm.active_bytes);
  EXPECT_EQ(end.peak_bytes, window.peak_bytes);
}

}  // namespace
}  // namespace kiln
