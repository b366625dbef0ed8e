// var, std, logsumexp, softmax and log_softmax: graphs of reduction and elementwise primitives.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_second_order;
using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

// For each element of a row-major array of `shape`, the index of its group (the output element it
// reduces into) when reducing over `axes`; n_groups receives the number of groups.
std::vector<int64_t> groups(const Shape& shape, const Axes& axes, int64_t& n_groups) {
  const int nd = static_cast<int>(shape.size());
  std::vector<bool> red(nd, false);
  for (int a : axes) red[a < 0 ? a + nd : a] = true;
  n_groups = 1;
  for (int d = 0; d < nd; ++d)
    if (!red[d]) n_groups *= shape[d];
  std::vector<int64_t> out;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < shape_size(shape); ++i) {
    int64_t o = 0;
    for (int d = 0; d < nd; ++d)
      if (!red[d]) o = o * shape[d] + idx[d];
    out.push_back(o);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<double> ref_var(const std::vector<double>& x, const Shape& shape, const Axes& axes, int ddof) {
  int64_t ng;
  const auto g = groups(shape, axes, ng);
  std::vector<double> s(ng, 0), n(ng, 0), v(ng, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    s[g[i]] += x[i];
    n[g[i]] += 1;
  }
  for (size_t i = 0; i < x.size(); ++i) v[g[i]] += (x[i] - s[g[i]] / n[g[i]]) * (x[i] - s[g[i]] / n[g[i]]);
  for (int64_t k = 0; k < ng; ++k) v[k] /= n[k] - ddof;
  return v;
}

std::vector<double> ref_logsumexp(const std::vector<double>& x, const Shape& shape, const Axes& axes) {
  int64_t ng;
  const auto g = groups(shape, axes, ng);
  std::vector<double> m(ng, -kInf), s(ng, 0);
  for (size_t i = 0; i < x.size(); ++i) m[g[i]] = std::max(m[g[i]], x[i]);
  for (size_t i = 0; i < x.size(); ++i) s[g[i]] += std::exp(x[i] - m[g[i]]);
  for (int64_t k = 0; k < ng; ++k) s[k] = std::log(s[k]) + m[k];
  return s;
}

std::vector<double> ref_log_softmax(const std::vector<double>& x, const Shape& shape, const Axes& axes) {
  int64_t ng;
  const auto g = groups(shape, axes, ng);
  const auto lse = ref_logsumexp(x, shape, axes);
  std::vector<double> out;
  for (size_t i = 0; i < x.size(); ++i) out.push_back(x[i] - lse[g[i]]);
  return out;
}

std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, const Axes& axes) {
  auto out = ref_log_softmax(x, shape, axes);
  for (double& v : out) v = std::exp(v);
  return out;
}

const std::vector<Axes> kAxisSets = {{0}, {-1}, {1}, {0, 2}, {-1, 0, 1}};
const Shape kShape = {3, 4, 5};

TEST(ReduceComposite, VarAndStdMatchReference) {
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    const Array x = random_array(kShape, t, 1, -2, 3);
    const auto xv = values(x);
    for (const Axes& axes : kAxisSets)
      for (int ddof : {0, 1})
        for (bool keepdims : {false, true}) {
          SCOPED_TRACE(::testing::Message() << t << " ddof " << ddof << " keepdims " << keepdims);
          const Array v = var(x, axes, keepdims, ddof);
          const Array s = std(x, axes, keepdims, ddof);
          EXPECT_EQ(v.dtype(), t);
          const auto ref = ref_var(xv, kShape, axes, ddof);
          std::vector<double> ref_s;
          for (double r : ref) ref_s.push_back(std::sqrt(r));
          expect_close(v, ref);
          expect_close(s, ref_s);
          if (keepdims) {
            EXPECT_EQ(v.ndim(), 3);
          }
        }
  }
  // All-axes overloads, integer input (float32 result), and ddof that leaves no freedom.
  const Array i(std::vector<int32_t>{1, 2, 3, 4}, {4});
  EXPECT_EQ(var(i).dtype(), float32);
  expect_close(var(i), {1.25});
  expect_close(std(i, false, 1), {std::sqrt(5.0 / 3.0)});
  EXPECT_TRUE(std::isinf(var(i, false, 4).item<float>()));
  // float16 input whose sum of squared deviations overflows float16: computed in float32 inside.
  const Array h(std::vector<double>{-200, 200, -200, 200}, {4}, float16);
  expect_close(var(h), std::vector<double>{40000.0}, 1e-3, 0);
  expect_close(var(h, false, 1), std::vector<double>{160000.0 / 3}, 1e-3, 0);
  EXPECT_EQ(var(h).dtype(), float16);
}

