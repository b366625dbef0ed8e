#pragma once
// Function transforms: reverse mode (vjp, grad, value_and_grad), forward mode (jvp) and
// batching (vmap). They compose in any order and depth: vmap(grad(f)) gives per-example
// gradients, jvp(grad(f)) Hessian-vector products.
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

/// Runs `fn` on `primals` and pushes `tangents` (one per primal, same shapes) forward through it.
/// Returns {outputs, tangents of the outputs}. Throws ShapeError if a tangent's shape differs.
std::pair<std::vector<Array>, std::vector<Array>> jvp(const ArrayFn& fn, const std::vector<Array>& primals,
                                                      const std::vector<Array>& tangents);

/// Vectorizes `fn` over a batch axis: in_axes[i] (>= 0) is the batched axis of input i (-1: not batched,
/// shared by every example; no other negative value is taken, since -1 is not "the last axis"
/// here); out_axes[j] is where output j's batch axis goes, counted from the end when negative (-1:
/// last, as JAX). Empty in_axes means 0 for every input; empty out_axes means 0 for every output.
/// Nested vmaps work. Throws ValueError at vmap() for an in_axes entry below -1, and at the call for
/// an in_axes entry past its input's rank, an out_axes entry past its output's rank (batch axis
/// included), batched inputs that disagree on the batch size; NotImplemented naming the primitive
/// when a primitive has no batching rule.
ArrayFn vmap(ArrayFn fn, std::vector<int> in_axes = {}, std::vector<int> out_axes = {});
/// Single-array form.
ScalarFn vmap(ScalarFn fn, int in_axis = 0, int out_axis = 0);

}  // namespace kiln
