// jvp and vmap, and their compositions with grad: per-example gradients equal a loop over
// examples, jvp(grad) gives Hessian-vector products equal to finite differences of the gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

Array mlp_loss(const Array& w1, const Array& w2, const Array& x, const Array& y) {
  const Array h = tanh(matmul(x, w1));
  return mean(square(matmul(h, w2) - y));
}

TEST(Jvp, MatchesFiniteDifferencesOfTheFunction) {
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{sum(exp(a[0]) * sin(a[1]), 0), a[0] * a[1]};
  };
  const Array x = random_array({3, 2}, float64, 1), y = random_array({3, 2}, float64, 2);
  const Array tx = random_array({3, 2}, float64, 3), ty = random_array({3, 2}, float64, 4);
  auto [outs, tangents] = jvp(f, {x, y}, {tx, ty});
  ASSERT_EQ(tangents.size(), 2u);
  const double eps = 1e-6;
  for (size_t j = 0; j < 2; ++j) {
    const auto plus = f({x + eps * tx, y + eps * ty})[j], minus = f({x - eps * tx, y - eps * ty})[j];
    expect_close(tangents[j], values((plus - minus) / (2 * eps)), 1e-6, 1e-8);
  }
  expect_close(outs[1], values(x * y));
}

TEST(Jvp, DotProductWithVjp) {
  // <u, J v> = <J^T u, v> ties the two modes together.
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{softmax(matmul(a[0], a[1]), -1) * log1p(square(a[0]))};
  };
  const Array a = random_array({4, 3}, float64, 5), b = random_array({3, 3}, float64, 6);
  const Array va = random_array({4, 3}, float64, 7), vb = random_array({3, 3}, float64, 8);
  const Array u = random_array({4, 3}, float64, 9);
  const Array jv = jvp(f, {a, b}, {va, vb}).second[0];
  const auto jtu = vjp(f, {a, b}, {u}).second;
  const double lhs = sum(u * jv).item<double>();
  const double rhs = sum(jtu[0] * va).item<double>() + sum(jtu[1] * vb).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
}

TEST(Jvp, HessianVectorProductOfGrad) {
  auto f = [](const Array& x) { return sum(exp(x) * sin(x) + square(x) * x); };
  auto g = grad(ScalarFn(f));
  const Array x = random_array({5}, float64, 10), v = random_array({5}, float64, 11);
  const Array hv =
      jvp([&](const std::vector<Array>& a) { return std::vector<Array>{g(a[0])}; }, {x}, {v}).second[0];
  const double eps = 1e-6;
  expect_close(hv, values((g(x + eps * v) - g(x - eps * v)) / (2 * eps)), 1e-6, 1e-7);
}

TEST(Jvp, RejectsMismatchedTangents) {
  auto f = [](const std::vector<Array>& a) { return a; };
  EXPECT_THROW(jvp(f, {ones({2})}, {}), ValueError);
  EXPECT_THROW(jvp(f, {ones({2})}, {ones({3})}), ShapeError);
}

TEST(Vmap, EqualsStackingOverExamples) {
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{matmul(a[0], a[1]) + sum(a[0]), logsumexp(a[0], 0)};
  };
  const Array xs = random_array({5, 2, 3}, float32, 1), w = random_array({3, 4}, float32, 2);
  const auto batched = vmap(f, {0, -1})({xs, w});
  for (int64_t i = 0; i < 5; ++i) {
    const auto one = f({take(xs, Array(int32_t(i)), 0), w});
    expect_close(take(batched[0], Array(int32_t(i)), 0), values(one[0]));
    expect_close(take(batched[1], Array(int32_t(i)), 0), values(one[1]));
  }
}

TEST(Vmap, InAndOutAxes) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] * a[1]}; };
  const Array x = random_array({3, 4}, float64, 3), y = random_array({4, 3}, float64, 4);
  // Batch along x's axis 1 and y's axis 0 (both size 4); put the batch last in the output.
  const Array r = vmap(f, {1, 0}, {1})({x, y})[0];
  ASSERT_EQ(r.shape(), (Shape{3, 4}));
  expect_close(r, values(x * transpose(y)));
}

