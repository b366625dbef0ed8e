#include "kiln/optim/adagrad.h"

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/unary.h"

namespace kiln::optim {

Adagrad::Adagrad(AdagradOptions options) : Optimizer("Adagrad", options.lr), o_(std::move(options)) {
  require(o_.lr_decay >= 0, "lr_decay", ">= 0", o_.lr_decay);
  require(o_.weight_decay >= 0, "weight_decay", ">= 0", o_.weight_decay);
  require(o_.initial_accumulator_value >= 0, "initial_accumulator_value", ">= 0",
          o_.initial_accumulator_value);
  require(o_.eps >= 0, "eps", ">= 0", o_.eps);
}

std::vector<Optimizer::Slot> Adagrad::slots(const Shape& param_shape) const {
  return {{"sum", param_shape, o_.initial_accumulator_value}};
}

Array Adagrad::update_one(const Array& param, const Array& grad, double lr, int64_t count,
                          Slots& slots) const {
  Array g = o_.maximize ? -grad : grad;
  if (o_.weight_decay != 0) g = g + o_.weight_decay * param;
  const double clr = lr / (1.0 + static_cast<double>(count - 1) * o_.lr_decay);
  Array& sum = slots.at("sum");
  sum = sum + g * g;
  return param - clr * (g / (sqrt(sum) + o_.eps));
}

}  // namespace kiln::optim
