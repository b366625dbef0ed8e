#pragma once
// nn::value_and_grad: the loss of a model and the gradients of its trainable parameters, as a
// ParamTree with the parameters' keys.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/compile.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

namespace detail {
/// Runs `loss` (which reads `model`'s parameters) with the trainable parameters traced; returns
/// the loss and its gradients by key. The model's parameters are restored afterwards, also when
/// loss throws.
std::pair<Array, ParamTree> module_value_and_grad(Module& model, const std::function<Array()>& loss);

/// The loss and its gradients with respect to `params`, which loss() reads through `slots` (a
/// model's trainable parameter slots, ModuleAccess::slots order) while they are swapped in: the
/// core of module_value_and_grad, also of the compiled forms, which give traced values.
std::pair<Array, std::vector<Array>> value_and_grad_at(
    const std::vector<std::pair<std::string, ParameterInfo*>>& slots, const std::vector<Array>& params,
    const std::function<Array()>& loss);

/// What nn::compiled_value_and_grad calls: a compiled function of (trainable parameters, args).
class CompiledModuleGrad {
 public:
  using Loss = std::function<Array(const std::vector<Array>&)>;
  explicit CompiledModuleGrad(Module& model) : model_(model) {}
  /// {loss, gradients by key} of `loss` (which reads the model) at `args`.
  std::pair<Array, ParamTree> call(const std::vector<Array>& args, const Loss& loss);
  /// The compiled function of the current trainable parameters (empty before the first call).
  const std::optional<CompiledFunction>& compiled() const { return fn_; }

 private:
  Module& model_;
  std::vector<std::string> keys_;  // the trainable parameters fn_ was made for
  std::optional<CompiledFunction> fn_;
  const Loss* loss_ = nullptr;  // the call's loss, while it traces
};
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

/// nn::value_and_grad with the forward and backward pass compiled (kiln::compile): traced once
/// per signature of the arguments (Arrays) and the trainable parameters, and on the GPU captured
/// into one command buffer and replayed from the second call on. The loss must depend on its
/// arguments and the model's parameters only through Array ops (no values read on the host); a
/// change of which parameters are trainable traces again. Keys the loss draws from
/// random::next_key() (dropout in training mode) are drawn afresh at every call, those
/// value_and_grad would draw. Same lifetime and threading rules as value_and_grad.
///
///   auto step = nn::compiled_value_and_grad(model, [&](const Array& x, const Array& y) {
///     return nn::cross_entropy(model(x), y);
///   });
///   auto [loss, grads] = step(x, y);  // then opt.update(model, grads)
template <class F>
auto compiled_value_and_grad(Module& model, F loss_fn) {
  auto impl = std::make_shared<detail::CompiledModuleGrad>(model);
  return [impl, loss_fn = std::move(loss_fn)](const auto&... args) -> std::pair<Array, ParamTree> {
    static_assert((std::is_convertible_v<decltype(args), const Array&> && ...),
                  "the arguments must be Arrays");
    const detail::CompiledModuleGrad::Loss loss = [&](const std::vector<Array>& a) {
      return [&]<size_t... I>(std::index_sequence<I...>) { return Array(loss_fn(a[I]...)); }
      (std::make_index_sequence<sizeof...(args)>{});
    };
    return impl->call({Array(args)...}, loss);
  };
}

}  // namespace kiln::nn
