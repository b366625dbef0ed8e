#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay, as
// torch.optim.SGD.
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// torch.optim.SGD's options and defaults (PyTorch >= 2.2 defaults lr to 1e-3).
struct SGDOptions {
  LearningRate lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool nesterov = false;
  bool maximize = false;
};

/// g = grad + weight_decay * p (negated first when maximize); with momentum, b = g at a
/// parameter's first step, else b = momentum * b + (1 - dampening) * g, and g = b (Nesterov:
/// g + momentum * b); p = p - lr * g. State: "momentum_buffer" when momentum != 0.
class SGD : public Optimizer {
 public:
  /// Throws ValueError for lr, momentum or weight_decay < 0, or nesterov without momentum > 0
  /// and dampening == 0.
  explicit SGD(SGDOptions options = {});
  const SGDOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override { return {"momentum_buffer"}; }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;

 private:
  SGDOptions o_;
};

}  // namespace kiln::optim
