#pragma once
// A multi-layer perceptron: Linear layers with an activation between them.
#include <vector>

#include "kiln/nn/layers/linear.h"
#include "kiln/nn/module.h"

namespace kiln::models {

struct MlpConfig {
  int64_t in_features = 784;
  std::vector<int64_t> hidden = {512, 512};
  int64_t out_features = 10;
  enum class Activation { relu, gelu, tanh } activation = Activation::relu;
  Dtype dtype = float32;
};

/// layers.0 ... layers.n (Linear), the activation after every layer but the last; the output is
/// the last layer's (logits). Throws ValueError for a size < 1.
class Mlp : public nn::Module {
 public:
  explicit Mlp(MlpConfig config = {});
  /// x: (..., in_features) -> (..., out_features). Inputs of rank > 2 other than (..., in) are
  /// flattened from axis 1 (an image batch (N, 28, 28) works as (N, 784)).
  Array operator()(const Array& x) const;
  const MlpConfig& config() const { return config_; }

  nn::ModuleList<nn::Linear> layers{this, "layers"};

 private:
  MlpConfig config_;
};

}  // namespace kiln::models
