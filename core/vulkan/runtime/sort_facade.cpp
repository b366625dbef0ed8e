// gpu::sort, gpu::argsort and gpu::argtopk (core/vulkan/gpu_sort.h) on the sort kernels
// (sort_kernels.h), which read the input through its strides: no copy moves the axis last.
#include "kiln/core/vulkan/gpu_sort.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/sort_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

void record(const Array& x, int axis, bool descending, vk::SortOutput what, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::record_sort_along_axis(vk::thread_recorder(), vk::array_view(x), axis, descending, what,
                             vk::array_out_view(out, out.shape()));
}

}  // namespace

void sort(const Array& x, int axis, Array& out) { record(x, axis, false, vk::SortOutput::values, out); }

void argsort(const Array& x, int axis, Array& out) { record(x, axis, false, vk::SortOutput::indices, out); }

void argtopk(const Array& x, int k, int axis, Array& out) {
  if (axis < 0 || axis >= x.ndim() || k <= 0 || k > x.shape()[static_cast<size_t>(axis)] ||
      out.shape()[static_cast<size_t>(axis)] != k)
    throw ValueError::of("gpu argtopk", "k must satisfy 0 < k <= the axis length and match the output",
                         "k {}, shape {}, axis {}", k, shape_str(x.shape()), axis);
  record(x, axis, true, vk::SortOutput::indices, out);
}

}  // namespace kiln::gpu
