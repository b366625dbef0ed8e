// Fused scaled dot-product attention: one forward primitive (ScaledDotProductAttention: outputs
// out and each row's logsumexp) and one backward primitive (ScaledDotProductAttentionVjp: dq, dk,
// dv), with kernels on the CPU (core/cpu/attention.cpp) and the GPU (core/vulkan/runtime/
// attention_facade.cpp, flash-attention style).
//
// The rules close over the two primitives and ordinary ops:
//   vjp  of the forward  = the backward primitive (the mask's gradient, rarely wanted, by ops)
//   jvp  of the forward  = jvp of forward_composite (the same function as ops)
//   vjp/jvp of the backward = those of backward_composite, traced again: grad of grad works
//   vmap = the batch axis moves to the front and becomes one more leading dim.
#include "kiln/core/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <tuple>

#include "kiln/core/cpu/attention.h"
#include "kiln/core/custom_transforms.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu_attention.h"

namespace kiln {
namespace detail {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr double kInf = std::numeric_limits<double>::infinity();

// The widest head dim the GPU kernels take (their shared-memory tiles); wider ones take the ops.
constexpr int64_t kGpuMaxHeadDim = 128;

// KILN_VULKAN_FUSED_ATTENTION=1 (read at every call, so tests can set it).
bool fused_on_gpu() {
  const char* v = std::getenv("KILN_VULKAN_FUSED_ATTENTION");
  return v && std::string_view(v) == "1";
}

AttentionDims dims_of(const Array& q, const Array& k, const Array& v, double scale, bool causal) {
  AttentionDims d;
  d.batch = 1;
  for (int a = 0; a + 2 < q.ndim(); ++a) d.batch *= q.shape(a);
  d.lq = q.shape(-2);
  d.lk = k.shape(-2);
  d.d = q.shape(-1);
  d.dv = v.shape(-1);
  d.scale = scale;
  d.causal = causal;
  return d;
}

// scale * (a @ b): the scale in the GEMM's epilogue (addmm's alpha, no addend) rather than a pass
// of its own over an operand or the product; float64 keeps its scale in double, as a multiply.
Array scaled_matmul(const Array& a, const Array& b, double scale, Stream s) {
  if (a.dtype() == float64) return multiply(matmul(a, b, s), scale, s);
  return addmm(zeros({}, a.dtype(), s), a, b, static_cast<float>(scale), 0.0f, s);
}

// The scores scale * q k^T (+ mask, causal limit) in the compute dtype, as ordinary ops.
Array scores_composite(double scale, bool causal, const Array& q, const Array& k, const Array* mask,
                       Stream s) {
  const Dtype c = attention_compute_dtype(q.dtype());
  Array scores = scaled_matmul(astype(q, c, s), swapaxes(astype(k, c, s), -1, -2, s), scale, s);
  if (mask) scores = add(scores, *mask, s);
  if (causal) {
    const int64_t lq = q.shape(-2), lk = k.shape(-2);
    const Array qpos =
        reshape(arange(static_cast<double>(lk - lq), static_cast<double>(lk), 1, int32, s), {lq, 1}, s);
    const Array kpos = reshape(arange(0, static_cast<double>(lk), 1, int32, s), {1, lk}, s);
    scores = where(greater(kpos, qpos, s), -kInf, scores, s);
  }
  return scores;
}

// The forward pass as ops: inputs {q, k, v, [mask]}, outputs {out, lse}.
std::vector<Array> forward_composite(double scale, bool causal, const std::vector<Array>& in, Stream s) {
  const Dtype t = in[0].dtype(), c = attention_compute_dtype(t);
  const Array scores = scores_composite(scale, causal, in[0], in[1], in.size() > 3 ? &in[3] : nullptr, s);
  const Array lse = logsumexp(scores, -1, true, s);
  const Array weights = exp(subtract(scores, lse, s), s);
  return {astype(matmul(weights, astype(in[2], c, s), s), t, s), squeeze(lse, Axes{-1}, s)};
}

// The backward pass as ops from the saved lse: inputs {q, k, v, [mask], out, lse, g, [glse]} (glse:
// a cotangent of lse, which only differentiating the backward pass again gives), outputs
// {dq, dk, dv, [dscores]} (dscores, the mask's gradient, only when with_dscores).
std::vector<Array> backward_composite(double scale, bool causal, bool has_mask, bool with_dscores,
                                      const std::vector<Array>& in, Stream s) {
  const Dtype t = in[0].dtype(), c = attention_compute_dtype(t);
  const size_t o = has_mask ? 4 : 3;
  const Array qc = astype(in[0], c, s), kc = astype(in[1], c, s), vc = astype(in[2], c, s);
  const Array out = astype(in[o], c, s), lse = expand_dims(in[o + 1], -1, s), g = astype(in[o + 2], c, s);
  const Array p =
      exp(subtract(scores_composite(scale, causal, qc, kc, has_mask ? &in[3] : nullptr, s), lse, s), s);
  const Array dv = matmul(swapaxes(p, -1, -2, s), g, s);
  const Array dp = matmul(g, swapaxes(vc, -1, -2, s), s);
  Array delta = sum(multiply(g, out, s), -1, true, s);
  if (in.size() > o + 3) delta = subtract(delta, expand_dims(astype(in[o + 3], c, s), -1, s), s);
  const Array ds = multiply(p, subtract(dp, delta, s), s);
  const Array dq = scaled_matmul(ds, kc, scale, s);
  const Array dk = scaled_matmul(swapaxes(ds, -1, -2, s), qc, scale, s);
  std::vector<Array> result{astype(dq, t, s), astype(dk, t, s), astype(dv, t, s)};
  if (with_dscores) result.push_back(ds);
  return result;
}

// Whether a cotangent is the zeros the vjp walk fills in for an output nobody used (a Full of a
// constant 0). lse is internal, so its cotangent is such zeros except under grad of grad.
bool is_zero(const Array& c) {
  const std::shared_ptr<const Primitive> primitive = c.primitive();  // once: eval may detach c
  if (!primitive || std::string_view(primitive->name()) != "Full") return false;
  const std::vector<Array> in = c.inputs();
  return in.size() == 1 && in[0].is_available() && in[0].size() == 1 && in[0].item<double>() == 0.0;
}

// What scaled_dot_product_attention checked, for shapeless compile's replays on new shapes
// (core/shape_polymorphic.h): q (.., Lq, D), k (.., Lk, D), v (.., Lk, Dv) of one rank with equal
// leading dims and a mask that broadcasts to (.., Lq, Lk); with `backward`, then out and g
// (.., Lq, Dv) and lse (.., Lq).
void check_attention_shapes(std::span<const Array> in, bool has_mask, bool backward) {
  const Shape &q = in[0].shape(), &k = in[1].shape(), &v = in[2].shape();
  const size_t nd = q.size();
  bool ok = nd >= 2 && k.size() == nd && v.size() == nd;
  for (size_t a = 0; ok && a + 2 < nd; ++a) ok = q[a] == k[a] && q[a] == v[a];
  ok = ok && q[nd - 1] == k[nd - 1] && k[nd - 2] == v[nd - 2];
  if (ok && has_mask) {
    const Shape& m = in[3].shape();
    ok = m.size() <= nd;
    for (size_t i = 1; ok && i <= m.size(); ++i)
      ok = m[m.size() - i] == 1 || m[m.size() - i] == (i == 1 ? k[nd - 2] : q[nd - i]);
  }
  if (ok && backward) {
    const size_t o = has_mask ? 4 : 3;
    Shape out = q, lse = q;
    out.back() = v.back();
    lse.pop_back();
    ok = in.size() == o + 3 && in[o].shape() == out && in[o + 1].shape() == lse && in[o + 2].shape() == out;
  }
  if (ok) return;
  std::string shapes;
  for (const Array& a : in) shapes += (shapes.empty() ? "" : ", ") + shape_str(a.shape());
  throw ShapeError::of(
      kOp, "inputs of inconsistent shapes",
      "q (.., Lq, D), k (.., Lk, D), v (.., Lk, Dv) with equal leading dims expected, got {}", shapes);
}

class ScaledDotProductAttentionVjp final : public PrimitiveWithParams<ScaledDotProductAttentionVjp> {
 public:
  ScaledDotProductAttentionVjp(Stream s, double scale, bool causal, bool has_mask)
      : PrimitiveWithParams(s), scale_(scale), causal_(causal), has_mask_(has_mask) {}
  const char* name() const override { return "ScaledDotProductAttentionVjp"; }
  auto params() const { return std::tie(scale_, causal_, has_mask_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_attention_shapes(in, has_mask_, true);
    return {in[0].shape(), in[1].shape(), in[2].shape()};
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const size_t o = has_mask_ ? 4 : 3;
    attention_backward(dims_of(in[0], in[1], in[2], scale_, causal_), in[0], in[1], in[2],
                       has_mask_ ? &in[3] : nullptr, in[o], in[o + 1], in[o + 2], out[0], out[1], out[2]);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const size_t o = has_mask_ ? 4 : 3;
    gpu::attention_backward(scale_, causal_, in[0], in[1], in[2], has_mask_ ? &in[3] : nullptr, in[o],
                            in[o + 1], in[o + 2], out[0], out[1], out[2]);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override { return vjp_of_function(composite(), a); }
  std::vector<Array> jvp(const JvpArgs& a) const override { return jvp_of_function(composite(), a); }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const int64_t batch = batch_size(a.inputs, a.axes);
    std::vector<Array> in;
    for (size_t i = 0; i < a.inputs.size(); ++i) in.push_back(batch_front(a.inputs[i], a.axes[i], batch, s));
    return {make(scale_, causal_, in, s), {0, 0, 0}};
  }

  /// {dq, dk, dv} for inputs {q, k, v, [mask], out, lse, g}.
  static std::vector<Array> make(double scale, bool causal, std::vector<Array> in, Stream s) {
    const bool has_mask = in.size() == 7;
    const Dtype t = in[0].dtype();
    in.back() = astype(in.back(), t, s);
    auto p = std::make_shared<ScaledDotProductAttentionVjp>(s, scale, causal, has_mask);
    std::vector<Shape> shapes{in[0].shape(), in[1].shape(), in[2].shape()};  // before `in` moves
    return Array::make_many(std::move(shapes), {t, t, t}, std::move(p), std::move(in));
  }

 private:
  ArrayFn composite() const {
    return [scale = scale_, causal = causal_, m = has_mask_, s = stream()](const std::vector<Array>& in) {
      return backward_composite(scale, causal, m, false, in, s);
    };
  }

  const double scale_;
  const bool causal_, has_mask_;
};

class ScaledDotProductAttention final : public PrimitiveWithParams<ScaledDotProductAttention> {
 public:
  ScaledDotProductAttention(Stream s, double scale, bool causal, bool has_mask)
      : PrimitiveWithParams(s), scale_(scale), causal_(causal), has_mask_(has_mask) {}
  const char* name() const override { return "ScaledDotProductAttention"; }
  auto params() const { return std::tie(scale_, causal_, has_mask_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_attention_shapes(in, has_mask_, false);
    Shape out = in[0].shape(), lse = in[0].shape();
    out.back() = in[2].shape(-1);
    lse.pop_back();
    return {out, lse};
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    attention_forward(dims_of(in[0], in[1], in[2], scale_, causal_), in[0], in[1], in[2],
                      has_mask_ ? &in[3] : nullptr, out[0], out[1]);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::attention_forward(scale_, causal_, in[0], in[1], in[2], has_mask_ ? &in[3] : nullptr, out[0],
                           out[1]);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    std::vector<Array> in(a.primals.begin(), a.primals.end());
    in.push_back(a.outputs[0]);
    in.push_back(a.outputs[1]);
    in.push_back(a.cotangents[0]);
    bool need_qkv = false, need_mask = false;
    for (int arg : a.argnums) (arg == 3 ? need_mask : need_qkv) = true;
    std::vector<Array> grads, mask_grad;
    if (!is_zero(a.cotangents[1])) {
      in.push_back(a.cotangents[1]);
      grads = backward_composite(scale_, causal_, has_mask_, need_mask, in, s);
      mask_grad = grads;
    } else {
      if (need_qkv) grads = ScaledDotProductAttentionVjp::make(scale_, causal_, in, s);
      if (need_mask) mask_grad = backward_composite(scale_, causal_, true, true, in, s);
    }
    std::vector<Array> out;
    for (int arg : a.argnums) out.push_back(arg == 3 ? mask_grad[3] : grads[static_cast<size_t>(arg)]);
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return jvp_of_function(
        [scale = scale_, causal = causal_, s = stream()](const std::vector<Array>& in) {
          return forward_composite(scale, causal, in, s);
        },
        a);
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const int64_t batch = batch_size(a.inputs, a.axes);
    std::vector<Array> in;
    for (size_t i = 0; i < a.inputs.size(); ++i) in.push_back(batch_front(a.inputs[i], a.axes[i], batch, s));
    return {make(scale_, causal_, in, s), {0, 0}};
  }

  /// {out, lse} for inputs {q, k, v, [mask]} (the mask of the compute dtype, (.., Lq, Lk)).
  static std::vector<Array> make(double scale, bool causal, std::vector<Array> in, Stream s) {
    const bool has_mask = in.size() == 4;
    const Dtype t = in[0].dtype();
    Shape out = in[0].shape(), lse = in[0].shape();
    out.back() = in[2].shape(-1);
    lse.pop_back();
    auto p = std::make_shared<ScaledDotProductAttention>(s, scale, causal, has_mask);
    return Array::make_many({out, lse}, {t, attention_compute_dtype(t)}, std::move(p), std::move(in));
  }

 private:
  const double scale_;
  const bool causal_, has_mask_;
};

void check_operand(const char* what, const Array& x) {
  if (!x.valid()) throw ValueError::of(kOp, "an operand is an empty (default-constructed) Array", "{}", what);
  if (!is_floating(x.dtype()))
    throw DtypeError::of(kOp, "q, k and v must be floating point", "{} is {}", what, dtype_name(x.dtype()));
  if (x.ndim() < 2)
    throw ShapeError::of(kOp, "q, k and v need at least two dims (L, D)", "{} is {}", what,
                         shape_str(x.shape()));
}

// The mask as an additive array of dtype c broadcast (as a view) to `shape` = (.., Lq, Lk).
Array additive_mask(const Array& mask, const Shape& shape, Dtype c, Stream s) {
  bool ok = mask.ndim() <= static_cast<int>(shape.size());
  for (int i = 1; ok && i <= mask.ndim(); ++i) {
    const int64_t m = mask.shape(-i), t = shape[shape.size() - static_cast<size_t>(i)];
    ok = m == 1 || m == t;
  }
  if (!ok)
    throw ShapeError::of(kOp, "mask does not broadcast to (.., Lq, Lk)", "mask {}, scores {}",
                         shape_str(mask.shape()), shape_str(shape));
  Array additive;
  if (mask.dtype() == bool_)
    additive = where(mask, -kInf, zeros({}, c, s), s);
  else if (is_floating(mask.dtype()))
    additive = astype(mask, c, s);
  else
    throw DtypeError::of(kOp, "mask must be bool or floating point", "got {}", dtype_name(mask.dtype()));
  return broadcast_to(additive, shape, s);
}

}  // namespace
}  // namespace detail

Array scaled_dot_product_attention(const Array& q, const Array& k, const Array& v, double scale, bool causal,
                                   const Array& mask, StreamOrDevice so) {
  using namespace detail;
  check_operand("q", q);
  check_operand("k", k);
  check_operand("v", v);
  const int nd = q.ndim();
  if (k.ndim() != nd || v.ndim() != nd)
    throw ShapeError::of(kOp, "q, k and v must have the same number of dims", "q {}, k {}, v {}",
                         shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  bool same_lead = true;
  for (int a = 0; a + 2 < nd; ++a) same_lead &= q.shape(a) == k.shape(a) && q.shape(a) == v.shape(a);
  if (!same_lead || q.shape(-1) != k.shape(-1) || k.shape(-2) != v.shape(-2))
    throw ShapeError::of(kOp, "expected q (.., Lq, D), k (.., Lk, D), v (.., Lk, Dv) with equal leading dims",
                         "q {}, k {}, v {}", shape_str(q.shape()), shape_str(k.shape()),
                         shape_str(v.shape()));
  if (!std::isfinite(scale)) throw ValueError::of(kOp, "scale must be finite", "got {}", scale);
  const Stream s = to_stream(so);
  const Dtype t = promote_types(promote_types(q.dtype(), k.dtype()), v.dtype());
  const Dtype c = attention_compute_dtype(t);
  std::vector<Array> in{astype(q, t, s), astype(k, t, s), astype(v, t, s)};
  if (mask.valid()) {
    Shape scores = q.shape();
    scores.back() = k.shape(-2);
    in.push_back(additive_mask(mask, scores, c, s));
  }
  // Degenerate sizes, and head dims wider than the GPU's tiles, take the unfused ops. So does the
  // GPU unless KILN_VULKAN_FUSED_ATTENTION=1: its fused kernels multiply with scalar loops from
  // shared memory and lose to the unfused graph's tiled GEMMs (on the H200, the small GPT's
  // (32, 4, 128, 64) heads took 0.27 ms forward and 0.77 ms backward per layer fused, about 0.2 ms
  // both ways unfused).
  const int64_t lk = k.shape(-2), d = q.shape(-1), dv = v.shape(-1);
  if (lk == 0 || d == 0 || dv == 0) return forward_composite(scale, causal, in, s)[0];
  if (s.device == Device::gpu && (std::max(d, dv) > kGpuMaxHeadDim || !fused_on_gpu())) {
    // The weights as one fused softmax row kernel (its gradient one kernel too) rather than
    // logsumexp's parts: six dependent dispatches forward (max, a fix-up, exp, sum, log, exp) became one.
    const Array weights =
        softmax(scores_composite(scale, causal, in[0], in[1], in.size() > 3 ? &in[3] : nullptr, s), -1, s);
    return astype(matmul(weights, astype(in[2], c, s), s), t, s);
  }
  return ScaledDotProductAttention::make(scale, causal, std::move(in), s)[0];
}

}  // namespace kiln
