// Reverse-mode autodiff: trace fn on fresh tracer copies of the primals, then walk the traced
// graph backwards (iteratively) asking each primitive for its vjp. Nothing here names a primitive.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/primitive.h"
#include "kiln/core/transforms.h"
#include "kiln/core/transforms/trace.h"

namespace kiln {
namespace detail {

/// vjp with cotangents seeded for the first `seeded` outputs only (the rest are auxiliary).
std::pair<std::vector<Array>, std::vector<Array>> vjp_impl(
    const ArrayFn& fn, const std::vector<Array>& primals,
    const std::function<std::vector<Array>(const std::vector<Array>&)>& seed) {
  TraceScope scope;
  std::vector<Array> tracers;
  std::unordered_set<const ArrayNode*> primal_set;
  for (const Array& p : primals) {
    tracers.push_back(make_tracer(p, "vjp"));
    primal_set.insert(&tracers.back().node());
  }
  std::vector<Array> outputs = fn(tracers);
  const std::vector<Array> seeds = seed(outputs);

  std::unordered_map<const ArrayNode*, Array> cot;
  auto accumulate = [&](const Array& target, Array g) {
    auto [it, fresh] = cot.try_emplace(&target.node(), g);
    if (!fresh) it->second = add(it->second, g);
  };
  for (size_t i = 0; i < seeds.size(); ++i) accumulate(outputs[i], seeds[i]);

  const std::vector<TapeEntry> tape = build_tape(outputs, primal_set);
  // Forward: which nodes depend on a primal. Only floating nodes carry gradients: a bool mask or
  // an integer index built from a primal is flat in it (JAX's float0), so the walk stops there.
  // An integer or bool primal is flat too: its gradient is zero (jvp gives it a zero tangent).
  std::unordered_set<const ArrayNode*> depends;
  for (const Array& t : tracers)
    if (is_floating(t.dtype())) depends.insert(&t.node());
  for (const TapeEntry& e : tape) {
    if (!is_floating(e.array.dtype())) continue;
    for (const Array& in : e.inputs)
      if (depends.count(&in.node())) {
        depends.insert(&e.array.node());
        break;
      }
  }
  // Backward, in reverse topological order. A multi-output primitive runs once, at the earliest
  // of its outputs in the tape, when every consumer of every output has contributed.
  std::unordered_set<const void*> done_groups;
  for (size_t k = tape.size(); k-- > 0;) {
    const TapeEntry& e = tape[k];
    const Array& n = e.array;
    const auto& prim = e.primitive;
    if (!prim || primal_set.count(&n.node())) continue;
    // A group runs at its first output in the tape, which may be an integer output that carries
    // nothing itself (a custom function returning a value and an argmax): any float output counts.
    const bool grouped = static_cast<bool>(n.node().group);
    if (!grouped && !depends.count(&n.node())) continue;
    if (prim->has(Trait::stop_gradient)) continue;
    std::vector<Array> outs = grouped ? n.outputs() : std::vector<Array>{n};
    if (grouped &&
        std::none_of(outs.begin(), outs.end(), [&](const Array& o) { return depends.count(&o.node()) > 0; }))
      continue;
    if (outs.size() > 1 &&
        (!is_first_of_group(tape, k, outs) || !done_groups.insert(n.node().group.get()).second))
      continue;
    std::vector<Array> cots;
    bool any = false;
    for (const Array& o : outs) {
      auto it = cot.find(&o.node());
      if (it != cot.end()) {
        cots.push_back(std::move(it->second));
        cot.erase(it);  // free memory as the walk goes
        any = true;
      } else {
        cots.push_back(zeros(o.shape(), o.dtype(), prim->stream()));
      }
    }
    if (!any) continue;
    const std::vector<Array>& inputs = e.inputs;
    std::vector<int> argnums;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (depends.count(&inputs[i].node())) argnums.push_back(static_cast<int>(i));
    const std::vector<Array> grads = prim->vjp({inputs, cots, argnums, outs});
    if (grads.size() != argnums.size())
      throw RuntimeError::of("vjp", "a primitive's vjp returned the wrong number of cotangents", "{}",
                             prim->name());
    for (size_t i = 0; i < argnums.size(); ++i) {
      const Array& in = inputs[argnums[i]];
      const Array& g = grads[i];
      if (g.shape() != in.shape())
        throw RuntimeError::of("vjp", "a primitive's vjp returned a cotangent of the wrong shape",
                               "{}: {} for {}", prim->name(), shape_str(g.shape()), shape_str(in.shape()));
      accumulate(in, g);
    }
  }

  std::vector<Array> result;
  for (size_t i = 0; i < tracers.size(); ++i) {
    auto it = cot.find(&tracers[i].node());
    result.push_back(it != cot.end() ? it->second : zeros_like(primals[i]));
  }
  return {std::move(outputs), std::move(result)};
}

}  // namespace detail

std::pair<std::vector<Array>, std::vector<Array>> vjp(const ArrayFn& fn, const std::vector<Array>& primals,
                                                      const std::vector<Array>& cotangents) {
  return detail::vjp_impl(fn, primals, [&](const std::vector<Array>& outputs) {
    if (outputs.size() != cotangents.size())
      throw ValueError::of("vjp", "need one cotangent per output", "{} outputs, {} cotangents",
                           outputs.size(), cotangents.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].shape() != cotangents[i].shape())
        throw ShapeError::of("vjp", "cotangent shape differs from its output",
                             "output {} is {}, cotangent {}", i, shape_str(outputs[i].shape()),
                             shape_str(cotangents[i].shape()));
    return cotangents;
  });
}

