#pragma once
// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as lucidrains'
// lion-pytorch.
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// lion-pytorch's options and defaults.
struct LionOptions {
  LearningRate lr = 1e-4;
  std::array<double, 2> betas = {0.9, 0.99};
  double weight_decay = 0.0;  // decoupled: p <- p (1 - lr weight_decay)
};

/// p = p (1 - lr weight_decay); p = p - lr sign(b1 m + (1 - b1) g); m = b2 m + (1 - b2) g.
/// State: "exp_avg".
class Lion : public Optimizer {
 public:
  /// Throws ValueError for lr or weight_decay < 0 or a beta outside [0, 1].
  explicit Lion(LionOptions options = {});
  const LionOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override { return {{"exp_avg", param_shape}}; }
  std::vector<std::string> slot_names() const override { return {"exp_avg"}; }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;

 private:
  LionOptions o_;
};

}  // namespace kiln::optim
