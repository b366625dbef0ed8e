// The LU family of kiln::linalg: Inv, Solve and Slogdet primitives (getrf with getri, getrs, or the
// product of the pivots), and det as sign * exp(logabsdet).
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/linalg_decomp.h"
#include "kiln/core/ops/linalg_decomp_impl.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace detail::la {
namespace {

class Inv final : public PrimitiveWithParams<Inv, HostPrimitive> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Inv"; }
  auto params() const { return std::tuple<>(); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_inv("inv", in[0], out[0]);
  }
  // d(a^-1) = -a^-1 da a^-1.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array xt = mT(a.outputs[0], s);
    return {negative(matmul(matmul(xt, a.cotangents[0], s), xt, s), s)};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Array x = inv_matrices(a.primals[0], s);
    return {negative(matmul(matmul(x, a.tangents[0], s), x, s), s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    return {{inv_matrices(batch_first(a.inputs[0], a.axes[0], stream()), stream())}, {0}};
  }
};

// x = a^-1 b with a (..., n, n) and b (..., n, k) of the same batch dims.
class Solve final : public PrimitiveWithParams<Solve, HostPrimitive> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Solve"; }
  auto params() const { return std::tuple<>(); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[1].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_solve("solve", in[0], in[1], out[0]);
  }
  // gb = a^-T g, ga = -gb x^T.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array gb = solve_matrices(mT(a.primals[0], s), a.cotangents[0], s);
    std::vector<Array> out;
    for (int arg : a.argnums) out.push_back(arg == 1 ? gb : negative(matmul(gb, mT(a.outputs[0], s), s), s));
    return out;
  }
  // dx = a^-1 (db - da x).
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    Array rhs;
    Array x;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      if (a.argnums[i] == 1) {
        rhs = rhs.valid() ? add(rhs, a.tangents[i], s) : a.tangents[i];
      } else {
        x = solve_matrices(a.primals[0], a.primals[1], s);
        const Array t = negative(matmul(a.tangents[i], x, s), s);
        rhs = rhs.valid() ? add(rhs, t, s) : t;
      }
    }
    return {solve_matrices(a.primals[0], rhs, s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const auto [x, b] = batch_first(a, stream());
    return {{solve_matrices(x, b, stream())}, {0}};
  }
};

// {sign, log|det|}; the sign's gradient is zero.
class Slogdet final : public PrimitiveWithParams<Slogdet, HostPrimitive> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Slogdet"; }
  auto params() const { return std::tuple<>(); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    const Shape batch(in[0].shape().begin(), in[0].shape().end() - 2);
    return {batch, batch};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_slogdet(in[0], out[0], out[1]);
  }
  // d log|det a| = tr(a^-1 da): the gradient is g a^-T.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array g = expand_dims(a.cotangents[1], {-2, -1}, s);
    return {multiply(g, mT(inv_matrices(a.primals[0], s), s), s)};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Array& x = a.primals[0];
    const Array dl = sum(multiply(mT(inv_matrices(x, s), s), a.tangents[0], s), {-2, -1}, false, s);
    const Shape batch(x.shape().begin(), x.shape().end() - 2);
    return {zeros(batch, x.dtype(), s), dl};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    auto [sign, logabsdet] = slogdet_matrices(batch_first(a.inputs[0], a.axes[0], stream()), stream());
    return {{sign, logabsdet}, {0, 0}};
  }
};

}  // namespace

Array inv_matrices(const Array& a, Stream s) {
  return Array::make(a.shape(), a.dtype(), std::make_shared<Inv>(s), {a});
}

Array solve_matrices(const Array& a, const Array& b, Stream s) {
  auto [x, y] = broadcast_batch("solve", a, b, s);
  const Shape shape = y.shape();
  return Array::make(shape, a.dtype(), std::make_shared<Solve>(s), {std::move(x), std::move(y)});
}

std::pair<Array, Array> slogdet_matrices(const Array& a, Stream s) {
  const Shape batch(a.shape().begin(), a.shape().end() - 2);
  auto out = Array::make_many({batch, batch}, {a.dtype(), a.dtype()}, std::make_shared<Slogdet>(s), {a});
  return {out[0], out[1]};
}

}  // namespace detail::la

namespace linalg {

using namespace detail::la;

Array inv(const Array& a, StreamOrDevice sd) {
  check_matrix("inv", a, true);
  const Stream s = to_stream(sd);
  return to_result(inv_matrices(to_compute(a, s), s), a.dtype(), s);
}

Array solve(const Array& a, const Array& b, bool left, StreamOrDevice sd) {
  check_matrix("solve", a, true);
  if (!b.valid()) throw ValueError::of("solve", "an operand is an empty (default-constructed) array");
  if (b.ndim() == 0)
    throw ShapeError::of("solve", "the right-hand side needs at least 1 dimension", "got a scalar");
  const Stream s = to_stream(sd);
  const int64_t n = a.shape(-1);
  // torch.linalg.solve: b is a vector when 1-d, or when it has a's batch dims and one dim of n.
  const Shape a_rows(a.shape().begin(), a.shape().end() - 1);
  const bool vector = b.ndim() == 1 || (b.ndim() == a.ndim() - 1 && b.shape() == a_rows);
  const int64_t rows = vector ? b.shape(-1) : (left ? b.shape(-2) : b.shape(-1));
  if (rows != n)
    throw ShapeError::of("solve", "the right-hand side does not match the matrix", "a {}, b {} ({})",
                         shape_str(a.shape()), shape_str(b.shape()), left ? "a x = b" : "x a = b");
  const Dtype t = promote_types(a.dtype(), b.dtype());
  const Dtype c = compute_dtype(t);
  Array x = astype(a, c, s), y = astype(b, c, s);
  if (!left) x = mT(x, s);  // x a = b  <=>  a^T x^T = b^T
  if (vector)
    y = expand_dims(y, -1, s);
  else if (!left)
    y = mT(y, s);
  {  // batch dims must broadcast (checked here, so the error names solve with the user's shapes)
    const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(y.shape().begin(), y.shape().end() - 2);
    try {
      (void)broadcast_shapes("solve", ab, bb);
    } catch (const ShapeError&) {
      throw ShapeError::of("solve", "batch dimensions do not broadcast", "a {}, b {}", shape_str(a.shape()),
                           shape_str(b.shape()));
    }
  }
  Array out = solve_matrices(x, y, s);
  if (vector)
    out = squeeze(out, -1, s);
  else if (!left)
    out = mT(out, s);
  return to_result(out, t, s);
}

std::pair<Array, Array> slogdet(const Array& a, StreamOrDevice sd) {
  check_matrix("slogdet", a, true);
  const Stream s = to_stream(sd);
  auto [sign, logabsdet] = slogdet_matrices(to_compute(a, s), s);
  return {to_result(sign, a.dtype(), s), to_result(logabsdet, a.dtype(), s)};
}

Array det(const Array& a, StreamOrDevice sd) {
  check_matrix("det", a, true);
  const Stream s = to_stream(sd);
  auto [sign, logabsdet] = slogdet_matrices(to_compute(a, s), s);
  return to_result(multiply(sign, exp(logabsdet, s), s), a.dtype(), s);
}

}  // namespace linalg
}  // namespace kiln
