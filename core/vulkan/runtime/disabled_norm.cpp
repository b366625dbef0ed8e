// The fused normalizations of the gpu facade in a build without the Vulkan backend
// (KILN_VULKAN=OFF): they throw DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_norm.h"

namespace kiln::gpu {

void norm_rows(uint8_t, double, const Array&, const Array*, const Array*, Array&) {
  throw DeviceError::of("gpu norm_rows", "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}

void norm_rows_vjp(uint8_t, double, const Array&, const Array*, const Array&, Array&, Array*) {
  throw DeviceError::of("gpu norm_rows_vjp", "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}

}  // namespace kiln::gpu
