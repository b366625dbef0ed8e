// kiln::linalg (core/ops/linalg_decomp.h) against float64 references computed here: products of the
// factors rebuild the input, inverses and solves leave small residuals, determinants match an LU
// and a cofactor expansion written here, norms match hand-written sums. Gradients against finite
// differences (vjp through check_vjp, jvp here), vmap against a loop, batches, every error.
#include "kiln/core/ops/linalg_decomp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/device.h"
#include "support/error_of.h"
#include "support/matrix_reference.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_close;
using test::identities;
using test::lu_dets;
using test::mats;
using test::Mats;
using test::max_diff;
using test::product;
using test::random_array;
using test::transposed;
using test::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- inputs

// Random matrices with n added to the diagonal: well conditioned.
Array well_conditioned(const Shape& shape, Dtype t, uint64_t seed) {
  const int64_t n = shape.back();
  std::vector<double> v = test::random_values(shape_size(shape), seed);
  for (size_t i = 0; i < v.size(); ++i)
    if ((static_cast<int64_t>(i) % (n * n)) % (n + 1) == 0) v[i] += static_cast<double>(n);
  return Array(v, shape, t);
}
// x x^T + n I: symmetric positive-definite.
Array spd(const Shape& shape, Dtype t, uint64_t seed) {
  const Array x = random_array(shape, float64, seed);
  const int64_t n = shape.back();
  return astype(add(matmul(x, swapaxes(x, -1, -2)), multiply(eye(n, n, 0, float64), static_cast<double>(n))),
                t);
}
// The same as a function of x (for gradients through an SPD input).
Array spd_of(const Array& x) {
  const int64_t n = x.shape(-1);
  return add(matmul(x, swapaxes(x, -1, -2)), multiply(eye(n, n, 0, x.dtype()), static_cast<double>(n)));
}
Array sym_of(const Array& x) { return multiply(add(x, swapaxes(x, -1, -2)), 0.5); }
// n x n float64 with ones strictly above (upper) or below the diagonal.
Array strict_triangle_ones(int64_t n, bool upper) {
  std::vector<double> v(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = (upper ? j > i : j < i) ? 1 : 0;
  return Array(v, {n, n});
}

// ---------------------------------------------------------------- transform checks

// jvp of fn against central differences along random tangents, in float64.
void check_jvp(const test::Fn& fn, const std::vector<Array>& inputs, double eps = 1e-6, double tol = 1e-6,
               const std::vector<Array>& given_tangents = {}) {
  std::vector<Array> x, t;
  uint64_t seed = 900;
  for (const Array& a : inputs) {
    x.push_back(astype(a, float64));
    t.push_back(random_array(a.shape(), float64, seed++));
  }
  if (!given_tangents.empty()) t = given_tangents;
  auto [outs, tangents] = jvp([&](const std::vector<Array>& v) { return std::vector<Array>{fn(v)}; }, x, t);
  auto shifted = [&](double h) {
    std::vector<Array> xs;
    for (size_t i = 0; i < x.size(); ++i) xs.push_back(add(x[i], multiply(t[i], h)));
    return values(fn(xs));
  };
  const std::vector<double> plus = shifted(eps), minus = shifted(-eps), got = values(tangents[0]);
  ASSERT_EQ(got.size(), plus.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double fd = (plus[i] - minus[i]) / (2 * eps);
    EXPECT_NEAR(got[i], fd, tol * (1 + std::abs(fd))) << "jvp element " << i;
  }
}

// vmap(fn) over axis `axis` of x against fn on each slice, stacked.
void check_vmap(const std::function<Array(const Array&)>& fn, const Array& x, int axis, double tol) {
  const Array batched = vmap(ScalarFn(fn), axis, 0)(x);
  std::vector<Array> parts;
  for (int64_t i = 0; i < x.shape(axis); ++i)
    parts.push_back(fn(take(x, Array(static_cast<int32_t>(i)), axis)));
  expect_close(batched, stack(parts), tol, tol);
}

// ---------------------------------------------------------------- inv, solve

TEST(LinalgInv, InverseTimesMatrixIsIdentity) {
  uint64_t seed = 1;
  for (Dtype t : {float64, float32}) {
    for (const Shape& shape : {Shape{1, 1}, Shape{4, 4}, Shape{3, 5, 5}, Shape{2, 2, 3, 3}}) {
      const Array a = well_conditioned(shape, t, seed++);
      const Array x = linalg::inv(a);
      EXPECT_EQ(x.dtype(), t);
      ASSERT_EQ(x.shape(), shape);
      const Mats am = mats(a), xm = mats(x);
      const double tol = t == float64 ? 1e-12 : 2e-5;
      EXPECT_LT(max_diff(product(xm, am).v, identities(am.count, am.rows)), tol) << shape_str(shape);
      EXPECT_LT(max_diff(product(am, xm).v, identities(am.count, am.rows)), tol) << shape_str(shape);
    }
  }
}

TEST(LinalgInv, StridedInputsHalvesAndIntegers) {
  const Array a = well_conditioned({4, 4}, float64, 2);
  const Mats ref = mats(linalg::inv(a));
  expect_close(linalg::inv(transpose(a)), transposed(ref).v, 1e-12, 1e-12);  // a view
  const Array h = linalg::inv(astype(a, float16));
  EXPECT_EQ(h.dtype(), float16);
  expect_close(h, ref.v, 1e-2, 2e-3);
  EXPECT_EQ(linalg::inv(astype(a, bfloat16)).dtype(), bfloat16);
  const Array i = linalg::inv(Array(std::vector<int32_t>{2, 1, 1, 1}, {2, 2}));
  EXPECT_EQ(i.dtype(), float32);
  expect_close(i, std::vector<double>{1, -1, -1, 2}, 1e-6, 1e-6);
  EXPECT_EQ(linalg::inv(zeros({2, 0, 0})).shape(), (Shape{2, 0, 0}));
}

TEST(LinalgSolve, MatrixAndVectorRightHandSidesWithBroadcastBatches) {
  uint64_t seed = 10;
  for (Dtype t : {float64, float32}) {
    const double tol = t == float64 ? 1e-12 : 1e-5;
    // a (2, 1, 3, 3) with b (4, 3, 2): batch dims broadcast to (2, 4).
    const Array a = well_conditioned({2, 1, 3, 3}, t, seed++), b = random_array({4, 3, 2}, t, seed++);
    const Array x = linalg::solve(a, b);
    ASSERT_EQ(x.shape(), (Shape{2, 4, 3, 2}));
    const Array ab = broadcast_to(a, {2, 4, 3, 3}), bb = broadcast_to(b, {2, 4, 3, 2});
    EXPECT_LT(max_diff(product(mats(ab), mats(x)).v, values(bb)), tol);
    // A vector: 1-d, or a's batch dims and n.
    const Array v = random_array({3}, t, seed++);
    const Array xv = linalg::solve(a, v);
    ASSERT_EQ(xv.shape(), (Shape{2, 1, 3}));
    const Array vb = random_array({2, 1, 3}, t, seed++);
    const Array xvb = linalg::solve(a, vb);
    ASSERT_EQ(xvb.shape(), (Shape{2, 1, 3}));
    EXPECT_LT(max_diff(product(mats(a), mats(expand_dims(xvb, -1))).v, values(vb)), tol);
    EXPECT_LT(max_diff(values(matmul(a, expand_dims(xv, -1))),
                       values(broadcast_to(expand_dims(v, -1), {2, 1, 3, 1}))),
              tol);
    // x a = b.
    const Array br = random_array({2, 1, 5, 3}, t, seed++);
    const Array xr = linalg::solve(a, br, false);
    ASSERT_EQ(xr.shape(), (Shape{2, 1, 5, 3}));
    EXPECT_LT(max_diff(product(mats(xr), mats(a)).v, values(br)), tol);
  }
  EXPECT_EQ(
      linalg::solve(astype(well_conditioned({3, 3}, float32, 5), float16), ones({3, 1}, float16)).dtype(),
      float16);
  EXPECT_EQ(linalg::solve(well_conditioned({3, 3}, float64, 5), ones({3}, float32)).dtype(), float64);
}

TEST(LinalgSolve, SingularMatricesThrowAtEval) {
  const Array singular({1.0, 2.0, 2.0, 4.0}, {2, 2});
  const std::string inv = error_of<ValueError>([&] { linalg::inv(singular).eval(); });
  EXPECT_NE(inv.find("[inv] the matrix is singular"), std::string::npos) << inv;
  const std::string solve = error_of<ValueError>([&] {
    linalg::solve(singular, ones({2, 1}, float64)).eval();
  });
  EXPECT_NE(solve.find("[solve] the matrix is singular"), std::string::npos) << solve;
  // The matrix of a batch that fails is named; the array stays unevaluated and throws again.
  const Array batch = stack({well_conditioned({2, 2}, float64, 3), singular});
  const Array x = linalg::inv(batch);
  const std::string named = error_of<ValueError>([&] { x.eval(); });
  EXPECT_NE(named.find("matrix 1 of the batch"), std::string::npos) << named;
  EXPECT_FALSE(x.is_available());
  EXPECT_THROW(x.eval(), ValueError);
}

TEST(LinalgSolve, ShapeErrors) {
  const Array sq = ones({3, 3}), rect = ones({2, 3});
  EXPECT_NE(error_of<ShapeError>([&] { linalg::inv(rect); }).find("[inv] needs square matrices"),
            std::string::npos);
  EXPECT_NE(error_of<ShapeError>([&] { linalg::inv(ones({3})); }).find("[inv] needs a matrix"),
            std::string::npos);
  EXPECT_THROW(linalg::inv(Array()), ValueError);
  EXPECT_THROW(linalg::solve(rect, ones({2, 1})), ShapeError);
  EXPECT_NE(error_of<ShapeError>([&] {
              linalg::solve(sq, ones({4, 2}));
            }).find("[solve] the right-hand side"),
            std::string::npos);
  EXPECT_THROW(linalg::solve(sq, ones({4})), ShapeError);
  EXPECT_THROW(linalg::solve(sq, Array(1.0f)), ShapeError);
  EXPECT_THROW(linalg::solve(sq, Array()), ValueError);
  EXPECT_NE(error_of<ShapeError>([&] {
              linalg::solve(ones({2, 3, 3}), ones({4, 3, 1}));
            }).find("batch dimensions"),
            std::string::npos);
  EXPECT_THROW(linalg::solve(sq, ones({3, 2}), false), ShapeError);  // x a = b needs b (..., k, 3)
}

// ---------------------------------------------------------------- det, slogdet

TEST(LinalgDet, MatchesLuAndCofactors) {
  uint64_t seed = 20;
  for (Dtype t : {float64, float32}) {
    const double tol = t == float64 ? 1e-11 : 2e-5;
    for (const Shape& shape : {Shape{3, 3}, Shape{4, 2, 2}, Shape{2, 3, 5, 5}}) {
      const Array a = random_array(shape, t, seed++, -2, 2);
      const std::vector<double> ref = lu_dets(mats(a));
      expect_close(linalg::det(a), ref, tol, tol);
      auto [sign, logabsdet] = linalg::slogdet(a);
      ASSERT_EQ(sign.shape(), Shape(shape.begin(), shape.end() - 2));
      std::vector<double> sr, lr;
      for (double d : ref) {
        sr.push_back(d > 0 ? 1 : -1);
        lr.push_back(std::log(std::abs(d)));
      }
      expect_close(sign, sr, 0, 0);
      expect_close(logabsdet, lr, tol, tol);
      if (shape == Shape{3, 3}) {
        EXPECT_NEAR(linalg::det(a).item<double>(), test::cofactor_det3(values(a)), tol);
      }
    }
  }
  // Singular: det 0, slogdet (0, -inf); an empty matrix has det 1.
  const Array singular({1.0, 2.0, 2.0, 4.0}, {2, 2});
  EXPECT_EQ(linalg::det(singular).item<double>(), 0.0);
  auto [s0, l0] = linalg::slogdet(singular);
  EXPECT_EQ(s0.item<double>(), 0.0);
  EXPECT_EQ(l0.item<double>(), -kInf);
  EXPECT_EQ(linalg::det(zeros({0, 0})).item<float>(), 1.0f);
  EXPECT_EQ(linalg::det(astype(singular, int32)).dtype(), float32);
  EXPECT_THROW(linalg::det(ones({2, 3})), ShapeError);
  EXPECT_THROW(linalg::slogdet(ones({3})), ShapeError);
}

// ---------------------------------------------------------------- cholesky, solve_triangular

TEST(LinalgCholesky, FactorRebuildsTheMatrix) {
  uint64_t seed = 30;
  for (Dtype t : {float64, float32}) {
    const double tol = t == float64 ? 1e-12 : 1e-5;
    for (const Shape& shape : {Shape{1, 1}, Shape{4, 4}, Shape{2, 3, 3}}) {
      const Array a = spd(shape, t, seed++);
      const Array l = linalg::cholesky(a);
      const Mats lm = mats(l), am = mats(a);
      EXPECT_LT(max_diff(product(lm, transposed(lm)).v, am.v), tol * shape.back() * 4);
      for (int64_t b = 0; b < lm.count; ++b)
        for (int64_t i = 0; i < lm.rows; ++i)
          for (int64_t j = i + 1; j < lm.cols; ++j) EXPECT_EQ(lm.at(b, i, j), 0.0);
      const Array u = linalg::cholesky(a, true);
      expect_close(u, transposed(lm).v, tol, tol);
    }
  }
  // Only the lower (or upper) triangle is read.
  const Array a = spd({3, 3}, float64, 33);
  const Array junk_above = add(a, multiply(strict_triangle_ones(3, true), 100.0));
  expect_close(linalg::cholesky(junk_above), linalg::cholesky(a), 1e-12, 1e-12);
  expect_close(linalg::cholesky(add(a, multiply(strict_triangle_ones(3, false), 100.0)), true),
               linalg::cholesky(a, true), 1e-12, 1e-12);
  EXPECT_EQ(linalg::cholesky(astype(a, bfloat16)).dtype(), bfloat16);
}

TEST(LinalgCholesky, NotPositiveDefiniteThrowsAtEval) {
  const Array indefinite({1.0, 2.0, 2.0, 1.0}, {2, 2});  // eigenvalues 3 and -1
  const Array l = linalg::cholesky(indefinite);
  const std::string e = error_of<ValueError>([&] { l.eval(); });
  EXPECT_NE(e.find("[cholesky] the matrix is not positive-definite"), std::string::npos) << e;
  EXPECT_NE(e.find("order 2"), std::string::npos) << e;
  EXPECT_THROW(linalg::cholesky(ones({2, 3})), ShapeError);
  EXPECT_THROW(linalg::cholesky(Array()), ValueError);
}

TEST(LinalgSolveTriangular, AllTrianglesAndSidesReadOnlyTheirTriangle) {
  uint64_t seed = 40;
  for (Dtype t : {float64, float32}) {
    const double tol = t == float64 ? 1e-11 : 2e-5;
    for (bool upper : {false, true})
      for (bool left : {true, false})
        for (bool unit : {false, true}) {
          // A triangular matrix with a strong diagonal; junk in the other triangle must be ignored.
          const Array full = well_conditioned({2, 4, 4}, float64, seed++);
          const Array keep = strict_triangle_ones(4, upper);
          const Array diag = eye(4, 4, 0, float64);
          Array tri = multiply(full, add(keep, multiply(diag, unit ? 0.0 : 1.0)));
          if (unit) tri = add(tri, diag);
          const Array junk = multiply(strict_triangle_ones(4, !upper), 50.0);
          const Array a = astype(add(unit ? add(tri, multiply(diag, 7.0)) : tri, junk), t);
          const Array b = random_array(left ? Shape{3, 1, 4, 2} : Shape{3, 1, 2, 4}, t, seed++);
          const Array x = linalg::solve_triangular(a, b, upper, left, unit);
          ASSERT_EQ(x.shape(), (Shape{3, 2, left ? 4 : 2, left ? 2 : 4}));
          const Array tb = broadcast_to(tri, {3, 2, 4, 4});
          const Array bb = broadcast_to(b, x.shape());
          const Mats prod = left ? product(mats(tb), mats(x)) : product(mats(x), mats(tb));
          EXPECT_LT(max_diff(prod.v, values(bb)), tol) << upper << left << unit << " " << dtype_name(t);
        }
  }
  EXPECT_THROW(linalg::solve_triangular(ones({3, 3}), ones({4, 2}), true), ShapeError);
  EXPECT_THROW(linalg::solve_triangular(ones({3, 3}), ones({3, 2}), true, false), ShapeError);
  EXPECT_THROW(linalg::solve_triangular(ones({3, 3}), ones({3}), true), ShapeError);
  EXPECT_THROW(linalg::solve_triangular(ones({2, 3}), ones({2, 2}), true), ShapeError);
  EXPECT_THROW(linalg::solve_triangular(ones({2, 3, 3}), ones({4, 3, 1}), true), ShapeError);
}

// ---------------------------------------------------------------- gradients, jvp, vmap (LU family)

TEST(LinalgGradients, LuFamilyVjpMatchesFiniteDifferences) {
  test::check_vjp([](const std::vector<Array>& x) { return linalg::inv(x[0]); },
                  {well_conditioned({2, 3, 3}, float64, 50)});
  test::check_vjp([](const std::vector<Array>& x) { return linalg::solve(x[0], x[1]); },
                  {well_conditioned({2, 3, 3}, float64, 51), random_array({3, 2}, float64, 52)});
  test::check_vjp([](const std::vector<Array>& x) { return linalg::solve(x[0], x[1], false); },
                  {well_conditioned({3, 3}, float64, 53), random_array({2, 3}, float64, 54)});
  test::check_vjp([](const std::vector<Array>& x) { return linalg::solve(x[0], x[1]); },
                  {well_conditioned({3, 3}, float64, 55), random_array({3}, float64, 56)});
  test::check_vjp([](const std::vector<Array>& x) { return linalg::det(x[0]); },
                  {random_array({2, 3, 3}, float64, 57)});
  test::check_vjp([](const std::vector<Array>& x) { return std::get<1>(linalg::slogdet(x[0])); },
                  {random_array({4, 4}, float64, 58)});
  test::check_second_order([](const std::vector<Array>& x) { return linalg::inv(x[0]); },
                           {well_conditioned({3, 3}, float64, 59)});
}

TEST(LinalgGradients, TriangularFamilyVjpMatchesFiniteDifferences) {
  test::check_vjp([](const std::vector<Array>& x) { return linalg::cholesky(spd_of(x[0])); },
                  {random_array({2, 3, 3}, float64, 60)});
  test::check_vjp([](const std::vector<Array>& x) { return linalg::cholesky(spd_of(x[0]), true); },
                  {random_array({3, 3}, float64, 61)});
  uint64_t seed = 62;
  for (bool upper : {false, true})
    for (bool left : {true, false})
      for (bool unit : {false, true})
        test::check_vjp(
            [=](const std::vector<Array>& x) {
              return linalg::solve_triangular(x[0], x[1], upper, left, unit);
            },
            {well_conditioned({2, 3, 3}, float64, seed++),
             random_array(left ? Shape{3, 2} : Shape{2, 3}, float64, seed++)});
}

TEST(LinalgGradients, LuAndTriangularJvpMatchFiniteDifferences) {
  check_jvp([](const std::vector<Array>& x) { return linalg::inv(x[0]); },
            {well_conditioned({2, 3, 3}, float64, 70)});
  check_jvp([](const std::vector<Array>& x) { return linalg::solve(x[0], x[1]); },
            {well_conditioned({3, 3}, float64, 71), random_array({2, 3, 2}, float64, 72)});
  check_jvp([](const std::vector<Array>& x) { return linalg::det(x[0]); },
            {random_array({2, 3, 3}, float64, 73)});
  check_jvp(
      [](const std::vector<Array>& x) {
        auto [sign, logabsdet] = linalg::slogdet(x[0]);
        return stack({sign, logabsdet});
      },
      {random_array({4, 4}, float64, 74)});
  // cholesky of a symmetric perturbation (its jvp symmetrizes the tangent, as JAX's).
  const Array a = spd({3, 3}, float64, 75);
  check_jvp([](const std::vector<Array>& x) { return linalg::cholesky(x[0]); }, {a}, 1e-6, 1e-6,
            {sym_of(random_array({3, 3}, float64, 76))});
  check_jvp([](const std::vector<Array>& x) { return linalg::cholesky(spd_of(x[0])); },
            {random_array({2, 3, 3}, float64, 77)});
  for (bool upper : {false, true})
    for (bool left : {true, false})
      check_jvp(
          [=](const std::vector<Array>& x) { return linalg::solve_triangular(x[0], x[1], upper, left); },
          {well_conditioned({3, 3}, float64, 78), random_array({3, 3}, float64, 79)});
}

TEST(LinalgVmap, LuAndTriangularFamiliesMatchALoop) {
  const Array a = well_conditioned({3, 3, 3}, float64, 80);
  check_vmap([](const Array& x) { return linalg::inv(x); }, a, 0, 1e-12);
  check_vmap([](const Array& x) { return linalg::det(x); }, swapaxes(a, 0, 1), 1, 1e-12);
  check_vmap([](const Array& x) { return std::get<0>(linalg::slogdet(x)); }, a, 2, 1e-12);
  check_vmap([](const Array& x) { return linalg::cholesky(x); }, spd({4, 3, 3}, float64, 81), 0, 1e-12);
  // Two inputs, one batched over axis 1 and one shared (in_axes -1).
  const Array b = random_array({3, 4, 2}, float64, 82);
  const Array m = well_conditioned({3, 3}, float64, 83);
  const ArrayFn solve = [](const std::vector<Array>& x) {
    return std::vector<Array>{linalg::solve(x[0], x[1])};
  };
  const Array batched = vmap(solve, {-1, 1})({m, b})[0];
  std::vector<Array> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(linalg::solve(m, take(b, Array(i), 1)));
  expect_close(batched, stack(parts), 1e-12, 1e-12);
  const ArrayFn tri = [](const std::vector<Array>& x) {
    return std::vector<Array>{linalg::solve_triangular(x[0], x[1], false)};
  };
  const Array mb = well_conditioned({2, 3, 3}, float64, 84);  // batched matrices, shared right-hand side
  const Array rhs = random_array({3, 5}, float64, 85);
  const Array tb = vmap(tri, {0, -1})({mb, rhs})[0];
  for (int i = 0; i < 2; ++i)
    expect_close(take(tb, Array(i), 0), linalg::solve_triangular(take(mb, Array(i), 0), rhs, false), 1e-12,
                 1e-12);
}

// ---------------------------------------------------------------- qr, svd, eigh

// Checks q^T q = I over its columns.
void expect_orthonormal_columns(const Array& q, double tol) {
  const Mats m = mats(q);
  EXPECT_LT(max_diff(product(transposed(m), m).v, identities(m.count, m.cols)), tol) << shape_str(q.shape());
}
Array first_columns(const Array& x, int64_t k) {
  std::vector<Slice> sl(x.ndim() - 1);
  sl.push_back(Slice{0, k});
  return slice(x, sl);
}

const Shape kRectShapes[] = {{5, 3}, {3, 5}, {4, 4}, {2, 4, 2}, {2, 1, 2, 3}};

TEST(LinalgQr, FactorsRebuildTheMatrix) {
  uint64_t seed = 100;
  for (Dtype t : {float64, float32})
    for (const Shape& shape : kRectShapes) {
      const double tol = t == float64 ? 1e-12 : 2e-5;
      const Array a = random_array(shape, t, seed++);
      const int64_t m = shape[shape.size() - 2], n = shape.back(), k = std::min(m, n);
      for (const char* mode : {"reduced", "complete"}) {
        auto [q, r] = linalg::qr(a, mode);
        const bool complete = std::string(mode) == "complete";
        EXPECT_EQ(q.shape().back(), complete ? m : k) << mode;
        EXPECT_EQ(r.shape(-2), complete ? m : k) << mode;
        EXPECT_EQ(q.dtype(), t);
        expect_orthonormal_columns(q, tol);
        EXPECT_LT(max_diff(product(mats(q), mats(r)).v, values(a)), tol) << mode << shape_str(shape);
        const Mats rm = mats(r);
        for (int64_t b = 0; b < rm.count; ++b)
          for (int64_t i = 0; i < rm.rows; ++i)
            for (int64_t j = 0; j < std::min(i, rm.cols); ++j) EXPECT_EQ(rm.at(b, i, j), 0.0);
      }
      auto [none, r] = linalg::qr(a, "r");
      EXPECT_FALSE(none.valid());
      expect_close(r, std::get<1>(linalg::qr(a)), 0, 0);
    }
  EXPECT_EQ(std::get<1>(linalg::qr(ones({3, 2}, float16))).dtype(), float16);
  EXPECT_NE(error_of<ValueError>([] {
              linalg::qr(ones({2, 2}), "full");
            }).find("[qr] unknown mode"),
            std::string::npos);
  EXPECT_THROW(linalg::qr(ones({3})), ShapeError);
}

TEST(LinalgSvd, FactorsRebuildTheMatrix) {
  uint64_t seed = 110;
  for (Dtype t : {float64, float32})
    for (const Shape& shape : kRectShapes)
      for (bool full : {true, false}) {
        const double tol = t == float64 ? 1e-12 : 2e-5;
        const Array a = random_array(shape, t, seed++);
        const int64_t m = shape[shape.size() - 2], n = shape.back(), k = std::min(m, n);
        auto [u, sv, vh] = linalg::svd(a, full);
        ASSERT_EQ(u.shape().back(), full ? m : k);
        ASSERT_EQ(vh.shape(-2), full ? n : k);
        ASSERT_EQ(sv.shape().back(), k);
        expect_orthonormal_columns(u, tol);
        expect_orthonormal_columns(swapaxes(vh, -1, -2), tol);
        const std::vector<double> s = values(sv);
        for (size_t i = 0; i < s.size(); ++i) {
          EXPECT_GE(s[i], 0.0);
          if (i % k != 0) {
            EXPECT_LE(s[i], s[i - 1]);
          }
        }
        const Array us = multiply(first_columns(u, k), expand_dims(sv, -2));
        const Array vhk = swapaxes(first_columns(swapaxes(vh, -1, -2), k), -1, -2);
        EXPECT_LT(max_diff(product(mats(us), mats(vhk)).v, values(a)), tol * 4) << shape_str(shape) << full;
      }
  EXPECT_THROW(linalg::svd(ones({3})), ShapeError);
}

TEST(LinalgEigh, VectorsDiagonalizeTheSymmetricMatrix) {
  uint64_t seed = 120;
  for (Dtype t : {float64, float32})
    for (const Shape& shape : {Shape{1, 1}, Shape{4, 4}, Shape{2, 3, 3}}) {
      const double tol = t == float64 ? 1e-12 : 2e-5;
      const Array a = astype(sym_of(random_array(shape, float64, seed++)), t);
      // The other triangle holds junk: only the lower one ("L") or the upper one ("U") is read.
      const int64_t n = shape.back();
      for (const char* uplo : {"L", "U"}) {
        const Array junk = multiply(strict_triangle_ones(n, std::string(uplo) == "L"), 9.0);
        auto [w, v] = linalg::eigh(add(a, astype(junk, t)), uplo);
        ASSERT_EQ(w.shape(), Shape(shape.begin(), shape.end() - 1));
        expect_orthonormal_columns(v, tol);
        const Array vdv = multiply(v, expand_dims(w, -2));
        EXPECT_LT(max_diff(product(mats(vdv), transposed(mats(v))).v, values(a)), tol * 4) << uplo;
        const std::vector<double> wv = values(w);
        for (size_t i = 0; i < wv.size(); ++i) {
          if (i % n != 0) {
            EXPECT_LE(wv[i - 1], wv[i]);
          }
        }
        // The product of the eigenvalues is the determinant.
        const std::vector<double> dets = lu_dets(mats(a));
        for (size_t b = 0; b < dets.size(); ++b) {
          double p = 1;
          for (int64_t i = 0; i < n; ++i) p *= wv[b * n + i];
          EXPECT_NEAR(p, dets[b], tol * 10);
        }
      }
    }
  EXPECT_THROW(linalg::eigh(ones({2, 3})), ShapeError);
  EXPECT_NE(error_of<ValueError>([] {
              linalg::eigh(ones({2, 2}), "X");
            }).find("[eigh] uplo"),
            std::string::npos);
}

// ---------------------------------------------------------------- pinv, norm, cross

TEST(LinalgPinv, PenroseConditions) {
  uint64_t seed = 130;
  for (Dtype t : {float64, float32}) {
    const double tol = t == float64 ? 1e-10 : 1e-4;
    for (const Shape& shape : kRectShapes) {
      const Array a = random_array(shape, t, seed++);
      const Array p = linalg::pinv(a);
      ASSERT_EQ(p.shape(-1), shape[shape.size() - 2]);
      const Mats am = mats(a), pm = mats(p), apm = product(am, pm);
      EXPECT_LT(max_diff(product(apm, am).v, am.v), tol) << shape_str(shape);
      EXPECT_LT(max_diff(product(product(pm, am), pm).v, pm.v), tol) << shape_str(shape);
      EXPECT_LT(max_diff(transposed(apm).v, apm.v), tol) << shape_str(shape);
    }
    // Rank 1: the zero singular value is dropped; pinv(u v^T) = v u^T / (|u|^2 |v|^2).
    const Array u = random_array({3, 1}, t, seed++), v = random_array({1, 4}, t, seed++);
    const double uu = values(sum(square(u))).at(0), vv = values(sum(square(v))).at(0);
    expect_close(linalg::pinv(matmul(u, v)), values(divide(matmul(transpose(v), transpose(u)), uu * vv)), tol,
                 tol);
    const Array s = astype(sym_of(random_array({4, 4}, float64, seed++)), t);
    expect_close(linalg::pinv(s, {}, {}, true), linalg::pinv(s), tol, tol);
    expect_close(linalg::pinv(s, 100.0), zeros({4, 4}), 0, 0);  // everything below atol
  }
  EXPECT_THROW(linalg::pinv(ones({2, 2}), -1.0), ValueError);
  EXPECT_THROW(linalg::pinv(ones({2, 3}), {}, {}, true), ShapeError);
}

TEST(LinalgNorm, VectorAndMatrixOrdersMatchHandWrittenSums) {
  const Array x = random_array({3, 4}, float64, 140, -2, 2);
  const std::vector<double> v = values(x);
  auto rows = [&](auto f) {  // f over each row's |values|
    std::vector<double> out;
    for (int i = 0; i < 3; ++i)
      out.push_back(f(std::vector<double>(v.begin() + 4 * i, v.begin() + 4 * i + 4)));
    return out;
  };
  auto p_norm = [](double p) {
    return [p](const std::vector<double>& r) {
      double s = 0;
      for (double e : r) s += std::pow(std::abs(e), p);
      return std::pow(s, 1 / p);
    };
  };
  for (double p : {1.0, 2.0, 3.0, 0.5}) expect_close(linalg::norm(x, p, {1}), rows(p_norm(p)), 1e-12, 1e-12);
  auto extreme = [](bool largest) {
    return [largest](const std::vector<double>& r) {
      double m = std::abs(r[0]);
      for (double e : r) m = largest ? std::max(m, std::abs(e)) : std::min(m, std::abs(e));
      return m;
    };
  };
  expect_close(linalg::norm(x, kInf, {-1}), rows(extreme(true)), 0, 0);
  expect_close(linalg::norm(x, -kInf, {-1}, true), rows(extreme(false)), 0, 0);
  EXPECT_EQ(linalg::norm(x, -kInf, {-1}, true).shape(), (Shape{3, 1}));
  expect_close(linalg::norm(Array({1.0, 0.0, -2.0, 0.0})), std::vector<double>{std::sqrt(5.0)}, 1e-12, 0);
  expect_close(linalg::norm(Array({1.0, 0.0, -2.0, 0.0}), 0.0), std::vector<double>{2}, 0, 0);
  // Matrix norms of x (3 x 4).
  double fro = 0, col_max = 0, col_min = kInf, row_max = 0, row_min = kInf;
  for (double e : v) fro += e * e;
  for (int j = 0; j < 4; ++j) {
    double c = 0;
    for (int i = 0; i < 3; ++i) c += std::abs(v[4 * i + j]);
    col_max = std::max(col_max, c), col_min = std::min(col_min, c);
  }
  for (double r : rows(p_norm(1))) row_max = std::max(row_max, r), row_min = std::min(row_min, r);
  expect_close(linalg::norm(x, "fro"), std::vector<double>{std::sqrt(fro)}, 1e-12, 0);
  expect_close(linalg::norm(x), std::vector<double>{std::sqrt(fro)}, 1e-12, 0);
  expect_close(linalg::norm(x, 1.0), std::vector<double>{col_max}, 1e-12, 0);
  expect_close(linalg::norm(x, -1.0), std::vector<double>{col_min}, 1e-12, 0);
  expect_close(linalg::norm(x, kInf), std::vector<double>{row_max}, 1e-12, 0);
  expect_close(linalg::norm(x, -kInf), std::vector<double>{row_min}, 1e-12, 0);
  expect_close(linalg::norm(transpose(x), kInf, {1, 0}), std::vector<double>{row_max}, 1e-12, 0);
  // Singular values of 2 x 2 matrices in closed form: s^2 = (F +- sqrt(F^2 - 4 det^2)) / 2.
  const Array b = random_array({2, 2, 3}, float64, 141);  // matrices over axes (0, 2)
  std::vector<double> s_max, s_min, nuc;
  const std::vector<double> bv = values(b);
  for (int k = 0; k < 2; ++k) {
    const double a11 = bv[0 * 6 + k * 3 + 0], a12 = bv[0 * 6 + k * 3 + 2], a21 = bv[1 * 6 + k * 3 + 0];
    const double a22 = bv[1 * 6 + k * 3 + 2];
    const double f = a11 * a11 + a12 * a12 + a21 * a21 + a22 * a22, d = a11 * a22 - a12 * a21;
    const double root = std::sqrt(f * f - 4 * d * d);
    s_max.push_back(std::sqrt((f + root) / 2));
    s_min.push_back(std::sqrt((f - root) / 2));
    nuc.push_back(s_max.back() + s_min.back());
  }
  const Array two = slice(b, {Slice{}, Slice{}, Slice{0, 3, 2}});  // (2, 2, 2): axes 0 and 2 are the matrix
  expect_close(linalg::norm(two, 2.0, {0, 2}), s_max, 1e-12, 1e-12);
  expect_close(linalg::norm(two, -2.0, {0, 2}), s_min, 1e-12, 1e-12);
  expect_close(linalg::norm(two, "nuc", {0, 2}, true), nuc, 1e-12, 1e-12);
  EXPECT_EQ(linalg::norm(two, "nuc", {0, 2}, true).shape(), (Shape{1, 2, 1}));
  EXPECT_EQ(linalg::norm(astype(x, bfloat16), 2.0, {1}).dtype(), bfloat16);
  EXPECT_EQ(linalg::norm(Array({3, 4})).dtype(), float32);
  // Errors.
  EXPECT_THROW(linalg::norm(ones({2, 2, 2}), 2.0), ShapeError);
  EXPECT_THROW(linalg::norm(x, 3.0, {0, 1}), ValueError);
  EXPECT_THROW(linalg::norm(x, "max"), ValueError);
  EXPECT_THROW(linalg::norm(x, "fro", {0}), ShapeError);
  EXPECT_THROW(linalg::norm(x, 2.0, {0, 0}), ShapeError);
  EXPECT_THROW(linalg::norm(x, 2.0, {0, 1, 2}), ShapeError);
  EXPECT_THROW(linalg::norm(Array()), ValueError);
}

TEST(LinalgCross, MatchesTheFormulaWithBroadcasting) {
  const Array a = random_array({4, 3}, float64, 150), b = random_array({3}, float64, 151);
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) {
    const double* x = &av[3 * i];
    want.insert(want.end(),
                {x[1] * bv[2] - x[2] * bv[1], x[2] * bv[0] - x[0] * bv[2], x[0] * bv[1] - x[1] * bv[0]});
  }
  expect_close(linalg::cross(a, b), want, 1e-15, 1e-15);
  expect_close(linalg::cross(transpose(a), expand_dims(b, 1), 0), values(transpose(linalg::cross(a, b))),
               1e-15, 1e-15);
  const Array i = linalg::cross(Array({1, 0, 0}), Array({0, 1, 0}));
  EXPECT_EQ(i.dtype(), int32);
  expect_close(i, std::vector<double>{0, 0, 1}, 0, 0);
  EXPECT_THROW(linalg::cross(ones({4, 2}), ones({4, 2})), ShapeError);
  EXPECT_THROW(linalg::cross(ones({3, 1}), ones({3, 3})), ShapeError);
  EXPECT_THROW(linalg::cross(ones({3}), ones({3}), 1), ShapeError);
  EXPECT_THROW(linalg::cross(Array({true, false, true}), Array({true, true, true})), DtypeError);
}

