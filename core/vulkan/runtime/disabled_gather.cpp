// The gather family of the gpu facade (core/vulkan/gpu_gather.h) in a build without the Vulkan
// backend (KILN_VULKAN=OFF): each call throws DeviceError, as runtime/disabled.cpp does.
#include "kiln/core/vulkan/gpu_gather.h"
#include "kiln/core/vulkan/gpu_scatter.h"

namespace kiln::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw DeviceError::of(what, "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}
}  // namespace

void take(const Array&, const Array&, int, Array&) { no_gpu("gpu take"); }
void gather(const Array&, std::span<const Array>, Array&) { no_gpu("gpu gather"); }
void scatter_add(const Array&, const Array&, const Array&, int, Array&) { no_gpu("gpu scatter_add"); }
void scatter_add_nd(const Array&, const Array&, std::span<const Array>, Array&) { no_gpu("gpu scatter_add"); }
void scatter_reduce_nd(const Array&, const Array&, std::span<const Array>, ScatterOp, Array&) {
  no_gpu("gpu scatter");
}
void put_along_axis(const Array&, const Array&, const Array&, int, Array&) { no_gpu("gpu put_along_axis"); }
void concatenate(std::span<const Array>, int, Array&) { no_gpu("gpu concatenate"); }
void pad(const Array&, const Array&, const Shape&, Array&) { no_gpu("gpu pad"); }
void slice_update(const Array&, const Array&, const Shape&, const Shape&, Array&) {
  no_gpu("gpu slice_update");
}

}  // namespace kiln::gpu
