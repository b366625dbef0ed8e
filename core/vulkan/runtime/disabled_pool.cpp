// The pooling calls of the gpu facade in a build without the Vulkan backend (KILN_VULKAN=OFF):
// each throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_pool.h"

namespace kiln::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw DeviceError::of(what, "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}
}  // namespace

void max_pool2d(const Array&, const Array*, const PoolOptions&, Array&) { no_gpu("gpu max_pool2d"); }
void max_pool2d_scatter(const Array&, const Array&, const PoolOptions&, Array&) {
  no_gpu("gpu max_pool2d_scatter");
}

}  // namespace kiln::gpu
