#include "kiln/optim/compiled_step.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/nn/value_and_grad.h"

namespace kiln::optim {
namespace {
std::string slot_key(const std::string& key, std::string_view slot) { return key + "." + std::string(slot); }
}  // namespace

CompiledStep::CompiledStep(nn::Module& model, Optimizer& optimizer, Loss loss)
    : model_(model), opt_(optimizer), loss_(std::move(loss)) {
  if (!loss_) throw ValueError::of("CompiledStep", "the loss is an empty std::function");
}

// in = params (n), each parameter's slots in slot_names_ order, the batch, the host scalars.
// out = loss, new params (n), new slots (same order).
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
  const std::vector<Array> scalars(in.begin() + static_cast<long>(at), in.end());

  const auto traced_slots = nn::detail::ModuleAccess::slots(model_, /*trainable_only=*/true);
  auto [value, grads] = nn::detail::value_and_grad_at(traced_slots, params, [&] { return loss_(batch); });
  std::vector<Array> out{value};
  for (size_t i = 0; i < n; ++i) {
    std::vector<Array> typed;
    for (const Array& s : scalars) typed.push_back(astype(s, params[i].dtype()));
    out.push_back(opt_.update_one_traced(params[i], grads[i], typed, slots[i]));
  }
  for (size_t i = 0; i < n; ++i)
    for (const std::string& name : slot_names_[i]) out.push_back(slots[i].at(name));
  return out;
}

Array CompiledStep::operator()(const std::vector<Array>& batch) {
  constexpr const char* op = "CompiledStep";
  const auto slots = nn::detail::ModuleAccess::slots(model_, /*trainable_only=*/true);
  if (slots.empty()) throw ValueError::of(op, "the model has no trainable parameters");
  std::vector<std::string> keys;
  ParamTree params;
  for (const auto& [key, info] : slots) {
    keys.push_back(key);
    params.set(key, info->value());
  }
  // State for parameters that have none yet (with init's checks); a step's own state needs none.
  for (const std::string& key : keys)
    if (!opt_.counts_.contains(key)) {
      opt_.init(params);
      break;
    }
  const int64_t count = opt_.counts_.at(keys[0]) + 1;
  for (const std::string& key : keys)
    if (opt_.counts_.at(key) + 1 != count)
      throw NotImplemented::of(op, "parameters stepped different numbers of times",
                               "'{}' has {} steps, '{}' {}", keys[0], count - 1, key, opt_.counts_.at(key));
  const double lr = opt_.learning_rate();
  if (!(lr >= 0) || !std::isfinite(lr))
    throw ValueError::of(op, "the learning rate must be >= 0 and finite", "{} at step {}", lr, opt_.step());
  const std::vector<double> scalars = opt_.step_scalars(lr, count);
  if (scalars.empty())
    throw NotImplemented::of(op, "this optimizer has no compiled step yet (Adam and AdamW do)", "{}",
                             opt_.name());

  std::vector<std::vector<std::string>> slot_names;
  for (const std::string& key : keys) {
    std::vector<std::string> names;
    for (const Optimizer::Slot& s : opt_.slots(params.at(key).shape())) names.push_back(s.name);
    slot_names.push_back(std::move(names));
  }
  if (!fn_ || keys != keys_ || slot_names != slot_names_ || batch.size() != batch_size_ ||
      scalars.size() != scalar_count_) {
    keys_ = std::move(keys);
    slot_names_ = std::move(slot_names);
    batch_size_ = batch.size();
    scalar_count_ = scalars.size();
    fn_ = compile([this](const std::vector<Array>& in) { return traced_step(in); });
  }

  std::vector<Array> inputs;
  for (const std::string& key : keys_) inputs.push_back(params.at(key));
  for (size_t i = 0; i < keys_.size(); ++i)
    for (const std::string& name : slot_names_[i]) inputs.push_back(opt_.state_.at(slot_key(keys_[i], name)));
  inputs.insert(inputs.end(), batch.begin(), batch.end());
  // In the first parameter's dtype (converted per parameter in the trace when they differ).
  for (double s : scalars) inputs.push_back(Array(s, params.at(keys_[0]).dtype()));
  const std::vector<Array> out = (*fn_)(inputs);

  // Commit, as Optimizer::apply and Module::update would.
  ParamTree new_params;
  for (size_t i = 0; i < keys_.size(); ++i) new_params.set(keys_[i], out[1 + i]);
  size_t at = 1 + keys_.size();
  ParamTree state = opt_.state_;
  for (size_t i = 0; i < keys_.size(); ++i) {
    for (const std::string& name : slot_names_[i]) state.set(slot_key(keys_[i], name), out[at++]);
    state.set(slot_key(keys_[i], "step"), Array(count));
  }
  state.set("step", Array(opt_.step_ + 1));
  model_.update(new_params, nn::Verify::none);
  opt_.state_ = std::move(state);
  ++opt_.step_;
  for (const std::string& key : keys_) opt_.counts_[key] = count;
  return out[0];
}

}  // namespace kiln::optim
