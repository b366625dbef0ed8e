// linear(x, w, b) = x @ w^T + b as one primitive. Its weight gradient is computed as g^T @ x, so it
// comes out in w's own (out, in) row-major layout: built from matmul(x, transpose(w)), the
// gradient would be a transposed view, and every optimizer op reading it would walk it strided.
#include <algorithm>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/gemm.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {
namespace {

// x @ w^T + b written out of ops: the rule for tangents and batched weights.
Array linear_from_ops(const Array& x, const Array& w, const Array& b, Stream s) {
  const Array y = matmul(x, swapaxes(w, -1, -2, s), s);
  return b.valid() ? add(y, b, s) : y;
}

template <class T>
void linear_cpu(const Array& x, const Array& w, const Array* b, Array& out) {
  const int64_t in = w.shape(1), units = w.shape(0), rows = units == 0 ? 0 : out.size() / units;
  T* o = out.strided_data<T>();
  if (rows == 0 || units == 0) return;
  if (in == 0) {  // an empty sum: the bias, or zeros
    const Array bc = b ? dense_copy(*b) : Array();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < units; ++u) o[r * units + u] = b ? bc.strided_data<T>()[u] : T(0);
    return;
  }
  const Array xc = dense_copy(x), wc = dense_copy(w);
  if (b) {  // GEMM accumulates onto the bias rows
    const Array bc = dense_copy(*b);
    const T* bp = bc.strided_data<T>();
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(units, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + units, o + r * units);
                 });
  }
  gemm(false, true, rows, units, in, T(1), xc.strided_data<T>(), in, wc.strided_data<T>(), in, T(b ? 1 : 0),
       o, units);
}

class Linear final : public PrimitiveWithParams<Linear> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Linear"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  // Checks what linear() checked: shapeless compile replays it on new shapes.
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    const Shape &x = in[0].shape(), &w = in[1].shape();
    if (x.back() != w[1] || (in.size() == 3 && in[2].shape() != Shape{w[0]}))
      throw ShapeError::of("linear", "x's last dimension must be weight's in, bias (out)",
                           "x {}, weight {}{}", shape_str(x), shape_str(w),
                           in.size() == 3 ? ", bias " + shape_str(in[2].shape()) : "");
    Shape s = x;
    s.back() = w[0];
    return {s};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].allocate();
    const Array* b = in.size() == 3 ? &in[2] : nullptr;
    if (in[0].dtype() == float32)
      linear_cpu<float>(in[0], in[1], b, out[0]);
    else
      linear_cpu<double>(in[0], in[1], b, out[0]);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[0].dtype() != float32 && in[0].dtype() != float64)
      throw NotImplemented::of(name(), "only float32 and float64 have a GPU kernel yet", "{}",
                               dtype_name(in[0].dtype()));
    gpu::linear(in[0], in[1], in.size() == 3 ? &in[2] : nullptr, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &w = a.primals[1], &g = a.cotangents[0];
    const Stream s = stream();
    const int64_t in = w.shape(1), units = w.shape(0);
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0) {
        out.push_back(matmul(g, w, s));
      } else if (arg == 1) {  // (units, rows) @ (rows, in): row-major in w's layout
        out.push_back(matmul(swapaxes(reshape(g, {-1, units}, s), 0, 1, s), reshape(x, {-1, in}, s), s));
      } else {
        out.push_back(sum(reshape(g, {-1, units}, s), 0, false, s));
      }
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    Array total;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      const Array& t = a.tangents[i];
      Array term;
      if (a.argnums[i] == 0)
        term = linear(t, a.primals[1], Array(), s);
      else if (a.argnums[i] == 1)
        term = linear(a.primals[0], t, Array(), s);
      else
        term = broadcast_to(t, output_shapes(a.primals)[0], s);
      total = total.valid() ? add(total, term, s) : term;
    }
    return {total};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Stream s = stream();
    const bool has_bias = a.inputs.size() == 3;
    const bool shared = a.axes[1] < 0 && (!has_bias || a.axes[2] < 0);
    if (shared) {  // only x batched: the batch is one more leading dimension of x
      const Array x = moveaxis(a.inputs[0], a.axes[0], 0, s);
      return {{linear(x, a.inputs[1], has_bias ? a.inputs[2] : Array(), s)}, {0}};
    }
    // Batched weights: (B, units, in). x goes to (B, ..., in) (broadcast when it is shared), the
    // product is batched over B, and the bias (B, units) broadcasts over x's middle dimensions.
    int64_t batch = 0;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      if (a.axes[i] >= 0) batch = a.inputs[i].shape(a.axes[i]);
    Array x = a.axes[0] >= 0 ? moveaxis(a.inputs[0], a.axes[0], 0, s) : expand_dims(a.inputs[0], 0, s);
    Shape xs = x.shape();
    xs[0] = batch;
    x = broadcast_to(x, xs, s);
    const Array w = a.axes[1] >= 0 ? moveaxis(a.inputs[1], a.axes[1], 0, s) : a.inputs[1];
    const int64_t in = w.shape(-1);
    Array y = matmul(reshape(x, {batch, -1, in}, s), swapaxes(w, -1, -2, s), s);  // (B, rows, units)
    if (has_bias) {
      Array b = a.axes[2] >= 0 ? moveaxis(a.inputs[2], a.axes[2], 0, s) : a.inputs[2];
      y = add(y, b.ndim() == 2 ? expand_dims(b, 1, s) : b, s);
    }
    Shape ys = xs;
    ys.back() = y.shape(-1);
    return {{reshape(y, ys, s)}, {0}};
  }
};

}  // namespace
}  // namespace detail

Array linear(const Array& x, const Array& weight, const Array& bias, StreamOrDevice s) {
  if (!x.valid() || !weight.valid())
    throw ValueError::of("linear", "an operand is an empty (default-constructed) array");
  if (weight.ndim() != 2)
    throw ShapeError::of("linear", "weight must be (out, in)", "got {}", shape_str(weight.shape()));
  if (x.ndim() < 1 || x.shape().back() != weight.shape(1))
    throw ShapeError::of("linear", "x's last dimension must be weight's in", "x {}, weight {}",
                         shape_str(x.shape()), shape_str(weight.shape()));
  if (bias.valid() && bias.shape() != Shape{weight.shape(0)})
    throw ShapeError::of("linear", "bias must be (out)", "weight {}, bias {}", shape_str(weight.shape()),
                         shape_str(bias.shape()));
  const Stream st = to_stream(s);
  Dtype t = promote_types(x.dtype(), weight.dtype());
  if (bias.valid()) t = promote_types(t, bias.dtype());
  // float32/float64 run as one GEMM; other dtypes through matmul's rules.
  if (t != float32 && t != float64) return detail::linear_from_ops(x, weight, bias, st);
  std::vector<Array> inputs{astype(x, t, s), astype(weight, t, s)};
  if (bias.valid()) inputs.push_back(astype(bias, t, s));
  Shape shape = x.shape();
  shape.back() = weight.shape(0);
  return Array::make(std::move(shape), t, std::make_shared<detail::Linear>(st), std::move(inputs));
}

}  // namespace kiln
