// Forward-mode autodiff: trace fn on tracer copies of the primals, then walk the traced graph in
// topological order asking each primitive that depends on a primal for its jvp.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/ops/creation.h"
#include "kiln/core/transforms.h"
#include "kiln/core/transforms/trace.h"

namespace kiln {

std::pair<std::vector<Array>, std::vector<Array>> jvp(const ArrayFn& fn, const std::vector<Array>& primals,
                                                      const std::vector<Array>& tangents) {
  if (primals.size() != tangents.size())
    throw ValueError::of("jvp", "need one tangent per primal", "{} primals, {} tangents", primals.size(),
                         tangents.size());
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!tangents[i].valid())
      throw ValueError::of("jvp", "a tangent is an empty (default-constructed) array");
    if (primals[i].valid() && primals[i].shape() != tangents[i].shape())
      throw ShapeError::of("jvp", "tangent shape differs from its primal", "primal {} is {}, tangent {}", i,
                           shape_str(primals[i].shape()), shape_str(tangents[i].shape()));
  }
  detail::TraceScope scope;
  std::vector<Array> tracers;
  std::unordered_set<const detail::ArrayNode*> primal_set;
  std::unordered_map<const detail::ArrayNode*, Array> tan;
  for (size_t i = 0; i < primals.size(); ++i) {
    tracers.push_back(detail::make_tracer(primals[i], "jvp"));
    primal_set.insert(&tracers.back().node());
    // Only floats carry tangents (JAX's float0): an integer or bool primal's tangent is zero, and
    // so is the tangent of every integer or bool value (astype(x, int32) included), as in vjp.
    if (is_floating(tracers.back().dtype())) tan.emplace(&tracers.back().node(), tangents[i]);
  }
  std::vector<Array> outputs = fn(tracers);

  const std::vector<detail::TapeEntry> tape = detail::build_tape(outputs, primal_set);
  std::unordered_set<const void*> done_groups;
  for (size_t k = 0; k < tape.size(); ++k) {
    const detail::TapeEntry& e = tape[k];
    if (!e.primitive || primal_set.count(&e.array.node()) || tan.count(&e.array.node())) continue;
    std::vector<int> argnums;
    std::vector<Array> in_tangents;
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      auto it = tan.find(&e.inputs[i].node());
      if (it == tan.end()) continue;
      argnums.push_back(static_cast<int>(i));
      in_tangents.push_back(it->second);
    }
    if (argnums.empty()) continue;
    std::vector<Array> outs = e.array.node().group ? e.array.outputs() : std::vector<Array>{e.array};
    if (outs.size() > 1 && !done_groups.insert(e.array.node().group.get()).second) continue;
    const bool any_float =
        std::any_of(outs.begin(), outs.end(), [](const Array& o) { return is_floating(o.dtype()); });
    if (e.primitive->has(Trait::stop_gradient) || !any_float) {
      for (const Array& o : outs) tan.emplace(&o.node(), zeros_like(o));
      continue;
    }
    std::vector<Array> out_tangents = e.primitive->jvp({e.inputs, in_tangents, argnums});
    if (out_tangents.size() != outs.size())
      throw RuntimeError::of("jvp", "a primitive's jvp returned the wrong number of tangents", "{}",
                             e.primitive->name());
    for (size_t j = 0; j < outs.size(); ++j) {
      if (out_tangents[j].shape() != outs[j].shape())
        throw RuntimeError::of("jvp", "a primitive's jvp returned a tangent of the wrong shape",
                               "{}: {} for {}", e.primitive->name(), shape_str(out_tangents[j].shape()),
                               shape_str(outs[j].shape()));
      tan.emplace(&outs[j].node(),
                  is_floating(outs[j].dtype()) ? std::move(out_tangents[j]) : zeros_like(outs[j]));
    }
  }

  std::vector<Array> result;
  for (const Array& o : outputs) {
    auto it = tan.find(&o.node());
    result.push_back(it != tan.end() ? it->second : zeros_like(o));
  }
  return {std::move(outputs), std::move(result)};
}

}  // namespace kiln
