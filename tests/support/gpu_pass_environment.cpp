// Linked into every test executable of tests/CMakeLists.txt's loop (not part of kiln_test_support,
// whose unreferenced objects the linker would drop). Under KILN_DEVICE=gpu (the gpu. ctest pass) it
// checks once, before any test, that a GPU exists: without one the whole run is skipped, or fails
// when KILN_REQUIRE_VULKAN=1 (CI, which must not pass without having run on the GPU).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <cstring>

#include "kiln/core/vulkan/gpu.h"

namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

class GpuPassEnvironment final : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!env_is("KILN_DEVICE", "gpu")) return;
    if (kiln::is_available(kiln::Device::gpu)) return;
    const std::string reason = kiln::gpu::unavailable_reason();
    if (env_is("KILN_REQUIRE_VULKAN", "1")) {
      // Not FAIL(): gtest marks every test skipped after a fatal failure here, and ctest reports
      // a run that prints "[  SKIPPED ]" as skipped. Each test then fails on its first op.
      ADD_FAILURE() << "KILN_DEVICE=gpu and KILN_REQUIRE_VULKAN=1 but no usable GPU: " << reason;
      return;
    }
    // gtest prints a skip from a global environment without its "[  SKIPPED ]" marker, which is
    // what ctest looks for (gtest_discover_tests' SKIP_REGULAR_EXPRESSION): name it, so that ctest
    // reports the run as skipped rather than passed.
    GTEST_SKIP() << "[  SKIPPED ] KILN_DEVICE=gpu but no usable GPU: " << reason;
  }
};

const auto* const registered = ::testing::AddGlobalTestEnvironment(new GpuPassEnvironment);

}  // namespace
