#include "kiln/optim/lion.h"

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/unary.h"

namespace kiln::optim {

Lion::Lion(LionOptions options) : Optimizer("Lion", options.lr), o_(std::move(options)) {
  require(o_.betas[0] >= 0 && o_.betas[0] <= 1, "betas[0]", "in [0, 1]", o_.betas[0]);
  require(o_.betas[1] >= 0 && o_.betas[1] <= 1, "betas[1]", "in [0, 1]", o_.betas[1]);
  require(o_.weight_decay >= 0, "weight_decay", ">= 0", o_.weight_decay);
}

Array Lion::update_one(const Array& param, const Array& grad, double lr, int64_t, Slots& slots) const {
  const auto [b1, b2] = o_.betas;
  Array& m = slots.at("exp_avg");
  const Array p = o_.weight_decay != 0 ? param * (1.0 - lr * o_.weight_decay) : param;
  const Array next = p - lr * sign(b1 * m + (1.0 - b1) * grad);
  m = b2 * m + (1.0 - b2) * grad;
  return next;
}

}  // namespace kiln::optim
