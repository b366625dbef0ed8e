// gpu::scan (core/vulkan/gpu_scan.h) on the scan kernels. The input is seen as an
// [outer, n, inner] block (the axes before the scanned one merged, then it, then the axes after
// it merged), read in place with its strides; only when those axes do not merge is it copied into
// a row-major temporary first. The output is written row-major directly: no transposes.
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_scan.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/dtype_adapter.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/scan_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;

void scan(ScanKind kind, const Array& x, int axis, bool reverse, bool inclusive, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const auto use =
      kind == ScanKind::max || kind == ScanKind::min ? vk::KernelUse::ordered : vk::KernelUse::arithmetic;
  vk::GpuView v = vk::kernel_input(r, vk::array_view(x), use);
  const size_t ax = static_cast<size_t>(axis), rank = v.shape.size();
  const int64_t outer = vk::shape_product(v.shape, 0, ax), n = v.shape[ax],
                inner = vk::shape_product(v.shape, ax + 1, rank);
  std::optional<int64_t> outer_stride = vk::merged_stride(v, 0, ax);
  std::optional<int64_t> inner_stride = vk::merged_stride(v, ax + 1, rank);
  int64_t axis_stride = v.strides[ax];
  if (!outer_stride || !inner_stride) {
    vk::GpuView dense = vk::GpuView::contiguous(
        r.context().allocator().allocate(static_cast<size_t>(x.size()) * size_of(v.dtype)), v.dtype, v.shape);
    vk::record_elementwise(r, {.inputs = {v.dtype}, .compute = v.dtype, .out = v.dtype, .expr = "x0"},
                           {&v, 1}, dense);
    v = std::move(dense);
    outer_stride = n * inner;
    inner_stride = 1;
    axis_stride = inner;
  }
  v.shape = {outer, n, inner};
  v.strides = {*outer_stride, axis_stride, *inner_stride};
  constexpr vk::ScanOp kOps[] = {vk::ScanOp::sum, vk::ScanOp::prod, vk::ScanOp::max, vk::ScanOp::min,
                                 vk::ScanOp::logaddexp};
  const vk::ScanParams params{kOps[static_cast<int>(kind)], reverse, inclusive};
  const vk::KernelOutput o(r, vk::array_out_view(out, v.shape), use);
  vk::record_scan(r, params, v, o.view());
  o.finish(r);
}

}  // namespace kiln::gpu
