// The gather family of the gpu facade (core/vulkan/gpu_gather.h, gpu_scatter.h) on the gather
// kernels: indices become dense uint32 rows (index_rows.comp), operands become [P, N, Q] blocks (a
// dense copy when their dims do not merge), and the joins are moves into views of their output.
//
// Scatter-adds are deterministic: the rows are stably radix-sorted on the device and each output
// element adds its updates in index order, as the CPU does, so GPU and CPU agree bit for bit and
// two runs never differ. Float atomics would skip the sort (two to three passes over the indices,
// which are small next to the [rows, features] updates of an embedding gradient) but would add in
// a different order each run, and lavapipe, float16, bfloat16 and 64-bit types lack them. The
// other scatters (set, max, min, prod) walk the same sorted segments.
#include <optional>

#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_gather.h"
#include "kiln/core/vulkan/gpu_scatter.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/dtype_adapter.h"
#include "kiln/core/vulkan/runtime/gather_kernels.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

// v as a [P, N, Q] block: dims [0, b), [b, e) and [e, rank) each merged into one; copied to dense
// storage first when their strides do not merge.
vk::GpuView block(vk::Recorder& r, vk::GpuView v, size_t b, size_t e) {
  const size_t rank = v.shape.size();
  const Shape shape{vk::shape_product(v.shape, 0, b), vk::shape_product(v.shape, b, e),
                    vk::shape_product(v.shape, e, rank)};
  if (vk::numel(v.shape) == 0) return {v.buffer, v.dtype, shape, {0, 0, 0}, 0};
  auto p = vk::merged_stride(v, 0, b), n = vk::merged_stride(v, b, e), q = vk::merged_stride(v, e, rank);
  if (!p || !n || !q) {
    vk::GpuView dense = vk::GpuView::contiguous(
        r.context().allocator().allocate(static_cast<size_t>(vk::numel(v.shape) * size_of(v.dtype))), v.dtype,
        v.shape);
    vk::record_move(r, v, dense);
    v = std::move(dense);
    p = vk::merged_stride(v, 0, b);
    n = vk::merged_stride(v, b, e);
    q = vk::merged_stride(v, e, rank);
  }
  v.shape = shape;
  v.strides = {*p, *n, *q};
  return v;
}

// The dims of x before `first` and from `last` on, with `middle` between: an output block's shape.
Shape block_shape(const Array& x, int first, int last, int64_t middle) {
  return {vk::shape_product(x.shape(), 0, static_cast<size_t>(first)), middle,
          vk::shape_product(x.shape(), static_cast<size_t>(last), x.shape().size())};
}

// out = x (a copy; what a scatter without updates leaves).
void copy_into(vk::Recorder& r, const Array& x, const Array& out) {
  vk::record_move(r, vk::array_view(x), vk::array_out_view(out, out.shape()));
}

// out = x with `updates` (a [P, J, Q] block after merging dims [first, first + index dims)) added
// at the rows `rows` picks from x's dims [first, last).
// With `combine`, the updates combine by it instead of adding.
void scatter_rows(vk::Recorder& r, const Array& x, const vk::BufferPtr& rows, int64_t j_count,
                  const Array& updates, int first, int last, int index_ndim, Array& out,
                  std::optional<vk::RowCombine> combine = std::nullopt) {
  const int64_t n = vk::shape_product(x.shape(), static_cast<size_t>(first), static_cast<size_t>(last));
  const vk::SortedRows sorted = vk::record_sort_rows(r, rows, j_count, n);
  // A set moves elements by their size; the others run per-dtype kernels (dtype_adapter.h).
  const bool moves = combine == vk::RowCombine::set;
  const auto use = combine == vk::RowCombine::max || combine == vk::RowCombine::min
                       ? vk::KernelUse::ordered
                       : vk::KernelUse::arithmetic;
  auto in = [&](const Array& a) {
    return moves ? vk::array_view(a) : vk::kernel_input(r, vk::array_view(a), use);
  };
  const vk::GpuView xb = block(r, in(x), static_cast<size_t>(first), static_cast<size_t>(last));
  const vk::GpuView ub =
      block(r, in(updates), static_cast<size_t>(first), static_cast<size_t>(first + index_ndim));
  const vk::GpuView out_view = vk::array_out_view(out, xb.shape);
  if (moves) return vk::record_scatter_reduce_rows(r, xb, sorted, ub, *combine, out_view);
  const vk::KernelOutput o(r, out_view, use);
  if (combine)
    vk::record_scatter_reduce_rows(r, xb, sorted, ub, *combine, o.view());
  else
    vk::record_scatter_add_rows(r, xb, sorted, ub, o.view());
  o.finish(r);
}

