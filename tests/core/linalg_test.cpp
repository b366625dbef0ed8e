// matmul and addmm against a naive float64 reference, plus gradients and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

// NumPy matmul in plain loops: 1-d operands promoted and the added dims dropped, batch broadcast.
struct Ref {
  std::vector<double> v;
  Shape shape;
};
Ref ref_matmul(const std::vector<double>& a, Shape as, const std::vector<double>& b, Shape bs) {
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const size_t nb = std::max(as.size(), bs.size()) - 2;
  Shape batch(nb), ab(nb, 1), bb(nb, 1);
  for (size_t i = 0; i < as.size() - 2; ++i) ab[nb - (as.size() - 2) + i] = as[i];
  for (size_t i = 0; i < bs.size() - 2; ++i) bb[nb - (bs.size() - 2) + i] = bs[i];
  int64_t total = 1;
  for (size_t i = 0; i < nb; ++i) total *= (batch[i] = std::max(ab[i], bb[i]));
  std::vector<double> out(total * M * N, 0.0);
  for (int64_t t = 0; t < total; ++t) {
    int64_t rem = t, ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t d = nb; d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ia += (ab[d] == 1 ? 0 : idx) * sa;
      ib += (bb[d] == 1 ? 0 : idx) * sb;
      sa *= ab[d];
      sb *= bb[d];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(ia * M + m) * K + k] * b[(ib * K + k) * N + n];
        out[(t * M + m) * N + n] = s;
      }
  }
  Shape shape = batch;
  if (!a1) shape.push_back(M);
  if (!b1) shape.push_back(N);
  return {out, shape};
}

Ref ref_of(const Array& a, const Array& b) { return ref_matmul(values(a), a.shape(), values(b), b.shape()); }

struct ShapePair {
  Shape a, b;
};
const ShapePair kShapes[] = {
    {{3, 4}, {4, 5}},       {{4}, {4, 5}},          {{3, 4}, {4}},          {{4}, {4}},
    {{2, 3, 4}, {4, 5}},    {{3, 4}, {2, 4, 5}},    {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}},
    {{1, 3, 4}, {6, 4, 2}}, {{2, 3, 4}, {4}},       {{4}, {2, 4, 3}},       {{1, 7}, {7, 1}},
    {{7, 1}, {1, 6}},       {{3, 2, 1, 5}, {5, 1}},
};

TEST(Matmul, ForwardMatchesReferenceAllFloatDtypes) {
  uint64_t seed = 1;
  for (const ShapePair& p : kShapes) {
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      const Array a = random_array(p.a, t, seed++), b = random_array(p.b, t, seed++);
      const Array c = matmul(a, b);
      const Ref r = ref_of(a, b);
      EXPECT_EQ(c.dtype(), t);
      ASSERT_EQ(c.shape(), r.shape) << shape_str(p.a) << " @ " << shape_str(p.b);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : t == float16 ? 4e-3 : 3e-2;
      expect_close(c, r.v, tol, tol);
    }
  }
}

TEST(Matmul, LargerFloat32AndFloat64) {
  const Array a = random_array({67, 96}, float32, 11), b = random_array({96, 81}, float32, 12);
  const Ref r = ref_of(a, b);
  expect_close(matmul(a, b), r.v, 1e-5, 1e-5);
  expect_close(matmul(astype(a, float64), astype(b, float64)), r.v, 1e-12, 1e-12);
}

