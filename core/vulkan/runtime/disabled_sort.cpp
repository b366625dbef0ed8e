// The sorting calls of the gpu facade (core/vulkan/gpu_sort.h) in a build without the Vulkan
// backend (KILN_VULKAN=OFF): each throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu_sort.h"

namespace kiln::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw DeviceError::of(what, "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}
}  // namespace

void sort(const Array&, int, Array&) { no_gpu("gpu sort"); }
void argsort(const Array&, int, Array&) { no_gpu("gpu argsort"); }
void argtopk(const Array&, int, int, Array&) { no_gpu("gpu argtopk"); }

}  // namespace kiln::gpu
