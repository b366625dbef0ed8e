#pragma once
// nn::value_and_grad: the loss of a model and the gradients of its trainable parameters, as a
// ParamTree with the parameters' keys.
#include <functional>
#include <utility>

#include "kiln/nn/module.h"

namespace kiln::nn {

namespace detail {
/// Runs `loss` (which reads `model`'s parameters) with the trainable parameters traced; returns
/// the loss and its gradients by key. The model's parameters are restored afterwards, also when
/// loss throws.
std::pair<Array, ParamTree> module_value_and_grad(Module& model, const std::function<Array()>& loss);
}  // namespace detail

/// Returns a function of loss_fn's arguments giving {loss, gradients}: loss_fn(args...) must
/// return a scalar computed from `model` (captured by reference, as MLX's nn.value_and_grad);
/// gradients hold one entry per trainable parameter, none for frozen ones. The model must outlive
/// the returned function and is not thread-safe while it runs (it swaps traced values in).
///
///   auto step = nn::value_and_grad(model, [&](const Array& x, const Array& y) {
///     return nn::cross_entropy(model(x), y);
///   });
///   auto [loss, grads] = step(x, y);
template <class F>
auto value_and_grad(Module& model, F loss_fn) {
  return [&model, loss_fn = std::move(loss_fn)](const auto&... args) -> std::pair<Array, ParamTree> {
    return detail::module_value_and_grad(model, [&]() -> Array { return loss_fn(args...); });
  };
}

}  // namespace kiln::nn