TEST(Matmul, IntegerAndBoolInputsComputeInFloat32) {
  const Array a(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Array b(std::vector<int32_t>{1, 0, -1, 2, 3, 1}, {3, 2});
  const Array c = matmul(a, b);
  EXPECT_EQ(c.dtype(), float32);
  expect_close(c, std::vector<double>{8, 7, 17, 16}, 0, 0);
  const Array m(std::vector<bool>{true, false, true, true}, {2, 2});
  const Array d = matmul(m, m);
  EXPECT_EQ(d.dtype(), float32);
  expect_close(d, std::vector<double>{1, 0, 2, 1}, 0, 0);
  // int with float16 promotes to float16.
  EXPECT_EQ(matmul(a, astype(b, float16)).dtype(), float16);
}

TEST(Matmul, TransposedViewsGoStraightToBlas) {
  for (Dtype t : {float32, float64, bfloat16}) {
    const Array a0 = random_array({5, 3}, t, 21), b0 = random_array({4, 5}, t, 22);
    const Array a = transpose(a0), b = transpose(b0);  // (3,5) and (5,4), column-major views
    const Ref r = ref_of(a, b);
    const double tol = t == bfloat16 ? 3e-2 : 1e-5;
    expect_close(matmul(a, b), r.v, tol, tol);
    expect_close(matmul(a, contiguous(b)), r.v, tol, tol);
    expect_close(matmul(contiguous(a), b), r.v, tol, tol);
    // Batched transposed operands.
    const Array x0 = random_array({2, 6, 3}, t, 23), y0 = random_array({2, 4, 6}, t, 24);
    const Array x = swapaxes(x0, -1, -2), y = swapaxes(y0, -1, -2);
    expect_close(matmul(x, y), ref_of(x, y).v, tol, tol);
  }
}

TEST(Matmul, StridedAndBroadcastViewsArePacked) {
  // Every other column and row: neither row- nor column-major.
  const Array big = random_array({8, 10}, float32, 31);
  const Array a = slice(big, {Slice{0, 8, 2}, Slice{1, 10, 2}});                                   // (4,5)
  const Array b = slice(random_array({10, 12}, float32, 32), {Slice{0, 10, 2}, Slice{0, 12, 3}});  // (5,4)
  expect_close(matmul(a, b), ref_of(a, b).v, 1e-5, 1e-5);
  // Negative strides.
  const Array rev = slice(random_array({5, 6}, float32, 33), {Slice{std::nullopt, std::nullopt, -1}});
  const Array rhs = random_array({6, 3}, float32, 37);
  expect_close(matmul(rev, rhs), ref_of(rev, rhs).v, 1e-5, 1e-5);
  expect_close(matmul(transpose(rev), rev), ref_of(transpose(rev), rev).v, 1e-5, 1e-5);
  // A stride-0 operand (broadcast_to).
  const Array row = random_array({1, 5}, float32, 34);
  const Array bc = broadcast_to(row, {4, 5});
  expect_close(matmul(bc, b), ref_of(bc, b).v, 1e-5, 1e-5);
  // Batch dims broadcast by a view.
  const Array w = random_array({5, 3}, float64, 35);
  const Array wb = broadcast_to(w, {3, 5, 3});
  const Array x = random_array({3, 2, 5}, float64, 36);
  expect_close(matmul(x, wb), ref_of(x, wb).v, 1e-12, 1e-12);
}

TEST(Matmul, FoldedBatchMatchesLoopedBatch) {
  // (batch, tokens, K) @ (K, N) is one GEMM over batch * tokens rows; a sliced batch is not.
  const Array x = random_array({3, 4, 6}, float32, 41), w = random_array({6, 5}, float32, 42);
  expect_close(matmul(x, w), ref_of(x, w).v, 1e-5, 1e-5);
  const Array xs = slice(random_array({6, 4, 6}, float32, 43), {Slice{0, 6, 2}});
  expect_close(matmul(xs, w), ref_of(xs, w).v, 1e-5, 1e-5);
  const Array xt = swapaxes(random_array({3, 6, 4}, float32, 44), 1, 2);
  expect_close(matmul(xt, w), ref_of(xt, w).v, 1e-5, 1e-5);
  expect_close(matmul(xt, transpose(random_array({5, 6}, float32, 45))),
               ref_of(xt, transpose(random_array({5, 6}, float32, 45))).v, 1e-5, 1e-5);
}

TEST(Matmul, MatrixVectorPaths) {
  for (Dtype t : {float32, float64}) {
    const Array m = random_array({6, 5}, t, 51), v = random_array({5}, t, 52), u = random_array({6}, t, 53);
    expect_close(matmul(m, v), ref_of(m, v).v, 1e-5, 1e-5);
    expect_close(matmul(u, m), ref_of(u, m).v, 1e-5, 1e-5);
    expect_close(matmul(transpose(m), u), ref_of(transpose(m), u).v, 1e-5, 1e-5);
    expect_close(matmul(v, transpose(m)), ref_of(v, transpose(m)).v, 1e-5, 1e-5);
    const Array col = reshape(v, {5, 1}), row = reshape(u, {1, 6});
    expect_close(matmul(row, m), ref_of(row, m).v, 1e-5, 1e-5);
    expect_close(matmul(m, col), ref_of(m, col).v, 1e-5, 1e-5);
  }
}

// Large enough (n * k >= 2^18, n >= 128) that gemm splits the matrix-vector product over the pool
// by its output: every layout of the matrix, the vector on either side, against the reference.
TEST(Matmul, LargeMatrixVectorProductsSplitOverThreads) {
  const Array m = random_array({640, 3300}, float32, 54), v = random_array({3300}, float32, 55);
  const Array u = random_array({640}, float32, 56);
  expect_close(matmul(m, v), ref_of(m, v).v, 1e-4, 1e-4);
  expect_close(matmul(u, m), ref_of(u, m).v, 1e-4, 1e-4);
  expect_close(matmul(v, transpose(m)), ref_of(v, transpose(m)).v, 1e-4, 1e-4);
  expect_close(matmul(transpose(m), u), ref_of(transpose(m), u).v, 1e-4, 1e-4);
  // linear's layout: a (1, k) row against a stored (n, k) weight.
  const Array row = reshape(v, {1, 3300});
  expect_close(linear(row, m), ref_of(row, transpose(m)).v, 1e-4, 1e-4);
}

TEST(Matmul, EmptyDimensions) {
  const Array a = zeros({3, 0}), b = zeros({0, 4});
  const Array c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  expect_close(c, std::vector<double>(12, 0.0), 0, 0);
  EXPECT_EQ(matmul(zeros({0, 3}), zeros({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(matmul(zeros({2, 0, 3}), zeros({3, 2})).shape(), (Shape{2, 0, 2}));
}

TEST(Matmul, Errors) {
  EXPECT_THROW(matmul(ones({2, 3}), ones({4, 5})), ShapeError);
  EXPECT_THROW(matmul(ones({3}), ones({4})), ShapeError);
  EXPECT_THROW(matmul(Array(1.0f), ones({3})), ShapeError);
  EXPECT_THROW(matmul(ones({2, 2, 3}), ones({3, 3, 4})), ShapeError);
  EXPECT_THROW(matmul(Array(), ones({3})), ValueError);
  try {
    matmul(ones({2, 3}), ones({4, 5}));
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "[matmul] inner dimensions differ: (2,3) @ (4,5)");
  }
}

TEST(Matmul, VjpMatchesFiniteDifferences) {
  const auto mm = [](const std::vector<Array>& x) { return matmul(x[0], x[1]); };
  uint64_t seed = 100;
  for (const ShapePair& p : kShapes)
    test::check_vjp(mm, {random_array(p.a, float64, seed++), random_array(p.b, float64, seed++)});
  // Transposed inputs.
  test::check_vjp([](const std::vector<Array>& x) { return matmul(transpose(x[0]), swapaxes(x[1], -1, -2)); },
                  {random_array({4, 3}, float64, 7), random_array({2, 5, 4}, float64, 8)});
}

TEST(Matmul, SecondOrder) {
  const auto mm = [](const std::vector<Array>& x) { return matmul(x[0], x[1]); };
  test::check_second_order(mm, {random_array({2, 3, 4}, float64, 61), random_array({4, 2}, float64, 62)});
  test::check_second_order(mm, {random_array({4}, float64, 63), random_array({2, 4, 3}, float64, 64)});
  // A function that is not bilinear, so the second derivative is not trivially zero.
  test::check_second_order([](const std::vector<Array>& x) { return matmul(x[0], x[0] * x[1]); },
                           {random_array({3, 3}, float64, 65), random_array({3, 3}, float64, 66)});
}

TEST(Matmul, GradientOfSharedWeightSumsOverBatch) {
  const Array x = random_array({2, 3, 4}, float64, 71), w = random_array({4, 5}, float64, 72);
  auto f = [&](const std::vector<Array>& in) { return std::vector<Array>{sum(matmul(in[0], in[1]))}; };
  const auto g = grad(f, {1})({x, w})[0];
  // d sum(x @ w) / dw[k][n] = sum over batch and rows of x[..., k].
  const std::vector<double> xv = values(x);
  std::vector<double> expected(20);
  for (int k = 0; k < 4; ++k) {
    double s = 0;
    for (int r = 0; r < 6; ++r) s += xv[r * 4 + k];
    for (int n = 0; n < 5; ++n) expected[k * 5 + n] = s;
  }
  expect_close(g, expected, 1e-12, 1e-12);
}

// ---- addmm

std::vector<double> ref_addmm(const Array& c, const Array& a, const Array& b, double alpha, double beta) {
  const Ref p = ref_of(a, b);
  const Array cb = broadcast_to(astype(c, float64), p.shape);
  std::vector<double> out = values(cb);
  for (size_t i = 0; i < out.size(); ++i) out[i] = beta * out[i] + alpha * p.v[i];
  return out;
}

TEST(Addmm, ForwardMatchesReference) {
  struct Case {
    Shape c, a, b;
  };
  const Case cases[] = {
      {{3, 5}, {3, 4}, {4, 5}}, {{5}, {3, 4}, {4, 5}},    {{3, 1}, {3, 4}, {4, 5}},
      {{}, {3, 4}, {4, 5}},     {{5}, {2, 3, 4}, {4, 5}}, {{5}, {4}, {4, 5}},
      {{3}, {3, 4}, {4}},       {{}, {4}, {4}},           {{2, 1, 5}, {2, 3, 4}, {2, 4, 5}}};
  uint64_t seed = 200;
  for (const Case& k : cases)
    for (Dtype t : {float64, float32, bfloat16}) {
      const Array c = random_array(k.c, t, seed++), a = random_array(k.a, t, seed++),
                  b = random_array(k.b, t, seed++);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : 4e-2;
      const Array r = addmm(c, a, b, 0.5f, -2.0f);
      EXPECT_EQ(r.shape(), ref_of(a, b).shape);
      expect_close(r, ref_addmm(c, a, b, 0.5, -2.0), tol, tol);
      expect_close(addmm(c, a, b), ref_addmm(c, a, b, 1, 1), tol, tol);
    }
}

TEST(Addmm, BetaZeroIgnoresNaN) {
  const Array c = full({3, 5}, std::numeric_limits<float>::quiet_NaN());
  const Array a = random_array({3, 4}, float32, 301), b = random_array({4, 5}, float32, 302);
  expect_close(addmm(c, a, b, 2.0f, 0.0f), ref_addmm(zeros({3, 5}), a, b, 2.0, 0.0), 1e-5, 1e-5);
}

TEST(Addmm, Float64CoefficientsAreNotRoundedToFloat32) {
  // alpha = 1 + 1e-12 rounds to exactly 1 in float32; the product must still see it (both devices).
  const double alpha = 1 + 1e-12, beta = 1 - 3e-12;
  const Array c = random_array({3, 5}, float64, 321), a = random_array({3, 4}, float64, 322, 1, 2),
              b = random_array({4, 5}, float64, 323, 1, 2);
  const Array got = addmm(c, a, b, alpha, beta);
  const std::vector<double> want = ref_addmm(c, a, b, alpha, beta), plain = ref_addmm(c, a, b, 1, 1);
  const std::vector<double> g = values(got);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], want[i], 2e-14 * std::abs(want[i])) << i;
    EXPECT_GT(std::abs(g[i] - plain[i]), 5e-13) << "alpha/beta were rounded at " << i;
  }
}

TEST(Addmm, TransposedWeightLikeLinear) {
  const Array x = random_array({2, 3, 4}, float32, 311), w = random_array({5, 4}, float32, 312),
              bias = random_array({5}, float32, 313);
  expect_close(addmm(bias, x, transpose(w)), ref_addmm(bias, x, transpose(w), 1, 1), 1e-5, 1e-5);
}

TEST(Addmm, Errors) {
  EXPECT_THROW(addmm(ones({4}), ones({3, 4}), ones({4, 5})), ShapeError);
  EXPECT_THROW(addmm(ones({2, 3, 5}), ones({3, 4}), ones({4, 5})), ShapeError);
  EXPECT_THROW(addmm(ones({5}), ones({3, 4}), ones({3, 5})), ShapeError);
}

TEST(Addmm, VjpAndSecondOrder) {
  const auto f = [](const std::vector<Array>& x) { return addmm(x[0], x[1], x[2], 0.7f, 1.3f); };
  test::check_vjp(f, {random_array({5}, float64, 401), random_array({2, 3, 4}, float64, 402),
                      random_array({4, 5}, float64, 403)});
  test::check_vjp(f, {random_array({3}, float64, 404), random_array({3, 4}, float64, 405),
                      random_array({4}, float64, 406)});
  test::check_vjp(f, {random_array({3, 1}, float64, 413), random_array({3, 4}, float64, 414),
                      random_array({4, 5}, float64, 415)});
  test::check_vjp(f, {random_array({}, float64, 407), random_array({4}, float64, 408),
                      random_array({2, 4, 3}, float64, 409)});
  test::check_second_order(
      [](const std::vector<Array>& x) { return addmm(x[0], x[1] * x[1], x[2], 0.7f, 1.3f); },
      {random_array({5}, float64, 410), random_array({3, 4}, float64, 411),
       random_array({4, 5}, float64, 412)});
}

// ---- jvp and vmap rules, called on the primitive directly

// Example i of `x` along its vmap axis (x itself when unbatched).
Array example(const Array& x, int axis, int i) { return axis >= 0 ? take(x, Array(i), axis) : x; }

std::vector<double> plus(std::vector<double> a, const std::vector<double>& b, double sb = 1.0) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += sb * b[i];
  return a;
}

