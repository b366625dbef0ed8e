#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"

namespace kiln::optim {

namespace {

const char kStep[] = "step";

std::string slot_key(const std::string& key, std::string_view slot) { return key + "." + std::string(slot); }

}  // namespace

LearningRate::LearningRate(Schedule schedule) : schedule_(std::move(schedule)) {
  if (!schedule_) throw ValueError::of("LearningRate", "the schedule is an empty std::function");
}

Optimizer::Optimizer(std::string name, LearningRate lr) : name_(std::move(name)), lr_(std::move(lr)) {
  if (!lr_.is_schedule()) require(lr_.at(0) >= 0 && std::isfinite(lr_.at(0)), "lr", ">= 0", lr_.at(0));
  state_.set(kStep, Array(int64_t{0}));
}

void Optimizer::require(bool ok, const char* what, const char* bound, double value) const {
  if (!ok) throw ValueError(fmt::format("[{}] {} must be {}, got {}", name_, what, bound, value));
}

void Optimizer::set_learning_rate(LearningRate lr) {
  if (!lr.is_schedule()) require(lr.at(0) >= 0 && std::isfinite(lr.at(0)), "lr", ">= 0", lr.at(0));
  lr_ = std::move(lr);
}

Array detail::lerp(const Array& a, const Array& b, double w) {
  // torch.lerp's two formulas: each is exact at its end (w = 0 gives a, w = 1 gives b).
  if (w < 0.5) return a + w * (b - a);
  return b - (b - a) * (1.0 - w);
}

Shape Optimizer::param_shape_of(const std::string& key, const Slots& slots) const {
  if (slots.empty()) throw KeyError::of(name_.c_str(), "no state slots", "for '{}'", key);
  return slots.begin()->second.shape();
}

void Optimizer::check_gradient(const std::string& key, const Array& param, const Array& grad) const {
  if (!param.valid() || !grad.valid())
    throw ValueError::of(name_.c_str(), "empty Array", "{} of '{}'", param.valid() ? "gradient" : "parameter",
                         key);
  if (!is_floating(param.dtype()))
    throw DtypeError::of(name_.c_str(), "parameters must be floating point", "'{}' is {}", key,
                         dtype_name(param.dtype()));
  if (grad.shape() != param.shape())
    throw ShapeError::of(name_.c_str(), "gradient shape differs from its parameter",
                         "at '{}': parameter {}, gradient {}", key, shape_str(param.shape()),
                         shape_str(grad.shape()));
  if (grad.dtype() != param.dtype())
    throw DtypeError::of(name_.c_str(), "gradient dtype differs from its parameter",
                         "at '{}': parameter {}, gradient {}", key, dtype_name(param.dtype()),
                         dtype_name(grad.dtype()));
}

void Optimizer::check_slots(const std::string& key, const Array& param) const {
  if (!counts_.contains(key)) return;
  for (const Slot& slot : slots(param.shape())) {
    const std::string k = slot_key(key, slot.name);
    if (!state_.contains(k))
      throw KeyError::of(name_.c_str(), "state does not fit the parameter", "no '{}' for '{}' of shape {}", k,
                         key, shape_str(param.shape()));
    const Array& a = state_.at(k);
    if (a.shape() != slot.shape)
      throw ShapeError::of(name_.c_str(), "state does not fit the parameter",
                           "'{}' is {}, parameter '{}' of shape {} needs {}", k, shape_str(a.shape()), key,
                           shape_str(param.shape()), shape_str(slot.shape));
    if (a.dtype() != param.dtype())
      throw DtypeError::of(name_.c_str(), "state dtype differs from its parameter", "'{}' is {}, '{}' is {}",
                           k, dtype_name(a.dtype()), key, dtype_name(param.dtype()));
  }
}

void Optimizer::create_state(ParamTree& state, const std::string& key, const Array& param) const {
  state.set(slot_key(key, kStep), Array(int64_t{0}));
  for (const Slot& slot : slots(param.shape()))
    state.set(slot_key(key, slot.name), full(slot.shape, slot.initial, param.dtype()));
}

ParamTree Optimizer::apply(const ParamTree& params, const ParamTree& grads) {
  const double lr = lr_.at(step_);
  if (!(lr >= 0) || !std::isfinite(lr))
    throw ValueError(
        fmt::format("[{}] lr must be >= 0, got {} (from the schedule at step {})", name_, lr, step_));
  for (const auto& [key, grad] : grads) {
    if (!params.contains(key))
      throw KeyError::of(name_.c_str(), "gradient for a key that is not a parameter",
                         "'{}' ({} parameters given)", key, params.size());
    check_gradient(key, params.at(key), grad);
    check_slots(key, params.at(key));
  }

  // Stage everything, then commit: nothing below throws for user input, and a failure leaves
  // the optimizer as it was.
  ParamTree state = state_;
  ParamTree out = params;
  std::vector<std::pair<std::string, int64_t>> counts;
  counts.reserve(grads.size());
  for (const auto& [key, grad] : grads) {
    const Array& param = params.at(key);
    auto it = counts_.find(key);
    const int64_t count = (it == counts_.end() ? 0 : it->second) + 1;
    if (it == counts_.end()) create_state(state, key, param);
    Slots slots_of_param;
    for (const Slot& slot : slots(param.shape()))
      slots_of_param.emplace(slot.name, state.at(slot_key(key, slot.name)));
    out.set(key, update_one(param, grad, lr, count, slots_of_param));
    for (auto& [slot, value] : slots_of_param) state.set(slot_key(key, slot), std::move(value));
    state.set(slot_key(key, kStep), Array(count));
    counts.emplace_back(key, count);
  }
  state.set(kStep, Array(step_ + 1));

  state_ = std::move(state);
  ++step_;
  for (auto& [key, count] : counts) counts_[key] = count;
  return out;
}

void Optimizer::update(nn::Module& model, const ParamTree& grads) {
  const ParamTree trainable = model.trainable_parameters();
  ParamTree params;
  for (const auto& [key, grad] : grads) {
    if (!trainable.contains(key)) {
      if (model.parameters().contains(key))
        throw KeyError::of(name_.c_str(), "gradient for a frozen parameter", "'{}'", key);
      throw KeyError::of(name_.c_str(), "gradient for a key that is not a parameter of the model", "'{}'",
                         key);
    }
    params.set(key, trainable.at(key));
  }
  // Parameters without a gradient are simply not in the tree: `missing` is expected.
  model.update(apply(params, grads), nn::Verify::shapes | nn::Verify::dtypes | nn::Verify::unknown);
}

Array Optimizer::update_one_traced(const Array&, const Array&, std::span<const Array>, Slots&) const {
  throw NotImplemented::of(name_.c_str(), "this optimizer has no compiled step yet (Adam and AdamW do)");
}

void Optimizer::init(const ParamTree& params) {
  for (const auto& [key, param] : params) {
    check_gradient(key, param, param);
    check_slots(key, param);
  }
  ParamTree state = state_;
  std::vector<std::string> fresh;
  for (const auto& [key, param] : params) {
    if (counts_.contains(key)) continue;
    create_state(state, key, param);
    fresh.push_back(key);
  }
  state_ = std::move(state);
  for (const std::string& key : fresh) counts_[key] = 0;
}

void Optimizer::set_state(const ParamTree& state) {
  const char* op = name_.c_str();
  auto read_step = [&](const std::string& key, const Array& a) -> int64_t {
    if (!a.valid() || a.ndim() != 0 || !is_integral(a.dtype()))
      throw ValueError::of(op, "a step must be a 0-d integer Array", "'{}' is {} {}", key,
                           a.valid() ? dtype_name(a.dtype()) : "empty",
                           a.valid() ? shape_str(a.shape()) : "");
    const auto v = a.item<int64_t>();
    if (v < 0) throw ValueError::of(op, "a step must be >= 0", "'{}' is {}", key, v);
    return v;
  };
  if (!state.contains(kStep)) throw KeyError::of(op, "state has no 'step' entry", "({} keys)", state.size());
  const int64_t step = read_step(kStep, state.at(kStep));

  const std::vector<std::string> names = slot_names();
  std::vector<std::string> order;  // parameter keys in the order their step appears
  std::map<std::string, int64_t, std::less<>> counts;
  std::map<std::string, Slots, std::less<>> slots_by_key;
  for (const auto& [key, value] : state) {
    if (key == kStep) continue;
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == key.size())
      throw KeyError::of(op, "state key is not '<parameter>.<slot>'", "'{}'", key);
    const std::string param = key.substr(0, dot);
    const std::string slot = key.substr(dot + 1);
    if (slot == kStep) {
      counts[param] = read_step(key, value);
      order.push_back(param);
    } else if (std::find(names.begin(), names.end(), slot) == names.end()) {
      throw KeyError::of(op, "unknown state slot", "'{}' ({} keeps: step, {})", key, name_,
                         fmt::join(names, ", "));
    } else {
      if (!value.valid()) throw ValueError::of(op, "empty Array", "at '{}'", key);
      slots_by_key[param].emplace(slot, value);
    }
  }
  for (const auto& [param, slots_of_param] : slots_by_key)
    if (!counts.contains(param))
      throw KeyError::of(op, "state of a parameter has no step", "'{}' has '{}.{}' but no '{}.step'", param,
                         param, slots_of_param.begin()->first, param);

