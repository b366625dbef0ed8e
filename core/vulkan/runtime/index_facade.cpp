// gpu::take_along_axis and gpu::scatter_add_along_axis (core/vulkan/gpu.h) on the along-axis
// indexing kernels. Out-of-range indices: the primitives check indices held on the host before
// recording (index.cpp, throwing as the CPU does); indices computed on the device in the same
// eval cannot be read before the submit, so the kernels read 0 for them and drop their updates.
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/dtype_adapter.h"
#include "kiln/core/vulkan/runtime/gather_kernels.h"
#include "kiln/core/vulkan/runtime/index_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;

void take_along_axis(const Array& x, const Array& indices, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  // Indices of any integer dtype (int16 and uint16 widened); x's values move by their size.
  vk::Recorder& r = vk::thread_recorder();
  vk::record_take_along_axis(r, vk::array_view(x),
                             vk::kernel_input(r, vk::array_view(indices), vk::KernelUse::arithmetic), axis,
                             vk::array_out_view(out, out.shape()));
}

void scatter_add_along_axis(const Array& x, const Array& indices, const Array& updates, int axis,
                            Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  if (indices.size() == 0) {  // nothing to add: a copy
    vk::record_move(vk::thread_recorder(), vk::array_view(x), vk::array_out_view(out, out.shape()));
    return;
  }
  vk::Recorder& r = vk::thread_recorder();
  const auto use = vk::KernelUse::arithmetic;
  const vk::KernelOutput o(r, vk::array_out_view(out, out.shape()), use);
  vk::record_scatter_add_along_axis(r, vk::kernel_input(r, vk::array_view(x), use),
                                    vk::kernel_input(r, vk::array_view(indices), use),
                                    vk::kernel_input(r, vk::array_view(updates), use), axis, o.view());
  o.finish(r);
}

}  // namespace kiln::gpu
