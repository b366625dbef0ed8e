// gpu::reduce and gpu::arg_reduce (core/vulkan/gpu.h) on the row-reduction kernels: the reduced
// axes go last, the kept ones form the rows and the reduced ones the columns; a copy into a
// row-major temporary makes them so when the view's strides do not. Reductions over leading or
// middle axes whose kept axes end contiguous read columns instead (record_reduce_cols).
#include <optional>

#include "kiln/core/cpu/reduce.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/dtype_adapter.h"
#include "kiln/core/vulkan/runtime/reduce_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

// An 8-byte view as uint32 words (a trailing dim of 2): record_copy moves 4-byte words only.
vk::GpuView as_words(const vk::GpuView& v) {
  vk::GpuView w = v;
  w.dtype = uint32;
  for (int64_t& s : w.strides) s *= 2;
  w.shape.push_back(2);
  w.strides.push_back(1);
  w.offset *= 2;
  return w;
}

// x with `axes` last, as a [rows, cols] view with dense columns (copied when it is not one; bytes
// may keep strided columns, and are widened to int32 when they need a copy).
vk::GpuView as_rows(vk::Recorder& r, const vk::GpuView& x, std::span<const int> axes) {
  vk::GpuView v = vk::move_axes_to_end(x, axes);
  const size_t kept = v.shape.size() - axes.size();
  const int64_t rows = vk::shape_product(v.shape, 0, kept),
                cols = vk::shape_product(v.shape, kept, v.shape.size());
  std::optional<int64_t> row_stride = vk::merged_stride(v, 0, kept);
  std::optional<int64_t> col_stride = vk::merged_stride(v, kept, v.shape.size());
  // The kernels read bytes (which record_copy cannot move) with any column stride, so they are
  // widened only when the axes do not merge; other dtypes get dense columns for coalesced loads.
  const bool bytes = size_of(x.dtype) == 1;
  const int64_t size = vk::numel(x.shape);
  const bool cols_ok = cols <= 1 || (col_stride && (*col_stride == 1 || (bytes && *col_stride > 0)));
  if (size > 0 && (!row_stride || *row_stride < 0 || !cols_ok)) {
    // Bytes are widened to int32 (sign-extended for int8), which the kernels reduce to the same
    // values.
    const Dtype dense_t = bytes ? int32 : x.dtype;
    vk::GpuView dense = vk::GpuView::contiguous(
        r.context().allocator().allocate(static_cast<size_t>(size) * size_of(dense_t)), dense_t, v.shape);
    if (bytes) {
      vk::record_widen_bytes(r, v, dense);
    } else if (size_of(x.dtype) == 8) {
      vk::record_copy(r, as_words(v), as_words(dense));
    } else {
      vk::record_copy(r, v, dense);
    }
    v = std::move(dense);
    row_stride = cols;
    col_stride = 1;
  }
  v.shape = {rows, cols};
  v.strides = {row_stride.value_or(cols), cols <= 1 ? 1 : col_stride.value_or(1)};
  return v;
}

// x with `axes` last as a [blocks, rows, cols] view for record_reduce_cols when the reduced axes
// do not step by 1 and the kept ones end in a contiguous run of at least two elements: kept dims
// [0, j) form the blocks, the reduced ones the rows, kept dims [j, kept) the (dense) columns.
std::optional<vk::GpuView> as_columns(const vk::GpuView& x, std::span<const int> axes) {
  vk::GpuView v = vk::move_axes_to_end(x, axes);
  const size_t n = v.shape.size(), kept = n - axes.size();
  if (vk::numel(x.shape) == 0 || kept == 0) return std::nullopt;
  const std::optional<int64_t> row_stride = vk::merged_stride(v, kept, n);
  if (vk::shape_product(v.shape, kept, n) <= 1 || !row_stride || *row_stride == 1 || *row_stride < 0)
    return std::nullopt;
  // The longest run of kept dims ending last that steps by 1.
  size_t j = kept;
  while (j > 0 && vk::merged_stride(v, j - 1, kept) == std::optional<int64_t>(1)) --j;
  while (j < kept && v.shape[j] == 1) ++j;  // size-1 dims belong with the blocks
  const int64_t cols = vk::shape_product(v.shape, j, kept);
  const std::optional<int64_t> block_stride = vk::merged_stride(v, 0, j);
  if (cols < 2 || !block_stride || *block_stride < 0) return std::nullopt;
  v.shape = {vk::shape_product(v.shape, 0, j), vk::shape_product(v.shape, kept, n), cols};
  v.strides = {*block_stride, *row_stride, 1};
  return v;
}

}  // namespace

void reduce(uint8_t kind, const Array& x, std::span<const int> axes, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const auto k = static_cast<detail::ReduceKind>(kind);
  const auto use = k == detail::ReduceKind::max || k == detail::ReduceKind::min ? vk::KernelUse::ordered
                                                                                : vk::KernelUse::arithmetic;
  const vk::GpuView in = vk::kernel_input(r, vk::array_view(x), use);
  const vk::KernelOutput o(r, vk::array_out_view(out, {out.size()}), use);
  if (std::optional<vk::GpuView> columns = as_columns(in, axes))
    vk::record_reduce_cols(r, k, *columns, o.view());
  else
    vk::record_reduce_rows(r, k, as_rows(r, in, axes), o.view());
  o.finish(r);
}

void arg_reduce(bool is_max, const Array& x, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  const int axes[] = {axis};
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView in = vk::kernel_input(r, vk::array_view(x), vk::KernelUse::ordered);
  vk::record_arg_reduce_rows(r, is_max, as_rows(r, in, axes), vk::array_out_view(out, {out.size()}));
}

}  // namespace kiln::gpu