TEST(Matmul, JvpRule) {
  const Array a = random_array({2, 3, 4}, float64, 501), b = random_array({4, 5}, float64, 502);
  const Array ta = random_array({2, 3, 4}, float64, 503), tb = random_array({4, 5}, float64, 504);
  const Array y = matmul(a, b);
  const std::vector<Array> primals{a, b}, tangents{ta, tb};
  const std::vector<int> both{0, 1}, second{1};
  const auto t = y.primitive()->jvp({primals, tangents, both});
  expect_close(t[0], plus(ref_of(ta, b).v, ref_of(a, tb).v), 1e-12, 1e-12);
  const std::vector<Array> only_tb{tb};
  const auto t1 = y.primitive()->jvp({primals, only_tb, second});
  expect_close(t1[0], ref_of(a, tb).v, 1e-12, 1e-12);
}

TEST(Matmul, VmapRule) {
  const int kB = 3;
  auto check = [&](const Array& x, int ax, const Array& y, int ay) {
    const Array node = matmul(example(x, ax, 0), example(y, ay, 0));
    const std::vector<Array> in{x, y};
    const std::vector<int> axes{ax, ay};
    const VmapResult r = node.primitive()->vmap({in, axes});
    for (int i = 0; i < kB; ++i) {
      const Ref e = ref_of(example(x, ax, i), example(y, ay, i));
      const Array got = example(r.outputs[0], r.axes[0], i);
      EXPECT_EQ(got.shape(), e.shape);
      expect_close(got, e.v, 1e-12, 1e-12);
    }
  };
  check(random_array({3, kB, 4}, float64, 511), 1, random_array({4, 5}, float64, 512), -1);
  check(random_array({3, 4}, float64, 513), -1, random_array({2, 4, 5, kB}, float64, 514), 3);
  check(random_array({kB, 3, 4}, float64, 515), 0, random_array({2, kB, 4, 5}, float64, 516), 1);
  check(random_array({2, 1, 3, 4, kB}, float64, 517), 4, random_array({kB, 4, 5}, float64, 518), 0);
}

