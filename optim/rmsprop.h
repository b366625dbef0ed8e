#pragma once
// RMSprop, as torch.optim.RMSprop.
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// torch.optim.RMSprop's options and defaults.
struct RMSpropOptions {
  LearningRate lr = 1e-2;
  double alpha = 0.99;  // smoothing constant of the running averages
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  double momentum = 0.0;
  bool centered = false;  // normalize by an estimate of the gradient's variance
  bool maximize = false;
};

/// g = grad + weight_decay p; v = alpha v + (1 - alpha) g^2; d = sqrt(v) + eps (centered:
/// a = lerp(a, g, 1 - alpha), d = sqrt(v - a^2) + eps); p = p - lr g / d (momentum: b = momentum b
/// + g / d, p = p - lr b). State: "square_avg", "momentum_buffer" (momentum > 0), "grad_avg"
/// (centered).
class RMSprop : public Optimizer {
 public:
  /// Throws ValueError for lr, alpha, eps, weight_decay or momentum < 0.
  explicit RMSprop(RMSpropOptions options = {});
  const RMSpropOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override {
    return {"square_avg", "momentum_buffer", "grad_avg"};
  }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;

 private:
  RMSpropOptions o_;
};

}  // namespace kiln::optim
