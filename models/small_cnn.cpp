#include "kiln/models/small_cnn.h"

#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/nn/activations.h"

namespace kiln::models {

namespace {

constexpr const char* kName = "SmallCnn";

// Checked before any layer is built, so a bad size names the model rather than a layer.
const SmallCnnConfig& checked(const SmallCnnConfig& c) {
  for (int64_t size : {c.in_channels, c.num_classes, c.conv1_channels, c.conv2_channels, c.hidden})
    if (size < 1)
      throw ValueError::of(kName, "every size must be >= 1",
                           "in_channels {}, num_classes {}, conv1_channels {}, conv2_channels {}, hidden {}",
                           c.in_channels, c.num_classes, c.conv1_channels, c.conv2_channels, c.hidden);
  if (c.image_size < 4)
    throw ValueError::of(kName, "image_size must be >= 4 (two 2x2 pools)", "got {}", c.image_size);
  return c;
}

// The layers' keys: four from config.key, or empty ones (each layer draws random::next_key(), in
// member order) when it has none.
std::vector<Array> layer_keys(const SmallCnnConfig& c) {
  if (!c.key.valid()) return std::vector<Array>(4);
  return random::split_keys(c.key, 4);
}

// Spatial size after the two pools.
int64_t pooled_size(const SmallCnnConfig& c) { return c.image_size / 2 / 2; }

}  // namespace

SmallCnn::SmallCnn(SmallCnnConfig c) : SmallCnn(checked(c), layer_keys(c)) {}

SmallCnn::SmallCnn(const SmallCnnConfig& c, const std::vector<Array>& keys)
    : conv1(this, "conv1", c.in_channels, c.conv1_channels, 3,
            nn::Conv2dOptions{.padding = 1, .dtype = c.dtype, .key = keys[0]}),
      conv2(this, "conv2", c.conv1_channels, c.conv2_channels, 3,
            nn::Conv2dOptions{.padding = 1, .dtype = c.dtype, .key = keys[1]}),
      fc1(this, "fc1", c.conv2_channels * pooled_size(c) * pooled_size(c), c.hidden,
          nn::LinearOptions{.dtype = c.dtype, .key = keys[2]}),
      fc2(this, "fc2", c.hidden, c.num_classes, nn::LinearOptions{.dtype = c.dtype, .key = keys[3]}),
      config_(c) {}

Array SmallCnn::operator()(const Array& x) const {
  if (!x.valid()) throw ValueError::of(kName, "input is an empty Array");
  Array h = x.ndim() == 3 && config_.in_channels == 1 ? expand_dims(x, 1) : x;
  const int64_t s = config_.image_size;
  if (h.ndim() != 4 || h.shape()[1] != config_.in_channels || h.shape()[2] != s || h.shape()[3] != s)
    throw ShapeError::of(kName, "expects (N, C, S, S) images", "C = {}, S = {}{}; got {}",
                         config_.in_channels, s, config_.in_channels == 1 ? " (or (N, S, S))" : "",
                         shape_str(x.shape()));
  h = pool_(nn::relu(conv1(h)));
  h = pool_(nn::relu(conv2(h)));
  const int64_t p = pooled_size(config_);
  h = reshape(h, {h.shape()[0], config_.conv2_channels * p * p});
  return fc2(nn::relu(fc1(h)));
}

}  // namespace kiln::models
