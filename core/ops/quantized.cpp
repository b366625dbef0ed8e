// quantize, dequantize and quantized_matmul: their primitives and rules. The CPU kernels are in
// core/cpu/quantized.cpp. The rules are written in ops over dequantize, which is linear in the
// scales and biases (W = scales * q + biases), so every rule but quantize's is exact.
#include "kiln/core/ops/quantized.h"

#include <type_traits>
#include <vector>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/quantized.h"
#include "kiln/core/half.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/primitive.h"
#include "kiln/core/transforms.h"

namespace kiln {
namespace detail {
namespace {

void check_layout(const char* op, int group_size, int bits) {
  if (bits != 2 && bits != 4 && bits != 8) throw ValueError::of(op, "bits must be 2, 4 or 8", "got {}", bits);
  if (group_size != 32 && group_size != 64 && group_size != 128)
    throw ValueError::of(op, "group_size must be 32, 64 or 128", "got {}", group_size);
}

template <class C>
C round_as(C v, Dtype t) {
  if (t == float16) return static_cast<C>(static_cast<float>(float16_t(static_cast<float>(v))));
  if (t == bfloat16) return static_cast<C>(static_cast<float>(bfloat16_t(static_cast<float>(v))));
  return v;
}

// The values of `a` in dtype `t`, dense (a copy only when needed).
template <class C>
const C* dense(const Array& a, Dtype t, std::vector<Array>& keep) {
  keep.push_back(dense_copy(a, t));
  return keep.back().strided_data<C>();
}

// Writes n computed values into `out` (allocated), converting to its dtype.
template <class C>
void store(const std::vector<C>& values, Array& out) {
  convert_values(values.data(), dtype_of<C>(), out.raw_data(), out.dtype(),
                 static_cast<int64_t>(values.size()));
}

// Allocates `out` and runs kernel(C* values) with C the type its dtype computes in (double for
// float64, float for the others): into out itself when it has that dtype, else into a buffer that
// is then converted.
template <class F>
void compute_into(Array& out, F&& kernel) {
  const auto run = [&](auto zero) {
    using C = decltype(zero);
    out.allocate();
    if (out.dtype() == dtype_of<C>()) return kernel(out.strided_data<C>());
    std::vector<C> values(static_cast<size_t>(out.size()));
    kernel(values.data());
    store(values, out);
  };
  out.dtype() == float64 ? run(0.0) : run(0.0f);
}

// Moves each batched input's axis to the front and gives the unbatched ones a broadcast leading
// axis of the batch's size: the primitives below treat leading dimensions as a batch already.
std::vector<Array> batch_in_front(const VmapArgs& a, Stream s) {
  int64_t batch = 1;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.axes[i] >= 0) batch = a.inputs[i].shape(a.axes[i]);
  std::vector<Array> out;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (a.axes[i] >= 0) {
      out.push_back(moveaxis(a.inputs[i], a.axes[i], 0, s));
      continue;
    }
    Shape shape = a.inputs[i].shape();
    shape.insert(shape.begin(), batch);
    out.push_back(broadcast_to(expand_dims(a.inputs[i], 0, s), shape, s));
  }
  return out;
}

// q itself, as dequantize with scale 1 and bias 0.
Array levels(const Array& wq, const Array& scales, QuantLayout l, Stream s) {
  return dequantize(wq, ones_like(scales, s), zeros_like(scales, s), l.group_size, l.bits, s);
}

// The cotangent of dequantize's input `arg` (0 wq, 1 scales, 2 biases) for W's cotangent g: the
// group sums of g * q for the scales, of g for the biases.
Array dequantize_cotangent(const Array& wq, const Array& scales, const Array& g, int arg, QuantLayout l,
                           Stream s) {
  if (arg == 0) return zeros_like(wq, s);
  const Array terms = arg == 1 ? multiply(g, levels(wq, scales, l, s), s) : g;
  Shape shape = g.shape();
  shape.back() /= l.group_size;
  shape.push_back(l.group_size);
  return sum(reshape(terms, shape, s), -1, false, s);
}

class Quantize final : public PrimitiveWithParams<Quantize> {
 public:
  Quantize(Stream s, QuantLayout l) : PrimitiveWithParams(s), l_(l) {}
  const char* name() const override { return "Quantize"; }
  auto params() const { return std::tie(l_.bits, l_.group_size); }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[0].dtype() == float64)
      run<double>(in[0], out);
    else
      run<float>(in[0], out);
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const QuantizedWeight q =
        quantize(moveaxis(a.inputs[0], a.axes[0], 0, stream()), l_.group_size, l_.bits, stream());
    return {{q.weight, q.scales, q.biases}, {0, 0, 0}};
  }

 private:
  template <class C>
  void run(const Array& w, std::span<Array> out) const {
    std::vector<Array> keep;
    const C* values = dense<C>(w, dtype_of<C>(), keep);
    const int64_t k = w.shape(-1), rows = k == 0 ? 0 : w.size() / k;
    for (Array& o : out) o.allocate();
    std::vector<C> scales(static_cast<size_t>(out[1].size())), biases(scales.size());
    // quantize_rows takes a plain function pointer: one per stored dtype.
    C(*stored)
    (C) = w.dtype() == float16    ? +[](C v) { return round_as(v, float16); }
          : w.dtype() == bfloat16 ? +[](C v) { return round_as(v, bfloat16); }
                                  : +[](C v) { return v; };
    quantize_rows(values, rows, k, l_, stored, out[0].strided_data<uint32_t>(), scales.data(), biases.data());
    store(scales, out[1]);
    store(biases, out[2]);
  }
  QuantLayout l_;
};

