#include "kiln/models/resnet.h"

#include <cmath>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/nn/activations.h"
#include "kiln/nn/init.h"

namespace kiln::models {

namespace {

constexpr const char* kName = "ResNet";

// Every weight is replaced by the model's own initialization (from config.key), so the layers are
// built with a fixed placeholder key instead of drawing from the process-wide sequence.
nn::Conv2dOptions conv_options(int stride, int padding, Dtype dtype) {
  return {.stride = stride, .padding = padding, .bias = false, .dtype = dtype, .key = random::key(0)};
}

// Normalizes x with bn's batch statistics and records the running statistics after this batch
// under `prefix`.
Array train_norm(const nn::BatchNorm& bn, const Array& x, const std::string& prefix, nn::ParamTree& stats) {
  nn::BatchNormOutput out = bn.forward_train(x);
  if (out.running_mean.valid()) {
    stats.set(prefix + ".running_mean", out.running_mean);
    stats.set(prefix + ".running_var", out.running_var);
    stats.set(prefix + ".num_batches_tracked", out.num_batches_tracked);
  }
  return out.y;
}

void merge(nn::ParamTree& into, const nn::ParamTree& from, const std::string& prefix) {
  for (const auto& [key, value] : from.prefixed(prefix)) into.set(key, value);
}

const ResNetConfig& checked(const ResNetConfig& c) {
  if (c.in_channels < 1 || c.num_classes < 1)
    throw ValueError::of(kName, "in_channels and num_classes must be >= 1", "in_channels {}, num_classes {}",
                         c.in_channels, c.num_classes);
  if (c.widths.empty() || c.widths.size() != c.blocks.size())
    throw ValueError::of(kName, "widths and blocks must be non-empty and of the same length (one per stage)",
                         "widths {}, blocks {}", c.widths, c.blocks);
  for (size_t s = 0; s < c.widths.size(); ++s)
    if (c.widths[s] < 1 || c.blocks[s] < 1)
      throw ValueError::of(kName, "every width and block count must be >= 1", "stage {}: width {}, blocks {}",
                           s, c.widths[s], c.blocks[s]);
  return c;
}

}  // namespace

// ---- ResNetStem

ResNetStem::ResNetStem(int64_t in_channels, int64_t out_channels, Dtype dtype)
    : conv(this, "conv", in_channels, out_channels, 3, conv_options(1, 1, dtype)),
      bn(this, "bn", out_channels, nn::BatchNormOptions{.dtype = dtype}) {}

Array ResNetStem::operator()(const Array& x) const { return nn::relu(bn(conv(x))); }

ResNetTrainOutput ResNetStem::forward_train(const Array& x) const {
  ResNetTrainOutput out;
  out.output = nn::relu(train_norm(*bn, conv(x), "bn", out.running_stats));
  return out;
}

// ---- ResNetBlock

ResNetBlock::ResNetBlock(int64_t in_channels, int64_t out_channels, int stride, Dtype dtype)
    : conv1(this, "conv1", in_channels, out_channels, 3, conv_options(stride, 1, dtype)),
      bn1(this, "bn1", out_channels, nn::BatchNormOptions{.dtype = dtype}),
      conv2(this, "conv2", out_channels, out_channels, 3, conv_options(1, 1, dtype)),
      bn2(this, "bn2", out_channels, nn::BatchNormOptions{.dtype = dtype}),
      downsample(this, "downsample") {
  if (stride != 1 || in_channels != out_channels) {
    downsample->emplace_back<nn::Conv2d>(in_channels, out_channels, 1, conv_options(stride, 0, dtype));
    downsample->emplace_back<nn::BatchNorm2d>(out_channels, nn::BatchNormOptions{.dtype = dtype});
  }
}

Array ResNetBlock::operator()(const Array& x) const {
  const Array h = bn2(conv2(nn::relu(bn1(conv1(x)))));
  return nn::relu(h + (has_downsample() ? (*downsample)(x) : x));
}

ResNetTrainOutput ResNetBlock::forward_train(const Array& x) const {
  ResNetTrainOutput out;
  nn::ParamTree& stats = out.running_stats;
  Array h = nn::relu(train_norm(*bn1, conv1(x), "bn1", stats));
  h = train_norm(*bn2, conv2(h), "bn2", stats);
  Array shortcut = x;
  if (has_downsample())
    shortcut = train_norm(downsample->at<nn::BatchNorm2d>(1), downsample->at<nn::Conv2d>(0)(x),
                          "downsample.1", stats);
  out.output = nn::relu(h + shortcut);
  return out;
}

// ---- ResNet

ResNet::ResNet(ResNetConfig c)
    : stem(this, "stem", checked(c).in_channels, c.widths[0], c.dtype),
      fc(this, "fc", c.widths.back(), c.num_classes,
         nn::LinearOptions{.dtype = c.dtype, .key = random::key(0)}),
      config_(std::move(c)) {
  int64_t in = config_.widths[0];
  for (size_t s = 0; s < config_.widths.size(); ++s) {
    nn::Sequential& stage = stages.emplace_back();
    for (int64_t b = 0; b < config_.blocks[s]; ++b) {
      const int stride = (s > 0 && b == 0) ? 2 : 1;
      stage.emplace_back<ResNetBlock>(in, config_.widths[s], stride, config_.dtype);
      in = config_.widths[s];
    }
  }

  std::vector<nn::Conv2d*> convs;
  for (auto& [key, m] : named_modules())
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) convs.push_back(conv);
  const auto keys = random::split_keys(config_.key.valid() ? config_.key : random::next_key(),
                                       static_cast<int>(convs.size()) + 2);
  for (size_t i = 0; i < convs.size(); ++i)
    convs[i]->weight =
        nn::init::kaiming_normal(convs[i]->weight.value().shape(), 0.0, nn::init::FanMode::fan_out,
                                 nn::init::Nonlinearity::relu, config_.dtype, keys[i]);
  // fc as PyTorch's Linear: weight and bias uniform on +-1/sqrt(in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(config_.widths.back()));
  fc->weight =
      nn::init::uniform(fc->weight.value().shape(), -bound, bound, config_.dtype, keys[convs.size()]);
  fc->bias =
      nn::init::uniform(fc->bias.value().shape(), -bound, bound, config_.dtype, keys[convs.size() + 1]);
}

