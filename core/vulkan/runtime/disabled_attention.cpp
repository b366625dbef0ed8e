// The fused attention of the gpu facade in a build without the Vulkan backend (KILN_VULKAN=OFF):
// it throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_attention.h"

namespace kiln::gpu {

void attention_forward(double, bool, const Array&, const Array&, const Array&, const Array*, Array&, Array&) {
  throw DeviceError::of("gpu attention_forward", "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}

void attention_backward(double, bool, const Array&, const Array&, const Array&, const Array*, const Array&,
                        const Array&, const Array&, Array&, Array&, Array&) {
  throw DeviceError::of("gpu attention_backward", "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}

}  // namespace kiln::gpu
