#include "kiln/nn/layers/linear.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions o)
    : in_(in_features), out_(out_features) {
  if (in_features < 1 || out_features < 1)
    throw ValueError::of("Linear", "features must be >= 1", "in {}, out {}", in_features, out_features);
  const Array key = o.key.valid() ? o.key : random::next_key();
  const auto keys = random::split_keys(key, 2);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight.set(init::uniform({out_features, in_features}, -bound, bound, o.dtype, keys[0]));
  if (o.bias) bias.set(init::uniform({out_features}, -bound, bound, o.dtype, keys[1]));
}

Array Linear::operator()(const Array& x) const {
  if (x.ndim() < 1 || x.shape().back() != in_)
    throw ShapeError::of("Linear", "input's last dimension must be in_features", "expected (..., {}), got {}",
                         in_, shape_str(x.shape()));
  return linear(x, weight.value(), bias.has_value() ? bias.value() : Array());
}

}  // namespace kiln::nn
