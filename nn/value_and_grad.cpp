#include "kiln/nn/value_and_grad.h"

#include "kiln/core/transforms.h"
#include "kiln/nn/swap_in.h"

namespace kiln::nn::detail {

std::pair<Array, ParamTree> module_value_and_grad(Module& model, const std::function<Array()>& loss) {
  const auto slots = ModuleAccess::slots(model, /*trainable_only=*/true);
  std::vector<Array> values;
  std::vector<int> argnums;
  for (size_t i = 0; i < slots.size(); ++i) {
    values.push_back(slots[i].second->value());
    argnums.push_back(static_cast<int>(i));
  }
  if (slots.empty()) return {loss(), ParamTree()};
  auto fn = [&](const std::vector<Array>& traced) {
    SwapIn swap(slots, traced);
    return std::vector<Array>{loss()};
  };
  auto [outputs, grads] = kiln::value_and_grad(fn, argnums)(values);
  ParamTree tree;
  for (size_t i = 0; i < slots.size(); ++i) tree.set(slots[i].first, std::move(grads[i]));
  return {outputs[0], std::move(tree)};
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
      if (n == 0) return std::vector<Array>{(*loss_)(rest)};
      std::vector<int> argnums(n);
      for (size_t i = 0; i < n; ++i) argnums[i] = static_cast<int>(i);
      auto f = [&](const std::vector<Array>& traced) {
        SwapIn swap(traced_slots, traced);
        return std::vector<Array>{(*loss_)(rest)};
      };
      auto [outputs, grads] = kiln::value_and_grad(f, argnums)(params);
      std::vector<Array> out{outputs[0]};
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