vk::RowCombine row_combine(ScatterOp op) {
  switch (op) {
    case ScatterOp::set:
      return vk::RowCombine::set;
    case ScatterOp::max:
      return vk::RowCombine::max;
    case ScatterOp::min:
      return vk::RowCombine::min;
    default:
      return vk::RowCombine::prod;
  }
}

// Indices of any integer dtype, as the index kernels read them (int16 and uint16 widened).
vk::GpuView index_view(vk::Recorder& r, const Array& a) {
  return vk::kernel_input(r, vk::array_view(a), vk::KernelUse::arithmetic);
}

std::vector<vk::GpuView> views(vk::Recorder& r, std::span<const Array> arrays) {
  std::vector<vk::GpuView> v;
  for (const Array& a : arrays) v.push_back(index_view(r, a));
  return v;
}

}  // namespace

void take(const Array& x, const Array& indices, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView idx = index_view(r, indices);
  const int64_t n = x.shape(axis);
  const vk::BufferPtr rows = vk::record_index_rows(r, {&idx, 1}, {&n, 1});
  const vk::GpuView xb =
      block(r, vk::array_view(x), static_cast<size_t>(axis), static_cast<size_t>(axis) + 1);
  vk::record_gather_rows(r, xb, rows, indices.size(),
                         vk::array_out_view(out, block_shape(x, axis, axis + 1, indices.size())));
}

void gather(const Array& x, std::span<const Array> indices, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const int k = static_cast<int>(indices.size());
  const Shape sizes(x.shape().begin(), x.shape().begin() + k);
  const vk::BufferPtr rows = vk::record_index_rows(r, views(r, indices), sizes);
  const vk::GpuView xb = block(r, vk::array_view(x), 0, static_cast<size_t>(k));
  vk::record_gather_rows(r, xb, rows, indices[0].size(),
                         vk::array_out_view(out, block_shape(x, 0, k, indices[0].size())));
}

void scatter_add(const Array& x, const Array& indices, const Array& updates, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  if (indices.size() == 0) return copy_into(r, x, out);
  const vk::GpuView idx = index_view(r, indices);
  const int64_t n = x.shape(axis);
  const vk::BufferPtr rows = vk::record_index_rows(r, {&idx, 1}, {&n, 1});
  scatter_rows(r, x, rows, indices.size(), updates, axis, axis + 1, indices.ndim(), out);
}

void scatter_add_nd(const Array& x, const Array& updates, std::span<const Array> indices, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  if (indices[0].size() == 0) return copy_into(r, x, out);
  const int k = static_cast<int>(indices.size());
  const Shape sizes(x.shape().begin(), x.shape().begin() + k);
  const vk::BufferPtr rows = vk::record_index_rows(r, views(r, indices), sizes);
  scatter_rows(r, x, rows, indices[0].size(), updates, 0, k, indices[0].ndim(), out);
}

void scatter_reduce_nd(const Array& x, const Array& updates, std::span<const Array> indices, ScatterOp op,
                       Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  if (indices[0].size() == 0) return copy_into(r, x, out);
  const int k = static_cast<int>(indices.size());
  const Shape sizes(x.shape().begin(), x.shape().begin() + k);
  const vk::BufferPtr rows = vk::record_index_rows(r, views(r, indices), sizes);
  scatter_rows(r, x, rows, indices[0].size(), updates, 0, k, indices[0].ndim(), out, row_combine(op));
}

