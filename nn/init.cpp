#include "kiln/nn/init.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"

namespace kiln::nn::init {
namespace {

Array key_or_next(const Array& key) { return key.valid() ? key : random::next_key(); }

int64_t fan(const Shape& shape, FanMode mode) {
  const auto [in, out] = fans(shape);
  return mode == FanMode::fan_in ? in : out;
}

}  // namespace

double gain(Nonlinearity f, double negative_slope) {
  switch (f) {
    case Nonlinearity::linear:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu:
      return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
    case Nonlinearity::selu:
      return 0.75;
  }
  throw ValueError::of("init::gain", "unknown nonlinearity");
}

std::pair<int64_t, int64_t> fans(const Shape& shape) {
  if (shape.size() < 2)
    throw ShapeError::of("init", "fans need a shape of at least 2 dimensions", "got {}", shape_str(shape));
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

Array constant(const Shape& shape, double value, Dtype dtype) { return full(shape, value, dtype); }

Array normal(const Shape& shape, double mean, double stddev, Dtype dtype, const Array& key) {
  return random::normal(shape, key_or_next(key), mean, stddev, dtype);
}

Array uniform(const Shape& shape, double low, double high, Dtype dtype, const Array& key) {
  return random::uniform(shape, key_or_next(key), low, high, dtype);
}

Array glorot_uniform(const Shape& shape, double g, Dtype dtype, const Array& key) {
  const auto [in, out] = fans(shape);
  const double bound = g * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform(shape, -bound, bound, dtype, key);
}

Array glorot_normal(const Shape& shape, double g, Dtype dtype, const Array& key) {
  const auto [in, out] = fans(shape);
  return normal(shape, 0.0, g * std::sqrt(2.0 / static_cast<double>(in + out)), dtype, key);
}

Array he_uniform(const Shape& shape, double a, FanMode mode, Nonlinearity f, Dtype dtype, const Array& key) {
  const double bound = gain(f, a) * std::sqrt(3.0 / static_cast<double>(fan(shape, mode)));
  return uniform(shape, -bound, bound, dtype, key);
}

Array he_normal(const Shape& shape, double a, FanMode mode, Nonlinearity f, Dtype dtype, const Array& key) {
  return normal(shape, 0.0, gain(f, a) / std::sqrt(static_cast<double>(fan(shape, mode))), dtype, key);
}

Array orthogonal(const Shape& shape, double g, Dtype dtype, const Array& key) {
  if (shape.size() < 2)
    throw ShapeError::of("init::orthogonal", "needs a shape of at least 2 dimensions", "got {}",
                         shape_str(shape));
  const int64_t rows = shape[0], cols = shape_size(shape) / std::max<int64_t>(rows, 1);
  // QR of an (m, n) normal matrix with m >= n, by Householder reflections in float64 on the host
  // (initialization runs once; n is a layer width).
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  std::vector<double> a = random::normal({m, n}, key_or_next(key), 0.0, 1.0, float64).to_vector<double>();
  auto A = [&](int64_t i, int64_t j) -> double& { return a[i * n + j]; };
  std::vector<std::vector<double>> reflectors;
  std::vector<double> r_diag(n);
  for (int64_t j = 0; j < n; ++j) {
    double norm = 0;
    for (int64_t i = j; i < m; ++i) norm += A(i, j) * A(i, j);
    norm = std::sqrt(norm);
    const double alpha = A(j, j) > 0 ? -norm : norm;
    std::vector<double> v(m, 0.0);
    for (int64_t i = j; i < m; ++i) v[i] = A(i, j);
    v[j] -= alpha;
    double vv = 0;
    for (int64_t i = j; i < m; ++i) vv += v[i] * v[i];
    if (vv > 0)
      for (int64_t c = j; c < n; ++c) {
        double dot = 0;
        for (int64_t i = j; i < m; ++i) dot += v[i] * A(i, c);
        for (int64_t i = j; i < m; ++i) A(i, c) -= 2 * dot / vv * v[i];
      }
    r_diag[j] = A(j, j);
    reflectors.push_back(std::move(v));
  }
  // Q's first n columns: apply the reflectors, last first, to the identity's columns; then fold in
  // the signs of R's diagonal so the distribution is uniform (Haar), as PyTorch does.
  std::vector<double> q(m * n, 0.0);
  for (int64_t c = 0; c < n; ++c) {
    std::vector<double> e(m, 0.0);
    e[c] = 1.0;
    for (int64_t j = n - 1; j >= 0; --j) {
      const auto& v = reflectors[j];
      double vv = 0, dot = 0;
      for (int64_t i = j; i < m; ++i) vv += v[i] * v[i], dot += v[i] * e[i];
      if (vv > 0)
        for (int64_t i = j; i < m; ++i) e[i] -= 2 * dot / vv * v[i];
    }
    const double sign = r_diag[c] < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < m; ++i) q[i * n + c] = e[i] * sign * g;
  }
  // (m, n) with orthonormal columns; transpose when rows < cols so the rows are orthonormal.
  std::vector<double> out(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = rows >= cols ? q[i * n + j] : q[j * n + i];
  return astype(reshape(Array(out, {rows, cols}), shape), dtype);
}

}  // namespace kiln::nn::init