// ---------------------------------------------------------------- gradients, jvp, vmap (the rest)

Array flat_cat(const std::vector<Array>& parts) {
  std::vector<Array> flat;
  for (const Array& p : parts) flat.push_back(reshape(p, {-1}));
  return concatenate(flat);
}
// Functions of the factors that do not depend on the signs LAPACK picks for the vectors.
Array qr_parts(const Array& a) {
  auto [q, r] = linalg::qr(a);
  return flat_cat({q, r});
}
Array svd_parts(const Array& a, bool full) {
  auto [u, sv, vh] = linalg::svd(a, full);
  const int64_t k = sv.shape(-1);
  const Array uk = first_columns(u, k), vhk = swapaxes(first_columns(swapaxes(vh, -1, -2), k), -1, -2);
  return flat_cat({sv, matmul(uk, vhk), square(uk), square(vhk)});
}
Array eigh_parts(const Array& a) {
  auto [w, v] = linalg::eigh(a);
  return flat_cat({w, square(v), matmul(multiply(v, expand_dims(sin(w), -2)), swapaxes(v, -1, -2))});
}

TEST(LinalgGradients, DecompositionsVjpMatchFiniteDifferences) {
  uint64_t seed = 160;
  for (const Shape& shape : kRectShapes) {
    test::check_vjp([](const std::vector<Array>& x) { return qr_parts(x[0]); },
                    {random_array(shape, float64, seed++)});
    for (bool full : {false, true})
      test::check_vjp([=](const std::vector<Array>& x) { return svd_parts(x[0], full); },
                      {random_array(shape, float64, seed++)});
  }
  test::check_vjp([](const std::vector<Array>& x) { return eigh_parts(sym_of(x[0])); },
                  {random_array({2, 4, 4}, float64, seed++)});
  // A complete Q of a tall matrix has no derivative.
  const Array tall = random_array({4, 2}, float64, seed++);
  const auto complete_q = [](const std::vector<Array>& x) {
    return std::vector<Array>{std::get<0>(linalg::qr(x[0], "complete"))};
  };
  EXPECT_THROW(vjp(complete_q, {tall}, {ones({4, 4}, float64)}), NotImplemented);
}

