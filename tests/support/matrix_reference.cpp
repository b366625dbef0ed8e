// The float64 references of matrix_reference.h.
#include "support/matrix_reference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/op_test.h"

namespace kiln::test {

Mats mats(const Array& a) {
  const int64_t r = a.shape(-2), c = a.shape(-1);
  return {values(a), r * c == 0 ? 0 : a.size() / (r * c), r, c};
}
Mats product(const Mats& x, const Mats& y) {
  Mats out{std::vector<double>(x.count * x.rows * y.cols, 0.0), x.count, x.rows, y.cols};
  for (int64_t b = 0; b < x.count; ++b)
    for (int64_t i = 0; i < x.rows; ++i)
      for (int64_t j = 0; j < y.cols; ++j) {
        double s = 0;
        for (int64_t k = 0; k < x.cols; ++k) s += x.at(b, i, k) * y.at(b, k, j);
        out.v[(b * x.rows + i) * y.cols + j] = s;
      }
  return out;
}
Mats transposed(const Mats& x) {
  Mats out{std::vector<double>(x.v.size()), x.count, x.cols, x.rows};
  for (int64_t b = 0; b < x.count; ++b)
    for (int64_t i = 0; i < x.rows; ++i)
      for (int64_t j = 0; j < x.cols; ++j) out.v[(b * x.cols + j) * x.rows + i] = x.at(b, i, j);
  return out;
}
std::vector<double> identities(int64_t count, int64_t n) {
  std::vector<double> v(count * n * n, 0.0);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < n; ++i) v[(b * n + i) * n + i] = 1;
  return v;
}
double max_diff(const std::vector<double>& x, const std::vector<double>& y) {
  EXPECT_EQ(x.size(), y.size());
  double d = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}
std::vector<double> lu_dets(const Mats& a) {
  std::vector<double> out;
  const int64_t n = a.rows;
  for (int64_t b = 0; b < a.count; ++b) {
    std::vector<double> m(a.v.begin() + b * n * n, a.v.begin() + (b + 1) * n * n);
    double det = 1;
    for (int64_t c = 0; c < n; ++c) {
      int64_t p = c;
      for (int64_t r = c + 1; r < n; ++r)
        if (std::abs(m[r * n + c]) > std::abs(m[p * n + c])) p = r;
      if (m[p * n + c] == 0) {
        det = 0;
        break;
      }
      if (p != c) {
        for (int64_t j = 0; j < n; ++j) std::swap(m[c * n + j], m[p * n + j]);
        det = -det;
      }
      det *= m[c * n + c];
      for (int64_t r = c + 1; r < n; ++r) {
        const double f = m[r * n + c] / m[c * n + c];
        for (int64_t j = c; j < n; ++j) m[r * n + j] -= f * m[c * n + j];
      }
    }
    out.push_back(det);
  }
  return out;
}
double cofactor_det3(const std::vector<double>& m) {
  return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
         m[2] * (m[3] * m[7] - m[4] * m[6]);
}

}  // namespace kiln::test
