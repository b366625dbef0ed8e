// The convolution calls of the gpu facade in a build without the Vulkan backend (KILN_VULKAN=OFF):
// each throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_conv.h"

namespace kiln::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw DeviceError::of(what, "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}
}  // namespace

void conv2d(const Array&, const Array&, const ConvOptions&, Array&) { no_gpu("gpu conv2d"); }
void conv2d_grad_input(const Array&, const Array&, const ConvOptions&, Array&) {
  no_gpu("gpu conv2d grad_input");
}
void conv2d_grad_weight(const Array&, const Array&, const ConvOptions&, Array&) {
  no_gpu("gpu conv2d grad_weight");
}

}  // namespace kiln::gpu