TEST(Addmm, JvpAndVmapRules) {
  const Array c = random_array({5}, float64, 521), a = random_array({3, 4}, float64, 522),
              b = random_array({4, 5}, float64, 523);
  const Array tc = random_array({5}, float64, 524), ta = random_array({3, 4}, float64, 525),
              tb = random_array({4, 5}, float64, 526);
  const Array y = addmm(c, a, b, 0.5f, 2.0f);
  const std::vector<Array> primals{c, a, b}, tangents{tc, ta, tb};
  const std::vector<int> all{0, 1, 2};
  const auto t = y.primitive()->jvp({primals, tangents, all});
  expect_close(t[0], plus(ref_addmm(tc, ta, b, 0.5, 2.0), ref_of(a, tb).v, 0.5), 1e-12, 1e-12);
  const std::vector<Array> only_tc{tc};
  const std::vector<int> first{0};
  const auto tcs = y.primitive()->jvp({primals, only_tc, first});
  EXPECT_EQ(tcs[0].shape(), (Shape{3, 5}));
  expect_close(tcs[0], ref_addmm(tc, a, b, 0.0, 2.0), 1e-12, 1e-12);

  const int kB = 2;
  auto check = [&](const Array& z, int az, const Array& x, int ax, const Array& w, int aw) {
    const Array node = addmm(example(z, az, 0), example(x, ax, 0), example(w, aw, 0), 0.5f, 2.0f);
    const std::vector<Array> in{z, x, w};
    const std::vector<int> axes{az, ax, aw};
    const VmapResult r = node.primitive()->vmap({in, axes});
    for (int i = 0; i < kB; ++i)
      expect_close(example(r.outputs[0], r.axes[0], i),
                   ref_addmm(example(z, az, i), example(x, ax, i), example(w, aw, i), 0.5, 2.0), 1e-12,
                   1e-12);
  };
  check(random_array({kB, 5}, float64, 531), 0, a, -1, b, -1);
  check(random_array({3, 1, kB}, float64, 532), 2, random_array({3, kB, 4}, float64, 533), 1, b, -1);
  check(c, -1, a, -1, random_array({4, kB, 5}, float64, 534), 1);
}
// linear(x, w, b) = x @ w^T + b against a float64 loop, for every float dtype and leading shape.
std::vector<double> linear_reference(const Array& x, const Array& w, const Array& b) {
  const std::vector<double> xv = values(x), wv = values(w),
                            bv = b.valid() ? values(b) : std::vector<double>();
  const int64_t in = w.shape(1), out = w.shape(0), rows = x.size() / in;
  std::vector<double> r(rows * out);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv.empty() ? 0.0 : bv[o];
      for (int64_t k = 0; k < in; ++k) acc += xv[i * in + k] * wv[o * in + k];
      r[i * out + o] = acc;
    }
  return r;
}

