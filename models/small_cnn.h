#pragma once
// A small CNN for small images (Fashion-MNIST, MNIST): two 3x3 convolution blocks (conv with
// padding 1, relu, 2x2 max pool) and a two-layer classifier. With the defaults:
// 28x28x1 -> 14x14x16 -> 7x7x32 -> 128 -> 10, 1.2 M multiply-adds per image (three times
// LeNet-5's); it takes Fashion-MNIST past 90% test accuracy in three epochs of
// examples/train_fashion_mnist. Keys: conv1, conv2, fc1, fc2 (each .weight and .bias).
#include <vector>

#include "kiln/nn/layers/conv.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/pooling.h"
#include "kiln/nn/module.h"

namespace kiln::models {

struct SmallCnnConfig {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t image_size = 28;      // height = width; each pool halves it (rounding down)
  int64_t conv1_channels = 16;  // outputs of the first convolution
  int64_t conv2_channels = 32;  // outputs of the second convolution
  int64_t hidden = 128;         // width of fc1
  Dtype dtype = float32;
  Array key =
      Array();  // initialization key, split over the four layers; random::next_key() per layer when empty
};

/// conv1 -> relu -> max pool 2 -> conv2 -> relu -> max pool 2 -> flatten -> fc1 -> relu -> fc2.
/// Throws ValueError for a size < 1 or an image_size < 4 (nothing left after two pools).
class SmallCnn : public nn::Module {
 public:
  explicit SmallCnn(SmallCnnConfig config = {});
  /// x: (N, C, S, S), or (N, S, S) for one channel, S = image_size -> logits (N, num_classes).
  /// Throws ShapeError for other shapes.
  Array operator()(const Array& x) const;
  const SmallCnnConfig& config() const { return config_; }

  nn::ModuleInfo<nn::Conv2d> conv1;
  nn::ModuleInfo<nn::Conv2d> conv2;
  nn::ModuleInfo<nn::Linear> fc1;
  nn::ModuleInfo<nn::Linear> fc2;

 private:
  SmallCnn(const SmallCnnConfig& config, const std::vector<Array>& keys);

  SmallCnnConfig config_;
  nn::MaxPool2d pool_{2};
};

}  // namespace kiln::models
