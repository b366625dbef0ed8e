#pragma once
// What the random-number tests check samples with: moments, the Kolmogorov-Smirnov statistic
// against a CDF, columns of row-major samples, and bit-identical arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/ops/cast.h"

namespace kiln::test {

inline double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
inline double variance_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}

/// Kolmogorov-Smirnov statistic sqrt(n) * sup |F_n - F|; above kKsCritical has probability about
/// 0.001.
template <class Cdf>
double ks_statistic(std::vector<double> v, Cdf cdf) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = cdf(v[i]);
    d = std::max({d, std::abs(f - static_cast<double>(i) / n), std::abs(static_cast<double>(i + 1) / n - f)});
  }
  return d * std::sqrt(n);
}
inline constexpr double kKsCritical = 1.95;

inline double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
inline double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); }

/// Column c of a row-major (rows, cols) vector.
inline std::vector<double> column(const std::vector<double>& v, size_t cols, size_t c) {
  std::vector<double> out;
  for (size_t i = c; i < v.size(); i += cols) out.push_back(v[i]);
  return out;
}

/// The raw bytes of an array, read on the CPU.
inline std::vector<unsigned char> array_bytes(const Array& a) {
  const Array c = contiguous(a, Device::cpu);
  c.eval();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  return {p, p + c.nbytes()};
}

/// The same shape, dtype and bytes.
inline void expect_bitwise(const Array& a, const Array& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const auto x = array_bytes(a), y = array_bytes(b);
  size_t first = 0;
  while (first < x.size() && x[first] == y[first]) ++first;
  EXPECT_EQ(first, x.size()) << what << ": first differing byte " << first << " of " << x.size();
}

}  // namespace kiln::test
