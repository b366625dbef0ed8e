#pragma once
// nn::checkpoint: gradient checkpointing of a module's forward (transformers'
// gradient_checkpointing_enable, MLX's nn.utils.checkpoint). The forward graph keeps the call's
// inputs and outputs but none of its intermediates; the backward pass runs the function again.
// kiln::checkpoint alone would treat the module's parameters as constants (it sees only its
// inputs); this one passes the trainable parameters in as inputs, so their gradients flow.
//
//   Array y = nn::checkpoint(layer, [&](const Array& h) { return layer(h); }, x);
#include <functional>
#include <vector>

#include "kiln/core/transforms.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// fn(inputs) as one checkpointed node whose inputs are `inputs` and `module`'s trainable
/// parameters; fn reads the parameters through the module (they are swapped in while it runs,
/// also when the backward pass runs it again). Random draws inside fn that take the default key
/// sequence (dropout without a key) repeat exactly when fn runs again: each call takes one
/// next_key() and fn draws from a sequence seeded by it. `module` must outlive the returned
/// arrays' graph; like training itself, the call is for one thread at a time per module. Throws
/// what kiln::checkpoint throws.
std::vector<Array> checkpoint(Module& module, const ArrayFn& fn, const std::vector<Array>& inputs);
/// The one-input, one-output form.
Array checkpoint(Module& module, const std::function<Array(const Array&)>& fn, const Array& x);

}  // namespace kiln::nn
