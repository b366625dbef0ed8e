#pragma once
// Adagrad, as torch.optim.Adagrad.
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// torch.optim.Adagrad's options and defaults.
struct AdagradOptions {
  LearningRate lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

/// g = grad + weight_decay p; s = s + g^2; p = p - lr / (1 + (t - 1) lr_decay) g / (sqrt(s) + eps)
/// with t the parameter's step count. State: "sum" (starting at initial_accumulator_value).
class Adagrad : public Optimizer {
 public:
  /// Throws ValueError for lr, lr_decay, weight_decay, initial_accumulator_value or eps < 0.
  explicit Adagrad(AdagradOptions options = {});
  const AdagradOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override { return {"sum"}; }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;

 private:
  AdagradOptions o_;
};

}  // namespace kiln::optim
