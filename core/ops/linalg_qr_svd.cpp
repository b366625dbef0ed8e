// kiln::linalg's orthogonal decompositions: the Qr (geqrf, orgqr), Svd (gesdd) and Eigh (syevd)
// primitives, with the derivative rules of PyTorch's FunctionsManual.cpp (vjp) and JAX's
// lax/linalg.py (jvp).
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

Array columns(const Array& x, int64_t begin, int64_t end, Stream s) {
  std::vector<Slice> sl(x.ndim() - 1);
  sl.push_back(Slice{begin, end, 1});
  return slice(x, sl, s);
}
Array rows(const Array& x, int64_t begin, int64_t end, Stream s) {
  std::vector<Slice> sl(x.ndim() - 2);
  sl.push_back(Slice{begin, end, 1});
  return slice(x, sl, s);
}

// ---------------------------------------------------------------- QR

// The vjp of a = q r for m >= n (r square): ga = (gq + q copyltu(M)) r^-T, M = r gr^T - gq^T q.
Array qr_vjp_tall(const Array& q, const Array& r, const Array& gq, const Array& gr, Stream s) {
  const Array m = subtract(matmul(r, mT(gr, s), s), matmul(mT(gq, s), q, s), s);
  const Array copyltu = add(tril(m, 0, s), mT(tril(m, -1, s), s), s);
  const Array b = add(gq, matmul(q, copyltu, s), s);
  return solve_tri(mT(r, s), b, false, false, false, s);  // b r^-T
}

// The jvp for m >= n: with C = q^T da r^-1 and its skew part O (from C's strict lower triangle),
// dr = (C - O) r and dq = da r^-1 - q (C - O).
std::pair<Array, Array> qr_jvp_tall(const Array& q, const Array& r, const Array& da, Stream s) {
  const Array da_rinv = solve_tri(r, da, true, false, false, s);
  const Array c = matmul(mT(q, s), da_rinv, s);
  const Array low = tril(c, -1, s);
  const Array c_minus_o = subtract(c, subtract(low, mT(low, s), s), s);
  return {subtract(da_rinv, matmul(q, c_minus_o, s), s), matmul(c_minus_o, r, s)};
}

