// core/random_more.h's multivariate_normal (every factorization, batches, gradients) and
// categorical with a sample shape or count: moments against the reference distributions, exact
// relations to the one-sample ops, errors. The GPU pass runs this suite with the GPU as the
// default device.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/core/random_more.h"
#include "support/device.h"
#include "support/op_test.h"
#include "support/stats.h"

namespace kiln {
namespace {

using test::column;
using test::expect_bitwise;
using test::mean_of;

// ---------------------------------------------------------------- multivariate_normal

// The lower Cholesky factor of a small symmetric positive-definite matrix, in the test.
std::vector<double> cholesky_ref(const std::vector<double>& a, int n) {
  std::vector<double> l(a.size(), 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      double s = a[i * n + j];
      for (int k = 0; k < j; ++k) s -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = i == j ? std::sqrt(s) : s / l[j * n + j];
    }
  return l;
}

const std::vector<double> kMean{1.0, -2.0, 0.5};
const std::vector<double> kCov{2.0, 0.6, -0.4, 0.6, 1.0, 0.3, -0.4, 0.3, 0.5};

TEST(RandomMultivariateNormal, CholeskyIsMeanPlusLz) {
  const Array k = random::key(601);
  const Array x =
      random::multivariate_normal(Array(kMean, {3}, float64), Array(kCov, {3, 3}, float64), k, Shape{50});
  ASSERT_EQ(x.shape(), (Shape{50, 3}));
  ASSERT_EQ(x.dtype(), float64);
  const auto z = random::normal({50, 3}, k, 0.0, 1.0, float64).to_vector<double>();
  const auto l = cholesky_ref(kCov, 3);
  std::vector<double> want(150);
  for (int s = 0; s < 50; ++s)
    for (int i = 0; i < 3; ++i) {
      want[s * 3 + i] = kMean[i];
      for (int j = 0; j < 3; ++j) want[s * 3 + i] += l[i * 3 + j] * z[s * 3 + j];
    }
  test::expect_close(x, want, 1e-12, 1e-12);
}

TEST(RandomMultivariateNormal, EmpiricalMeanAndCovarianceForEveryMethod) {
  const int n = 20000;
  for (const char* method : {"cholesky", "svd", "eigh"}) {
    const Array x = random::multivariate_normal(Array(kMean, {3}, float32), Array(kCov, {3, 3}, float32),
                                                random::key(602), Shape{n}, method);
    ASSERT_EQ(x.dtype(), float32);
    const auto v = x.to_vector<double>();
    std::vector<double> m(3);
    for (int i = 0; i < 3; ++i) m[i] = mean_of(column(v, 3, i));
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(m[i], kMean[i], 5 * std::sqrt(kCov[i * 4] / n)) << method << " mean " << i;
      for (int j = 0; j < 3; ++j) {
        double c = 0;
        for (int s = 0; s < n; ++s) c += (v[s * 3 + i] - m[i]) * (v[s * 3 + j] - m[j]);
        c /= n;
        // Var of the sample covariance of a normal pair: (S_ii S_jj + S_ij^2) / n.
        const double sd = std::sqrt((kCov[i * 4] * kCov[j * 4] + kCov[i * 3 + j] * kCov[i * 3 + j]) / n);
        EXPECT_NEAR(c, kCov[i * 3 + j], 5 * sd) << method << " cov " << i << j;
      }
    }
  }
}

TEST(RandomMultivariateNormal, SingularCovarianceThroughSvdAndEigh) {
  // Rank 1: cov = w w^T, so every sample is mean + t w, orthogonal directions get nothing.
  const std::vector<double> w{1.0, 2.0, -1.0};
  std::vector<double> cov(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) cov[i * 3 + j] = w[i] * w[j];
  for (const char* method : {"svd", "eigh"}) {
    const auto v = random::multivariate_normal(zeros({3}, float64), Array(cov, {3, 3}, float64),
                                               random::key(603), Shape{500}, method)
                       .to_vector<double>();
    for (int s = 0; s < 500; ++s) {
      // Orthogonal to w: (2, -1, 0) and (1, 0, 1).
      EXPECT_NEAR(2 * v[s * 3] - v[s * 3 + 1], 0.0, 1e-6) << method;
      EXPECT_NEAR(v[s * 3] + v[s * 3 + 2], 0.0, 1e-6) << method;
    }
    EXPECT_GT(std::abs(v[0]) + std::abs(v[3]), 0.0);
  }
}

TEST(RandomMultivariateNormal, BatchShapes) {
  const Array k = random::key(604);
  const Array mean2 = test::random_array({2, 3}, float32, 1);
  const Array cov = Array(kCov, {3, 3}, float64);
  EXPECT_EQ(random::multivariate_normal(mean2, cov, k).shape(), (Shape{2, 3}));
  EXPECT_EQ(random::multivariate_normal(mean2, cov, k, Shape{5, 2}).shape(), (Shape{5, 2, 3}));
  EXPECT_EQ(random::multivariate_normal(mean2, cov, k, Shape{4, 1, 2}).shape(), (Shape{4, 1, 2, 3}));
  const Array covs = stack({cov, multiply(cov, 2.0)});
  const Array x = random::multivariate_normal(Array(kMean, {3}, float64), covs, k, Shape{2});
  ASSERT_EQ(x.shape(), (Shape{2, 3}));
  // Batch element b uses cov b: the second is the first's noise scaled by sqrt(2) about the mean.
  const auto v = x.to_vector<double>();
  const auto z = random::normal({2, 3}, k, 0.0, 1.0, float64).to_vector<double>();
  const auto l = cholesky_ref(kCov, 3);
  for (int i = 0; i < 3; ++i) {
    double y = 0;
    for (int j = 0; j < 3; ++j) y += l[i * 3 + j] * z[3 + j];
    EXPECT_NEAR(v[3 + i], kMean[i] + std::sqrt(2.0) * y, 1e-12) << i;
  }
  // Integer inputs sample in float32.
  EXPECT_EQ(
      random::multivariate_normal(Array({1, 2}), Array(std::vector<int32_t>{2, 0, 0, 2}, {2, 2}), k).dtype(),
      float32);
}

TEST(RandomMultivariateNormal, DifferentiableInMeanAndCov) {
  const Array k = random::key(605);
  for (const char* method : {"cholesky", "eigh"}) {
    auto f = [k, method](const std::vector<Array>& in) {
      return random::multivariate_normal(in[0], Array(kCov, {3, 3}, float64), k, Shape{4}, method);
    };
    test::check_vjp(f, {test::random_array({3}, float64, 11)});
    test::check_jvp(f, {test::random_array({3}, float64, 12)});
  }
  // Cov through a symmetrization: cholesky reads one triangle, so unsymmetric perturbations would
  // not be seen by the finite differences.
  auto g = [k](const std::vector<Array>& in) {
    const Array c = multiply(add(in[1], transpose(in[1])), 0.5);
    return random::multivariate_normal(in[0], c, k, Shape{4});
  };
  test::check_vjp(g, {Array(kMean, {3}, float64), Array(kCov, {3, 3}, float64)}, 1e-6, 1e-5);
}

// ---------------------------------------------------------------- categorical with a shape

TEST(RandomCategoricalShape, BatchShapeIsTheOneSampleCategorical) {
  const Array logits = test::random_array({5, 4}, float32, 21, -2.0, 2.0);
  const Array k = random::key(701);
  expect_bitwise(random::categorical(logits, k, -1, Shape{5}), random::categorical(logits, k, -1), "axis -1");
  expect_bitwise(random::categorical(logits, k, 0, Shape{4}), random::categorical(logits, k, 0), "axis 0");
}

TEST(RandomCategoricalShape, ManySamplesMatchSoftmax) {
  const int n = 20000;
  const std::vector<double> logits{0.5, -1.0, 2.0, 0.0};
  double z = 0;
  for (double l : logits) z += std::exp(l);
  // One distribution, n independent samples through the leading dims of `shape`.
  const Array s = random::categorical(Array(logits, {4}, float32), random::key(702), -1, Shape{n / 4, 4});
  ASSERT_EQ(s.dtype(), int32);
  ASSERT_EQ(s.shape(), (Shape{n / 4, 4}));
  std::vector<int> counts(4, 0);
  for (int32_t c : s.to_vector<int32_t>()) {
    ASSERT_TRUE(c >= 0 && c < 4);
    ++counts[c];
  }
  double chi2 = 0;
  for (int c = 0; c < 4; ++c) {
    const double e = n * std::exp(logits[c]) / z;
    chi2 += (counts[c] - e) * (counts[c] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // chi-square with 3 degrees of freedom: P(> 16.27) = 0.001
}

TEST(RandomCategoricalShape, SamplesPerBatchRowAlongAxisZero) {
  const int n = 12000;
  // Categories along axis 0 of (3, 2): column 0 favors class 2, column 1 is uniform.
  const std::vector<double> l{0.0, 0.0, 0.0, 0.0, std::log(6.0), 0.0};  // rows: class 0, 1, 2
  const Array logits(l, {3, 2}, float32);
  const Array s = random::categorical(logits, random::key(703), 0, Shape{n, 2});
  ASSERT_EQ(s.shape(), (Shape{n, 2}));
  const auto v = s.to_vector<int32_t>();
  const double p[2][3] = {{1.0 / 8, 1.0 / 8, 6.0 / 8}, {1.0 / 3, 1.0 / 3, 1.0 / 3}};
  for (int b = 0; b < 2; ++b) {
    std::vector<int> counts(3, 0);
    for (int i = 0; i < n; ++i) ++counts[v[2 * i + b]];
    double chi2 = 0;
    for (int c = 0; c < 3; ++c) chi2 += (counts[c] - n * p[b][c]) * (counts[c] - n * p[b][c]) / (n * p[b][c]);
    EXPECT_LT(chi2, 13.82) << "column " << b;  // 2 degrees of freedom at 0.001
  }
  // The batch dim of size 1 broadcasts to the shape's.
  EXPECT_EQ(random::categorical(zeros({1, 4}), random::key(704), -1, Shape{7, 3}).shape(), (Shape{7, 3}));
}

TEST(RandomCategoricalShape, NumSamplesLastAndIndependent) {
  const Array logits = test::random_array({2, 5}, float32, 22, -1.0, 1.0);
  const Array k = random::key(705);
  const Array s = random::categorical_samples(logits, k, 6);
  ASSERT_EQ(s.shape(), (Shape{2, 6}));
  expect_bitwise(s, transpose(random::categorical(logits, k, -1, Shape{6, 2})), "num_samples");
  EXPECT_EQ(random::categorical_samples(logits, k, 0).shape(), (Shape{2, 0}));
  EXPECT_EQ(random::categorical_samples(logits, k, 3, 0).shape(), (Shape{5, 3}));
  // Not all equal: the samples have their own noise.
  const auto many = random::categorical_samples(zeros({1, 10}), k, 50).to_vector<int32_t>();
  EXPECT_GT(std::set<int32_t>(many.begin(), many.end()).size(), 5u);
}

}  // namespace
}  // namespace kiln
