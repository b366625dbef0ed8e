#include "support/norm_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::test {

std::string row_norm_name(RowNorm k) {
  const char* names[] = {"softmax", "log_softmax", "layer_norm", "rms_norm"};
  return names[static_cast<int>(k)];
}

bool is_norm(RowNorm k) { return k == RowNorm::layer_norm || k == RowNorm::rms_norm; }

std::vector<double> row_norm_reference(RowNorm k, const std::vector<double>& x, int64_t n,
                                       const std::vector<double>& w, const std::vector<double>& b,
                                       double eps) {
  std::vector<double> y(x.size());
  for (size_t r0 = 0; r0 < x.size(); r0 += static_cast<size_t>(n)) {
    const double* row = x.data() + r0;
    if (!is_norm(k)) {
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, row[i]);
      for (int64_t i = 0; i < n; ++i) s += std::exp(row[i] - m);
      for (int64_t i = 0; i < n; ++i)
        y[r0 + i] = k == RowNorm::softmax ? std::exp(row[i] - m) / s : row[i] - m - std::log(s);
      continue;
    }
    double mean = 0, sq = 0;
    if (k == RowNorm::layer_norm) {
      for (int64_t i = 0; i < n; ++i) mean += row[i];
      mean /= static_cast<double>(n);
    }
    for (int64_t i = 0; i < n; ++i) sq += (row[i] - mean) * (row[i] - mean);
    const double r = 1 / std::sqrt(sq / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      double v = (row[i] - mean) * r;
      if (!w.empty()) v *= w[static_cast<size_t>(i)];
      if (!b.empty() && k == RowNorm::layer_norm) v += b[static_cast<size_t>(i)];
      y[r0 + i] = v;
    }
  }
  return y;
}

}  // namespace kiln::test
