// Fused normalizations along the last axis: one forward primitive (RowNormalize: softmax,
// log_softmax, layer_norm, rms_norm) and one backward primitive (RowNormalizeVjp), each a single
// kernel per row on the CPU (core/cpu/norm.cpp) and the GPU (core/vulkan/runtime/norm_facade.cpp).
//
// The rules close over the two primitives and ordinary ops:
//   vjp  of the forward  = RowNormalizeVjp (plus row sums for weight and bias)
//   jvp  of the forward  = RowNormalizeVjp again: the Jacobians of softmax, layer_norm and rms_norm
//                          without weight are symmetric, so J t is the backward kernel applied to t
//   vjp/jvp of the backward = those of its composite (backward_composite), traced again, so
//                          grad of grad works to any order
//   vmap = batch axes are just more rows; a weight or bias that differs per example falls back to
//          the composite with the weight broadcast.
#include "kiln/core/ops/fused_norm.h"

#include <cmath>
#include <ostream>
#include <tuple>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/norm.h"
#include "kiln/core/custom_transforms.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu_norm.h"

namespace kiln {
namespace detail {

// For print(): the kind by name. Internal linkage, found by argument-dependent lookup.
static std::ostream& operator<<(std::ostream& os, RowNorm k) {
  constexpr const char* kNames[] = {"softmax", "log_softmax", "layer_norm", "rms_norm"};
  return os << kNames[static_cast<int>(k)];
}

namespace {

bool is_softmax(RowNorm k) { return k == RowNorm::softmax || k == RowNorm::log_softmax; }

// Every axis but the last: the rows a weight's gradient sums over.
Axes leading_axes(const Array& x) {
  Axes axes;
  for (int a = 0; a + 1 < x.ndim(); ++a) axes.push_back(a);
  return axes;
}

// xhat = x * r (layer_norm: (x - mean) * r) and r = 1 / sqrt(var + eps), from ordinary ops in
// the compute dtype (for the composite below, whose derivatives are the backward kernel's).
std::pair<Array, Array> normalized_composite(RowNorm kind, double eps, const Array& xc, Stream s) {
  const Array centered = kind == RowNorm::layer_norm ? subtract(xc, mean(xc, -1, true, s), s) : xc;
  const Array r = rsqrt(add(mean(square(centered, s), -1, true, s), eps, s), s);
  return {multiply(centered, r, s), r};
}

// The backward kernel as ordinary ops: inputs {x (y for softmax), [w], g}, outputs {dx, [gxhat]}.
// w may be any shape that broadcasts against x (per-example weights under vmap).
std::vector<Array> backward_composite(RowNorm kind, double eps, bool has_weight, bool with_gxhat,
                                      const std::vector<Array>& in, Stream s) {
  const Dtype t = in[0].dtype(), c = norm_compute_dtype(t);
  const Array xc = astype(in[0], c, s), gc = astype(in.back(), c, s);
  if (kind == RowNorm::softmax)
    return {astype(multiply(xc, subtract(gc, sum(multiply(gc, xc, s), -1, true, s), s), s), t, s)};
  if (kind == RowNorm::log_softmax)
    return {astype(subtract(gc, multiply(exp(xc, s), sum(gc, -1, true, s), s), s), t, s)};
  const auto [xhat, r] = normalized_composite(kind, eps, xc, s);
  const Array gw = has_weight ? multiply(gc, astype(in[1], c, s), s) : gc;
  Array inner = subtract(gw, multiply(xhat, mean(multiply(gw, xhat, s), -1, true, s), s), s);
  if (kind == RowNorm::layer_norm) inner = subtract(inner, mean(gw, -1, true, s), s);
  std::vector<Array> out{astype(multiply(r, inner, s), t, s)};
  if (with_gxhat) out.push_back(multiply(gc, xhat, s));
  return out;
}

// `p` (a weight or bias of a vmap call, batched at `axis` or not: -1) ready to broadcast against
// a batch-first input of rank `rank`: (B, 1, ..., 1, n), or as it is when not batched.
Array batched_param(const Array& p, int axis, int64_t batch, int rank, Stream s) {
  if (axis < 0) return p;
  const Array front = batch_front(p, axis, batch, s);
  Shape shape(static_cast<size_t>(rank), 1);
  shape.front() = batch;
  shape.back() = front.shape(-1);
  return reshape(front, shape, s);
}

// What the op functions checked, for shapeless compile's replays on new shapes
// (core/shape_polymorphic.h): `params` weight/bias rows after x of its last axis' size, and with
// `has_g` a last input of x's shape.
void check_row_shapes(const char* primitive, std::span<const Array> in, int params, bool has_g) {
  const Shape& x = in[0].shape();
  bool ok = true;
  for (int i = 1; i <= params; ++i) ok = ok && in[static_cast<size_t>(i)].shape() == Shape{x.back()};
  if (has_g) ok = ok && in.back().shape() == x;
  if (ok) return;
  std::string shapes;
  for (const Array& a : in) shapes += (shapes.empty() ? "" : ", ") + shape_str(a.shape());
  throw ShapeError::of(primitive, "inputs of inconsistent shapes", "{}", shapes);
}

class RowNormalizeVjp final : public PrimitiveWithParams<RowNormalizeVjp> {
 public:
  RowNormalizeVjp(Stream s, RowNorm kind, double eps, bool has_weight, bool with_gxhat)
      : PrimitiveWithParams(s), kind_(kind), eps_(eps), has_weight_(has_weight), with_gxhat_(with_gxhat) {}
  const char* name() const override {
    constexpr const char* kNames[] = {"SoftmaxVjp", "LogSoftmaxVjp", "LayerNormVjp", "RmsNormVjp"};
    return kNames[static_cast<int>(kind_)];
  }
  auto params() const { return std::tie(kind_, eps_, has_weight_, with_gxhat_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_row_shapes(name(), in, has_weight_ ? 1 : 0, true);
    return std::vector<Shape>(with_gxhat_ ? 2 : 1, in[0].shape());
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array x = dense_copy(in[0]), g = dense_copy(in.back());
    const Array w = has_weight_ ? dense_copy(in[1]) : Array();
    for (Array& o : out) o.allocate();
    norm_rows_vjp(kind_, eps_, x, w, g, out[0], with_gxhat_ ? &out[1] : nullptr);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::norm_rows_vjp(static_cast<uint8_t>(kind_), eps_, in[0], has_weight_ ? &in[1] : nullptr, in.back(),
                       out[0], with_gxhat_ ? &out[1] : nullptr);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override { return vjp_of_function(composite(), a); }
  std::vector<Array> jvp(const JvpArgs& a) const override { return jvp_of_function(composite(), a); }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const int64_t batch = batch_size(a.inputs, a.axes);
    const Array x = batch_front(a.inputs[0], a.axes[0], batch, s);
    const Array g = batch_front(a.inputs.back(), a.axes.back(), batch, s);
    std::vector<Array> outputs;
    if (has_weight_ && a.axes[1] >= 0) {
      outputs = backward_composite(kind_, eps_, true, with_gxhat_,
                                   {x, batched_param(a.inputs[1], a.axes[1], batch, x.ndim(), s), g}, s);
    } else {
      outputs = make(kind_, eps_, x, has_weight_ ? a.inputs[1] : Array(), g, with_gxhat_, s);
    }
    return {outputs, std::vector<int>(outputs.size(), 0)};
  }

  /// {dx, [gxhat]}; w (when valid) is (n) in the compute dtype, g has x's shape.
  static std::vector<Array> make(RowNorm kind, double eps, const Array& x, const Array& w, const Array& g,
                                 bool with_gxhat, Stream s) {
    std::vector<Array> inputs{x};
    if (w.valid()) inputs.push_back(w);
    inputs.push_back(astype(g, x.dtype(), s));
    std::vector<Dtype> dtypes{x.dtype()};
    if (with_gxhat) dtypes.push_back(norm_compute_dtype(x.dtype()));
    auto p = std::make_shared<RowNormalizeVjp>(s, kind, eps, w.valid(), with_gxhat);
    return Array::make_many(std::vector<Shape>(dtypes.size(), x.shape()), dtypes, std::move(p),
                            std::move(inputs));
  }

 private:
  ArrayFn composite() const {
    return [kind = kind_, eps = eps_, w = has_weight_, gx = with_gxhat_, s = stream()](
               const std::vector<Array>& in) { return backward_composite(kind, eps, w, gx, in, s); };
  }

  const RowNorm kind_;
  const double eps_;
  const bool has_weight_, with_gxhat_;
};

class RowNormalize final : public PrimitiveWithParams<RowNormalize> {
 public:
  RowNormalize(Stream s, RowNorm kind, double eps, bool has_weight, bool has_bias)
      : PrimitiveWithParams(s), kind_(kind), eps_(eps), has_weight_(has_weight), has_bias_(has_bias) {}
  const char* name() const override {
    constexpr const char* kNames[] = {"Softmax", "LogSoftmax", "LayerNorm", "RmsNorm"};
    return kNames[static_cast<int>(kind_)];
  }
  auto params() const { return std::tie(kind_, eps_, has_weight_, has_bias_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_row_shapes(name(), in, (has_weight_ ? 1 : 0) + (has_bias_ ? 1 : 0), false);
    return {in[0].shape()};
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array x = dense_copy(in[0]);
    const Array w = has_weight_ ? dense_copy(in[1]) : Array();
    const Array b = has_bias_ ? dense_copy(in[has_weight_ ? 2 : 1]) : Array();
    out[0].allocate();
    norm_rows(kind_, eps_, x, w, b, out[0]);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::norm_rows(static_cast<uint8_t>(kind_), eps_, in[0], has_weight_ ? &in[1] : nullptr,
                   has_bias_ ? &in[has_weight_ ? 2 : 1] : nullptr, out[0]);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;

  /// w and b (when valid) are (n) in the compute dtype.
  static Array make(RowNorm kind, double eps, const Array& x, const Array& w, const Array& b, Stream s) {
    std::vector<Array> inputs{x};
    if (w.valid()) inputs.push_back(w);
    if (b.valid()) inputs.push_back(b);
    return Array::make(x.shape(), x.dtype(),
                       std::make_shared<RowNormalize>(s, kind, eps, w.valid(), b.valid()), std::move(inputs));
  }

 private:
  int weight_index() const { return has_weight_ ? 1 : -1; }
  int bias_index() const { return has_bias_ ? (has_weight_ ? 2 : 1) : -1; }
  Array input(std::span<const Array> in, int index) const { return index < 0 ? Array() : in[index]; }

  const RowNorm kind_;
  const double eps_;
  const bool has_weight_, has_bias_;
};

std::vector<Array> RowNormalize::vjp(const VjpArgs& a) const {
  const Stream s = stream();
  const Array& x = a.primals[0];
  const Array g = astype(a.cotangents[0], x.dtype(), s);
  if (is_softmax(kind_)) return {RowNormalizeVjp::make(kind_, 0.0, a.outputs[0], Array(), g, false, s)[0]};
  bool need_x = false, need_w = false;
  for (int arg : a.argnums) {
    need_x |= arg == 0;
    need_w |= arg == weight_index();
  }
  std::vector<Array> parts;
  if (need_x || need_w)
    parts = RowNormalizeVjp::make(kind_, eps_, x, input(a.primals, weight_index()), g, need_w, s);
  std::vector<Array> out;
  for (int arg : a.argnums) {
    if (arg == 0)
      out.push_back(parts[0]);
    else if (arg == weight_index())
      out.push_back(sum(parts[1], leading_axes(x), false, s));
    else
      out.push_back(sum(astype(g, a.primals[arg].dtype(), s), leading_axes(x), false, s));
  }
  return out;
}

std::vector<Array> RowNormalize::jvp(const JvpArgs& a) const {
  const Stream s = stream();
  const Array& x = a.primals[0];
  const Dtype t = x.dtype(), c = norm_compute_dtype(t);
  Array tx, tw, tb;
  for (size_t i = 0; i < a.argnums.size(); ++i) {
    const int arg = a.argnums[i];
    (arg == 0 ? tx : arg == weight_index() ? tw : tb) = a.tangents[i];
  }
  if (is_softmax(kind_)) {
    const Array y = make(kind_, 0.0, x, Array(), Array(), s);
    if (!tx.valid()) return {zeros_like(y, s)};
    if (kind_ == RowNorm::softmax) return {RowNormalizeVjp::make(kind_, 0.0, y, Array(), tx, false, s)[0]};
    const Array txc = astype(tx, c, s);
    return {astype(subtract(txc, sum(multiply(exp(astype(y, c, s), s), txc, s), -1, true, s), s), t, s)};
  }
  const Array w = input(a.primals, weight_index());
  Array ty;
  const auto accumulate = [&](const Array& term) { ty = ty.valid() ? add(ty, term, s) : term; };
  if (tx.valid()) {
    const Array jt = RowNormalizeVjp::make(kind_, eps_, x, Array(), tx, false, s)[0];
    accumulate(w.valid() ? multiply(astype(jt, c, s), w, s) : jt);
  }
  if (tw.valid()) accumulate(multiply(astype(make(kind_, eps_, x, Array(), Array(), s), c, s), tw, s));
  if (tb.valid()) accumulate(broadcast_to(tb, x.shape(), s));
  return {ty.valid() ? astype(ty, t, s) : zeros_like(x, s)};
}

VmapResult RowNormalize::vmap(const VmapArgs& a) const {
  const Stream s = stream();
  const int bx = a.axes[0];
  bool params_batched = false;
  for (size_t i = 1; i < a.axes.size(); ++i) params_batched |= a.axes[i] >= 0;
  const Array w = input(a.inputs, weight_index()), b = input(a.inputs, bias_index());
  if (!params_batched) {
    // Rows are rows wherever the batch axis is, unless it is the last (the normalized) one.
    if (bx >= 0 && bx + 1 < a.inputs[0].ndim()) return {{make(kind_, eps_, a.inputs[0], w, b, s)}, {bx}};
  }
  const int64_t batch = batch_size(a.inputs, a.axes);
  const Array x = batch_front(a.inputs[0], bx, batch, s);
  if (!params_batched) return {{make(kind_, eps_, x, w, b, s)}, {0}};
  Array y = make(kind_, eps_, x, Array(), Array(), s);
  const int wi = weight_index(), bi = bias_index();
  if (w.valid()) y = multiply(y, batched_param(w, a.axes[wi], batch, x.ndim(), s), s);
  if (b.valid()) y = add(y, batched_param(b, a.axes[bi], batch, x.ndim(), s), s);
  return {{astype(y, x.dtype(), s)}, {0}};
}

void check_input(const char* op, const Array& x) {
  if (!x.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
  if (!is_floating(x.dtype()))
    throw DtypeError::of(op, "input must be floating point", "got {}", dtype_name(x.dtype()));
  if (x.ndim() == 0) throw ShapeError::of(op, "input needs at least one dimension", "got a 0-d array");
}

void check_param(const char* op, const char* what, const Array& p, const Array& x) {
  if (!p.valid()) return;
  if (!is_floating(p.dtype()))
    throw DtypeError::of(op, "weight and bias must be floating point", "{} is {}", what,
                         dtype_name(p.dtype()));
  if (p.ndim() != 1 || p.shape(0) != x.shape(-1))
    throw ShapeError::of(op, "weight and bias must have the shape of the last axis",
                         "{} is {}, input {} (expected ({}))", what, shape_str(p.shape()),
                         shape_str(x.shape()), x.shape(-1));
}

Array normalize_op(RowNorm kind, const char* op, const Array& x, const Array& w, const Array& b, double eps,
                   StreamOrDevice so) {
  check_input(op, x);
  check_param(op, "weight", w, x);
  check_param(op, "bias", b, x);
  if (!(eps >= 0) || !std::isfinite(eps))
    throw ValueError::of(op, "eps must be finite and >= 0", "got {}", eps);
  const Stream s = to_stream(so);
  const Dtype c = norm_compute_dtype(x.dtype());
  return RowNormalize::make(kind, eps, x, w.valid() ? astype(w, c, s) : Array(),
                            b.valid() ? astype(b, c, s) : Array(), s);
}

}  // namespace

Array softmax_last_axis(const Array& x, bool log, StreamOrDevice s) {
  const char* op = log ? "log_softmax" : "softmax";
  check_input(op, x);
  return RowNormalize::make(log ? RowNorm::log_softmax : RowNorm::softmax, 0.0, x, Array(), Array(),
                            to_stream(s));
}

}  // namespace detail

Array layer_norm(const Array& x, const Array& weight, const Array& bias, double eps, StreamOrDevice s) {
  return detail::normalize_op(detail::RowNorm::layer_norm, "layer_norm", x, weight, bias, eps, s);
}

Array rms_norm(const Array& x, const Array& weight, double eps, StreamOrDevice s) {
  return detail::normalize_op(detail::RowNorm::rms_norm, "rms_norm", x, weight, Array(), eps, s);
}

}  // namespace kiln
