#include "kiln/nn/value_and_grad.h"

#include "kiln/core/transforms.h"

namespace kiln::nn::detail {
namespace {

// Puts `values` into `slots` and puts the old values back on destruction.
class SwapIn {
 public:
  SwapIn(const std::vector<std::pair<std::string, ParameterInfo*>>& slots, const std::vector<Array>& values)
      : slots_(slots) {
    saved_.reserve(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      saved_.push_back(slots[i].second->value());
      slots[i].second->reset(values[i]);
    }
  }
  ~SwapIn() {
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].second->reset(saved_[i]);
  }
  SwapIn(const SwapIn&) = delete;
  SwapIn& operator=(const SwapIn&) = delete;

 private:
  const std::vector<std::pair<std::string, ParameterInfo*>>& slots_;
  std::vector<Array> saved_;
};

}  // namespace

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

}  // namespace kiln::nn::detail
