#pragma once
// Functions that transforms treat as one node: checkpoint (recompute in the backward pass) and
// custom_function / custom_vjp (user rules for vjp, jvp and vmap). See docs/transforms.md.
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kiln/core/primitive.h"
#include "kiln/core/transforms.h"

namespace kiln {

/// A vjp rule: (primals, outputs, cotangents of the outputs) -> one cotangent per primal, each of
/// its primal's shape (converted to the primal's dtype if it differs). An empty Array means zero.
using CustomVjpFn =
    std::function<std::vector<Array>(const std::vector<Array>& primals, const std::vector<Array>& outputs,
                                     const std::vector<Array>& cotangents)>;
/// A jvp rule: (primals, tangents: one per primal, zeros for primals not differentiated) -> one
/// tangent per output, each of its output's shape. Must be linear in the tangents. An empty Array
/// means zero.
using CustomJvpFn =
    std::function<std::vector<Array>(const std::vector<Array>& primals, const std::vector<Array>& tangents)>;
/// A batching rule: (inputs, axes: the batch axis of each input, -1 if not batched) -> {outputs,
/// the batch axis of each output (-1: the same for every example)}.
using CustomVmapFn = std::function<std::pair<std::vector<Array>, std::vector<int>>(
    const std::vector<Array>& inputs, const std::vector<int>& axes)>;

/// fn as one graph node that keeps no intermediates: the backward pass runs fn again (so fn should
/// be pure). Arrays fn closes over are constants to the transforms; pass what they should see as
/// inputs. Throws ValueError if fn is empty, or when called, if an input is empty or fn returns none.
ArrayFn checkpoint(ArrayFn fn);

namespace detail {
struct CustomRules;
}  // namespace detail

/// fn with optional user rules for vjp, jvp and vmap; immutable, so `.vjp(rule)` etc. return a copy.
/// A missing rule transforms fn instead (vjp: the jvp rule transposed if there is one); vmap keeps
/// the other rules, batched. As for checkpoint, closed-over arrays are constants. Callable from
/// many threads when fn and the rules are.
class CustomFunction {
 public:
  /// Throws ValueError if fn is empty.
  explicit CustomFunction(ArrayFn fn);
  /// A copy whose vjp is `rule` (replacing any earlier one). Throws ValueError if rule is empty.
  [[nodiscard]] CustomFunction vjp(CustomVjpFn rule) const;
  /// A copy whose jvp is `rule`; also used, transposed, for vjp when no vjp rule is given.
  [[nodiscard]] CustomFunction jvp(CustomJvpFn rule) const;
  /// A copy whose batching rule is `rule`.
  [[nodiscard]] CustomFunction vmap(CustomVmapFn rule) const;
  /// fn's outputs, as one node of the graph carrying the rules. Throws ValueError if an input is
  /// empty or fn returns no outputs; a rule's wrong output count or shape is a ValueError or
  /// ShapeError from the transform that calls it.
  std::vector<Array> operator()(const std::vector<Array>& inputs) const;

 private:
  explicit CustomFunction(std::shared_ptr<const detail::CustomRules> rules) : rules_(std::move(rules)) {}
  std::shared_ptr<const detail::CustomRules> rules_;
};

/// A CustomFunction with no rules yet.
CustomFunction custom_function(ArrayFn fn);
/// fn with the vjp `vjp_fn` (custom_function(fn).vjp(vjp_fn)). jvp and vmap fall back to fn's.
ArrayFn custom_vjp(ArrayFn fn, CustomVjpFn vjp_fn);

namespace detail {
// Shared by the primitives behind checkpoint and custom_function, which stand for a whole function.

/// fn(inputs), checking that every output is a valid array; `op` names the caller in errors.
std::vector<Array> call_function(const ArrayFn& fn, const std::vector<Array>& inputs, const char* op);
/// An eval_cpu body: evaluates fn on the (available) inputs and makes each output a view of it.
void eval_function(const ArrayFn& fn, const char* op, std::span<const Array> inputs,
                   std::span<Array> outputs);
/// Cotangents of args.primals[args.argnums] through fn: vjp of fn, which traces fn again.
std::vector<Array> vjp_of_function(const ArrayFn& fn, const VjpArgs& args);
/// Tangents of fn's outputs for args.tangents (one per entry of args.argnums): jvp of fn.
std::vector<Array> jvp_of_function(const ArrayFn& fn, const JvpArgs& args);
}  // namespace detail

}  // namespace kiln
