#include <gtest/gtest.h>

#include <cmath>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;

TEST(Autodiff, GradOfPolynomial) {
  auto f = [](const Array& x) { return sum(x * x * x); };
  const Array x({1.0, 2.0, -3.0});
  expect_close(grad(f)(x), {3.0, 12.0, 27.0});
}

TEST(Autodiff, HigherOrderDerivatives) {
  ScalarFn f = [](const Array& x) { return x * x * x * x; };  // x^4
  const Array x(1.5);
  expect_close(grad(f)(x), {4 * std::pow(1.5, 3)});
  expect_close(grad(grad(f))(x), {12 * 1.5 * 1.5});
  expect_close(grad(grad(grad(f)))(x), {24 * 1.5});
  ScalarFn g = [](const Array& x) { return sin(x); };
  expect_close(grad(grad(grad(g)))(x), {-std::cos(1.5)});
}

TEST(Autodiff, ValueAndGradWithArgnumsAndAux) {
  auto f = [](const std::vector<Array>& a) {
    const Array loss = sum(a[0] * a[1]);
    return std::vector<Array>{loss, a[0] + 1.0};  // the second output is auxiliary
  };
  const Array x({1.0, 2.0}), y({3.0, 4.0});
  auto [outs, grads] = value_and_grad(f, {1, 0})({x, y});
  ASSERT_EQ(outs.size(), 2u);
  expect_close(outs[0], {11.0});
  expect_close(outs[1], {2.0, 3.0});
  ASSERT_EQ(grads.size(), 2u);
  expect_close(grads[0], {1.0, 2.0});  // d/dy
  expect_close(grads[1], {3.0, 4.0});  // d/dx
}

TEST(Autodiff, ValueAndGradRejectsNonScalarLossAndBadArgnums) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] * 2.0}; };
  EXPECT_THROW(value_and_grad(f)({ones({3})}), ValueError);
  auto g = [](const std::vector<Array>& a) { return std::vector<Array>{sum(a[0])}; };
  EXPECT_THROW(value_and_grad(g, {3})({ones({3})}), ValueError);
  EXPECT_THROW(value_and_grad(g, {0, 0})({ones({3})}), ValueError);
  auto h = [](const std::vector<Array>& a) { return std::vector<Array>{sum(a[0] > 0.0)}; };
  EXPECT_THROW(value_and_grad(h)({ones({3})}), DtypeError);
}

TEST(Autodiff, VjpWithSeveralOutputs) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] * 2.0, square(a[0])}; };
  const Array x({1.0, -2.0});
  auto [outs, cots] = vjp(f, {x}, {Array({1.0, 1.0}), Array({0.5, 2.0})});
  expect_close(cots[0], {2.0 + 0.5 * 2 * 1.0, 2.0 + 2.0 * 2 * -2.0});
  EXPECT_THROW(vjp(f, {x}, {Array({1.0})}), ValueError);
  EXPECT_THROW(vjp(f, {x}, {Array({1.0}), Array({1.0})}), ShapeError);
}

TEST(Autodiff, StopGradientBlocks) {
  auto f = [](const Array& x) { return sum(x * stop_gradient(x)); };
  const Array x({2.0, 3.0});
  expect_close(grad(f)(x), {2.0, 3.0});
}

TEST(Autodiff, UnusedInputGetsZeros) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{sum(a[0])}; };
  auto g = grad(f, {1})({ones({2}), ones({3}, float64)});
  expect_close(g[0], {0.0, 0.0, 0.0});
  EXPECT_EQ(g[0].dtype(), float64);
}

TEST(Autodiff, IdentityAndReusedInputsAccumulate) {
  expect_close(grad([](const Array& x) { return x; })(Array(3.0)), {1.0});
  expect_close(grad([](const Array& x) { return x + x + x; })(Array(3.0)), {3.0});
}

TEST(Autodiff, EvalInsideTheFunctionKeepsTheGraph) {
  auto f = [](const Array& x) {
    Array y = exp(x);
    y.eval();  // evaluating a traced value must not cut it out of the gradient
    return sum(y * x);
  };
  const Array x({0.5, 1.0});
  const auto xv = test::values(x);
  expect_close(grad(f)(x), {std::exp(0.5) * 1.5, std::exp(1.0) * 2.0});
}

TEST(Autodiff, GradientsOfAChainAreCorrectAndDeepChainsWork) {
  auto f = [](const Array& x) {
    Array y = x;
    for (int i = 0; i < 2000; ++i) y = y * 1.0001;
    return sum(y);
  };
  expect_close(grad(f)(Array({1.0})), std::vector<double>{std::pow(1.0001, 2000)}, 1e-9, 0.0);
}

TEST(Autodiff, MixedFunctionMatchesFiniteDifferences) {
  test::check_vjp(
      [](const std::vector<Array>& a) { return tanh(a[0] * a[1] + sigmoid(a[0])) / (1.0 + square(a[1])); },
      {random_array({2, 3}, float64, 1), random_array({3}, float64, 2)});
  test::check_second_order([](const std::vector<Array>& a) { return exp(a[0]) * tanh(a[1]); },
                           {random_array({3}, float64, 3), random_array({3}, float64, 4)});
}

}  // namespace
}  // namespace kiln