class Dequantize final : public PrimitiveWithParams<Dequantize> {
 public:
  Dequantize(Stream s, QuantLayout l) : PrimitiveWithParams(s), l_(l) {}
  const char* name() const override { return "Dequantize"; }
  auto params() const { return std::tie(l_.bits, l_.group_size); }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const int64_t k = out[0].shape(-1), rows = k == 0 ? 0 : out[0].size() / k;
    compute_into(out[0], [&](auto* w) {
      using C = std::remove_pointer_t<decltype(w)>;
      std::vector<Array> keep;
      dequantize_rows(dense<uint32_t>(in[0], uint32, keep), dense<C>(in[1], dtype_of<C>(), keep),
                      dense<C>(in[2], dtype_of<C>(), keep), rows, k, l_, w);
    });
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array& g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums) out.push_back(dequantize_cotangent(a.primals[0], a.primals[1], g, arg, l_, s));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    // Linear in (scales, biases): the tangent is dequantize with their tangents (zeros for the rest).
    const Stream s = stream();
    Array ts = zeros_like(a.primals[1], s), tb = zeros_like(a.primals[2], s);
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      if (a.argnums[i] == 1) ts = a.tangents[i];
      if (a.argnums[i] == 2) tb = a.tangents[i];
    }
    return {dequantize(a.primals[0], ts, tb, l_.group_size, l_.bits, s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const std::vector<Array> in = batch_in_front(a, stream());
    return {{dequantize(in[0], in[1], in[2], l_.group_size, l_.bits, stream())}, {0}};
  }

 private:
  QuantLayout l_;
};

