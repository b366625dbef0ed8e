#include "kiln/nn/layers/bilinear.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/core/shape.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

Bilinear::Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, BilinearOptions o)
    : in1_(in1_features), in2_(in2_features), out_(out_features) {
  if (in1_features < 1 || in2_features < 1 || out_features < 1)
    throw ValueError::of("Bilinear", "features must be >= 1", "in1 {}, in2 {}, out {}", in1_features,
                         in2_features, out_features);
  const auto keys = random::split_keys(o.key.valid() ? o.key : random::next_key(), 2);
  // PyTorch bounds both by 1/sqrt(weight.size(1)) = 1/sqrt(in1).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in1_features));
  weight.set(init::uniform({out_features, in1_features, in2_features}, -bound, bound, o.dtype, keys[0]));
  if (o.bias) bias.set(init::uniform({out_features}, -bound, bound, o.dtype, keys[1]));
}

Array Bilinear::operator()(const Array& x1, const Array& x2) const {
  if (!x1.valid() || !x2.valid())
    throw ValueError::of("Bilinear", "an input is an empty (default-constructed) array");
  if (x1.ndim() < 1 || x1.shape().back() != in1_ || x2.ndim() < 1 || x2.shape().back() != in2_)
    throw ShapeError::of("Bilinear", "inputs' last dimensions must be in1_features and in2_features",
                         "expected (..., {}) and (..., {}), got {} and {}", in1_, in2_, shape_str(x1.shape()),
                         shape_str(x2.shape()));
  const Shape lead(x1.shape().begin(), x1.shape().end() - 1);
  if (x2.ndim() != x1.ndim() || !std::equal(lead.begin(), lead.end(), x2.shape().begin()))
    throw ShapeError::of("Bilinear", "inputs' leading dimensions differ", "{} and {}", shape_str(x1.shape()),
                         shape_str(x2.shape()));
  // One GEMM: (B, in1) @ (in1, out * in2), then a product with x2 summed over in2.
  const auto c = detail::compute_dtype(*this);  // a mixed-precision policy's 16-bit dtype
  const int64_t b = shape_size(lead);
  const Array a = reshape(detail::to_compute(x1, c), {b, in1_});
  const Array w = reshape(transpose(detail::to_compute(weight.value(), c), {1, 0, 2}), {in1_, out_ * in2_});
  const Array t = reshape(matmul(a, w), {b, out_, in2_});
  Array y = sum(t * expand_dims(reshape(detail::to_compute(x2, c), {b, in2_}), 1), -1);
  if (bias.has_value()) y = y + detail::to_compute(bias.value(), c);
  Shape out_shape = lead;
  out_shape.push_back(out_);
  return reshape(y, out_shape);
}

}  // namespace kiln::nn