class Qr final : public PrimitiveWithParams<Qr, HostPrimitive> {
 public:
  Qr(Stream s, bool complete) : PrimitiveWithParams(s), complete_(complete) {}
  const char* name() const override { return "Qr"; }
  auto params() const { return std::tie(complete_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return shapes(in[0].shape()); }
  std::vector<Shape> shapes(const Shape& a) const {
    const int64_t m = a[a.size() - 2], n = a.back(), k = complete_ ? m : std::min(m, n);
    Shape q = a, r = a;
    q.back() = k;
    r[r.size() - 2] = k;
    return {q, r};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_qr(in[0], complete_, out[0], out[1]);
  }
  // m >= n as qr_vjp_tall; m < n splits a = [x | y]: x = q u, v = q^T y.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array &x = a.primals[0], &q = a.outputs[0], &r = a.outputs[1];
    const Array &gq = a.cotangents[0], &gr = a.cotangents[1];
    const int64_t m = x.shape(-2), n = x.shape(-1);
    check_differentiable(m, n);
    if (m >= n) return {qr_vjp_tall(q, r, gq, gr, s)};
    const Array u = columns(r, 0, m, s), gu = columns(gr, 0, m, s), gv = columns(gr, m, n, s);
    const Array y = columns(x, m, n, s);
    const Array gx = qr_vjp_tall(q, u, add(gq, matmul(y, mT(gv, s), s), s), gu, s);
    return {concatenate({gx, matmul(q, gv, s)}, -1, s)};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Array &x = a.primals[0], &da = a.tangents[0];
    const int64_t m = x.shape(-2), n = x.shape(-1);
    check_differentiable(m, n);
    const auto [q, r] = qr_matrices(x, complete_, s);
    if (m >= n) {
      auto [dq, dr] = qr_jvp_tall(q, r, da, s);
      return {dq, dr};
    }
    const Array u = columns(r, 0, m, s), v = columns(r, m, n, s);
    auto [dq, du] = qr_jvp_tall(q, u, columns(da, 0, m, s), s);
    const Array dv = matmul(mT(q, s), subtract(columns(da, m, n, s), matmul(dq, v, s), s), s);
    return {dq, concatenate({du, dv}, -1, s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    auto [q, r] = qr_matrices(batch_first(a.inputs[0], a.axes[0], stream()), complete_, stream());
    return {{q, r}, {0, 0}};
  }

 private:
  void check_differentiable(int64_t m, int64_t n) const {
    if (complete_ && m > n)
      throw NotImplemented::of("qr",
                               "the derivative of mode 'complete' with more rows than columns is not defined",
                               "Q's last {} columns are any orthonormal basis of the complement", m - n);
  }
  const bool complete_;
};

// ---------------------------------------------------------------- SVD

class Svd final : public PrimitiveWithParams<Svd, HostPrimitive> {
 public:
  Svd(Stream s, bool full) : PrimitiveWithParams(s), full_(full) {}
  const char* name() const override { return "Svd"; }
  auto params() const { return std::tie(full_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return shapes(in[0].shape()); }
  std::vector<Shape> shapes(const Shape& a) const {
    const int64_t m = a[a.size() - 2], n = a.back(), k = std::min(m, n);
    Shape u = a, sv(a.begin(), a.end() - 1), vh = a;
    u.back() = full_ ? m : k;
    sv.back() = k;
    vh[vh.size() - 2] = full_ ? n : k;
    return {u, sv, vh};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_svd("svd", in[0], full_, out[0], out[1], out[2]);
  }
  // PyTorch's svd_backward, the columns past k of a full U and rows of a full Vh left out.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const int64_t m = a.primals[0].shape(-2), n = a.primals[0].shape(-1), k = std::min(m, n);
    Array u = a.outputs[0], vh = a.outputs[2], gu = a.cotangents[0], gvh = a.cotangents[2];
    const Array &sv = a.outputs[1], &gs = a.cotangents[1];
    if (full_ && m != n) {
      u = columns(u, 0, k, s);
      gu = columns(gu, 0, k, s);
      vh = rows(vh, 0, k, s);
      gvh = rows(gvh, 0, k, s);
    }
    const Array ut_gu = matmul(mT(u, s), gu, s), vh_gv = matmul(vh, mT(gvh, s), s);
    const Array skew_u = subtract(ut_gu, mT(ut_gu, s), s), skew_v = subtract(vh_gv, mT(vh_gv, s), s);
    const Array f = inverse_gaps(square(sv, s), s);  // [i, j] = 1 / (s_j^2 - s_i^2)
    const Array row_s = expand_dims(sv, -2, s), col_s = expand_dims(sv, -1, s);
    Array inner = multiply(add(multiply(skew_u, row_s, s), multiply(col_s, skew_v, s), s), f, s);
    inner = add(inner, diag_embed(gs, s), s);
    const Array s_inv = safe_reciprocal(sv, not_equal(sv, 0.0, s), s);
    if (m > n) {  // ga = [U inner + (I - U U^T) gU S^-1] Vh
      const Array gu_sinv = multiply(gu, expand_dims(s_inv, -2, s), s);
      Array ga = add(matmul(u, inner, s), gu_sinv, s);
      ga = subtract(ga, matmul(u, matmul(mT(u, s), gu_sinv, s), s), s);
      return {matmul(ga, vh, s)};
    }
    if (m < n) {  // ga = U [inner Vh + S^-1 gVh (I - V Vh)]
      const Array sinv_gvh = multiply(expand_dims(s_inv, -1, s), gvh, s);
      Array ga = add(matmul(inner, vh, s), sinv_gvh, s);
      ga = subtract(ga, matmul(matmul(sinv_gvh, mT(vh, s), s), vh, s), s);
      return {matmul(u, ga, s)};
    }
    return {matmul(matmul(u, inner, s), vh, s)};
  }
  // JAX's svd_jvp_rule (reduced factors).
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const Array &x = a.primals[0], &da = a.tangents[0];
    const int64_t m = x.shape(-2), n = x.shape(-1);
    if (full_ && m != n)
      throw NotImplemented::of("svd", "jvp with full_matrices needs square matrices",
                               "the extra columns of U or rows of Vh of a {}x{} matrix are not unique", m, n);
    const auto [u, sv, vh] = svd_matrices(x, false, s);
    const Array v = mT(vh, s);
    const Array ds_mat = matmul(matmul(mT(u, s), da, s), v, s);
    const Array ds = diagonal(ds_mat, s);
    const Array f = inverse_gaps(square(sv, s), s);
    const Array row_s = expand_dims(sv, -2, s), col_s = expand_dims(sv, -1, s);
    const Array dss = multiply(row_s, ds_mat, s), sds = multiply(col_s, ds_mat, s);
    Array du = matmul(u, multiply(f, add(dss, mT(dss, s), s), s), s);
    Array dv = matmul(v, multiply(f, add(sds, mT(sds, s), s), s), s);
    const Array s_inv = expand_dims(safe_reciprocal(sv, not_equal(sv, 0.0, s), s), -2, s);
    if (m > n) {
      const Array dav = matmul(da, v, s);
      du = add(du, multiply(subtract(dav, matmul(u, matmul(mT(u, s), dav, s), s), s), s_inv, s), s);
    }
    if (n > m) {
      const Array dau = matmul(mT(da, s), u, s);
      dv = add(dv, multiply(subtract(dau, matmul(v, matmul(vh, dau, s), s), s), s_inv, s), s);
    }
    return {du, ds, mT(dv, s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    auto [u, sv, vh] = svd_matrices(batch_first(a.inputs[0], a.axes[0], stream()), full_, stream());
    return {{u, sv, vh}, {0, 0, 0}};
  }

 private:
  const bool full_;
};

// ---------------------------------------------------------------- eigh

class Eigh final : public PrimitiveWithParams<Eigh, HostPrimitive> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Eigh"; }
  auto params() const { return std::tuple<>(); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {Shape(in[0].shape().begin(), in[0].shape().end() - 1), in[0].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    lapack_eigh("eigh", in[0], out[0], out[1]);
  }
  // ga = V (diag(gw) + F o skew(V^T gV) / 2) V^T with F[i, j] = 1 / (w_j - w_i): symmetric.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Stream s = stream();
    const Array &w = a.outputs[0], &v = a.outputs[1];
    const Array vt_gv = matmul(mT(v, s), a.cotangents[1], s);
    const Array skew = multiply(subtract(vt_gv, mT(vt_gv, s), s), 0.5, s);
    const Array inner = add(multiply(skew, inverse_gaps(w, s), s), diag_embed(a.cotangents[0], s), s);
    return {matmul(matmul(v, inner, s), mT(v, s), s)};
  }
  // JAX's eigh_jvp_rule: dw = diag(V^T da V), dV = V (F o V^T da V), da made symmetric.
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Stream s = stream();
    const auto [w, v] = eigh_lower(a.primals[0], s);
    const Array vdv = matmul(matmul(mT(v, s), sym(a.tangents[0], s), s), v, s);
    return {diagonal(vdv, s), matmul(v, multiply(inverse_gaps(w, s), vdv, s), s)};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    auto [w, v] = eigh_lower(batch_first(a.inputs[0], a.axes[0], stream()), stream());
    return {{w, v}, {0, 0}};
  }
};

}  // namespace

