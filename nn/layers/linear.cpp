#include "kiln/nn/layers/linear.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/quantized.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers/dropout.h"

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
  // Under a mixed-precision policy the input and the float parameters go to the 16-bit dtype
  // (the casts' vjps return the gradients in the parameters' dtype); a quantized base keeps its
  // own kernel and dtype.
  const auto c = detail::compute_dtype(*this);
  const Array xc = detail::to_compute(x, c);
  const Array b = bias.has_value() ? detail::to_compute(bias.value(), c) : Array();
  Array y;
  if (quantization_) {
    y = quantized_matmul(x, weight.value(), scales.value(), biases.value(), true, quantization_->group_size,
                         quantization_->bits);
    if (bias.has_value()) y = y + bias.value();
  } else {
    y = linear(xc, detail::to_compute(weight.value(), c), b);
  }
  if (!has_lora()) return y;
  const Array xa = is_training() && lora_dropout_ > 0 ? dropout(xc, lora_dropout_) : xc;
  return y + linear(linear(xa, detail::to_compute(lora_A->weight.value(), c)),
                    detail::to_compute(lora_B->weight.value(), c)) *
                 lora_scale_;
}

void Linear::add_lora(const LoRAOptions& o) {
  if (o.r < 1) throw ValueError::of("Linear::add_lora", "rank r must be >= 1", "got {}", o.r);
  if (!(o.dropout >= 0 && o.dropout < 1))
    throw ValueError::of("Linear::add_lora", "dropout must be in [0, 1)", "got {}", o.dropout);
  const Dtype t = compute_dtype();
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  lora_A->weight.reset(
      init::uniform({o.r, in_}, -bound, bound, t, o.key.valid() ? o.key : random::next_key()));
  lora_B->weight.reset(zeros({out_, o.r}, t));
  lora_scale_ = o.alpha / static_cast<double>(o.r);
  lora_dropout_ = o.dropout;
  lora_A->unfreeze();  // a factor of an earlier adapter may have been frozen
  lora_B->unfreeze();
}

void Linear::merge_lora() {
  if (!has_lora()) return;
  const Array base = dequantized_weight();
  const Array w =
      astype(base + matmul(lora_B->weight.value(), lora_A->weight.value()) * lora_scale_, base.dtype());
  if (quantization_) {
    const QuantizedWeight q = kiln::quantize(w, quantization_->group_size, quantization_->bits);
    eval(q.weight, q.scales, q.biases);
    weight.set(q.weight);
    scales.set(q.scales);
    biases.set(q.biases);
  } else {
    w.eval();
    weight.set(w);
  }
  remove_lora();
}

void Linear::quantize(const QuantizeOptions& o) {
  if (quantization_) throw ValueError::of("Linear::quantize", "the layer is already quantized");
  if (!weight.has_value()) throw ValueError::of("Linear::quantize", "the layer has no weight (a tied head?)");
  const bool known =
      o.group_size == 32 || o.group_size == 64 || o.group_size == 128;  // else quantize says so
  if (known && in_ % o.group_size != 0)
    throw ValueError::of("Linear::quantize", "in_features must be a multiple of the group size",
                         "Linear({}, {}), group_size {}", in_, out_, o.group_size);
  const QuantizedWeight q = kiln::quantize(weight.value(), o.group_size, o.bits);  // checks bits and groups
  eval(q.weight, q.scales, q.biases);
  weight.reset(q.weight);
  scales.reset(q.scales);
  biases.reset(q.biases);
  quantization_ = o;
  std::vector<std::string> own{"weight", "scales", "biases"};
  if (bias.has_value()) own.push_back("bias");
  freeze(own, false);
}

Array Linear::dequantized_weight() const {
  if (!quantization_) return weight.value();
  return dequantize(weight.value(), scales.value(), biases.value(), quantization_->group_size,
                    quantization_->bits);
}

Dtype Linear::compute_dtype() const {
  return quantization_ ? scales.value().dtype() : weight.value().dtype();
}

void Linear::remove_lora() {
  lora_A->weight.reset(Array());
  lora_B->weight.reset(Array());
  lora_scale_ = lora_dropout_ = 0.0;
}

}  // namespace kiln::nn
