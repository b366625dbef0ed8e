#include "kiln/models/mlp.h"

#include "kiln/core/error.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"
#include "kiln/nn/activations.h"

namespace kiln::models {

Mlp::Mlp(MlpConfig config) : config_(std::move(config)) {
  std::vector<int64_t> sizes{config_.in_features};
  sizes.insert(sizes.end(), config_.hidden.begin(), config_.hidden.end());
  sizes.push_back(config_.out_features);
  for (int64_t s : sizes)
    if (s < 1) throw ValueError::of("Mlp", "every layer size must be >= 1", "got {}", s);
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    layers.emplace_back(sizes[i], sizes[i + 1], nn::LinearOptions{.dtype = config_.dtype});
}

Array Mlp::operator()(const Array& x) const {
  Array h = x;
  if (h.ndim() > 2 && h.shape().back() != config_.in_features) h = reshape(h, {h.shape()[0], -1});
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i](h);
    if (i + 1 == layers.size()) break;
    switch (config_.activation) {
      case MlpConfig::Activation::relu:
        h = nn::relu(h);
        break;
      case MlpConfig::Activation::gelu:
        h = nn::gelu(h);
        break;
      case MlpConfig::Activation::tanh:
        h = tanh(h);
        break;
    }
  }
  return h;
}

}  // namespace kiln::models
