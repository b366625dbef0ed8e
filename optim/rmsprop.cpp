#include "kiln/optim/rmsprop.h"

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/unary.h"

namespace kiln::optim {

RMSprop::RMSprop(RMSpropOptions options) : Optimizer("RMSprop", options.lr), o_(std::move(options)) {
  require(o_.alpha >= 0, "alpha", ">= 0", o_.alpha);
  require(o_.eps >= 0, "eps", ">= 0", o_.eps);
  require(o_.weight_decay >= 0, "weight_decay", ">= 0", o_.weight_decay);
  require(o_.momentum >= 0, "momentum", ">= 0", o_.momentum);
}

std::vector<Optimizer::Slot> RMSprop::slots(const Shape& param_shape) const {
  std::vector<Slot> out = {{"square_avg", param_shape}};
  if (o_.momentum > 0) out.push_back({"momentum_buffer", param_shape});
  if (o_.centered) out.push_back({"grad_avg", param_shape});
  return out;
}

Array RMSprop::update_one(const Array& param, const Array& grad, double lr, int64_t, Slots& slots) const {
  Array g = o_.maximize ? -grad : grad;
  if (o_.weight_decay != 0) g = g + o_.weight_decay * param;
  Array& v = slots.at("square_avg");
  v = o_.alpha * v + (1.0 - o_.alpha) * (g * g);
  Array avg;
  if (o_.centered) {
    Array& a = slots.at("grad_avg");
    a = detail::lerp(a, g, 1.0 - o_.alpha);
    avg = sqrt(v - a * a) + o_.eps;
  } else {
    avg = sqrt(v) + o_.eps;
  }
  if (o_.momentum > 0) {
    Array& buf = slots.at("momentum_buffer");
    buf = o_.momentum * buf + g / avg;
    return param - lr * buf;
  }
  return param - lr * (g / avg);
}

}  // namespace kiln::optim
