#include "kiln/optim/compiled_step.h"

#include <cmath>
#include <span>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"
#include "kiln/nn/value_and_grad.h"

namespace kiln::optim {
namespace {
std::string slot_key(const std::string& key, std::string_view slot) { return key + "." + std::string(slot); }
}  // namespace

CompiledStep::CompiledStep(nn::Module& model, Optimizer& optimizer, Loss loss, GradScaler* scaler)
    : model_(model),
      opt_(optimizer),
      loss_(std::move(loss)),
      scaler_(scaler && scaler->options().enabled ? scaler : nullptr) {
  if (!loss_) throw ValueError::of("CompiledStep", "the loss is an empty std::function");
}

// in = params (n), each parameter's slots in slot_names_ order, the batch, the host scalars, and
// with a scaler the loss scale. out = loss, new params (n), new slots (same order), and with a
// scaler whether every gradient was finite (the new values are then the old ones where not).
std::vector<Array> CompiledStep::traced_step(const std::vector<Array>& in) const {
  const size_t n = keys_.size();
  std::vector<Array> params(in.begin(), in.begin() + static_cast<long>(n));
  size_t at = n;
  std::vector<Optimizer::Slots> slots(n);
  for (size_t i = 0; i < n; ++i)
    for (const std::string& name : slot_names_[i]) slots[i].emplace(name, in[at++]);
  const std::vector<Array> batch(in.begin() + static_cast<long>(at),
                                 in.begin() + static_cast<long>(at + batch_size_));
  at += batch_size_;
  const std::vector<Array> scalars(in.begin() + static_cast<long>(at), in.end() - (scaler_ ? 1 : 0));

  const auto traced_slots = nn::detail::ModuleAccess::slots(model_, /*trainable_only=*/true);
  const Array scale = scaler_ ? in.back() : Array();
  auto [value, grads] = nn::detail::value_and_grad_at(traced_slots, params, [&] {
    const Array l = loss_(batch);
    return scaler_ ? nn::detail::to_float32(l) * scale : l;
  });
  Array finite;
  if (scaler_) {
    value = value / scale;
    finite = Array(true);
    for (Array& g : grads) {
      g = astype(nn::detail::to_float32(g) / scale, g.dtype());
      finite = logical_and(finite, all(isfinite(g)));
    }
  }
  std::vector<Array> out{value};
  for (size_t i = 0; i < n; ++i) {
    std::vector<Array> typed;
    for (const Array& s : scalars) typed.push_back(astype(s, params[i].dtype()));
    const Optimizer::Slots before = slots[i];
    Array next = opt_.update_one_traced(params[i], grads[i], typed, slots[i]);
    if (scaler_) {  // a step with an inf or NaN gradient keeps everything as it was
      next = where(finite, next, params[i]);
      for (auto& [name, v] : slots[i]) v = where(finite, v, before.at(name));
    }
    out.push_back(next);
  }
  for (size_t i = 0; i < n; ++i)
    for (const std::string& name : slot_names_[i]) out.push_back(slots[i].at(name));
  if (scaler_) out.push_back(finite);
  return out;
}

Array CompiledStep::operator()(const std::vector<Array>& batch) {
  constexpr const char* op = "CompiledStep";
  const auto slots = nn::detail::ModuleAccess::slots(model_, /*trainable_only=*/true);
  if (slots.empty()) throw ValueError::of(op, "the model has no trainable parameters");
  // State for parameters that have none yet (with init's checks); a step's own state needs none.
  for (const auto& [key, info] : slots)
    if (!opt_.counts_.contains(key)) {
      nn::ParamTree params;
      for (const auto& [k, i] : slots) params.set(k, i->value());
      opt_.init(params);
      break;
    }
  const int64_t count = opt_.counts_.at(slots[0].first) + 1;
  for (const auto& [key, info] : slots)
    if (opt_.counts_.at(key) + 1 != count)
      throw NotImplemented::of(op, "parameters stepped different numbers of times",
                               "'{}' has {} steps, '{}' {}", slots[0].first, count - 1, key,
                               opt_.counts_.at(key));
  const double lr = opt_.learning_rate();
  if (!(lr >= 0) || !std::isfinite(lr))
    throw ValueError::of(op, "the learning rate must be >= 0 and finite", "{} at step {}", lr, opt_.step());
  const std::vector<double> scalars = opt_.step_scalars(lr, count);
  if (scalars.empty())
    throw NotImplemented::of(op, "this optimizer has no compiled step yet (Adam and AdamW do)", "{}",
                             opt_.name());

  // The keys, shapes and slot names (with the state's keys built from them) are worked out again
  // only when the trainable parameters change: strings and maps were most of a replayed step's
  // host time. The step is traced again when the keys, the slot names or the batch's size change.
  bool same_params = slots.size() == keys_.size();
  for (size_t i = 0; same_params && i < slots.size(); ++i)
    same_params = slots[i].first == keys_[i] && slots[i].second->value().shape() == shapes_[i];
  bool retrace = !fn_ || batch.size() != batch_size_ || scalars.size() != scalar_count_;
  if (!same_params) {
    std::vector<std::string> keys;
    std::vector<Shape> shapes;
    std::vector<std::vector<std::string>> slot_names;
    for (const auto& [key, info] : slots) {
      keys.push_back(key);
      shapes.push_back(info->value().shape());
      std::vector<std::string> names;
      for (const Optimizer::Slot& s : opt_.slots(shapes.back())) names.push_back(s.name);
      slot_names.push_back(std::move(names));
    }
    retrace = retrace || keys != keys_ || slot_names != slot_names_;
    keys_ = std::move(keys);
    shapes_ = std::move(shapes);
    slot_names_ = std::move(slot_names);
    state_keys_.clear();
    step_keys_.clear();
    for (size_t i = 0; i < keys_.size(); ++i) {
      std::vector<std::string> state_keys;
      for (const std::string& name : slot_names_[i]) state_keys.push_back(slot_key(keys_[i], name));
      state_keys_.push_back(std::move(state_keys));
      step_keys_.push_back(slot_key(keys_[i], "step"));
    }
  }
  if (retrace) {
    batch_size_ = batch.size();
    scalar_count_ = scalars.size();
    fn_ = compile([this](const std::vector<Array>& in) { return traced_step(in); });
  }

  std::vector<Array> inputs;
  for (const auto& [key, info] : slots) inputs.push_back(info->value());
  for (const auto& state_keys : state_keys_)
    for (const std::string& key : state_keys) inputs.push_back(opt_.state_.at(key));
  inputs.insert(inputs.end(), batch.begin(), batch.end());
  // In the first parameter's dtype (converted per parameter in the trace when they differ).
  const Dtype scalar_dtype = slots[0].second->value().dtype();
  for (double s : scalars) inputs.push_back(Array(s, scalar_dtype));
  if (scaler_) inputs.push_back(Array(scaler_->scale_value(), float32));
  const std::vector<Array> out = (*fn_)(inputs);
  if (scaler_) {
    // One host read, as PyTorch's scaler.step: a skipped step changes nothing but the scale.
    const bool finite = out.back().item<bool>();
    scaler_->update(finite);
    if (!finite) return out[0];
  }

  // Commit, as Optimizer::apply and Module::update would (nothing below can fail but allocation).
  const size_t n = keys_.size();
  nn::detail::ModuleAccess::assign(model_, slots, std::span(out).subspan(1, n));
  size_t at = 1 + n;
  const Array step_count(count);
  for (size_t i = 0; i < n; ++i) {
    for (const std::string& key : state_keys_[i]) opt_.state_.set(key, out[at++]);
    opt_.state_.set(step_keys_[i], step_count);
  }
  opt_.state_.set("step", Array(opt_.step_ + 1));
  ++opt_.step_;
  for (const std::string& key : keys_) opt_.counts_[key] = count;
  return out[0];
}

}  // namespace kiln::optim
