#pragma once
// Dynamic loss scaling for float16 training, with the semantics of PyTorch's GradScaler:
//
//   optim::GradScaler scaler;                            // scale 65536, x2 every 2000 clean steps
//   auto [loss, grads] = nn::value_and_grad(model, [&] { return scaler.scale(loss_fn()); })();
//   scaler.step(opt, model, grads);                      // unscale; step, or skip on inf/NaN
//
// float16 gradients underflow below 6e-8: scaling the loss by S scales every gradient by S and
// lifts them into range; step() divides by S again before the optimizer sees them. When any
// gradient is inf or NaN the step is skipped (model and optimizer untouched) and S backs off;
// after `growth_interval` clean steps in a row S grows. bfloat16 has float32's range and needs
// none of this (a disabled scaler passes everything through). optim::CompiledStep takes a scaler
// too (compiled_step.h). The state goes into checkpoints (io::make_checkpoint's scaler overload).
#include <cstdint>
#include <utility>

#include "kiln/core/array.h"
#include "kiln/nn/module.h"
#include "kiln/nn/param_tree.h"

namespace kiln::optim {

class Optimizer;

struct GradScalerOptions {
  double init_scale = 65536.0;     // 2^16, as PyTorch
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps before the scale grows; >= 1
  bool enabled = true;             // false: scale 1, nothing skipped (bfloat16 runs)
};

class GradScaler {
 public:
  /// Throws ValueError for options outside the ranges above (or a non-finite init_scale <= 0).
  explicit GradScaler(GradScalerOptions options = {});

  /// loss (a scalar) times the scale, in float32 (a float16 loss is taken up first: 65536 times a
  /// float16 loss would overflow). Lazy. Throws ShapeError for a loss with more than one element.
  Array scale(const Array& loss) const;
  /// The gradients divided by the scale (each in its own dtype) and a lazy 0-d bool: whether
  /// every entry is finite. Nothing is evaluated.
  std::pair<nn::ParamTree, Array> unscale(const nn::ParamTree& scaled_grads) const;
  /// Unscales `scaled_grads` (gradients of scale(loss)); when they are all finite runs
  /// optimizer.update(model, unscaled) and returns true, else leaves the model and the optimizer
  /// as they were and returns false; then update(). Reads one bool on the host (as PyTorch's
  /// step does), so the gradients are evaluated here. Throws what Optimizer::update throws (then
  /// the scale is unchanged).
  bool step(Optimizer& optimizer, nn::Module& model, const nn::ParamTree& scaled_grads);
  /// Advances the scale after a step whose gradients were (or were not) all finite: backs off
  /// and restarts the count on inf/NaN, grows after growth_interval clean steps in a row.
  void update(bool all_finite);

  /// The current scale (1 when disabled).
  double scale_value() const { return options_.enabled ? scale_ : 1.0; }
  /// Clean steps since the scale last changed or backed off.
  int64_t growth_tracker() const { return tracker_; }
  /// Steps skipped for inf/NaN so far (not checkpointed: a statistic of this process).
  int64_t skipped_steps() const { return skipped_; }
  const GradScalerOptions& options() const { return options_; }

  /// {"scale": 0-d float64, "growth_tracker": 0-d int64}, as checkpoints store it.
  nn::ParamTree state() const;
  /// Restores state(): both keys present, 0-d, scale finite and > 0, tracker >= 0 (else
  /// KeyError/ShapeError/ValueError naming the key, and nothing changes). Evaluates them.
  void set_state(const nn::ParamTree& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t tracker_ = 0, skipped_ = 0;
};

}  // namespace kiln::optim