TEST(LinalgGradients, CompositionsVjpMatchFiniteDifferences) {
  const Array x = random_array({3, 4}, float64, 170, -2, 2);
  for (double p : {1.0, 2.0, 3.0, kInf, -kInf})
    test::check_vjp([=](const std::vector<Array>& v) { return linalg::norm(v[0], p, {1}); }, {x});
  for (double p : {1.0, -1.0, 2.0, -2.0, kInf})
    test::check_vjp([=](const std::vector<Array>& v) { return linalg::norm(v[0], p); }, {x});
  for (const char* name : {"fro", "nuc"})
    test::check_vjp([=](const std::vector<Array>& v) { return linalg::norm(v[0], name); }, {x});
  test::check_vjp([](const std::vector<Array>& v) { return linalg::norm(v[0]); }, {x});
  test::check_vjp([](const std::vector<Array>& v) { return linalg::pinv(v[0]); }, {x});
  test::check_vjp([](const std::vector<Array>& v) { return linalg::pinv(sym_of(v[0]), {}, {}, true); },
                  {random_array({3, 3}, float64, 171)});
  test::check_vjp([](const std::vector<Array>& v) { return linalg::cross(v[0], v[1]); },
                  {random_array({2, 3}, float64, 172), random_array({3}, float64, 173)});
}

