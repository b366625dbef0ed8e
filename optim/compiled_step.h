#pragma once
// A whole training step compiled once: loss, gradients and the optimizer's update in one graph
// of (parameters, optimizer state, batch, the step's host scalars). On the GPU the graph is captured
// after its first call and replayed (kiln::compile), so parameters and optimizer state stay in
// device memory, only the batch and a few scalars go up, and nothing is traced or recorded again.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/compile.h"
#include "kiln/nn/module.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// One compiled training step of `model` with `optimizer` on `loss`, MLX's
/// mx.compile(step, inputs=state, outputs=state) as one object:
///
///   optim::CompiledStep step(model, opt, [&](const std::vector<Array>& b) {
///     return nn::cross_entropy(model(b[0]), b[1]);
///   });
///   for (auto& batch : loader) { Array loss = step({batch.x, batch.y}); ... }
///
/// Each call leaves the model's trainable parameters and the optimizer's state (state(), step(),
/// learning_rate() of the next step) as an eager `optimizer.update(model, grads)` would, as lazy
/// arrays, and returns the loss (lazy). The loss must reach the batch and the parameters only
/// through Array ops. The trace is redone when the trainable parameters or the batch's shapes
/// change. Keys the loss draws from random::next_key() (dropout in training mode) are drawn afresh
/// at every step, those the eager loop would draw. Throws NotImplemented for an optimizer without a
/// compiled form (Adam and AdamW have one) and when parameters have been stepped different numbers
/// of times; the model and the optimizer must outlive the step and are not thread-safe while it runs.
///
/// With a GradScaler (float16 training), the traced step scales the loss and unscales the
/// gradients by the scale passed in as an input, and keeps the parameters and the state as they
/// were when a gradient is inf or NaN; each call then reads that one flag on the host (as PyTorch's
/// scaler.step does), so the step is evaluated before the call returns, and advances the scaler
/// and the optimizer's step counts only for a step taken. The returned loss is the unscaled one.
class CompiledStep {
 public:
  using Loss = std::function<Array(const std::vector<Array>& batch)>;
  CompiledStep(nn::Module& model, Optimizer& optimizer, Loss loss, GradScaler* scaler = nullptr);

  /// One step on `batch`; returns the loss.
  Array operator()(const std::vector<Array>& batch);

  /// The compiled function behind the step (trace and capture counts); empty before the first call.
  const std::optional<CompiledFunction>& compiled() const { return fn_; }

 private:
  std::vector<Array> traced_step(const std::vector<Array>& in) const;

  nn::Module& model_;
  Optimizer& opt_;
  Loss loss_;
  GradScaler* scaler_;
  // What fn_ was traced for: the trainable keys and each one's slot names; the batch's size.
  std::vector<std::string> keys_;
  std::vector<std::vector<std::string>> slot_names_;
  // For the trainable parameters of the last call: their shapes, and the keys of their state in
  // the optimizer ("<key>.<slot>", "<key>.step").
  std::vector<Shape> shapes_;
  std::vector<std::vector<std::string>> state_keys_;
  std::vector<std::string> step_keys_;
  size_t batch_size_ = 0, scalar_count_ = 0;
  std::optional<CompiledFunction> fn_;
};

}  // namespace kiln::optim