class QuantizedMatmul final : public PrimitiveWithParams<QuantizedMatmul> {
 public:
  QuantizedMatmul(Stream s, QuantLayout l, bool transpose)
      : PrimitiveWithParams(s), l_(l), transpose_(transpose) {}
  const char* name() const override { return "QuantizedMatmul"; }
  auto params() const { return std::tie(l_.bits, l_.group_size, transpose_); }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const int64_t k = in[0].shape(-1), n = out[0].shape(-1), m = n == 0 ? 0 : out[0].size() / n;
    compute_into(out[0], [&](auto* y) {
      using C = std::remove_pointer_t<decltype(y)>;
      std::vector<Array> keep;
      const Dtype t = dtype_of<C>();
      quantized_matmul(dense<C>(in[0], t, keep), m, dense<uint32_t>(in[1], uint32, keep),
                       dense<C>(in[2], t, keep), dense<C>(in[3], t, keep), n, k, l_, transpose_, y);
    });
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array &x = a.primals[0], &g = a.cotangents[0];
    std::vector<Array> out;
    Array dw;  // the cotangent of W as stored: (out, in) or (in, out)
    for (int arg : a.argnums) {
      if (arg == 0) {  // y = x W^T -> g W; y = x W -> g W^T
        out.push_back(quantized_matmul(g, a.primals[1], a.primals[2], a.primals[3], !transpose_,
                                       l_.group_size, l_.bits, s));
        continue;
      }
      if (arg == 1) {  // integers: no gradient
        out.push_back(zeros_like(a.primals[1], s));
        continue;
      }
      if (!dw.valid()) {
        const int64_t k = x.shape(-1), n = g.shape(-1);
        const Array x2 = reshape(x, {-1, k}, s), g2 = reshape(g, {-1, n}, s);
        dw = transpose_ ? matmul(swapaxes(g2, 0, 1, s), x2, s) : matmul(swapaxes(x2, 0, 1, s), g2, s);
      }
      out.push_back(dequantize_cotangent(a.primals[1], a.primals[2], dw, arg - 1, l_, s));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    Array total, ts = zeros_like(a.primals[2], s), tb = zeros_like(a.primals[3], s);
    bool weights = false;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      if (a.argnums[i] == 0)
        total = quantized_matmul(a.tangents[i], a.primals[1], a.primals[2], a.primals[3], transpose_,
                                 l_.group_size, l_.bits, s);
      if (a.argnums[i] == 2) ts = a.tangents[i], weights = true;
      if (a.argnums[i] == 3) tb = a.tangents[i], weights = true;
    }
    if (weights) {
      const Array tw = dequantize(a.primals[1], ts, tb, l_.group_size, l_.bits, s);
      const Array term = matmul(a.primals[0], transpose_ ? swapaxes(tw, 0, 1, s) : tw, s);
      total = total.valid() ? add(total, term, s) : term;
    }
    return {total.valid() ? total : zeros_like(output_like(a.primals), s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    if (a.axes[1] < 0 && a.axes[2] < 0 && a.axes[3] < 0) {  // one W: the batch is a leading dimension of x
      const Array x = moveaxis(a.inputs[0], a.axes[0], 0, s);
      return {
          {quantized_matmul(x, a.inputs[1], a.inputs[2], a.inputs[3], transpose_, l_.group_size, l_.bits, s)},
          {0}};
    }
    // A W per example: each dequantized (in a batch), then one batched product.
    std::vector<Array> in = batch_in_front(a, s);
    const Array w = dequantize(in[1], in[2], in[3], l_.group_size, l_.bits, s);  // (B, ., .)
    const Array& x = in[0];                                                      // (B, ..., k)
    const int64_t k = x.shape(-1);
    Array y = matmul(reshape(x, {x.shape(0), -1, k}, s), transpose_ ? swapaxes(w, -1, -2, s) : w, s);
    Shape shape = x.shape();
    shape.back() = y.shape(-1);
    return {{reshape(y, shape, s)}, {0}};
  }

 private:
  Array output_like(std::span<const Array> p) const {
    return quantized_matmul(p[0], p[1], p[2], p[3], transpose_, l_.group_size, l_.bits, stream());
  }
  QuantLayout l_;
  bool transpose_;
};

// The checks dequantize and quantized_matmul share: wq uint32, scales and biases alike, and their
// shapes those of one quantized array of last dimension d. Returns d.
int64_t check_quantized(const char* op, const Array& wq, const Array& scales, const Array& biases,
                        int group_size, int bits) {
  check_layout(op, group_size, bits);
  if (!wq.valid() || !scales.valid() || !biases.valid())
    throw ValueError::of(op, "an operand is an empty (default-constructed) array");
  if (wq.dtype() != uint32)
    throw DtypeError::of(op, "the quantized weight must be uint32 (quantize's packed words)", "got {}",
                         dtype_name(wq.dtype()));
  if (!is_floating(scales.dtype()) || biases.dtype() != scales.dtype())
    throw DtypeError::of(op, "scales and biases must share one floating dtype", "scales {}, biases {}",
                         dtype_name(scales.dtype()), dtype_name(biases.dtype()));
  const int64_t d = wq.ndim() == 0 ? 0 : wq.shape(-1) * (32 / bits);
  Shape groups = wq.shape();
  if (!groups.empty()) groups.back() = d / group_size;
  if (wq.ndim() < 1 || scales.shape() != groups || biases.shape() != groups)
    throw ShapeError::of(
        op, "scales and biases must be (..., d / group_size) for a weight of (..., d * bits / 32)",
        "weight {} ({} bits: d = {}), group_size {}, scales {}, biases {}", shape_str(wq.shape()), bits, d,
        group_size, shape_str(scales.shape()), shape_str(biases.shape()));
  return d;
}

}  // namespace
}  // namespace detail

