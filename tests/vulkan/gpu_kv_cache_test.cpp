// In-place updates on the GPU: slice_update donates the device buffer of an array nothing else
// holds (the KV cache of a decode loop), copies one that something else holds, and a decode loop
// of models::Gpt on the GPU keeps its cache in one buffer and matches the CPU. Runs on lavapipe
// in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>

#include <vector>

#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;
using GpuInPlace = vk::testing::VulkanTest;

// The device allocation holding a's values: numbered once per allocation, never reused.
uint64_t buffer_of(const Array& a) { return a.node().buffer->device()->id(); }

// A (rows, 6) float32 array computed on the GPU: its only copy is in device memory.
Array on_gpu(int64_t rows, uint64_t seed) {
  Array x = add(test::random_array({rows, 6}, float32, seed, -2, 2), Array(0.0f), Device::gpu);
  x.eval();
  return x;
}

TEST_F(GpuInPlace, SliceUpdateWritesTheBufferOfAnArrayNothingElseHolds) {
  Array x = on_gpu(8, 1);
  std::vector<float> expected = on_gpu(8, 1).to_vector<float>();  // the same values, its own array
  const uint64_t buffer = buffer_of(x);
  for (int64_t row = 0; row < 8; ++row) {
    const Array update = test::random_array({1, 6}, float32, 10 + row, -2, 2);
    const std::vector<float> u = update.to_vector<float>();
    std::copy(u.begin(), u.end(), expected.begin() + row * 6);
    x = slice_update(x, update, {Slice{row, row + 1}}, Device::gpu);
    x.eval();
    EXPECT_EQ(buffer_of(x), buffer) << "row " << row << " was a copy";
  }
  test::expect_close(x, test::values(Array(expected, {8, 6})), 0, 0);
}

TEST_F(GpuInPlace, SliceUpdateCopiesAnArrayThatIsHeldElsewhere) {
  const Array x = on_gpu(4, 2);
  const std::vector<float> before = on_gpu(4, 2).to_vector<float>();
  const Array y = slice_update(x, full({2, 6}, 7.0f), {Slice{1, 3}}, Device::gpu);
  y.eval();
  EXPECT_NE(buffer_of(y), buffer_of(x));
  test::expect_close(x, test::values(Array(before, {4, 6})), 0, 0);  // the held array is unchanged
  std::vector<float> expected = before;
  std::fill(expected.begin() + 6, expected.begin() + 18, 7.0f);
  test::expect_close(y, test::values(Array(expected, {4, 6})), 0, 0);
  // An array read on the host has a host copy that an in-place write would leave stale: copied.
  Array z = on_gpu(4, 3);
  (void)z.to_vector<float>();
  const uint64_t host_read = buffer_of(z);
  z = slice_update(z, full({1, 6}, -1.0f), {Slice{0, 1}}, Device::gpu);
  z.eval();
  EXPECT_NE(buffer_of(z), host_read);
  EXPECT_EQ(z.to_vector<float>()[0], -1.0f);
}

// Within one evaluation: the update of x and a later reader of x see the written values.
TEST_F(GpuInPlace, ReadersAfterAnInPlaceUpdateSeeTheNewValues) {
  Array x = on_gpu(6, 4);
  const std::vector<float> base = on_gpu(6, 4).to_vector<float>();
  x = slice_update(x, full({6, 1}, 3.0f), {Slice{}, Slice{2, 3}}, Device::gpu);
  const Array total = sum(multiply(transpose(x, Device::gpu), Array(2.0f), Device::gpu), false, Device::gpu);
  eval(x, total);
  double expected = 0;
  for (int64_t i = 0; i < 36; ++i) expected += 2.0 * (i % 6 == 2 ? 3.0 : base[i]);
  EXPECT_NEAR(total.item<float>(), expected, 1e-3);
}

TEST_F(GpuInPlace, GptDecodesWithItsCacheInOneBuffer) {
  models::Gpt model({.vocab_size = 13,
                     .context = 40,
                     .d_model = 16,
                     .heads = 2,
                     .layers = 2,
                     .positions = models::GptPositions::rope,
                     .key = random::key(3)});
  const Array x = random::randint({2, 20}, random::key(4), 0, 13);
  const Array full_cpu = model(x);
  std::vector<Array> steps;
  models::GptCache cache;
  uint64_t storage = 0;
  {
    StreamScope gpu(Device::gpu);
    for (int64_t t = 0; t < 20; ++t) {
      const Array logits = model.forward(slice(x, {Slice{}, Slice{t, t + 1}}), cache);
      std::vector<Array> ready = cache.storage();
      ready.push_back(logits);
      eval(ready);
      steps.push_back(logits);
      if (t == 0) storage = buffer_of(cache.storage()[0]);
      if (t > 0) {
        EXPECT_EQ(buffer_of(cache.storage()[0]), storage) << "position " << t << " was a copy";
      }
    }
  }
  EXPECT_EQ(cache.capacity(), 40);  // the context: below kMinCapacity
  test::expect_close(concatenate(steps, 1), test::values(full_cpu), 1e-4, 1e-4);
}

}  // namespace
}  // namespace kiln
