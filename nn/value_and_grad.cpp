#include "kiln/nn/value_and_grad.h"

#include "kiln/core/transforms.h"
#include "kiln/nn/swap_in.h"

namespace kiln::nn::detail {

std::pair<Array, std::vector<Array>> value_and_grad_at(
    const std::vector<std::pair<std::string, ParameterInfo*>>& slots, const std::vector<Array>& params,
    const std::function<Array()>& loss) {
  if (slots.empty()) return {loss(), {}};
  std::vector<int> argnums(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) argnums[i] = static_cast<int>(i);
  auto fn = [&](const std::vector<Array>& traced) {
    SwapIn swap(slots, traced);
    return std::vector<Array>{loss()};
  };
  auto [outputs, grads] = kiln::value_and_grad(fn, argnums)(params);
  return {outputs[0], std::move(grads)};
}

std::pair<Array, ParamTree> module_value_and_grad(Module& model, const std::function<Array()>& loss) {
  const auto slots = ModuleAccess::slots(model, /*trainable_only=*/true);
  std::vector<Array> values;
  for (const auto& [key, info] : slots) values.push_back(info->value());
  auto [value, grads] = value_and_grad_at(slots, values, loss);
  ParamTree tree;
  for (size_t i = 0; i < slots.size(); ++i) tree.set(slots[i].first, std::move(grads[i]));
  return {value, std::move(tree)};
}

std::pair<Array, ParamTree> CompiledModuleGrad::call(const std::vector<Array>& args, const Loss& loss) {
  const auto slots = ModuleAccess::slots(model_, /*trainable_only=*/true);
  std::vector<std::string> keys;
  std::vector<Array> inputs;
  for (const auto& [key, info] : slots) {
    keys.push_back(key);
    inputs.push_back(info->value());
  }
  inputs.insert(inputs.end(), args.begin(), args.end());
  if (!fn_ || keys != keys_) {
    keys_ = keys;
    const size_t n = keys_.size();
    fn_ = compile([this, n](const std::vector<Array>& in) {
      const std::vector<Array> params(in.begin(), in.begin() + static_cast<long>(n));
      const std::vector<Array> rest(in.begin() + static_cast<long>(n), in.end());
      const auto traced_slots = ModuleAccess::slots(model_, /*trainable_only=*/true);
      auto [value, grads] = value_and_grad_at(traced_slots, params, [&] { return (*loss_)(rest); });
      std::vector<Array> out{value};
      out.insert(out.end(), grads.begin(), grads.end());
      return out;
    });
  }
  loss_ = &loss;
  struct Clear {
    const Loss*& p;
    ~Clear() { p = nullptr; }
  } clear{loss_};
  const std::vector<Array> out = (*fn_)(inputs);
  ParamTree grads;
  for (size_t i = 0; i < keys_.size(); ++i) grads.set(keys_[i], out[1 + i]);
  return {out[0], std::move(grads)};
}

}  // namespace kiln::nn::detail
