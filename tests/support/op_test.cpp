#include "support/op_test.h"

#include <gtest/gtest.h>

#include <algorithm>
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

double max_abs_diff(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = values(a), y = values(b);
  double m = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

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

void check_jvp(const Fn& fn, const std::vector<Array>& inputs, double eps, double tol) {
  const std::vector<Array> x = to_float64(inputs);
  std::vector<Array> t;
  for (size_t i = 0; i < x.size(); ++i)
    t.push_back(is_floating(x[i].dtype())
                    ? Array(random_values(x[i].size(), 4242 + i, -1, 1), x[i].shape(), float64)
                    : zeros(x[i].shape(), x[i].dtype()));
  auto wrapped = [&](const std::vector<Array>& a) { return std::vector<Array>{fn(a)}; };
  auto [outs, tangents] = jvp(wrapped, x, t);
  ASSERT_EQ(tangents.size(), 1u);
  ASSERT_EQ(tangents[0].shape(), outs[0].shape()) << "jvp: tangent shape";
  const std::vector<double> jt = values(tangents[0]);
  // Finite differences along t.
  auto shifted = [&](double delta) {
    std::vector<Array> xs = x;
    for (size_t i = 0; i < x.size(); ++i)
      if (is_floating(x[i].dtype())) xs[i] = x[i] + delta * t[i];
    return values(fn(xs));
  };
  const std::vector<double> plus = shifted(eps), minus = shifted(-eps);
  ASSERT_EQ(plus.size(), jt.size());
  int failures = 0;
  for (size_t k = 0; k < jt.size() && failures < 8; ++k) {
    const double fd = (plus[k] - minus[k]) / (2 * eps);
    if (!(std::abs(jt[k] - fd) <= tol * (1 + std::abs(fd)))) {
      ++failures;
      ADD_FAILURE() << "jvp element " << k << ": " << jt[k] << ", finite differences " << fd;
    }
  }
  // Against the vjp: <u, J t> = <J^T u, t>.
  if (!is_floating(outs[0].dtype())) return;
  const std::vector<double> u = random_values(outs[0].size(), 999, -1, 1);
  auto [vouts, grads] = vjp(wrapped, x, {Array(u, outs[0].shape(), float64)});
  double lhs = 0, rhs = 0, scale = 0;
  for (size_t k = 0; k < jt.size(); ++k) lhs += u[k] * jt[k], scale += std::abs(u[k] * jt[k]);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!is_floating(x[i].dtype())) continue;
    const std::vector<double> g = values(grads[i]), ti = values(t[i]);
    for (size_t k = 0; k < g.size(); ++k) rhs += g[k] * ti[k], scale += std::abs(g[k] * ti[k]);
  }
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + scale)) << "jvp disagrees with vjp: <u, J t> vs <J^T u, t>";
}

namespace {
// `batch` examples like `example` stacked along `axis` (0 or example.ndim()).
Array batch_of(const Array& example, int batch, int axis, uint64_t seed, double lo, double hi) {
  std::vector<Array> items;
  for (int b = 0; b < batch; ++b) {
    if (is_floating(example.dtype())) {
      items.push_back(random_array(example.shape(), example.dtype(), seed + b, lo, hi));
    } else {  // the example's own values rotated: indices and masks stay valid and distinct ones distinct
      const std::vector<double> v = values(example);
      std::vector<double> p(v.size());
      for (size_t k = 0; k < v.size(); ++k) p[k] = v[(k + static_cast<size_t>(b)) % v.size()];
      items.push_back(astype(Array(p, example.shape(), float64), example.dtype()));
    }
  }
  return stack(items, axis);
}
}  // namespace

void check_vmap(const Fn& fn, const std::vector<Array>& inputs, double lo, double hi, int batch) {
  const size_t n = inputs.size();
  auto run = [&](const std::vector<int>& in_axes, uint64_t seed, const std::string& what) {
    std::vector<Array> batched = inputs;
    for (size_t i = 0; i < n; ++i)
      if (in_axes[i] >= 0) batched[i] = batch_of(inputs[i], batch, in_axes[i], seed + 100 * i, lo, hi);
    auto wrapped = [&](const std::vector<Array>& a) { return std::vector<Array>{fn(a)}; };
    const Array got = vmap(wrapped, in_axes)(batched)[0];
    std::vector<Array> expected;
    for (int b = 0; b < batch; ++b) {
      std::vector<Array> example = inputs;
      for (size_t i = 0; i < n; ++i)
        if (in_axes[i] >= 0) example[i] = take(batched[i], Array(b), in_axes[i]);
      expected.push_back(fn(example));
    }
    const Array want = stack(expected, 0);
    ASSERT_EQ(got.shape(), want.shape()) << "vmap " << what;
    const Tolerance tol = tolerance(want.dtype());
    SCOPED_TRACE("vmap " + what);
    expect_close(got, want, tol.rtol, tol.atol);
  };
  for (size_t i = 0; i < n; ++i)
    for (int axis : {0, inputs[i].ndim()}) {
      std::vector<int> in_axes(n, -1);
      in_axes[i] = axis;
      run(in_axes, 50 + 7 * i + axis, "input " + std::to_string(i) + " on axis " + std::to_string(axis));
    }
  if (n > 1) run(std::vector<int>(n, 0), 90, "every input on axis 0");
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
