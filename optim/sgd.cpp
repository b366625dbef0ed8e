#include "kiln/optim/sgd.h"

#include "kiln/core/ops/binary.h"

namespace kiln::optim {

SGD::SGD(SGDOptions options) : Optimizer("SGD", options.lr), o_(std::move(options)) {
  require(o_.momentum >= 0, "momentum", ">= 0", o_.momentum);
  require(o_.weight_decay >= 0, "weight_decay", ">= 0", o_.weight_decay);
  if (o_.nesterov && (o_.momentum <= 0 || o_.dampening != 0))
    throw ValueError(
        fmt::format("[SGD] nesterov momentum requires momentum > 0 and dampening == 0, got momentum {}, "
                    "dampening {}",
                    o_.momentum, o_.dampening));
}

std::vector<Optimizer::Slot> SGD::slots(const Shape& param_shape) const {
  if (o_.momentum == 0) return {};
  return {{"momentum_buffer", param_shape}};
}

Array SGD::update_one(const Array& param, const Array& grad, double lr, int64_t count, Slots& slots) const {
  Array g = o_.maximize ? -grad : grad;
  if (o_.weight_decay != 0) g = g + o_.weight_decay * param;
  if (o_.momentum != 0) {
    Array& buf = slots.at("momentum_buffer");
    // PyTorch starts the buffer at the first gradient itself, not at momentum * 0 + (1 - d) g.
    buf = count == 1 ? g : o_.momentum * buf + (1.0 - o_.dampening) * g;
    g = o_.nesterov ? g + o_.momentum * buf : buf;
  }
  return param - lr * g;
}

}  // namespace kiln::optim