TEST(LinalgGradients, DecompositionsJvpMatchFiniteDifferences) {
  uint64_t seed = 180;
  for (const Shape& shape : kRectShapes) {
    check_jvp([](const std::vector<Array>& x) { return qr_parts(x[0]); },
              {random_array(shape, float64, seed++)});
    check_jvp([](const std::vector<Array>& x) { return svd_parts(x[0], false); },
              {random_array(shape, float64, seed++)});
  }
  check_jvp([](const std::vector<Array>& x) { return svd_parts(x[0], true); },
            {random_array({3, 3}, float64, seed++)});
  check_jvp([](const std::vector<Array>& x) { return eigh_parts(sym_of(x[0])); },
            {random_array({2, 4, 4}, float64, seed++)});
  check_jvp([](const std::vector<Array>& x) { return linalg::norm(x[0], "nuc"); },
            {random_array({3, 4}, float64, seed++)});
  check_jvp([](const std::vector<Array>& x) { return linalg::pinv(x[0]); },
            {random_array({4, 3}, float64, seed++)});
  check_jvp([](const std::vector<Array>& x) { return linalg::cross(x[0], x[1]); },
            {random_array({2, 3}, float64, seed++), random_array({2, 3}, float64, seed++)});
  const auto full_svd = [](const std::vector<Array>& x) {
    return std::vector<Array>{std::get<0>(linalg::svd(x[0]))};
  };
  const Array wide = random_array({2, 3}, float64, seed++);
  EXPECT_THROW(jvp(full_svd, {wide}, {wide}), NotImplemented);
}

