#pragma once
// LeNet-5 for 28x28 images (MNIST, Fashion-MNIST): conv 5x5 (padding 2) -> relu -> max pool 2 ->
// conv 5x5 -> relu -> max pool 2 -> fc 120 -> fc 84 -> fc classes.
#include "kiln/nn/layers/conv.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/pooling.h"
#include "kiln/nn/module.h"

namespace kiln::models {

struct LeNetConfig {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  Dtype dtype = float32;
};

class LeNet : public nn::Module {
 public:
  explicit LeNet(LeNetConfig config = {});
  /// x: (N, C, 28, 28), or (N, 28, 28) for one channel -> logits (N, classes). Throws ShapeError
  /// for other image sizes.
  Array operator()(const Array& x) const;
  const LeNetConfig& config() const { return config_; }

  nn::ModuleInfo<nn::Conv2d> conv1;
  nn::ModuleInfo<nn::Conv2d> conv2;
  nn::ModuleInfo<nn::Linear> fc1;
  nn::ModuleInfo<nn::Linear> fc2;
  nn::ModuleInfo<nn::Linear> fc3;

 private:
  LeNetConfig config_;
  nn::MaxPool2d pool_{2};
};

}  // namespace kiln::models
