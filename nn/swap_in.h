#pragma once
// Library-internal: parameter values swapped into a module's slots for the length of a scope
// (nn::value_and_grad traces them this way, nn::checkpoint recomputes with them).
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn::detail {

/// Puts `values` into `slots` and puts the old values back on destruction.
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

}  // namespace kiln::nn::detail
