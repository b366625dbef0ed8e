#include "kiln/models/lenet.h"

#include "kiln/core/error.h"
#include "kiln/core/ops/shape.h"
#include "kiln/nn/activations.h"

namespace kiln::models {

LeNet::LeNet(LeNetConfig c)
    : conv1(this, "conv1", c.in_channels, 6, 5, nn::Conv2dOptions{.padding = 2, .dtype = c.dtype}),
      conv2(this, "conv2", 6, 16, 5, nn::Conv2dOptions{.dtype = c.dtype}),
      fc1(this, "fc1", 16 * 5 * 5, 120, nn::LinearOptions{.dtype = c.dtype}),
      fc2(this, "fc2", 120, 84, nn::LinearOptions{.dtype = c.dtype}),
      fc3(this, "fc3", 84, c.num_classes, nn::LinearOptions{.dtype = c.dtype}),
      config_(c) {}

Array LeNet::operator()(const Array& x) const {
  Array h = x.ndim() == 3 ? expand_dims(x, 1) : x;
  if (h.ndim() != 4 || h.shape()[2] != 28 || h.shape()[3] != 28)
    throw ShapeError::of("LeNet", "expects 28x28 images", "(N, C, 28, 28) or (N, 28, 28), got {}",
                         shape_str(x.shape()));
  h = pool_(nn::relu(conv1(h)));
  h = pool_(nn::relu(conv2(h)));
  h = reshape(h, {h.shape()[0], 16 * 5 * 5});
  return fc3(nn::relu(fc2(nn::relu(fc1(h)))));
}

}  // namespace kiln::models