TEST(LinalgVmap, DecompositionsMatchALoop) {
  const Array a = random_array({3, 4, 2}, float64, 190);
  check_vmap([](const Array& x) { return qr_parts(x); }, a, 0, 1e-12);
  check_vmap([](const Array& x) { return svd_parts(x, true); }, a, 1, 1e-12);
  check_vmap([](const Array& x) { return eigh_parts(x); }, sym_of(random_array({3, 3, 3}, float64, 191)), 2,
             1e-12);
  check_vmap([](const Array& x) { return linalg::pinv(x); }, a, 0, 1e-12);
  check_vmap([](const Array& x) { return linalg::norm(x, 2.0); }, a, 0, 1e-12);
}

// ---------------------------------------------------------------- edge cases

TEST(LinalgEdgeCases, EmptyMatricesZeroNormsAndAsyncEval) {
  auto [u, sv, vh] = linalg::svd(zeros({0, 3}));
  EXPECT_EQ(u.shape(), (Shape{0, 0}));
  EXPECT_EQ(sv.shape(), (Shape{0}));
  expect_close(vh, eye(3), 0, 0);
  auto [q, r] = linalg::qr(zeros({3, 0}), "complete");
  expect_close(q, eye(3), 0, 0);
  EXPECT_EQ(r.shape(), (Shape{3, 0}));
  EXPECT_EQ(std::get<0>(linalg::eigh(zeros({2, 0, 0}))).shape(), (Shape{2, 0}));
  EXPECT_EQ(linalg::cholesky(zeros({0, 0})).shape(), (Shape{0, 0}));
  EXPECT_EQ(linalg::solve(eye(3), zeros({3, 0})).shape(), (Shape{3, 0}));
  EXPECT_EQ(linalg::pinv(zeros({2, 0})).shape(), (Shape{0, 2}));
  // A zero vector's norm has gradient 0 (PyTorch's subgradient); a NaN stays NaN.
  expect_close(grad(ScalarFn([](const Array& x) { return linalg::norm(x); }))(zeros({3})), zeros({3}), 0, 0);
  expect_close(grad(ScalarFn([](const Array& x) { return linalg::norm(x, 3.0); }))(zeros({3})), zeros({3}), 0,
               0);
  EXPECT_TRUE(std::isnan(linalg::norm(Array({1.0f, std::nanf("")})).item<float>()));
  // async_eval: the values, and an error raised by the wait.
  const Array a = well_conditioned({3, 3}, float32, 200);
  const Array x = linalg::inv(a), bad = linalg::inv(Array({1.0f, 2.0f, 2.0f, 4.0f}, {2, 2}));
  async_eval({x});
  EXPECT_LT(max_diff(product(mats(x), mats(a)).v, identities(1, 3)), 1e-5);
  async_eval({bad});
  EXPECT_THROW(bad.wait(), ValueError);
}

