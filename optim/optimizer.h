#pragma once
// The optimizer base: a functional step over ParamTrees and a state tree with dotted keys.
//
//   kiln::optim::Adam opt({.lr = 1e-3, .betas = {0.9, 0.999}});
//   auto [loss, grads] = step(x, y);                 // nn::value_and_grad
//   opt.update(model, grads);                        // new Arrays in the model, nothing computed yet
//   const auto params = model.parameters();
//   kiln::nn::eval({&params, &opt.state()});         // one evaluation for the whole step
//
// State keys are "<parameter key>.<slot>" ("fc1.weight.exp_avg", "fc1.weight.step": the number of
// updates that parameter has had, as PyTorch's per-parameter "step") plus "step": the number of
// apply() calls, the argument of a learning-rate schedule. A parameter gets state at its first
// gradient. An optimizer is not thread-safe: keep one per training loop, or in an Exclusive<T>.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/nn/module.h"
#include "kiln/nn/param_tree.h"

namespace kiln::optim {

using nn::ParamTree;

/// A learning rate as a function of the step: the number of updates applied before this one
/// (the first update uses schedule(0), as MLX). See schedules.h.
using Schedule = std::function<double(int64_t step)>;

/// A constant learning rate or a Schedule; converts implicitly from either (and from a lambda), so
/// options read `.lr = 1e-3` or `.lr = optim::cosine_decay(1e-3, 1000)`.
class LearningRate {
 public:
  LearningRate(double value) : value_(value) {}  // NOLINT: implicit by design
  LearningRate(Schedule schedule);               // NOLINT: implicit by design
  template <class F>
  requires(std::is_invocable_r_v<double, F&, int64_t> && !std::is_arithmetic_v<std::decay_t<F>> &&
           !std::is_same_v<std::decay_t<F>, Schedule>) LearningRate(F f)
      : LearningRate(Schedule(std::move(f))) {}  // NOLINT: implicit by design

  /// The value at `step` (the constant, or schedule(step)).
  double at(int64_t step) const { return schedule_ ? schedule_(step) : value_; }
  bool is_schedule() const { return static_cast<bool>(schedule_); }

 private:
  double value_ = 0;
  Schedule schedule_;
};

namespace detail {
/// a + w (b - a), rounded as torch.lerp (from b's side when w >= 0.5, so w = 1 gives b exactly).
Array lerp(const Array& a, const Array& b, double w);
}  // namespace detail

/// Base of every optimizer. Copying an optimizer copies its state handles (a snapshot: Arrays are
/// immutable, so the copies never affect each other).
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  /// One step, functionally: returns `params` with every entry that has a gradient replaced by its
  /// new value (entries without a gradient are passed through as the same Arrays) and advances
  /// the state. Nothing is evaluated: evaluate the result and state() together. `grads` may cover
  /// a subset of `params`. Everything is checked before anything changes: a key of `grads` not in
  /// `params` is a KeyError naming it; a gradient whose shape differs from its parameter (or state
  /// of another shape, e.g. restored from another model) is a ShapeError naming the key; a
  /// non-float parameter or a gradient/state of another dtype is a DtypeError; a negative or
  /// non-finite learning rate from a schedule is a ValueError.
  ParamTree apply(const ParamTree& params, const ParamTree& grads);

  /// apply() on the model's trainable parameters that have a gradient, then model.update() with
  /// the result. Parameters absent from `grads` (frozen ones) are left alone. A key of `grads`
  /// that is not a trainable parameter of `model` (unknown or frozen) is a KeyError naming it.
  void update(nn::Module& model, const ParamTree& grads);

  /// Creates zero state for every parameter that has none yet (optional: state is created at a
  /// parameter's first gradient anyway; MLX's Optimizer.init). Same checks as apply().
  void init(const ParamTree& params);

