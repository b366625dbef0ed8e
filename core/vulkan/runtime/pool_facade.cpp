// gpu::max_pool2d and max_pool2d_scatter (core/vulkan/gpu_pool.h) on the max-pooling kernels
// (pool_kernels.h): the arrays' shapes become the pooling's sizes, their storage device views read
// in place whatever their strides.
#include "kiln/core/vulkan/gpu_pool.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/pool_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

void check_rank(const Array& a, const char* what, const char* op) {
  if (a.ndim() != 4)
    throw ShapeError::of(op, "operands must have 4 dims (N, C, H, W)", "{} is {}", what,
                         shape_str(a.shape()));
}

vk::PoolDims dims(const Shape& x, const Shape& pooled, const PoolOptions& o) {
  return {.n = x[0],
          .c = x[1],
          .h = x[2],
          .w = x[3],
          .oh = pooled[2],
          .ow = pooled[3],
          .kernel = o.kernel,
          .stride = o.stride,
          .padding = o.padding,
          .dilation = o.dilation};
}

}  // namespace

void max_pool2d(const Array& x, const Array* src, const PoolOptions& o, Array& out) {
  constexpr const char* op = "gpu max_pool2d";
  check_rank(x, "input", op);
  check_rank(out, "output", op);
  if (src) check_rank(*src, "src", op);
  allocate(out);
  if (out.size() == 0) return;
  const vk::GpuView sv = src ? vk::input_view(*src) : vk::GpuView{};
  vk::record_max_pool(vk::thread_recorder(), dims(x.shape(), out.shape(), o), vk::input_view(x),
                      src ? &sv : nullptr, vk::array_out_view(out, out.shape()));
}

void max_pool2d_scatter(const Array& x, const Array& g, const PoolOptions& o, Array& out) {
  constexpr const char* op = "gpu max_pool2d_scatter";
  check_rank(x, "input", op);
  check_rank(g, "gradient", op);
  check_rank(out, "output", op);
  allocate(out);
  if (out.size() == 0) return;
  vk::record_max_pool_scatter(vk::thread_recorder(), dims(x.shape(), g.shape(), o), vk::array_view(x),
                              vk::array_view(g), vk::array_out_view(out, out.shape()));
}

}  // namespace kiln::gpu
