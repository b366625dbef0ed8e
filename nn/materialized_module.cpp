#include "kiln/nn/materialized_module.h"

namespace kiln::nn::detail {

void materialize_parameters(Module& m) {
  const auto slots = ModuleAccess::slots(m, /*trainable_only=*/false);
  std::vector<Array> values;
  for (auto& [key, slot] : slots) values.push_back(slot->value());
  kiln::eval(values);  // one graph walk, then each parameter is only wrapped
  for (auto& [key, slot] : slots) slot->reset(materialize(slot->value()));
  m.train(false);
}

}  // namespace kiln::nn::detail