TEST(Vmap, NestedAndUnbatchedOutputs) {
  ScalarFn inner = [](const Array& v) { return sum(v * v); };
  const Array x = random_array({2, 3, 4}, float64, 5);
  const Array r = vmap(vmap(inner))(x);  // per (i, j) sum over the last axis
  expect_close(r, values(sum(x * x, -1)));
  // An output that ignores the batch is broadcast over it.
  auto g = [](const std::vector<Array>& a) { return std::vector<Array>{ones({2}) * 3.0f, a[0]}; };
  const auto out = vmap(g)({ones({4, 1})});
  EXPECT_EQ(out[0].shape(), (Shape{4, 2}));
}

TEST(Vmap, PerExampleGradientsEqualALoop) {
  const Array w1 = random_array({3, 8}, float64, 6), w2 = random_array({8, 1}, float64, 7);
  const Array xs = random_array({6, 1, 3}, float64, 8), ys = random_array({6, 1, 1}, float64, 9);
  auto g =
      grad([&](const std::vector<Array>& a) { return std::vector<Array>{mlp_loss(a[0], a[1], a[2], a[3])}; },
           {0, 1});
  const auto per_example = vmap(g, {-1, -1, 0, 0})({w1, w2, xs, ys});
  ASSERT_EQ(per_example[0].shape(), (Shape{6, 3, 8}));
  for (int64_t i = 0; i < 6; ++i) {
    const Array idx{static_cast<int32_t>(i)};
    const auto one = g({w1, w2, take(xs, idx, 0), take(ys, idx, 0)});
    expect_close(take(per_example[0], idx, 0), values(one[0]), 1e-9, 1e-12);
    expect_close(take(per_example[1], idx, 0), values(one[1]), 1e-9, 1e-12);
  }
}

TEST(Vmap, GradOfVmapAndVmapOfJvp) {
  const Array xs = random_array({4, 3}, float64, 10);
  ScalarFn per = [](const Array& v) { return sum(sin(v) * v); };
  // grad of (sum over the batch of vmap(per)) is the elementwise derivative.
  const Array g = grad(ScalarFn([&](const Array& x) { return sum(vmap(per)(x)); }))(xs);
  expect_close(g, values(cos(xs) * xs + sin(xs)), 1e-12, 1e-12);
  // vmap of jvp: directional derivatives per example.
  const Array ts = random_array({4, 3}, float64, 11);
  auto dir = [&](const std::vector<Array>& a) {
    return jvp([&](const std::vector<Array>& b) { return std::vector<Array>{per(b[0])}; }, {a[0]}, {a[1]})
        .second;
  };
  const Array d = vmap(dir)({xs, ts})[0];
  expect_close(d, values(sum((cos(xs) * xs + sin(xs)) * ts, -1)), 1e-12, 1e-12);
}

TEST(Vmap, RejectsBadAxesAndBatchSizes) {
  auto f = [](const std::vector<Array>& a) { return a; };
  EXPECT_THROW(vmap(f)({ones({2, 3}), ones({3, 3})}), ValueError);
  EXPECT_THROW(vmap(f, {2})({ones({2, 3})}), ValueError);
  EXPECT_THROW(vmap(f, {-1})({ones({2, 3})}), ValueError);
  EXPECT_THROW(vmap(f, {0, 0})({ones({2, 3})}), ValueError);
}

TEST(Transforms, GradOfGradOfGradThroughVmap) {
  ScalarFn f = [](const Array& x) { return sum(x * x * x * x); };
  const Array xs = random_array({3}, float64, 12);
  const Array third = vmap(grad(grad(grad(ScalarFn([&](const Array& x) { return f(x); })))))(xs);
  expect_close(third, values(24.0 * xs), 1e-12, 1e-12);
}

}  // namespace
}  // namespace kiln