TEST(ReduceComposite, LogSumExpMatchesReferenceAndIsStable) {
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    const Array x = random_array(kShape, t, 2, -3, 3);
    const auto xv = values(x);
    for (const Axes& axes : kAxisSets)
      for (bool keepdims : {false, true}) {
        const Array y = logsumexp(x, axes, keepdims);
        EXPECT_EQ(y.dtype(), t);
        expect_close(y, ref_logsumexp(xv, kShape, axes));
      }
  }
  // Huge values do not overflow; all -inf gives -inf; +inf gives +inf.
  const Array big({1000.0, 1000.0, 999.0});
  expect_close(logsumexp(big), ref_logsumexp(values(big), {3}, {0}));
  expect_close(logsumexp(Array({-kInf, -kInf})), {-kInf});
  expect_close(logsumexp(Array({1.0, kInf})), {kInf});
  expect_close(logsumexp(Array({1.0f, 2.0f}), 0), {std::log(std::exp(1.0) + std::exp(2.0))});
  EXPECT_EQ(logsumexp(Array({1, 2})).dtype(), float32);
  // Over an empty axis: log(0) = -inf.
  expect_close(logsumexp(zeros({0, 2}), 0), {-kInf, -kInf});
}

TEST(ReduceComposite, SoftmaxAndLogSoftmaxMatchReference) {
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    const Array x = random_array(kShape, t, 3, -4, 4);
    const auto xv = values(x);
    for (const Axes& axes : kAxisSets) {
      const Array p = softmax(x, axes);
      const Array lp = log_softmax(x, axes);
      EXPECT_EQ(p.dtype(), t);
      EXPECT_EQ(p.shape(), kShape);
      expect_close(p, ref_softmax(xv, kShape, axes));
      const auto tol = test::tolerance(t);
      expect_close(lp, ref_log_softmax(xv, kShape, axes), tol.rtol, tol.atol * 8);
    }
  }
  // Default axis is the last; transposed input; large logits stay finite.
  const Array x = random_array({4, 6}, float32, 4);
  expect_close(softmax(x), ref_softmax(values(x), {4, 6}, {1}));
  expect_close(softmax(transpose(x), 0), ref_softmax(values(transpose(x)), {6, 4}, {0}));
  const Array big = Array({1000.0f, 1001.0f, 1002.0f});
  expect_close(softmax(big), ref_softmax({1000, 1001, 1002}, {3}, {0}));
  expect_close(log_softmax(big), ref_log_softmax({1000, 1001, 1002}, {3}, {0}));
  expect_close(log_softmax(Array({-kInf, 0.0})), {-kInf, 0.0});
  EXPECT_EQ(softmax(Array({1, 2, 3})).dtype(), float32);
  EXPECT_EQ(softmax(zeros({2, 0})).shape(), (Shape{2, 0}));
}

TEST(ReduceComposite, GradientsMatchFiniteDifferences) {
  const Array x = random_array({3, 4, 2}, float64, 5, -2, 2);
  using Op = std::function<Array(const Array&, const Axes&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"var", [](const Array& a, const Axes& ax) { return var(a, ax); }},
      {"var_ddof1_keep", [](const Array& a, const Axes& ax) { return var(a, ax, true, 1); }},
      {"std", [](const Array& a, const Axes& ax) { return std(a, ax); }},
      {"std_ddof1", [](const Array& a, const Axes& ax) { return std(a, ax, false, 1); }},
      {"logsumexp", [](const Array& a, const Axes& ax) { return logsumexp(a, ax); }},
      {"logsumexp_keep", [](const Array& a, const Axes& ax) { return logsumexp(a, ax, true); }},
      {"softmax", [](const Array& a, const Axes& ax) { return softmax(a, ax); }},
      {"log_softmax", [](const Array& a, const Axes& ax) { return log_softmax(a, ax); }},
  };
  for (const auto& [name, op] : ops)
    for (const Axes& axes : std::vector<Axes>{{1}, {0, 2}, {-1}}) {
      SCOPED_TRACE(name);
      check_vjp([&](const std::vector<Array>& a) { return op(a[0], axes); }, {x});
      check_vjp([&](const std::vector<Array>& a) { return op(transpose(a[0], {1, 2, 0}), axes); }, {x});
    }
}

TEST(ReduceComposite, SecondOrder) {
  const Array x = random_array({3, 5}, float64, 6, -2, 2);
  check_second_order([](const std::vector<Array>& a) { return logsumexp(a[0], 1); }, {x});
  check_second_order([](const std::vector<Array>& a) { return logsumexp(a[0], Axes{0, 1}); }, {x});
  check_second_order([](const std::vector<Array>& a) { return softmax(a[0], 1); }, {x});
  check_second_order([](const std::vector<Array>& a) { return log_softmax(a[0], 0); }, {x});
  check_second_order([](const std::vector<Array>& a) { return var(a[0], Axes{1}); }, {x});
}

TEST(ReduceComposite, SoftmaxGradientOfCrossEntropy) {
  // d/dx of -sum(onehot * log_softmax(x)) is softmax(x) - onehot.
  const Array x = random_array({2, 4}, float64, 7);
  const Array onehot(std::vector<double>{0, 1, 0, 0, 0, 0, 0, 1}, {2, 4});
  const Array g = grad([&](const Array& a) { return negative(sum(onehot * log_softmax(a))); })(x);
  auto expected = ref_softmax(values(x), {2, 4}, {1});
  const auto oh = values(onehot);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] -= oh[i];
  expect_close(g, expected);
}

}  // namespace
}  // namespace kiln
