// gpu::norm_rows and norm_rows_vjp (core/vulkan/gpu_norm.h) on the normalization kernels
// (norm_kernels.h): an array becomes a [rows, n] view read in place with its strides (its leading
// dims merged); only when those dims do not merge is it copied into a row-major temporary first.
#include <optional>

#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_norm.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/norm_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

using detail::RowNorm;

RowNorm to_kind(uint8_t kind, const char* op) {
  if (kind > static_cast<uint8_t>(RowNorm::rms_norm)) throw ValueError::of(op, "unknown kind", "{}", kind);
  return static_cast<RowNorm>(kind);
}

vk::GpuView as_rows(vk::Recorder& r, const Array& x, const char* op) {
  if (x.ndim() == 0) throw ShapeError::of(op, "needs at least one dimension", "got a 0-d array");
  vk::GpuView v = vk::array_view(x);
  const size_t last = v.shape.size() - 1;
  const int64_t rows = vk::shape_product(v.shape, 0, last), n = v.shape[last];
  std::optional<int64_t> row_stride = vk::merged_stride(v, 0, last);
  int64_t col_stride = v.strides[last];
  if (!row_stride) {
    vk::GpuView dense = vk::GpuView::contiguous(
        r.context().allocator().allocate(static_cast<size_t>(x.nbytes())), x.dtype(), v.shape);
    vk::record_elementwise(r, {.inputs = {x.dtype()}, .compute = x.dtype(), .out = x.dtype(), .expr = "x0"},
                           {&v, 1}, dense);
    v = std::move(dense);
    row_stride = n;
    col_stride = 1;
  }
  v.shape = {rows, n};
  v.strides = {*row_stride, col_stride};
  return v;
}

}  // namespace

void norm_rows(uint8_t kind, double eps, const Array& x, const Array* weight, const Array* bias, Array& out) {
  constexpr const char* op = "gpu norm_rows";
  const RowNorm k = to_kind(kind, op);
  allocate(out);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView xv = as_rows(r, x, op);
  const std::optional<vk::GpuView> wv = weight ? std::optional(vk::array_view(*weight)) : std::nullopt;
  const std::optional<vk::GpuView> bv = bias ? std::optional(vk::array_view(*bias)) : std::nullopt;
  vk::record_norm_rows(r, k, eps, xv, wv ? &*wv : nullptr, bv ? &*bv : nullptr,
                       vk::array_out_view(out, xv.shape));
}

void norm_rows_vjp(uint8_t kind, double eps, const Array& x, const Array* weight, const Array& g, Array& dx,
                   Array* gxhat) {
  constexpr const char* op = "gpu norm_rows_vjp";
  const RowNorm k = to_kind(kind, op);
  allocate(dx);
  if (gxhat) allocate(*gxhat);
  if (dx.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  const vk::GpuView xv = as_rows(r, x, op), gv = as_rows(r, g, op);
  const std::optional<vk::GpuView> wv = weight ? std::optional(vk::array_view(*weight)) : std::nullopt;
  const std::optional<vk::GpuView> gx =
      gxhat ? std::optional(vk::array_out_view(*gxhat, xv.shape)) : std::nullopt;
  vk::record_norm_rows_vjp(r, k, eps, xv, wv ? &*wv : nullptr, gv, vk::array_out_view(dx, xv.shape),
                           gx ? &*gx : nullptr);
}

}  // namespace kiln::gpu
