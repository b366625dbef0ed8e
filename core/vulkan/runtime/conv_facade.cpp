// gpu::conv2d, conv2d_grad_input and conv2d_grad_weight (core/vulkan/gpu_conv.h) on the
// convolution kernels (conv_kernels.h): the arrays' shapes become the convolution's sizes, their
// storage device views read in place whatever their strides.
#include "kiln/core/vulkan/gpu_conv.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/conv_kernels.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

void check_rank(const Array& a, const char* what, const char* op) {
  if (a.ndim() != 4)
    throw ShapeError::of(op, "operands must have 4 dims", "{} is {}", what, shape_str(a.shape()));
}

// The sizes of a convolution of x (n, c, h, w) with a weight (o, _, kh, kw) into (_, _, oh, ow).
vk::ConvDims dims(const Shape& x, const Shape& w, const Shape& y, const ConvOptions& o) {
  return {.n = x[0],
          .c = x[1],
          .h = x[2],
          .w = x[3],
          .o = w[0],
          .kh = w[2],
          .kw = w[3],
          .oh = y[2],
          .ow = y[3],
          .stride = o.stride,
          .padding = o.padding,
          .dilation = o.dilation,
          .groups = o.groups};
}

}  // namespace

void conv2d(const Array& x, const Array& w, const ConvOptions& o, Array& y) {
  constexpr const char* op = "gpu conv2d";
  check_rank(x, "input", op);
  check_rank(w, "weight", op);
  check_rank(y, "output", op);
  allocate(y);
  vk::record_conv_forward(vk::thread_recorder(), dims(x.shape(), w.shape(), y.shape(), o), vk::input_view(x),
                          vk::input_view(w), vk::array_out_view(y, y.shape()));
}

void conv2d_grad_input(const Array& gy, const Array& w, const ConvOptions& o, Array& dx) {
  constexpr const char* op = "gpu conv2d grad_input";
  check_rank(gy, "output gradient", op);
  check_rank(w, "weight", op);
  check_rank(dx, "input gradient", op);
  allocate(dx);
  vk::record_conv_grad_input(vk::thread_recorder(), dims(dx.shape(), w.shape(), gy.shape(), o),
                             vk::input_view(gy), vk::input_view(w), vk::array_out_view(dx, dx.shape()));
}

void conv2d_grad_weight(const Array& x, const Array& gy, const ConvOptions& o, Array& dw) {
  constexpr const char* op = "gpu conv2d grad_weight";
  check_rank(x, "input", op);
  check_rank(gy, "output gradient", op);
  check_rank(dw, "weight gradient", op);
  allocate(dw);
  vk::record_conv_grad_weight(vk::thread_recorder(), dims(x.shape(), dw.shape(), gy.shape(), o),
                              vk::input_view(x), vk::input_view(gy), vk::array_out_view(dw, dw.shape()));
}

}  // namespace kiln::gpu
