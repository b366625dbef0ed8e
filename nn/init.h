#pragma once
// Parameter initializers, as torch.nn.init: each returns a new array of `shape` drawn from `key`
// (random::next_key() when none is given). Fans follow PyTorch: fan_in = shape[1] * receptive,
// fan_out = shape[0] * receptive, receptive = product of shape[2:].
#include "kiln/core/array.h"
#include "kiln/core/random.h"

namespace kiln::nn::init {

enum class FanMode { fan_in, fan_out };
/// The nonlinearity a layer feeds, for the recommended gain (torch.nn.init.calculate_gain).
enum class Nonlinearity { linear, sigmoid, tanh, relu, leaky_relu, selu };

/// The recommended gain: 1 (linear, sigmoid), 5/3 (tanh), sqrt(2) (relu),
/// sqrt(2 / (1 + slope^2)) (leaky_relu), 3/4 (selu).
double gain(Nonlinearity f, double negative_slope = 0.01);
/// {fan_in, fan_out} of a weight shape; throws ShapeError for fewer than 2 dimensions.
std::pair<int64_t, int64_t> fans(const Shape& shape);

Array constant(const Shape& shape, double value, Dtype dtype = float32);
Array normal(const Shape& shape, double mean = 0.0, double stddev = 1.0, Dtype dtype = float32,
             const Array& key = Array());
Array uniform(const Shape& shape, double low = 0.0, double high = 1.0, Dtype dtype = float32,
              const Array& key = Array());
/// Glorot/Xavier: uniform on +-gain * sqrt(6 / (fan_in + fan_out)).
Array glorot_uniform(const Shape& shape, double gain = 1.0, Dtype dtype = float32,
                     const Array& key = Array());
/// Glorot/Xavier: normal with stddev gain * sqrt(2 / (fan_in + fan_out)).
Array glorot_normal(const Shape& shape, double gain = 1.0, Dtype dtype = float32, const Array& key = Array());
/// He/Kaiming: uniform on +-gain(f, a) * sqrt(3 / fan).
Array he_uniform(const Shape& shape, double a = 0.0, FanMode mode = FanMode::fan_in,
                 Nonlinearity f = Nonlinearity::leaky_relu, Dtype dtype = float32,
                 const Array& key = Array());
/// He/Kaiming: normal with stddev gain(f, a) / sqrt(fan).
Array he_normal(const Shape& shape, double a = 0.0, FanMode mode = FanMode::fan_in,
                Nonlinearity f = Nonlinearity::leaky_relu, Dtype dtype = float32, const Array& key = Array());
/// A (semi-)orthogonal matrix times gain, for shape (rows, cols...) flattened to (rows, prod(cols)):
/// rows orthonormal when rows <= cols, columns otherwise (QR of a normal matrix with the signs of
/// R's diagonal folded in, as PyTorch). Throws ShapeError for fewer than 2 dimensions.
Array orthogonal(const Shape& shape, double gain = 1.0, Dtype dtype = float32, const Array& key = Array());

/// Aliases under PyTorch's names.
inline Array xavier_uniform(const Shape& s, double g = 1.0, Dtype d = float32, const Array& k = Array()) {
  return glorot_uniform(s, g, d, k);
}
inline Array xavier_normal(const Shape& s, double g = 1.0, Dtype d = float32, const Array& k = Array()) {
  return glorot_normal(s, g, d, k);
}
inline Array kaiming_uniform(const Shape& s, double a = 0.0, FanMode m = FanMode::fan_in,
                             Nonlinearity f = Nonlinearity::leaky_relu, Dtype d = float32,
                             const Array& k = Array()) {
  return he_uniform(s, a, m, f, d, k);
}
inline Array kaiming_normal(const Shape& s, double a = 0.0, FanMode m = FanMode::fan_in,
                            Nonlinearity f = Nonlinearity::leaky_relu, Dtype d = float32,
                            const Array& k = Array()) {
  return he_normal(s, a, m, f, d, k);
}

}  // namespace kiln::nn::init