TEST(Linear, ForwardMatchesReference) {
  for (Dtype t : {float32, float64, float16, bfloat16}) {
    const Array w = random_array({5, 7}, t, 30), b = random_array({5}, t, 31);
    for (Shape xs : {Shape{7}, Shape{3, 7}, Shape{2, 4, 7}}) {
      const Array x = random_array(xs, t, 32);
      const Array y = linear(x, w, b);
      Shape expected = xs;
      expected.back() = 5;
      EXPECT_EQ(y.shape(), expected);
      EXPECT_EQ(y.dtype(), t);
      expect_close(y, linear_reference(x, w, b));
      expect_close(linear(x, w), linear_reference(x, w, Array()));
    }
  }
  // Strided x and w are copied to row-major first.
  const Array xt = transpose(random_array({7, 3}, float32, 33)),
              wt = transpose(random_array({7, 5}, float32, 34));
  expect_close(linear(xt, wt), linear_reference(xt, wt, Array()));
  EXPECT_EQ(linear(zeros({0, 7}), random_array({5, 7}, float32, 35)).shape(), (Shape{0, 5}));
  // No input features: the empty sum is the bias (or zeros).
  const Array no_in = random_array({3, 0}, float32, 36), w0 = random_array({4, 0}, float32, 37),
              b0 = random_array({4}, float32, 38);
  test::expect_close(linear(no_in, w0, b0), broadcast_to(b0, {3, 4}), 0, 0);
  test::expect_close(linear(no_in, w0), zeros({3, 4}), 0, 0);
}