QuantizedWeight quantize(const Array& w, int group_size, int bits, StreamOrDevice s) {
  detail::check_layout("quantize", group_size, bits);
  if (!w.valid()) throw ValueError::of("quantize", "the array is empty (default-constructed)");
  if (!is_floating(w.dtype()))
    throw DtypeError::of("quantize", "only floating arrays are quantized", "got {}", dtype_name(w.dtype()));
  if (w.ndim() < 2 || w.shape(-1) % group_size != 0)
    throw ShapeError::of("quantize",
                         "the array must have at least 2 dimensions, the last a multiple of group_size",
                         "shape {}, group_size {}", shape_str(w.shape()), group_size);
  Shape packed = w.shape(), groups = w.shape();
  packed.back() = w.shape(-1) * bits / 32;
  groups.back() = w.shape(-1) / group_size;
  auto prim = std::make_shared<detail::Quantize>(to_stream(s), detail::QuantLayout{bits, group_size});
  std::vector<Array> out =
      Array::make_many({packed, groups, groups}, {uint32, w.dtype(), w.dtype()}, std::move(prim), {w});
  return {out[0], out[1], out[2]};
}

Array dequantize(const Array& wq, const Array& scales, const Array& biases, int group_size, int bits,
                 StreamOrDevice s) {
  const int64_t d = detail::check_quantized("dequantize", wq, scales, biases, group_size, bits);
  Shape shape = wq.shape();
  shape.back() = d;
  return Array::make(
      std::move(shape), scales.dtype(),
      std::make_shared<detail::Dequantize>(to_stream(s), detail::QuantLayout{bits, group_size}),
      {wq, scales, biases});
}

Array quantized_matmul(const Array& x, const Array& wq, const Array& scales, const Array& biases,
                       bool transpose, int group_size, int bits, StreamOrDevice s) {
  const char* op = "quantized_matmul";
  const int64_t d = detail::check_quantized(op, wq, scales, biases, group_size, bits);
  if (!x.valid()) throw ValueError::of(op, "x is an empty (default-constructed) array");
  if (wq.ndim() != 2)
    throw ShapeError::of(op, "the quantized weight must be a matrix", "got {}", shape_str(wq.shape()));
  const Dtype t = promote_types(x.dtype(), scales.dtype());
  if (!is_floating(t))
    throw DtypeError::of(op, "x must be floating", "x {}, scales {}", dtype_name(x.dtype()), dtype_name(t));
  // W is (out, in) with transpose, (in, out) without; its stored rows have d values.
  const int64_t in = transpose ? d : wq.shape(0), out = transpose ? wq.shape(0) : d;
  if (x.ndim() < 1 || x.shape(-1) != in)
    throw ShapeError::of(op, "x's last dimension must be the weight's input dimension",
                         "x {}, weight {} x {} ({}), transpose {}", shape_str(x.shape()),
                         transpose ? out : in, transpose ? in : out, transpose ? "(out, in)" : "(in, out)",
                         transpose);
  Shape shape = x.shape();
  shape.back() = out;
  const Array xt = x.dtype() == t ? x : astype(x, t, s);
  const Array st = scales.dtype() == t ? scales : astype(scales, t, s),
              bt = biases.dtype() == t ? biases : astype(biases, t, s);
  return Array::make(std::move(shape), t,
                     std::make_shared<detail::QuantizedMatmul>(
                         to_stream(s), detail::QuantLayout{bits, group_size}, transpose),
                     {xt, wq, st, bt});
}

}  // namespace kiln
