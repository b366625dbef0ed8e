// The scan call of the gpu facade in a build without the Vulkan backend (KILN_VULKAN=OFF): it
// throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_scan.h"

namespace kiln::gpu {

void scan(ScanKind, const Array&, int, bool, bool, Array&) {
  throw DeviceError::of("gpu scan", "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}

}  // namespace kiln::gpu
