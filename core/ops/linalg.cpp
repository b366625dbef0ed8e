// Matrix products: matmul and addmm as primitives over the OpenBLAS kernel in core/cpu/gemm.cpp.
#include "kiln/core/ops/linalg.h"

#include <algorithm>
#include <climits>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/gemm.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {
namespace {

void check_valid(const char* op, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "an operand is an empty (default-constructed) array");
}

// Integer and bool operands are computed in float32, as the header documents.
Dtype product_dtype(Dtype t) { return is_floating(t) ? t : float32; }

// Shape of a @ b for operands of rank >= 2: broadcast batch dims, then (M, N).
Shape product_shape(const char* op, const Shape& a, const Shape& b) {
  const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape out = broadcast_shapes(op, ab, bb);
  out.push_back(a[a.size() - 2]);
  out.push_back(b[b.size() - 1]);
  return out;
}

// Validates a @ b with NumPy's rules and returns the final (user-visible) result shape.
Shape checked_product_shape(const char* op, const Shape& a, const Shape& b) {
  if (a.empty() || b.empty())
    throw ShapeError::of(op, "operands need at least one dimension", "{} @ {}", shape_str(a), shape_str(b));
  const int64_t k_a = a.back(), k_b = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (k_a != k_b) throw ShapeError::of(op, "inner dimensions differ", "{} @ {}", shape_str(a), shape_str(b));
  Shape a2 = a, b2 = b;
  if (a.size() == 1) a2.insert(a2.begin(), 1);
  if (b.size() == 1) b2.push_back(1);
  Shape out;
  try {
    out = product_shape(op, a2, b2);
  } catch (const ShapeError&) {
    throw ShapeError::of(op, "batch dimensions do not broadcast", "{} @ {}", shape_str(a), shape_str(b));
  }
  const int64_t m = a2[a2.size() - 2], n = b2.back();
  if (m > INT_MAX || n > INT_MAX || k_a > INT_MAX)
    throw ShapeError::of(op, "matrix dimensions exceed BLAS's 32-bit range", "{} @ {}", shape_str(a),
                         shape_str(b));
  if (b.size() == 1) out.pop_back();
  if (a.size() == 1) out.erase(out.end() - (b.size() == 1 ? 1 : 2));
  return out;
}

Array mT(const Array& x, Stream s) { return swapaxes(x, -1, -2, s); }

// d(a @ b)/da applied to g, summed over the batch dims that a was broadcast along.
Array grad_lhs(const Array& g, const Array& b, const Shape& a_shape, Stream s) {
  return sum_to_shape(matmul(g, mT(b, s), s), a_shape, s);
}
Array grad_rhs(const Array& a, const Array& g, const Shape& b_shape, Stream s) {
  if (b_shape.size() == 2 && a.ndim() > 2) {
    // b was shared by every batch entry: one GEMM over the flattened batch replaces a batched
    // product followed by a reduction (the Linear layer's weight gradient).
    const int64_t k = a.shape(-1), n = g.shape(-1);
    return matmul(mT(reshape(a, {-1, k}, s), s), reshape(g, {-1, n}, s), s);
  }
  return sum_to_shape(matmul(mT(a, s), g, s), b_shape, s);
}

// Moves each batched operand's vmap axis to the front and pads it with size-1 dims to rank
// `rank` + 1, so that right-aligned broadcasting lines up the per-example dims.
std::vector<Array> align_batched(const VmapArgs& a, int rank, Stream s) {
  std::vector<Array> in;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    Array v = a.inputs[i];
    if (a.axes[i] >= 0) {
      v = moveaxis(v, a.axes[i], 0, s);
      Shape sh = v.shape();
      const int missing = rank + 1 - v.ndim();
      if (missing > 0) {
        sh.insert(sh.begin() + 1, missing, 1);
        v = reshape(v, sh, s);
      }
    }
    in.push_back(std::move(v));
  }
  return in;
}
int per_example_rank(const VmapArgs& a, size_t i) { return a.inputs[i].ndim() - (a.axes[i] >= 0 ? 1 : 0); }

class Matmul final : public PrimitiveWithParams<Matmul> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Matmul"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  // Checked (inner dimensions): shapeless compile replays it on new shapes.
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {checked_product_shape("matmul", in[0].shape(), in[1].shape())};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].allocate();
    batched_matmul(in[0], in[1], out[0], 1.0, 0.0);
  }
  // Every dtype batched_matmul takes (float16/bfloat16 accumulate in float32); the kernel
  // throws NotImplemented where the device lacks one.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::matmul(in[0], in[1], out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &y = a.primals[1], &g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(arg == 0 ? grad_lhs(g, y, x.shape(), stream()) : grad_rhs(x, g, y.shape(), stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    Array total;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      const Array t = a.argnums[i] == 0 ? matmul(a.tangents[i], a.primals[1], stream())
                                        : matmul(a.primals[0], a.tangents[i], stream());
      total = total.valid() ? add(total, t, stream()) : t;
    }
    return {total};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int rank = std::max(per_example_rank(a, 0), per_example_rank(a, 1));
    const auto in = align_batched(a, rank, stream());
    return {{matmul(in[0], in[1], stream())}, {0}};
  }
};

