// gpu::take_along_axis and gpu::scatter_add_along_axis (core/vulkan/gpu.h) on the along-axis
// indexing kernels. Out-of-range indices: the primitives check indices held on the host before
// recording (index.cpp, throwing as the CPU does); indices computed on the device in the same
// eval cannot be read before the submit, so the kernels read 0 for them and drop their updates.
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/index_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;

void take_along_axis(const Array& x, const Array& indices, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::record_take_along_axis(vk::thread_recorder(), vk::array_view(x), vk::array_view(indices), axis,
                             vk::array_out_view(out, out.shape()));
}

void scatter_add_along_axis(const Array& x, const Array& indices, const Array& updates, int axis,
                            Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  if (indices.size() == 0) {  // nothing to add: a copy
    vk::record_copy(vk::thread_recorder(), vk::array_view(x), vk::array_out_view(out, out.shape()));
    return;
  }
  vk::record_scatter_add_along_axis(vk::thread_recorder(), vk::array_view(x), vk::array_view(indices),
                                    vk::array_view(updates), axis, vk::array_out_view(out, out.shape()));
}

}  // namespace kiln::gpu