  for (const std::string& param : order) {
    const Slots& given = slots_by_key[param];
    if (given.empty()) {
      // Without slots the parameter's shape is unknown: fine only if no parameter has slots.
      const std::vector<Slot> needed = slots(Shape{});
      if (!needed.empty())
        throw KeyError::of(op, "state of a parameter is incomplete", "no '{}.{}'", param,
                           needed.front().name);
      continue;
    }
    const Dtype dtype = given.begin()->second.dtype();
    for (const auto& [slot, value] : given) {
      if (!is_floating(value.dtype()) || value.dtype() != dtype)
        throw DtypeError::of(op, "state slots of a parameter must share one float dtype",
                             "'{}.{}' is {}, '{}.{}' is {}", param, slot, dtype_name(value.dtype()), param,
                             given.begin()->first, dtype_name(dtype));
    }
    const Shape shape = param_shape_of(param, given);
    const std::vector<Slot> expected = slots(shape);
    for (const Slot& slot : expected) {
      auto it = given.find(slot.name);
      if (it == given.end())
        throw KeyError::of(op, "state of a parameter is incomplete", "no '{}.{}' (parameter shape {})", param,
                           slot.name, shape_str(shape));
      if (it->second.shape() != slot.shape)
        throw ShapeError::of(op, "state slot shapes do not fit one parameter", "'{}.{}' is {}, expected {}",
                             param, slot.name, shape_str(it->second.shape()), shape_str(slot.shape));
    }
    for (const auto& entry : given) {
      const std::string& slot = entry.first;  // not a structured binding: clang 14 cannot capture one
      if (std::none_of(expected.begin(), expected.end(), [&](const Slot& s) { return s.name == slot; }))
        throw KeyError::of(op, "state slot not used with these options", "'{}.{}'", param, slot);
    }

    // State this optimizer already holds for the key must describe the same parameter.
    if (counts_.contains(param)) {
      Slots held;
      for (const std::string& n : names)
        if (state_.contains(slot_key(param, n))) held.emplace(n, state_.at(slot_key(param, n)));
      if (!held.empty()) {
        const Shape held_shape = param_shape_of(param, held);
        if (held_shape != shape)
          throw ShapeError::of(op, "state does not fit the parameter",
                               "'{}': held state is for shape {}, new for {}", param, shape_str(held_shape),
                               shape_str(shape));
        if (held.begin()->second.dtype() != dtype)
          throw DtypeError::of(op, "state dtype differs from the state held", "'{}': held {}, new {}", param,
                               dtype_name(held.begin()->second.dtype()), dtype_name(dtype));
      }
    }
  }

  // Commit, with every step stored as int64 (the dtype state() always has).
  ParamTree next;
  for (const auto& [key, value] : state) {
    if (key == kStep) {
      next.set(key, Array(step));
    } else if (key.size() > 5 && key.ends_with(".step")) {
      next.set(key, Array(counts.at(key.substr(0, key.size() - 5))));
    } else {
      next.set(key, value);
    }
  }
  state_ = std::move(next);
  step_ = step;
  counts_ = std::move(counts);
}

}  // namespace kiln::optim