std::pair<Array, Array> qr_matrices(const Array& a, bool complete, Stream s) {
  const int64_t m = a.shape(-2), n = a.shape(-1);
  auto p = std::make_shared<Qr>(s, complete && m > n);  // complete is reduced unless m > n
  auto shapes = p->shapes(a.shape());
  auto out = Array::make_many(std::move(shapes), {a.dtype(), a.dtype()}, std::move(p), {a});
  return {out[0], out[1]};
}

std::tuple<Array, Array, Array> svd_matrices(const Array& a, bool full, Stream s) {
  auto p = std::make_shared<Svd>(s, full && a.shape(-2) != a.shape(-1));  // full is reduced when square
  auto shapes = p->shapes(a.shape());
  auto out = Array::make_many(std::move(shapes), {a.dtype(), a.dtype(), a.dtype()}, std::move(p), {a});
  return {out[0], out[1], out[2]};
}

std::pair<Array, Array> eigh_lower(const Array& a, Stream s) {
  const Shape w(a.shape().begin(), a.shape().end() - 1);
  auto out = Array::make_many({w, a.shape()}, {a.dtype(), a.dtype()}, std::make_shared<Eigh>(s), {a});
  return {out[0], out[1]};
}

}  // namespace detail::la

namespace linalg {

using namespace detail::la;

std::pair<Array, Array> qr(const Array& a, std::string_view mode, StreamOrDevice sd) {
  if (mode != "reduced" && mode != "complete" && mode != "r")
    throw ValueError::of("qr", "unknown mode", "'{}' (reduced, complete or r)", mode);
  check_matrix("qr", a, false);
  const Stream s = to_stream(sd);
  auto [q, r] = qr_matrices(to_compute(a, s), mode == "complete", s);
  if (mode == "r") return {Array(), to_result(r, a.dtype(), s)};
  return {to_result(q, a.dtype(), s), to_result(r, a.dtype(), s)};
}

std::tuple<Array, Array, Array> svd(const Array& a, bool full_matrices, StreamOrDevice sd) {
  check_matrix("svd", a, false);
  const Stream s = to_stream(sd);
  auto [u, sv, vh] = svd_matrices(to_compute(a, s), full_matrices, s);
  return {to_result(u, a.dtype(), s), to_result(sv, a.dtype(), s), to_result(vh, a.dtype(), s)};
}

std::pair<Array, Array> eigh(const Array& a, std::string_view uplo, StreamOrDevice sd) {
  if (uplo != "L" && uplo != "U") throw ValueError::of("eigh", "uplo must be 'L' or 'U'", "got '{}'", uplo);
  check_matrix("eigh", a, true);
  const Stream s = to_stream(sd);
  const Array x = to_compute(a, s);
  auto [w, v] = eigh_lower(uplo == "U" ? mT(x, s) : x, s);  // a's upper triangle is a^T's lower one
  return {to_result(w, a.dtype(), s), to_result(v, a.dtype(), s)};
}

}  // namespace linalg
}  // namespace kiln