  /// The state: "<key>.<slot>" entries in each parameter's dtype, "<key>.step" and "step" as
  /// 0-d int64 Arrays. Evaluate it with the parameters; save it; restore it with set_state().
  const ParamTree& state() const { return state_; }

  /// Replaces the state (a tree from state() of an optimizer of the same kind and options, e.g. a
  /// checkpoint). Checks everything first and changes nothing on error: "step" must be present
  /// and every other key "<key>.<slot>" with a slot this optimizer uses (else KeyError naming the
  /// key); each parameter's slots must be complete, of one float dtype and of shapes that fit one
  /// parameter shape, and of the shape and dtype of the state this optimizer already holds for
  /// that key (else KeyError/ShapeError/DtypeError naming the key). Steps must be 0-d integers
  /// >= 0. Evaluates the step entries.
  void set_state(const ParamTree& state);

  /// The number of apply() calls so far (restored by set_state).
  int64_t step() const { return step_; }
  /// The learning rate the next apply() uses: lr.at(step()).
  double learning_rate() const { return lr_.at(step_); }
  /// Replaces the learning rate (constant or schedule); a negative constant is a ValueError.
  void set_learning_rate(LearningRate lr);
  /// "SGD", "Adam", ...: the name used in error messages.
  const std::string& name() const { return name_; }

 protected:
  /// One state entry of a parameter besides its step: the slot name, its shape (for a parameter
  /// of a given shape) and the value it starts from. Its dtype is the parameter's.
  struct Slot {
    std::string name;
    Shape shape;
    double initial = 0.0;
  };
  /// A parameter's slots by name, read and replaced by update_one().
  using Slots = std::map<std::string, Array, std::less<>>;

  Optimizer(std::string name, LearningRate lr);

  /// The slots a parameter of `param_shape` has (may be none).
  virtual std::vector<Slot> slots(const Shape& param_shape) const = 0;
  /// Every slot name this optimizer may use with any option or shape (for set_state's checks).
  virtual std::vector<std::string> slot_names() const = 0;
  /// The parameter shape that a complete set of slots belongs to (default: the shape of the first
  /// slot, for optimizers whose slots all have the parameter's shape). Throw ShapeError naming
  /// `key` when the slots fit no parameter shape.
  virtual Shape param_shape_of(const std::string& key, const Slots& slots) const;
  /// The new value of `param` after one step: `lr` is this step's learning rate and `count` the
  /// number of updates of this parameter including this one (1 at its first gradient).
  /// Replaces entries of `slots` with their new values. Builds lazy Arrays only.
  virtual Array update_one(const Array& param, const Array& grad, double lr, int64_t count,
                           Slots& slots) const = 0;

  /// For compiled steps (optim/compiled_step.h): the host numbers update_one derives from `lr` and
  /// `count` (bias corrections, decay factors), which a compiled step passes in as 0-d inputs so
  /// that one trace serves every step. Empty (the default): no compiled form.
  virtual std::vector<double> step_scalars(double /*lr*/, int64_t /*count*/) const { return {}; }
  /// update_one with step_scalars(lr, count) as 0-d arrays of the parameter's dtype (traced inputs).
  /// The default throws NotImplemented.
  virtual Array update_one_traced(const Array& param, const Array& grad, std::span<const Array> scalars,
                                  Slots& slots) const;

  /// Throws "[name] what must be <bound>, got value" as a ValueError unless ok.
  void require(bool ok, const char* what, const char* bound, double value) const;

 private:
  void check_gradient(const std::string& key, const Array& param, const Array& grad) const;
  void check_slots(const std::string& key, const Array& param) const;
  void create_state(ParamTree& state, const std::string& key, const Array& param) const;
  friend class CompiledStep;  // reads counts and slots, commits a step's state

  std::string name_;
  LearningRate lr_;
  ParamTree state_;
  int64_t step_ = 0;
  std::map<std::string, int64_t, std::less<>> counts_;  // "<key>.step" of every parameter, on the host
};

}  // namespace kiln::optim