// beta * c + alpha * a @ b in one pass: c is copied into the output and GEMM accumulates onto it.
class AddMM final : public PrimitiveWithParams<AddMM> {
 public:
  AddMM(Stream s, double alpha, double beta) : PrimitiveWithParams(s), alpha_(alpha), beta_(beta) {}
  const char* name() const override { return "AddMM"; }
  auto params() const { return std::tie(alpha_, beta_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }

  static Shape shape_of(const Shape& c, const Shape& a, const Shape& b) {
    return broadcast_shapes("addmm", c, checked_product_shape("addmm", a, b));
  }
  static Array build(const Array& c, const Array& a, const Array& b, double alpha, double beta, Stream s) {
    return Array::make(shape_of(c.shape(), a.shape(), b.shape()), a.dtype(),
                       std::make_shared<AddMM>(s, alpha, beta), {c, a, b});
  }

  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {shape_of(in[0].shape(), in[1].shape(), in[2].shape())};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].allocate();
    if (beta_ != 0.0) copy_strided(in[0], out[0]);  // with beta == 0, c is ignored, NaNs included
    batched_matmul(in[1], in[2], out[0], alpha_, beta_);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::matmul(in[1], in[2], out[0], &in[0], alpha_, beta_);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &c = a.primals[0], &x = a.primals[1], &y = a.primals[2], &g = a.cotangents[0];
    const Stream s = stream();
    const Array ga = alpha_ == 1.0 ? g : multiply(g, alpha_, s);
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0) {
        out.push_back(sum_to_shape(beta_ == 1.0 ? g : multiply(g, beta_, s), c.shape(), s));
      } else if (arg == 1) {
        out.push_back(grad_lhs(ga, y, x.shape(), s));
      } else {
        out.push_back(grad_rhs(x, ga, y.shape(), s));
      }
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Shape shape = shape_of(a.primals[0].shape(), a.primals[1].shape(), a.primals[2].shape());
    Array total;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      const Array& t = a.tangents[i];
      Array term;
      if (a.argnums[i] == 0)
        term = multiply(t, beta_, s);
      else if (a.argnums[i] == 1)
        term = multiply(matmul(t, a.primals[2], s), alpha_, s);
      else
        term = multiply(matmul(a.primals[1], t, s), alpha_, s);
      total = total.valid() ? add(total, term, s) : term;
    }
    if (total.shape() != shape) total = broadcast_to(total, shape, s);
    return {total};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int rank = std::max({per_example_rank(a, 0), per_example_rank(a, 1), per_example_rank(a, 2)});
    const auto in = align_batched(a, rank, stream());
    // c may be the only batched input; the output takes the batch dim from it then.
    return {{build(in[0], in[1], in[2], alpha_, beta_, stream())}, {0}};
  }

 private:
  double alpha_, beta_;
};

}  // namespace
}  // namespace detail

Array matmul(const Array& a, const Array& b, StreamOrDevice s) {
  detail::check_valid("matmul", a);
  detail::check_valid("matmul", b);
  const Shape final_shape = detail::checked_product_shape("matmul", a.shape(), b.shape());
  const Dtype t = detail::product_dtype(promote_types(a.dtype(), b.dtype()));
  Array x = astype(a, t, s), y = astype(b, t, s);
  if (a.ndim() == 1) x = reshape(x, {1, a.shape(0)}, s);
  if (b.ndim() == 1) y = reshape(y, {b.shape(0), 1}, s);
  Shape shape = detail::product_shape("matmul", x.shape(), y.shape());
  const bool squeeze_result = shape != final_shape;
  Array out = Array::make(std::move(shape), t, std::make_shared<detail::Matmul>(to_stream(s)), {x, y});
  return squeeze_result ? reshape(out, final_shape, s) : out;
}

Array addmm(const Array& c, const Array& a, const Array& b, double alpha, double beta, StreamOrDevice s) {
  detail::check_valid("addmm", c);
  detail::check_valid("addmm", a);
  detail::check_valid("addmm", b);
  const Shape final_shape = detail::checked_product_shape("addmm", a.shape(), b.shape());
  bool fits = c.ndim() <= static_cast<int>(final_shape.size());
  for (int i = 1; fits && i <= c.ndim(); ++i) {
    const int64_t dc = c.shape()[c.ndim() - i], d = final_shape[final_shape.size() - i];
    fits = dc == d || dc == 1;
  }
  if (!fits)
    throw ShapeError::of("addmm", "c does not broadcast to the product's shape", "c {}, {} @ {} is {}",
                         shape_str(c.shape()), shape_str(a.shape()), shape_str(b.shape()),
                         shape_str(final_shape));
  const Dtype t = detail::product_dtype(promote_types(c.dtype(), promote_types(a.dtype(), b.dtype())));
  Array z = astype(c, t, s), x = astype(a, t, s), y = astype(b, t, s);
  // 1-d operands become matrices; c gets the same unit dims so it stays aligned with the product.
  if (a.ndim() == 1) {
    x = reshape(x, {1, a.shape(0)}, s);
    if (b.ndim() != 1 && z.ndim() >= 1) z = expand_dims(z, z.ndim() - 1, s);
  }
  if (b.ndim() == 1) {
    y = reshape(y, {b.shape(0), 1}, s);
    if (a.ndim() != 1 && z.ndim() >= 1) z = expand_dims(z, z.ndim(), s);
  }
  Array out = detail::AddMM::build(z, x, y, alpha, beta, to_stream(s));
  return out.shape() != final_shape ? reshape(out, final_shape, s) : out;
}

}  // namespace kiln