Array ResNet::prepare(const Array& x) const {
  if (!x.valid()) throw ValueError::of(kName, "input is an empty Array");
  if (!is_floating(x.dtype()))
    throw DtypeError::of(kName, "images must be floating point", "got {}", dtype_name(x.dtype()));
  const Array h = (x.ndim() == 3 && config_.in_channels == 1) ? expand_dims(x, 1) : x;
  if (h.ndim() != 4 || h.shape()[1] != config_.in_channels)
    throw ShapeError::of(kName,
                         "expects images (N, C, H, W) with C = in_channels (or (N, H, W) when it is 1)",
                         "in_channels {}, got {}", config_.in_channels, shape_str(x.shape()));
  return h;
}

Array ResNet::operator()(const Array& x) const {
  Array h = stem(prepare(x));
  for (const auto& stage : stages) h = (*stage)(h);
  return fc(mean(h, Axes{2, 3}));  // global average pooling: any image size
}

ResNetTrainOutput ResNet::forward_train(const Array& x) const {
  ResNetTrainOutput out = stem->forward_train(prepare(x));
  nn::ParamTree stats;
  merge(stats, out.running_stats, "stem");
  Array h = out.output;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (size_t b = 0; b < stages[s].size(); ++b) {
      ResNetTrainOutput block = stages[s].at<ResNetBlock>(b).forward_train(h);
      merge(stats, block.running_stats, "stages." + std::to_string(s) + "." + std::to_string(b));
      h = block.output;
    }
  }
  return {fc(mean(h, Axes{2, 3})), std::move(stats)};
}

void ResNet::update_running_stats(const nn::ParamTree& running_stats) {
  update(running_stats, nn::Verify::shapes | nn::Verify::dtypes | nn::Verify::unknown);
}

}  // namespace kiln::models
