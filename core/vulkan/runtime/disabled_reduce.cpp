// The reduction and indexing calls of the gpu facade in a build without the Vulkan backend
// (KILN_VULKAN=OFF): each throws DeviceError, as runtime/disabled.cpp does for the others.
#include "kiln/core/vulkan/gpu.h"

namespace kiln::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw DeviceError::of(what, "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}
}  // namespace

void reduce(uint8_t, const Array&, std::span<const int>, Array&) { no_gpu("gpu reduce"); }
void arg_reduce(bool, const Array&, int, Array&) { no_gpu("gpu arg_reduce"); }
void take_along_axis(const Array&, const Array&, int, Array&) { no_gpu("gpu take_along_axis"); }
void scatter_add_along_axis(const Array&, const Array&, const Array&, int, Array&) {
  no_gpu("gpu scatter_add_along_axis");
}

}  // namespace kiln::gpu
