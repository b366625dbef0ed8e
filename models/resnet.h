#pragma once
// A small ResNet (He et al. 2016) of basic blocks for small images (MNIST, Fashion-MNIST, CIFAR):
// a 3x3 stem, stages of two-convolution residual blocks (each stage after the first halves the
// resolution), global average pooling and a linear head. Any image size works.
//
// Keys (PyTorch-like, so a PyTorch twin with the same module names exports into it):
//   stem.conv.weight, stem.bn.{weight, bias, running_mean, running_var, num_batches_tracked},
//   stages.<s>.<b>.conv1.weight, stages.<s>.<b>.bn1.*, stages.<s>.<b>.conv2.weight, ...bn2.*,
//   stages.<s>.<b>.downsample.0.weight (1x1 conv) and downsample.1.* (BatchNorm) where the block
//   changes stride or width (torchvision's names), fc.weight, fc.bias.
// Convolutions have no bias (BatchNorm follows each), as torchvision.
//
// BatchNorm: in training mode operator() normalizes with the batch statistics and leaves the
// running statistics alone (forward is const); forward_train also returns the updated running
// statistics and update_running_stats assigns them. In evaluation mode the running ones are used.
//
//   models::ResNet model({.widths = {16, 32, 64}, .blocks = {2, 2, 2}});
//   nn::ParamTree stats;
//   auto step = nn::value_and_grad(model, [&](const Array& x, const Array& y) {
//     auto out = model.forward_train(x);
//     stats = out.running_stats;
//     return nn::cross_entropy(out.output, y);
//   });
//   auto [loss, grads] = step(x, y);
//   opt.update(model, grads);
//   model.update_running_stats(stats);
//   const auto params = model.parameters();   // includes the running statistics
//   nn::eval({&params, &opt.state()});
#include <vector>

#include "kiln/nn/layers/conv.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"
#include "kiln/nn/layers/sequential.h"
#include "kiln/nn/module.h"

namespace kiln::models {

struct ResNetConfig {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  std::vector<int64_t> widths = {16, 32, 64};  // output channels of each stage (the stem makes widths[0])
  std::vector<int64_t> blocks = {2, 2, 2};     // basic blocks per stage
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// A training-mode forward's result: the output and the running BatchNorm statistics after this
/// batch, keyed relative to the module that returned them ("bn1.running_mean", ...).
struct ResNetTrainOutput {
  Array output;
  nn::ParamTree running_stats;
};

/// conv 3x3 (stride 1, padding 1) -> BatchNorm -> relu.
class ResNetStem : public nn::Module {
 public:
  ResNetStem(int64_t in_channels, int64_t out_channels, Dtype dtype);
  /// (N, C_in, H, W) -> (N, C_out, H, W).
  Array operator()(const Array& x) const;
  ResNetTrainOutput forward_train(const Array& x) const;

  nn::ModuleInfo<nn::Conv2d> conv;
  nn::ModuleInfo<nn::BatchNorm2d> bn;
};

/// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)): conv1 is 3x3 with the block's stride,
/// conv2 3x3 with stride 1; the shortcut is the identity, or a 1x1 convolution with the stride
/// and a BatchNorm (downsample) when the stride is not 1 or the width changes.
class ResNetBlock : public nn::Module {
 public:
  ResNetBlock(int64_t in_channels, int64_t out_channels, int stride, Dtype dtype);
  /// (N, C_in, H, W) -> (N, C_out, ceil(H / stride), ceil(W / stride)).
  Array operator()(const Array& x) const;
  ResNetTrainOutput forward_train(const Array& x) const;
  bool has_downsample() const { return !downsample->empty(); }

  nn::ModuleInfo<nn::Conv2d> conv1;
  nn::ModuleInfo<nn::BatchNorm2d> bn1;
  nn::ModuleInfo<nn::Conv2d> conv2;
  nn::ModuleInfo<nn::BatchNorm2d> bn2;
  nn::ModuleInfo<nn::Sequential> downsample;  // empty, or 0: Conv2d 1x1, 1: BatchNorm2d
};

class ResNet : public nn::Module {
 public:
  /// Convolutions kaiming-normal (fan_out, relu) as torchvision, BatchNorm weight 1 and bias 0, fc
  /// PyTorch's default. Throws ValueError for in_channels or num_classes < 1, empty widths,
  /// widths and blocks of different lengths, or a width or block count < 1.
  explicit ResNet(ResNetConfig config = {});

  /// x: (N, C, H, W), or (N, H, W) when in_channels is 1, float -> logits (N, num_classes).
  /// Training mode normalizes with batch statistics (never updating the running ones), evaluation
  /// mode with the running statistics. Throws ShapeError for another rank or channel count,
  /// DtypeError for non-float input, ValueError in training mode for one value per channel.
  Array operator()(const Array& x) const;
  /// Batch statistics whatever the mode; returns the logits and the updated running statistics
  /// by full key ("stem.bn.running_mean", ...), without assigning them. Errors as operator().
  ResNetTrainOutput forward_train(const Array& x) const;
  /// Assigns running statistics from forward_train (a subset of the parameters is fine). Throws
  /// KeyError for a key that names no parameter, ShapeError/DtypeError for a mismatch; nothing
  /// changes on error.
  void update_running_stats(const nn::ParamTree& running_stats);

  const ResNetConfig& config() const { return config_; }

  nn::ModuleInfo<ResNetStem> stem;
  nn::ModuleList<nn::Sequential> stages{this, "stages"};  // stages.<s>.<b>: ResNetBlock
  nn::ModuleInfo<nn::Linear> fc;

 private:
  Array prepare(const Array& x) const;
  ResNetConfig config_;
};

}  // namespace kiln::models