// ---------------------------------------------------------------- devices and compile

// On the GPU these primitives compute on the host: the input is downloaded once, the result uploaded
// once when a GPU op reads it, and a chain of them moves nothing in between.
TEST(LinalgDevice, GpuFallbackCountsItsTransfers) {
  if (!test::gpu_default()) GTEST_SKIP() << "the GPU pass checks the fallback's transfers";
  const Array a0 = well_conditioned({4, 4}, float32, 90);
  const Array a = multiply(a0, 1.0f);  // computed on the GPU
  eval(a);
  const MemoryStats before = memory_stats();
  const Array x = linalg::inv(a);
  const Array y = linalg::inv(x);  // host to host: nothing moves
  const Array z = matmul(y, a);    // y goes up once
  eval(z);
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.device_to_host_bytes - before.device_to_host_bytes, static_cast<size_t>(a.nbytes()));
  EXPECT_EQ(after.host_to_device_bytes - before.host_to_device_bytes, static_cast<size_t>(y.nbytes()));
  const Mats am = mats(a0);
  EXPECT_LT(max_diff(values(z), product(am, am).v), 1e-3);
}

// compile traces the primitives and replays them; on the GPU its capture of the step fails (the
// host fallback cannot be replayed) and the steps replay one by one, with the same results.
TEST(LinalgDevice, CompiledFunctionsMatchEagerCalls) {
  const ArrayFn fn = [](const std::vector<Array>& x) {
    return std::vector<Array>{add(linalg::solve(x[0], x[1]), expand_dims(linalg::det(x[0]), {-2, -1})),
                              linalg::cholesky(spd_of(x[0]))};
  };
  const CompiledFunction step = compile(fn);
  for (uint64_t seed = 91; seed < 94; ++seed) {
    const Array a = well_conditioned({2, 3, 3}, float32, seed),
                b = random_array({2, 3, 1}, float32, seed + 10);
    const std::vector<Array> got = step({a, b}), want = fn({a, b});
    expect_close(got[0], want[0], 1e-6, 1e-6);
    expect_close(got[1], want[1], 1e-6, 1e-6);
  }
  EXPECT_EQ(step.capture_count(), 0);
}

}  // namespace
}  // namespace kiln