std::function<std::pair<std::vector<Array>, std::vector<Array>>(const std::vector<Array>&)> value_and_grad(
    ArrayFn fn, std::vector<int> argnums) {
  if (argnums.empty()) throw ValueError::of("value_and_grad", "argnums must not be empty");
  return [fn = std::move(fn), argnums = std::move(argnums)](const std::vector<Array>& inputs) {
    const int n = static_cast<int>(inputs.size());
    std::vector<int> pos(argnums.size());
    for (size_t i = 0; i < argnums.size(); ++i) {
      pos[i] = argnums[i] < 0 ? argnums[i] + n : argnums[i];
      if (pos[i] < 0 || pos[i] >= n)
        throw ValueError::of("value_and_grad", "argnum out of range", "{} for {} inputs", argnums[i], n);
      for (size_t j = 0; j < i; ++j)
        if (pos[j] == pos[i]) throw ValueError::of("value_and_grad", "repeated argnum", "{}", argnums[i]);
    }
    std::vector<Array> primals;
    for (int p : pos) primals.push_back(inputs[p]);
    auto wrapped = [&](const std::vector<Array>& tracers) {
      std::vector<Array> args = inputs;
      for (size_t i = 0; i < pos.size(); ++i) args[pos[i]] = tracers[i];
      return fn(args);
    };
    return detail::vjp_impl(wrapped, primals, [](const std::vector<Array>& outputs) {
      if (outputs.empty()) throw ValueError::of("value_and_grad", "the function returned no outputs");
      const Array& loss = outputs[0];
      if (loss.size() != 1 || loss.ndim() != 0)
        throw ValueError::of("value_and_grad", "the first output must be a scalar", "got shape {}",
                             shape_str(loss.shape()));
      if (!is_floating(loss.dtype()))
        throw DtypeError::of("value_and_grad", "the first output must be a float", "got {}",
                             dtype_name(loss.dtype()));
      return std::vector<Array>{ones_like(loss)};
    });
  };
}

std::function<std::pair<Array, Array>(const Array&)> value_and_grad(ScalarFn fn) {
  auto vg = value_and_grad(
      [fn = std::move(fn)](const std::vector<Array>& x) { return std::vector<Array>{fn(x[0])}; }, {0});
  return [vg](const Array& x) {
    auto [values, grads] = vg({x});
    return std::pair<Array, Array>{values[0], grads[0]};
  };
}

ArrayFn grad(ArrayFn fn, std::vector<int> argnums) {
  auto vg = value_and_grad(std::move(fn), std::move(argnums));
  return [vg](const std::vector<Array>& x) { return vg(x).second; };
}

ScalarFn grad(ScalarFn fn) {
  auto vg = value_and_grad(std::move(fn));
  return [vg](const Array& x) { return vg(x).second; };
}

}  // namespace kiln
