// Convolutions: one forward primitive and its two adjoints. Conv is bilinear in (x, w), so the
// three primitives' vjps are built from each other and grad-of-grad works to any order:
//   y  = Conv(x, w)             dx = ConvGradInput(gy, w),  dw = ConvGradWeight(x, gy)
//   dx = ConvGradInput(gy, w)   d gy = Conv(c, w),          dw = ConvGradWeight(c, gy)
//   dw = ConvGradWeight(x, gy)  dx = ConvGradInput(gy, c),  d gy = Conv(x, c)
#include "kiln/core/ops/conv.h"

#include "kiln/core/cpu/im2col.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/conv_internal.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu_conv.h"

namespace kiln {
namespace detail {
namespace {

using Pair = std::array<int, 2>;
using Size2 = std::array<int64_t, 2>;

struct ConvParams {
  Pair stride, padding, dilation;
  int groups;
};

ConvGeometry geometry(const Shape& x, const Shape& w, const ConvParams& p) {
  ConvGeometry g{};
  g.n = x[0];
  g.c = x[1];
  g.h = x[2];
  g.w = x[3];
  g.o = w[0];
  g.kh = w[2];
  g.kw = w[3];
  g.stride = p.stride;
  g.padding = p.padding;
  g.dilation = p.dilation;
  g.groups = p.groups;
  g.oh = conv_output_size(g.h, g.kh, p.stride[0], p.padding[0], p.dilation[0]);
  g.ow = conv_output_size(g.w, g.kw, p.stride[1], p.padding[1], p.dilation[1]);
  return g;
}

// Base of the three primitives: the convolution's parameters and their tuple.
template <class D>
class ConvBase : public PrimitiveWithParams<D> {
 public:
  ConvBase(Stream s, ConvParams p) : PrimitiveWithParams<D>(s), p_(p) {}
  const ConvParams& conv_params() const { return p_; }

