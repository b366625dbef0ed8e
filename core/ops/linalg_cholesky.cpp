// kiln::linalg's triangular family: the Cholesky primitive (potrf) and SolveTriangular (trsm),
// whose rules are written with each other.
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/linalg_decomp.h"
#include "kiln/core/ops/linalg_decomp_impl.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace detail::la {
namespace {

// L with a = L L^T, from a's lower triangle.
class Cholesky final : public PrimitiveWithParams<Cholesky, HostPrimitive> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Cholesky"; }
  auto params() const { return std::tuple<>(); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_cholesky("cholesky", in[0], out[0]);
  }
  // PyTorch's cholesky_backward: ga = L^-T Phi(L^T gL) L^-1 with Phi keeping the lower triangle
  // and halving the diagonal, made symmetric.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array& l = a.outputs[0];
    Array p = tril(matmul(mT(l, s), a.cotangents[0], s), 0, s);
    p = multiply(add(p, mT(tril(p, -1, s), s), s), 0.5, s);
    p = solve_tri(mT(l, s), p, true, true, false, s);  // L^-T p
    return {solve_tri(l, p, false, false, false, s)};  // (L^-T p) L^-1
  }
  // JAX's cholesky_jvp_rule: dL = L Phi(L^-1 sym(da) L^-T).
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Array l = cholesky_lower(a.primals[0], s);
    Array x = solve_tri(l, sym(a.tangents[0], s), false, true, false, s);  // L^-1 da
    x = solve_tri(mT(l, s), x, true, false, false, s);                     // (L^-1 da) L^-T
    const Array phi = subtract(tril(x, 0, s), multiply(diag_embed(diagonal(x, s), s), 0.5, s), s);
    return {matmul(l, phi, s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    return {{cholesky_lower(batch_first(a.inputs[0], a.axes[0], stream()), stream())}, {0}};
  }
};

// x = a^-1 b (left) or b a^-1 with a's upper or lower triangle; a and b have the same batch dims.
class SolveTriangular final : public PrimitiveWithParams<SolveTriangular, HostPrimitive> {
 public:
  SolveTriangular(Stream s, bool upper, bool left, bool unit)
      : PrimitiveWithParams(s), upper_(upper), left_(left), unit_(unit) {}
  const char* name() const override { return "SolveTriangular"; }
  auto params() const { return std::tie(upper_, left_, unit_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[1].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    blas_solve_triangular(in[0], in[1], upper_, left_, unit_, out[0]);
  }
  // left: gb = a^-T g, ga = -gb x^T; right: gb = g a^-T, ga = -x^T gb; ga keeps a's triangle.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array& x = a.outputs[0];
    const Array gb = solve_tri(mT(a.primals[0], s), a.cotangents[0], !upper_, left_, unit_, s);
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 1) {
        out.push_back(gb);
      } else {
        const Array p = left_ ? matmul(gb, mT(x, s), s) : matmul(mT(x, s), gb, s);
        out.push_back(negative(triangle(p, s), s));
      }
    }
    return out;
  }
  // left: dx = a^-1 (db - da x); right: dx = (db - x da) a^-1; da is read in a's triangle.
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Array& m = a.primals[0];
    Array rhs;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      Array t = a.tangents[i];
      if (a.argnums[i] == 0) {
        const Array x = solve_tri(m, a.primals[1], upper_, left_, unit_, s);
        const Array da = triangle(t, s);
        t = negative(left_ ? matmul(da, x, s) : matmul(x, da, s), s);
      }
      rhs = rhs.valid() ? add(rhs, t, s) : t;
    }
    return {solve_tri(m, rhs, upper_, left_, unit_, s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const auto [m, b] = batch_first(a, stream());
    return {{solve_tri(m, b, upper_, left_, unit_, stream())}, {0}};
  }

 private:
  // The entries of a the solve reads.
  Array triangle(const Array& x, Stream s) const {
    return upper_ ? triu(x, unit_ ? 1 : 0, s) : tril(x, unit_ ? -1 : 0, s);
  }
  const bool upper_, left_, unit_;
};

}  // namespace

Array cholesky_lower(const Array& a, Stream s) {
  return Array::make(a.shape(), a.dtype(), std::make_shared<Cholesky>(s), {a});
}

Array solve_tri(const Array& a, const Array& b, bool upper, bool left, bool unit, Stream s) {
  auto [x, y] = broadcast_batch("solve_triangular", a, b, s);
  const Shape shape = y.shape();
  return Array::make(shape, a.dtype(), std::make_shared<SolveTriangular>(s, upper, left, unit),
                     {std::move(x), std::move(y)});
}

}  // namespace detail::la

namespace linalg {

using namespace detail::la;

Array cholesky(const Array& a, bool upper, StreamOrDevice sd) {
  check_matrix("cholesky", a, true);
  const Stream s = to_stream(sd);
  const Array x = to_compute(a, s);
  // The upper triangle of a is the lower one of a^T, and U = L^T.
  const Array out = upper ? mT(cholesky_lower(mT(x, s), s), s) : cholesky_lower(x, s);
  return to_result(out, a.dtype(), s);
}

Array solve_triangular(const Array& a, const Array& b, bool upper, bool left, bool unitriangular,
                       StreamOrDevice sd) {
  check_matrix("solve_triangular", a, true);
  check_matrix("solve_triangular", b, false);
  const int64_t n = a.shape(-1), rows = left ? b.shape(-2) : b.shape(-1);
  if (rows != n)
    throw ShapeError::of("solve_triangular", "the right-hand side does not match the matrix",
                         "a {}, b {} ({})", shape_str(a.shape()), shape_str(b.shape()),
                         left ? "a x = b" : "x a = b");
  const Stream s = to_stream(sd);
  const Dtype t = promote_types(a.dtype(), b.dtype());
  const Dtype c = compute_dtype(t);
  return to_result(solve_tri(astype(a, c, s), astype(b, c, s), upper, left, unitriangular, s), t, s);
}

}  // namespace linalg
}  // namespace kiln
