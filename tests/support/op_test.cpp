#include "support/op_test.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kiln::test {

std::vector<double> random_values(int64_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

Array random_array(const Shape& shape, Dtype dtype, uint64_t seed, double lo, double hi) {
  return Array(random_values(shape_size(shape), seed, lo, hi), shape, dtype);
}

std::vector<double> values(const Array& a) { return a.to_vector<double>(); }

Tolerance tolerance(Dtype dtype) {
  switch (dtype) {
    case float64:
      return {1e-10, 1e-12};
    case float32:
      return {2e-5, 1e-6};
    case float16:
      return {2e-3, 1e-3};
    case bfloat16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

void expect_close(const Array& actual, const std::vector<double>& expected, double rtol, double atol) {
  const std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size()) << "size mismatch, shape " << shape_str(actual.shape());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 8; ++i) {
    const double a = got[i], e = expected[i];
    bool ok;
    if (std::isnan(e))
      ok = std::isnan(a);
    else if (std::isinf(e))
      ok = a == e;
    else
      ok = std::abs(a - e) <= atol + rtol * std::abs(e);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "element " << i << ": got " << a << ", expected " << e << " (rtol " << rtol
                    << ", atol " << atol << ", dtype " << actual.dtype() << ")";
    }
  }
}

void expect_close(const Array& actual, const std::vector<double>& expected) {
  const Tolerance t = tolerance(actual.dtype());
  expect_close(actual, expected, t.rtol, t.atol);
}

void expect_close(const Array& actual, const Array& expected, double rtol, double atol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  expect_close(actual, values(expected), rtol, atol);
}

namespace {

// sum(fn(x) * u) evaluated in double.
double contract(const Fn& fn, const std::vector<Array>& x, const std::vector<double>& u) {
  const std::vector<double> y = values(fn(x));
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * u[i];
  return s;
}

std::vector<Array> to_float64(const std::vector<Array>& inputs) {
  std::vector<Array> out;
  for (const Array& a : inputs) out.push_back(is_floating(a.dtype()) ? astype(a, float64) : a);
  return out;
}

void check_against_fd(const Fn& fn, const std::vector<Array>& x, const std::vector<double>& u,
                      const std::vector<Array>& grads, double eps, double tol, int max_elements,
                      const char* what) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!is_floating(x[i].dtype())) continue;
    const std::vector<double> base = values(x[i]);
    const std::vector<double> g = values(grads[i]);
    ASSERT_EQ(g.size(), base.size()) << what << ": gradient size of input " << i;
    const int64_t n = static_cast<int64_t>(base.size());
    const int64_t stride = std::max<int64_t>(1, n / max_elements);
    for (int64_t j = 0; j < n; j += stride) {
      auto probe = [&](double delta) {
        std::vector<double> v = base;
        v[j] += delta;
        std::vector<Array> xs = x;
        xs[i] = Array(v, x[i].shape(), float64);
        return contract(fn, xs, u);
      };
      const double fd = (probe(eps) - probe(-eps)) / (2 * eps);
      EXPECT_NEAR(g[j], fd, tol * (1 + std::abs(fd))) << what << ": input " << i << ", element " << j;
    }
  }
}

}  // namespace

void check_vjp(const Fn& fn, const std::vector<Array>& inputs, double eps, double tol, int max_elements) {
  const std::vector<Array> x = to_float64(inputs);
  const Array y = fn(x);
  const std::vector<double> u = random_values(y.size(), 12345, -1, 1);
  const Array cot(u, y.shape(), float64);
  auto wrapped = [&](const std::vector<Array>& a) { return std::vector<Array>{fn(a)}; };
  auto [outs, grads] = vjp(wrapped, x, {cot});
  ASSERT_EQ(grads.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(grads[i].shape(), x[i].shape()) << "gradient shape of input " << i;
  check_against_fd(fn, x, u, grads, eps, tol, max_elements, "vjp");
}

void check_second_order(const Fn& fn, const std::vector<Array>& inputs, double eps, double tol,
                        int max_elements) {
  const std::vector<Array> x = to_float64(inputs);
  const Array y = fn(x);
  const std::vector<double> u = random_values(y.size(), 777, -1, 1);
  const Array cot(u, y.shape(), float64);
  // g(x) = d/dx0 sum(fn(x) * u): a function whose own vjp is the second derivative.
  Fn first = [&](const std::vector<Array>& a) {
    auto wrapped = [&](const std::vector<Array>& b) { return std::vector<Array>{sum(fn(b) * cot)}; };
    return grad(wrapped, {0})(a)[0];
  };
  check_vjp(first, x, eps, tol, max_elements);
}

}  // namespace kiln::test