 protected:
  ConvParams p_;
};

Array conv_node(const Array& x, const Array& w, const ConvParams& p, Stream s);
void validate(const char* op, const Shape& x, const Shape& w, const ConvParams& p, const Shape& x_shape,
              const Shape& w_shape);
Array grad_input_node(const Array& gy, const Array& w, const ConvParams& p, Size2 in_hw, Stream s);
Array grad_weight_node(const Array& x, const Array& gy, const ConvParams& p, Size2 k_hw, Stream s);

gpu::ConvOptions gpu_options(const ConvParams& p) { return {p.stride, p.padding, p.dilation, p.groups}; }

ConvParams times_groups(ConvParams p, int64_t b) {
  p.groups *= static_cast<int>(b);
  return p;
}

// vmap helpers. Batching is folded into the groups: example b of a batched (B, N, C, H, W) input
// becomes channels [b * C, (b + 1) * C) of an (N, B * C, H, W) input, and a batched weight stacks
// its B examples along the output channels, so B convolutions are one with B * groups groups.
Array batch_into_channels(const Array& v, int axis, int64_t b, Stream s) {
  const Shape& sh = v.shape();
  if (axis < 0) {
    Array e = broadcast_to(expand_dims(v, 1, s), {sh[0], b, sh[1], sh[2], sh[3]}, s);
    return reshape(e, {sh[0], b * sh[1], sh[2], sh[3]}, s);
  }
  Array m = moveaxis(v, axis, 1, s);
  return reshape(m, {m.shape(0), b * m.shape(2), m.shape(3), m.shape(4)}, s);
}
Array batch_into_out_channels(const Array& w, int axis, int64_t b, Stream s) {
  const Shape& sh = w.shape();
  if (axis < 0) {
    Array e = broadcast_to(expand_dims(w, 0, s), {b, sh[0], sh[1], sh[2], sh[3]}, s);
    return reshape(e, {b * sh[0], sh[1], sh[2], sh[3]}, s);
  }
  Array m = moveaxis(w, axis, 0, s);
  return reshape(m, {b * m.shape(1), m.shape(2), m.shape(3), m.shape(4)}, s);
}
int64_t batch_size(const VmapArgs& a) {
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.axes[i] >= 0) return a.inputs[i].shape(a.axes[i]);
  return 1;
}
// (N, B * C, ...) -> (N, B, C, ...): the batch ends up on axis 1.
Array split_channels(const Array& y, int64_t b, Stream s) {
  const Shape& sh = y.shape();
  return reshape(y, {sh[0], b, sh[1] / b, sh[2], sh[3]}, s);
}
// Only the first (sample-major) input batched: fold the batch into N instead.
bool fold_into_samples(const VmapArgs& a) { return a.axes[0] >= 0 && a.axes[1] < 0; }
Array samples_folded(const Array& v, int axis, Stream s) {
  Array m = moveaxis(v, axis, 0, s);
  return reshape(m, {m.shape(0) * m.shape(1), m.shape(2), m.shape(3), m.shape(4)}, s);
}
Array samples_unfolded(const Array& y, int64_t b, Stream s) {
  const Shape& sh = y.shape();
  return reshape(y, {b, sh[0] / b, sh[1], sh[2], sh[3]}, s);
}

class Conv final : public ConvBase<Conv> {
 public:
  using ConvBase::ConvBase;
  const char* name() const override { return "Conv"; }
  auto params() const { return std::tie(p_.stride, p_.padding, p_.dilation, p_.groups); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  // Validated as conv2d validates: shapeless compile replays it on new shapes.
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    validate("conv", in[0].shape(), in[1].shape(), p_, in[0].shape(), in[1].shape());
    const ConvGeometry g = geometry(in[0].shape(), in[1].shape(), p_);
    return {{g.n, g.o, g.oh, g.ow}};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    conv2d_forward(in[0], in[1], out[0], geometry(in[0].shape(), in[1].shape(), p_));
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::conv2d(in[0], in[1], gpu_options(p_), out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &w = a.primals[1], &gy = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(arg == 0 ? grad_input_node(gy, w, p_, {x.shape(2), x.shape(3)}, stream())
                             : grad_weight_node(x, gy, p_, {w.shape(2), w.shape(3)}, stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    Array total;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      const Array t = a.argnums[i] == 0 ? conv_node(a.tangents[i], a.primals[1], p_, stream())
                                        : conv_node(a.primals[0], a.tangents[i], p_, stream());
      total = total.valid() ? add(total, t, stream()) : t;
    }
    return {total};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const int64_t b = batch_size(a);
    if (fold_into_samples(a))
      return {
          {samples_unfolded(conv_node(samples_folded(a.inputs[0], a.axes[0], s), a.inputs[1], p_, s), b, s)},
          {0}};
    const Array x = batch_into_channels(a.inputs[0], a.axes[0], b, s);
    const Array w = batch_into_out_channels(a.inputs[1], a.axes[1], b, s);
    return {{split_channels(conv_node(x, w, times_groups(p_, b), s), b, s)}, {1}};
  }
};

class ConvGradInput final : public ConvBase<ConvGradInput> {
 public:
  ConvGradInput(Stream s, ConvParams p, Size2 in_hw) : ConvBase(s, p), in_hw_(in_hw) {}
  const char* name() const override { return "ConvGradInput"; }
  auto params() const { return std::tie(p_.stride, p_.padding, p_.dilation, p_.groups, in_hw_); }
  Shape x_shape(const Shape& gy, const Shape& w) const {
    return {gy[0], w[1] * p_.groups, in_hw_[0], in_hw_[1]};
  }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {x_shape(in[0].shape(), in[1].shape())};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const ConvGeometry g = geometry(out[0].shape(), in[1].shape(), p_);
    KILN_ASSERT(in[0].shape(2) == g.oh && in[0].shape(3) == g.ow);
    conv2d_grad_input(in[0], in[1], out[0], g);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::conv2d_grad_input(in[0], in[1], gpu_options(p_), out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &gy = a.primals[0], &w = a.primals[1], &c = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(arg == 0 ? conv_node(c, w, p_, stream())
                             : grad_weight_node(c, gy, p_, {w.shape(2), w.shape(3)}, stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    Array total;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      const Array t = a.argnums[i] == 0 ? grad_input_node(a.tangents[i], a.primals[1], p_, in_hw_, stream())
                                        : grad_input_node(a.primals[0], a.tangents[i], p_, in_hw_, stream());
      total = total.valid() ? add(total, t, stream()) : t;
    }
    return {total};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const int64_t b = batch_size(a);
    if (fold_into_samples(a))
      return {
          {samples_unfolded(
              grad_input_node(samples_folded(a.inputs[0], a.axes[0], s), a.inputs[1], p_, in_hw_, s), b, s)},
          {0}};
    const Array gy = batch_into_channels(a.inputs[0], a.axes[0], b, s);
    const Array w = batch_into_out_channels(a.inputs[1], a.axes[1], b, s);
    return {{split_channels(grad_input_node(gy, w, times_groups(p_, b), in_hw_, s), b, s)}, {1}};
  }

 private:
  Size2 in_hw_;
};

class ConvGradWeight final : public ConvBase<ConvGradWeight> {
 public:
  ConvGradWeight(Stream s, ConvParams p, Size2 k_hw) : ConvBase(s, p), k_hw_(k_hw) {}
  const char* name() const override { return "ConvGradWeight"; }
  auto params() const { return std::tie(p_.stride, p_.padding, p_.dilation, p_.groups, k_hw_); }
  Shape w_shape(const Shape& x, const Shape& gy) const {
    return {gy[1], x[1] / p_.groups, k_hw_[0], k_hw_[1]};
  }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {w_shape(in[0].shape(), in[1].shape())};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const ConvGeometry g = geometry(in[0].shape(), out[0].shape(), p_);
    KILN_ASSERT(in[1].shape(2) == g.oh && in[1].shape(3) == g.ow);
    conv2d_grad_weight(in[0], in[1], out[0], g);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::conv2d_grad_weight(in[0], in[1], gpu_options(p_), out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &gy = a.primals[1], &c = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(arg == 0 ? grad_input_node(gy, c, p_, {x.shape(2), x.shape(3)}, stream())
                             : conv_node(x, c, p_, stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    Array total;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      const Array t = a.argnums[i] == 0 ? grad_weight_node(a.tangents[i], a.primals[1], p_, k_hw_, stream())
                                        : grad_weight_node(a.primals[0], a.tangents[i], p_, k_hw_, stream());
      total = total.valid() ? add(total, t, stream()) : t;
    }
    return {total};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    // dw sums over samples, so the batch cannot fold into N; it always goes into the groups.
    const Stream s = stream();
    const int64_t b = batch_size(a);
    const Array x = batch_into_channels(a.inputs[0], a.axes[0], b, s);
    const Array gy = batch_into_channels(a.inputs[1], a.axes[1], b, s);
    const Array dw = grad_weight_node(x, gy, times_groups(p_, b), k_hw_, s);
    const Shape& sh = dw.shape();
    return {{reshape(dw, {b, sh[0] / b, sh[1], sh[2], sh[3]}, s)}, {0}};
  }

 private:
  Size2 k_hw_;
};

Array conv_node(const Array& x, const Array& w, const ConvParams& p, Stream s) {
  const ConvGeometry g = geometry(x.shape(), w.shape(), p);
  return Array::make({g.n, g.o, g.oh, g.ow}, x.dtype(), std::make_shared<Conv>(s, p), {x, w});
}
Array grad_input_node(const Array& gy, const Array& w, const ConvParams& p, Size2 in_hw, Stream s) {
  auto prim = std::make_shared<ConvGradInput>(s, p, in_hw);
  Shape shape = prim->x_shape(gy.shape(), w.shape());
  return Array::make(std::move(shape), gy.dtype(), std::move(prim), {gy, w});
}
Array grad_weight_node(const Array& x, const Array& gy, const ConvParams& p, Size2 k_hw, Stream s) {
  auto prim = std::make_shared<ConvGradWeight>(s, p, k_hw);
  Shape shape = prim->w_shape(x.shape(), gy.shape());
  return Array::make(std::move(shape), x.dtype(), std::move(prim), {x, gy});
}

// Checks a 2-d convolution (after conv1d's reshape); `x_shape`/`w_shape` are the caller's shapes,
// used in messages.
void validate(const char* op, const Shape& x, const Shape& w, const ConvParams& p, const Shape& x_shape,
              const Shape& w_shape) {
  if (p.groups < 1) throw ValueError::of(op, "groups must be >= 1", "got {}", p.groups);
  for (int i = 0; i < 2; ++i) {
    if (p.stride[i] < 1) throw ValueError::of(op, "stride must be >= 1", "got {}", p.stride[i]);
    if (p.dilation[i] < 1) throw ValueError::of(op, "dilation must be >= 1", "got {}", p.dilation[i]);
    if (p.padding[i] < 0) throw ValueError::of(op, "padding must be >= 0", "got {}", p.padding[i]);
  }
  const std::string shapes =
      fmt::format("input {}, weight {}, groups {}", shape_str(x_shape), shape_str(w_shape), p.groups);
  if (x[1] % p.groups != 0)
    throw ShapeError::of(op, "input channels are not divisible by groups", "{}", shapes);
  if (w[0] % p.groups != 0)
    throw ShapeError::of(op, "output channels are not divisible by groups", "{}", shapes);
  if (w[1] * p.groups != x[1])
    throw ShapeError::of(op, "weight channels differ from input channels / groups", "{}", shapes);
  if (w[2] < 1 || w[3] < 1) throw ShapeError::of(op, "kernel size must be positive", "{}", shapes);
  const ConvGeometry g = geometry(x, w, p);
  if (g.oh <= 0 || g.ow <= 0)
    throw ShapeError::of(op, "input is smaller than the dilated kernel",
                         "{}, padding ({},{}), dilation ({},{})", shapes, p.padding[0], p.padding[1],
                         p.dilation[0], p.dilation[1]);
}

Array conv(const char* op, const Array& x, const Array& w, const ConvParams& p, StreamOrDevice s) {
  const Dtype t = promote_types(x.dtype(), w.dtype());
  if (!is_floating(t))
    throw DtypeError::of(op, "convolution needs floating-point operands", "input {}, weight {}",
                         dtype_name(x.dtype()), dtype_name(w.dtype()));
  // float16/bfloat16 compute in float32: the kernels are im2col + sgemm.
  const Dtype compute = t == float64 ? float64 : float32;
  const Array y = conv_node(astype(x, compute, s), astype(w, compute, s), p, to_stream(s));
  return astype(y, t, s);
}

void check_operands(const char* op, const Array& x, const Array& w, int rank, const char* layout) {
  if (!x.valid() || !w.valid())
    throw ValueError::of(op, "an operand is an empty (default-constructed) array");
  if (x.ndim() != rank)
    throw ShapeError::of(op, "input has the wrong rank", "expected {} {}, got {}", rank, layout,
                         shape_str(x.shape()));
  if (w.ndim() != rank)
    throw ShapeError::of(op, "weight has the wrong rank", "expected {}, got {}", rank, shape_str(w.shape()));
}

}  // namespace

Array conv2d_transpose(const Array& x, const Array& w, std::array<int, 2> stride, std::array<int, 2> padding,
                       std::array<int, 2> dilation, int groups, std::array<int64_t, 2> out_hw,
                       StreamOrDevice s) {
  const Dtype t = promote_types(x.dtype(), w.dtype());
  const Dtype compute = t == float64 ? float64 : float32;
  const ConvParams p{stride, padding, dilation, groups};
  const Array y = grad_input_node(astype(x, compute, s), astype(w, compute, s), p, out_hw, to_stream(s));
  return astype(y, t, s);
}

}  // namespace detail

Array conv1d(const Array& input, const Array& weight, int stride, int padding, int dilation, int groups,
             StreamOrDevice s) {
  detail::check_operands("conv1d", input, weight, 3, "(N, C, W)");
  const detail::ConvParams p{{1, stride}, {0, padding}, {1, dilation}, groups};
  const Shape& xs = input.shape();
  const Shape& ws = weight.shape();
  const Shape x4{xs[0], xs[1], 1, xs[2]}, w4{ws[0], ws[1], 1, ws[2]};
  detail::validate("conv1d", x4, w4, p, xs, ws);
  const Array y = detail::conv("conv1d", reshape(input, x4, s), reshape(weight, w4, s), p, s);
  return reshape(y, {y.shape(0), y.shape(1), y.shape(3)}, s);
}

Array conv2d(const Array& input, const Array& weight, std::array<int, 2> stride, std::array<int, 2> padding,
             std::array<int, 2> dilation, int groups, StreamOrDevice s) {
  detail::check_operands("conv2d", input, weight, 4, "(N, C, H, W)");
  const detail::ConvParams p{stride, padding, dilation, groups};
  detail::validate("conv2d", input.shape(), weight.shape(), p, input.shape(), weight.shape());
  return detail::conv("conv2d", input, weight, p, s);
}

}  // namespace kiln
