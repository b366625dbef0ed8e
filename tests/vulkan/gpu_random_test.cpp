// The random primitives on the GPU give the CPU's numbers bit for bit: threefry-2x32 over the same
// counters, the same float and bounded-integer conversions (shaders/common/random.glsl), single
// keys and batches of keys (vmap), every dtype. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/core/ops/random_primitives.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuRandom : public detail::vk::testing::VulkanTest {
 protected:
  bool device_has(Dtype t) {
    if (t == int64) return ctx().caps().int64;
    if (t == float64) return ctx().caps().float64;
    return true;
  }
};

// The raw bytes of an evaluated array (bitwise comparison, NaN-free or not).
std::vector<unsigned char> bytes_of(const Array& a) {
  const Array c = contiguous(a, Device::cpu);
  c.eval();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  return {p, p + c.nbytes()};
}

void expect_bitwise(const Array& gpu, const Array& cpu, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const auto g = bytes_of(gpu), c = bytes_of(cpu);
  size_t first = 0;
  while (first < g.size() && g[first] == c[first]) ++first;
  EXPECT_EQ(first, g.size()) << what << ": first differing byte " << first << " of " << g.size();
}

TEST_F(GpuRandom, BitsAndKeysMatchTheCpu) {
  const Array key = random::key(20261123);
  for (const Shape& shape : std::vector<Shape>{{}, {1}, {7}, {300, 17}, {2, 3, 4}}) {
    expect_bitwise(random::bits(shape, key, Device::gpu), random::bits(shape, key, Device::cpu),
                   "bits " + shape_str(shape));
  }
  for (int num : {1, 2, 5, 1001})
    expect_bitwise(random::split(key, num, Device::gpu), random::split(key, num, Device::cpu),
                   "split " + std::to_string(num));
}

TEST_F(GpuRandom, UniformMatchesTheCpuInEveryFloatDtype) {
  const Array key = random::key(7);
  struct Range {
    double low, high;
  };
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    for (Range r : {Range{0.0, 1.0}, Range{-3.5, 2.25}, Range{1e-3, 1e-3 + 1e-6}, Range{-1e4, 1e4}}) {
      const std::string what = fmt::format("uniform {} [{}, {})", dtype_name(t), r.low, r.high);
      if (!device_has(t)) {
        EXPECT_THROW(random::uniform({10}, key, r.low, r.high, t, Device::gpu).eval(), NotImplemented)
            << what;
        continue;
      }
      const Array g = random::uniform({513, 3}, key, r.low, r.high, t, Device::gpu);
      expect_bitwise(g, random::uniform({513, 3}, key, r.low, r.high, t, Device::cpu), what);
      // Inside [low, high) however the rounding went.
      const std::vector<double> v = astype(g, float64, Device::cpu).to_vector<double>();
      EXPECT_GE(*std::min_element(v.begin(), v.end()),
                static_cast<double>(astype(Array(r.low), t).item<float>()))
          << what;
      EXPECT_LT(*std::max_element(v.begin(), v.end()), r.high) << what;
    }
  }
}

TEST_F(GpuRandom, NormalAndBernoulliMatchTheCpu) {
  // Composites of uniform and elementwise ops: equal draws, then the same (float32) math.
  const Array key = random::key(99);
  const Array g = random::normal({4096}, key, 1.0, 2.0, float32, Device::gpu);
  const Array c = random::normal({4096}, key, 1.0, 2.0, float32, Device::cpu);
  const std::vector<float> gv = g.to_vector<float>(), cv = c.to_vector<float>();
  for (size_t i = 0; i < gv.size(); ++i) ASSERT_NEAR(gv[i], cv[i], 1e-5f * (1.0f + std::abs(cv[i]))) << i;
  expect_bitwise(random::bernoulli({1000}, key, 0.3, Device::gpu),
                 random::bernoulli({1000}, key, 0.3, Device::cpu), "bernoulli");
}

TEST_F(GpuRandom, RandintMatchesTheCpuInEveryIntegerDtype) {
  const Array key = random::key(31337);
  struct Range {
    int64_t low, high;
  };
  for (Dtype t : {uint8, int8, int32, uint32, int64}) {
    std::vector<Range> ranges{{0, 10}, {0, 2}, {5, 6}};
    if (t == int8 || t == int32 || t == int64) ranges.push_back({-100, 27});
    if (t == uint32) ranges.push_back({0, 4294967295LL});
    if (t == int32) ranges.push_back({-2147483648LL, 2147483647LL});
    if (t == int64) ranges.push_back({-(int64_t{1} << 40), (int64_t{1} << 52) + 12345});
    for (Range r : ranges) {
      const std::string what = fmt::format("randint {} [{}, {})", dtype_name(t), r.low, r.high);
      if (!device_has(t)) {
        EXPECT_THROW(random::randint({10}, key, r.low, r.high, t, Device::gpu).eval(), NotImplemented)
            << what;
        continue;
      }
      expect_bitwise(random::randint({1000, 3}, key, r.low, r.high, t, Device::gpu),
                     random::randint({1000, 3}, key, r.low, r.high, t, Device::cpu), what);
    }
  }
}

TEST_F(GpuRandom, PermutationMatchesTheCpu) {
  const Array key = random::key(5);
  for (int64_t n : {0, 1, 2, 3, 1000, 16385, 70000}) {
    const Array g = random::permutation(n, key, Device::gpu);
    expect_bitwise(g, random::permutation(n, key, Device::cpu), "permutation " + std::to_string(n));
    std::vector<int32_t> v = g.to_vector<int32_t>();
    std::sort(v.begin(), v.end());
    std::vector<int32_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(v, iota) << n;
  }
}

TEST_F(GpuRandom, BatchesOfKeysUnderVmapMatchTheCpu) {
  // vmap gives the primitives a batch of keys: row-major, and a strided view (a transpose).
  const Array keys = random::split(random::key(11), 6, Device::cpu);
  const Array strided = transpose(contiguous(transpose(keys)));
  strided.eval();
  ASSERT_FALSE(strided.row_contiguous());
  auto draw = [](Device d) {
    return [d](const std::vector<Array>& in) -> std::vector<Array> {
      return {random::uniform({5, 7}, in[0], 0.0, 1.0, float32, d),
              random::randint({33}, in[0], -5, 5, int32, d), random::permutation(9, in[0], d),
              random::bits({4}, in[0], d)};
    };
  };
  const auto c = vmap(draw(Device::cpu))({keys});
  for (const Array& batch : {keys, strided}) {
    const auto g = vmap(draw(Device::gpu))({batch});
    ASSERT_EQ(g.size(), c.size());
    for (size_t k = 0; k < g.size(); ++k) expect_bitwise(g[k], c[k], "output " + std::to_string(k));
  }
}

TEST_F(GpuRandom, DefaultDeviceDrawsOnTheGpu) {
  const Array key = random::key(3);
  set_default_device(Device::gpu);
  const Array g = random::uniform({64, 32}, key, -0.5, 0.5);
  const Array k = random::next_key();
  set_default_device(Device::cpu);
  expect_bitwise(g, random::uniform({64, 32}, key, -0.5, 0.5), "default device");
  EXPECT_EQ(k.shape(), (Shape{2}));
}

}  // namespace
}  // namespace kiln
