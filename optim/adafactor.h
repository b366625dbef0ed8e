#pragma once
// Adafactor (Shazeer & Stern 2018), as torch.optim.Adafactor (PyTorch >= 2.5): factored second
// moments for parameters with 2 or more dimensions, relative step sizes and update clipping.
#include <optional>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// torch.optim.Adafactor's options and defaults. PyTorch's eps = (eps1, eps2) is split in two.
struct AdafactorOptions {
  LearningRate lr = 1e-2;     // the largest relative step size rho_t, and weight decay's scale
  double beta2_decay = -0.8;  // 1 - beta2_t = t^beta2_decay
  std::optional<double> eps1 = std::nullopt;  // floor of the variance estimate; unset: the dtype's epsilon
  double eps2 = 1e-3;                         // floor of the parameter's RMS in the step size
  double d = 1.0;                             // update clipping threshold
  double weight_decay = 0.0;                  // decoupled: p <- p (1 - lr weight_decay)
  bool maximize = false;
};

/// PyTorch 2.5's Adafactor. With t the parameter's step count: rho = min(lr, 1/sqrt(t)),
/// alpha = max(eps2, RMS(p)) rho; p = p (1 - lr weight_decay). For ndim >= 2 the row and column
/// means of g^2 over the last two axes are averaged into "row_var" (..., R, 1) and "col_var"
/// (..., 1, C) with lerp weight t^beta2_decay, and V = row_var col_var / max(mean(row_var), eps1);
/// otherwise "variance" (the parameter's shape) averages g^2 likewise and V = variance.
/// u = g / sqrt(max(V, eps1^2)); p = p - alpha / max(1, RMS(u) / d) u.
class Adafactor : public Optimizer {
 public:
  /// Throws ValueError for lr, eps1, eps2 or weight_decay < 0, beta2_decay > 0 or d < 1.
  explicit Adafactor(AdafactorOptions options = {});
  const AdafactorOptions& options() const { return o_; }

 protected:
  std::vector<Slot> slots(const Shape& param_shape) const override;
  std::vector<std::string> slot_names() const override { return {"row_var", "col_var", "variance"}; }
  Shape param_shape_of(const std::string& key, const Slots& slots) const override;
  Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                   Slots& slots) const override;

 private:
  AdafactorOptions o_;
};

}  // namespace kiln::optim