TEST(Linear, GradientsJvpVmapAndLayout) {
  const Array x = random_array({2, 3, 4}, float64, 36), w = random_array({5, 4}, float64, 37),
              b = random_array({5}, float64, 38);
  auto fn = [](const std::vector<Array>& a) { return linear(a[0], a[1], a[2]); };
  test::check_vjp(fn, {x, w, b});
  test::check_second_order(fn, {x, w, b});
  // The weight gradient is row-major in the weight's layout, not a transposed view.
  const Array gw =
      grad([&](const std::vector<Array>& a) { return std::vector<Array>{sum(linear(x, a[0], b))}; })({w})[0];
  gw.eval();
  EXPECT_TRUE(gw.row_contiguous());
  // jvp against the same product written with matmul.
  const Array tx = random_array(x.shape(), float64, 39), tw = random_array(w.shape(), float64, 40),
              tb = random_array(b.shape(), float64, 41);
  auto ops = [](const std::vector<Array>& a) {
    return std::vector<Array>{matmul(a[0], transpose(a[1])) + a[2]};
  };
  auto lin = [](const std::vector<Array>& a) { return std::vector<Array>{linear(a[0], a[1], a[2])}; };
  expect_close(jvp(lin, {x, w, b}, {tx, tw, tb}).second[0],
               values(jvp(ops, {x, w, b}, {tx, tw, tb}).second[0]));
  // vmap over x only, and over batched weights and biases, against a loop.
  const Array ws = random_array({2, 5, 4}, float64, 42), bs = random_array({2, 5}, float64, 43);
  const Array shared = vmap(lin, {0, -1, -1})({x, w, b})[0];
  const Array batched = vmap(lin, {0, 0, 0})({x, ws, bs})[0];
  for (int32_t i = 0; i < 2; ++i) {
    const Array xi = take(x, Array(i), 0);
    expect_close(take(shared, Array(i), 0), linear_reference(xi, w, b));
    expect_close(take(batched, Array(i), 0),
                 linear_reference(xi, take(ws, Array(i), 0), take(bs, Array(i), 0)));
  }
  const Array x_shared = vmap(lin, {-1, 0, 0})({take(x, Array(0), 0), ws, bs})[0];
  expect_close(take(x_shared, Array(1), 0),
               linear_reference(take(x, Array(0), 0), take(ws, Array(1), 0), take(bs, Array(1), 0)));
}

TEST(Linear, Errors) {
  const Array w = ones({5, 4});
  EXPECT_THROW(linear(ones({3, 3}), w), ShapeError);
  EXPECT_THROW(linear(ones({3, 4}), ones({5, 4, 1})), ShapeError);
  EXPECT_THROW(linear(ones({3, 4}), w, ones({4})), ShapeError);
  EXPECT_THROW(linear(Array(), w), ValueError);
}

}  // namespace
}  // namespace kiln
