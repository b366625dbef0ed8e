#include "kiln/nn/materialized_module.h"

namespace kiln::nn::detail {

void materialize_parameters(Module& m) {
  for (auto& [key, slot] : ModuleAccess::slots(m, /*trainable_only=*/false))
    slot->reset(materialize(slot->value()));
  ModuleAccess::set_training(m, false);
}

}  // namespace kiln::nn::detail
