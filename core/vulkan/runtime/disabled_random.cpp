// The random calls of the gpu facade (core/vulkan/gpu_random.h) in a build without the Vulkan
// backend (KILN_VULKAN=OFF): each throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_random.h"

namespace kiln::gpu {

void keyed_elementwise_inputs(std::string_view, Dtype, const Array&, int64_t, std::span<const Array>,
                              Array&) {
  throw DeviceError::of("gpu random", "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}

}  // namespace kiln::gpu
