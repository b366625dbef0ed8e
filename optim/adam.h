#pragma once
// Adam, AdamW and Adamax, as torch.optim.Adam, AdamW and Adamax.
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// torch.optim.Adam's options and defaults.
struct AdamOptions {
  LearningRate lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};

/// torch.optim.AdamW's options and defaults (decoupled weight decay, 1e-2 by default).
struct AdamWOptions {
  LearningRate lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // p <- p (1 - lr weight_decay) before the Adam step
  bool amsgrad = false;
  bool maximize = false;
};

/// torch.optim.Adamax's options and defaults.
struct AdamaxOptions {
  LearningRate lr = 2e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool maximize = false;
};

/// g = grad + weight_decay p; m = lerp(m, g, 1 - b1); v = b2 v + (1 - b2) g^2 (amsgrad: vmax =
/// max(vmax, v) is used for v below); p = p - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
/// with t the parameter's step count. State: "exp_avg", "exp_avg_sq", amsgrad's "max_exp_avg_sq".
class Adam : public Optimizer {
 public:
  /// Throws ValueError for lr, eps or weight_decay < 0, or a beta outside [0, 1).
  explicit Adam(AdamOptions options = {});
  const AdamOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;
  std::vector<double> step_scalars(double lr, int64_t count) const override;
  Array update_one_traced(const Array& param, const Array& grad, std::span<const Array> scalars,
                          Slots& slots) const override;

 private:
  AdamOptions o_;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter): p <- p (1 - lr weight_decay), then
/// Adam's step with no L2 term. Same state as Adam.
class AdamW : public Optimizer {
 public:
  /// Throws ValueError for lr, eps or weight_decay < 0, or a beta outside [0, 1).
  explicit AdamW(AdamWOptions options = {});
  const AdamWOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;
  std::vector<double> step_scalars(double lr, int64_t count) const override;
  Array update_one_traced(const Array& param, const Array& grad, std::span<const Array> scalars,
                          Slots& slots) const override;

 private:
  AdamWOptions o_;
};

/// Adam's infinity-norm variant: g = grad + weight_decay p; m = lerp(m, g, 1 - b1);
/// u = max(b2 u, |g| + eps); p = p - lr / (1 - b1^t) m / u. State: "exp_avg", "exp_inf".
class Adamax : public Optimizer {
 public:
  /// Throws ValueError for lr, eps or weight_decay < 0, or a beta outside [0, 1).
  explicit Adamax(AdamaxOptions options = {});
  const AdamaxOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_inf"}; }
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;

 private:
  AdamaxOptions o_;
};

}  // namespace kiln::optim
