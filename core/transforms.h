#pragma once
// Function transforms: reverse-mode autodiff (vjp, grad, value_and_grad).
#include <functional>
#include <utility>
#include <vector>

#include "kiln/core/array.h"

namespace kiln {

using ArrayFn = std::function<std::vector<Array>(const std::vector<Array>&)>;
using ScalarFn = std::function<Array(const Array&)>;

/// Runs `fn` on `primals` and pulls `cotangents` (one per output) back through it.
/// Returns {outputs, cotangents of the primals}. Throws ShapeError if a cotangent's shape differs
/// from its output's.
std::pair<std::vector<Array>, std::vector<Array>> vjp(const ArrayFn& fn, const std::vector<Array>& primals,
                                                      const std::vector<Array>& cotangents);

/// Returns a function giving {outputs, gradients}: the gradient of outputs[0] (a scalar loss) with
/// respect to the inputs listed in `argnums`. Further outputs are auxiliary: returned, not
/// differentiated. Throws ValueError if outputs[0] is not a scalar.
std::function<std::pair<std::vector<Array>, std::vector<Array>>(const std::vector<Array>&)> value_and_grad(
    ArrayFn fn, std::vector<int> argnums = {0});
/// Single-argument form: {loss, d loss / d x}.
std::function<std::pair<Array, Array>(const Array&)> value_and_grad(ScalarFn fn);

/// The gradients of outputs[0] with respect to the inputs in `argnums`.
ArrayFn grad(ArrayFn fn, std::vector<int> argnums = {0});
/// d fn / d x for a scalar-valued fn of one array; composes (grad(grad(f)) is the second derivative).
ScalarFn grad(ScalarFn fn);

}  // namespace kiln