void put_along_axis(const Array& x, const Array& indices, const Array& values, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  if (indices.size() == 0) return copy_into(r, x, out);
  const vk::GpuView idx = index_view(r, indices);
  const int64_t n = x.shape(axis);
  // Dense over the indices' shape, which is [P, J, Q] around the axis.
  const vk::BufferPtr rows = vk::record_index_rows(r, {&idx, 1}, {&n, 1});
  const size_t a = static_cast<size_t>(axis);
  vk::record_put_rows(r, block(r, vk::array_view(x), a, a + 1), rows,
                      block(r, vk::array_view(values), a, a + 1),
                      vk::array_out_view(out, block_shape(x, axis, axis + 1, n)));
}

void concatenate(std::span<const Array> inputs, int axis, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView whole = vk::array_out_view(out, out.shape());
  int64_t at = 0;
  for (const Array& x : inputs) {
    if (x.size() > 0) {
      vk::GpuView part = whole;
      part.shape = x.shape();
      part.offset = at * whole.strides[static_cast<size_t>(axis)];
      vk::record_move(r, vk::array_view(x), part);
    }
    at += x.shape(axis);
  }
}

void pad(const Array& x, const Array& value, const Shape& low, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView whole = vk::array_out_view(out, out.shape());
  vk::GpuView fill = vk::array_view(value);  // 0-d: broadcast over the output
  fill.shape = out.shape();
  fill.strides.assign(out.shape().size(), 0);
  vk::record_move(r, fill, whole);
  if (x.size() == 0) return;
  vk::GpuView inner = whole;
  inner.shape = x.shape();
  for (size_t d = 0; d < low.size(); ++d) inner.offset += low[d] * whole.strides[d];
  vk::record_move(r, vk::array_view(x), inner);
}

namespace {

// Gives `out` the device buffer of `x` when nothing else can see x's values: the node only in the
// consumer's input list, its Buffer only in the node, the device memory only in the Buffer and
// in this thread's recording (no other thread's recording or pending submit reads it), and no host
// copy that would go stale. The GPU twin of Array::donate_from (the same rule for traced values),
// which takes host buffers only. A captured program replays its bindings, so nothing is donated
// while capturing.
bool donate_device_buffer(vk::Recorder& r, const Array& x, Array& out) {
  if (r.mode() != vk::Recorder::Mode::submit || x.node_ptr().use_count() != 1) return false;
  const detail::ArrayNode& n = x.node();
  if ((n.tracer && detail::in_trace()) || !n.row_contiguous || n.offset != 0 || n.dtype != out.dtype() ||
      n.size != out.size())
    return false;
  const std::shared_ptr<detail::Buffer>& b = n.buffer;
  if (!b || b.use_count() != 1 || b->external() || b->on_host() || !b->on_device()) return false;
  const vk::BufferPtr& device = b->device();
  if (static_cast<size_t>(device.use_count()) != 1 + r.references(device)) return false;
  // Threads that read x and then let go of it: an acq_rel increment of the counts orders this
  // write after their reads (as Array::donate_from does).
  const std::shared_ptr<detail::ArrayNode> node = x.node_ptr();
  const std::shared_ptr<detail::Buffer> buffer = b;
  detail::set_buffer(out, buffer);
  r.forget_dense_copies(device->id());
  return true;
}

}  // namespace

// In place when x's buffer can be donated (a KV cache written one position per step, linear
// instead of quadratic); otherwise a copy of x and then of the update into its slice.
void slice_update(const Array& x, const Array& update, const Shape& starts, const Shape& steps, Array& out) {
  vk::Recorder& r = vk::thread_recorder();
  const bool in_place = out.size() != 0 && donate_device_buffer(r, x, out);
  if (!in_place) allocate(out);
  if (out.size() == 0) return;
  const vk::GpuView whole = vk::array_out_view(out, out.shape());
  if (!in_place) vk::record_move(r, vk::array_view(x), whole);
  if (update.size() == 0) return;
  vk::GpuView part = whole;
  part.shape = update.shape();
  for (size_t d = 0; d < starts.size(); ++d) {
    part.offset += starts[d] * whole.strides[d];
    part.strides[d] = whole.strides[d] * steps[d];
  }
  vk::record_move(r, vk::array_view(update), part);
}

}  // namespace kiln::gpu
