#pragma once
// The fixture of the Vulkan tests: the process-wide context, or a skip naming the reason when there
// is no device. With KILN_REQUIRE_VULKAN=1 (CI) a missing device fails the test instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/memory.h"

namespace kiln::detail::vk::testing {

inline bool vulkan_required() {
  const char* v = std::getenv("KILN_REQUIRE_VULKAN");
  return v && std::strcmp(v, "1") == 0;
}

class VulkanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Availability a = availability();
    if (!a.available) {
      if (vulkan_required()) FAIL() << "KILN_REQUIRE_VULKAN=1 but no Vulkan device: " << a.reason;
      GTEST_SKIP() << "no Vulkan device: " << a.reason;
    }
    ctx_ = &context();
  }
  Context& ctx() { return *ctx_; }

  /// A device buffer holding `values`.
  template <class T>
  BufferPtr upload_vector(const std::vector<T>& values) {
    BufferPtr b = ctx().allocator().allocate(values.size() * sizeof(T));
    upload(ctx(), b, values.data(), values.size() * sizeof(T));
    return b;
  }
  template <class T>
  std::vector<T> read_vector(const BufferPtr& b, size_t n) {
    std::vector<T> out(n);
    readback(ctx(), b, out.data(), n * sizeof(T));
    return out;
  }

 private:
  Context* ctx_ = nullptr;
};

/// n uniform floats in [lo, hi) from a fixed seed.
inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace kiln::detail::vk::testing
