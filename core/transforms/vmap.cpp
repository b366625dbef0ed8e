// Batching: trace fn on one example of each batched input, then replay the traced graph on the
// whole batch, asking each primitive that touches batched data for its batching rule. There is
// no fallback to a loop: a primitive without a rule is an error that names it.
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/transforms.h"
#include "kiln/core/transforms/trace.h"

namespace kiln {
namespace {

struct Batched {
  Array value;
  int axis;
};

}  // namespace

ArrayFn vmap(ArrayFn fn, std::vector<int> in_axes, std::vector<int> out_axes) {
  for (size_t i = 0; i < in_axes.size(); ++i)
    if (in_axes[i] < -1)
      throw ValueError::of("vmap", "in_axes entries are axes >= 0, or -1 for an unbatched input",
                           "in_axes[{}] is {}", i, in_axes[i]);
  return [fn = std::move(fn), in_axes = std::move(in_axes),
          out_axes = std::move(out_axes)](const std::vector<Array>& inputs) {
    const size_t n = inputs.size();
    if (!in_axes.empty() && in_axes.size() != n)
      throw ValueError::of("vmap", "in_axes needs one entry per input", "{} entries for {} inputs",
                           in_axes.size(), n);
    int64_t batch = -1;
    std::vector<int> axes(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (!inputs[i].valid())
        throw ValueError::of("vmap", "an input is an empty (default-constructed) array");
      const int a = in_axes.empty() ? 0 : in_axes[i];
      if (a == -1) {  // -1 means "not batched" (JAX's None), so axes count from the front only
        axes[i] = -1;
        continue;
      }
      if (a < 0 || a >= inputs[i].ndim())
        throw ValueError::of("vmap", "in_axes entry out of range", "{} for input {} of shape {}", a, i,
                             shape_str(inputs[i].shape()));
      axes[i] = a;
      const int64_t b = inputs[i].shape(axes[i]);
      if (batch >= 0 && b != batch)
        throw ValueError::of("vmap", "batched inputs disagree on the batch size", "{} and {}", batch, b);
      batch = b;
    }
    if (batch < 0) throw ValueError::of("vmap", "no input is batched (every in_axes entry is -1)");

    // Trace on example 0 of every batched input; unbatched inputs enter as themselves.
    detail::TraceScope scope;
    std::vector<Array> tracers;
    std::unordered_set<const detail::ArrayNode*> stop;
    std::unordered_map<const detail::ArrayNode*, Batched> batched;
    for (size_t i = 0; i < n; ++i) {
      if (axes[i] < 0) {
        tracers.push_back(inputs[i]);
        continue;
      }
      tracers.push_back(detail::make_tracer(take(inputs[i], Array(0), axes[i]), "vmap"));
      stop.insert(&tracers.back().node());
      batched.emplace(&tracers.back().node(), Batched{inputs[i], axes[i]});
    }
    const std::vector<Array> outputs = fn(tracers);
    if (!out_axes.empty() && out_axes.size() != outputs.size())
      throw ValueError::of("vmap", "out_axes needs one entry per output", "{} entries for {} outputs",
                           out_axes.size(), outputs.size());

    // Replay in topological order on the batch.
    const std::vector<detail::TapeEntry> tape = detail::build_tape(outputs, stop);
    for (const detail::TapeEntry& e : tape) {
      if (!e.primitive || batched.count(&e.array.node())) continue;
      bool any = false;
      std::vector<Array> in;
      std::vector<int> in_ax;
      for (const Array& x : e.inputs) {
        auto it = batched.find(&x.node());
        if (it != batched.end()) {
          any = true;
          in.push_back(it->second.value);
          in_ax.push_back(it->second.axis);
        } else {
          in.push_back(x);
          in_ax.push_back(-1);
        }
      }
      if (!any) continue;
      VmapResult r = e.primitive->vmap({in, in_ax});
      std::vector<Array> outs = e.array.node().group ? e.array.outputs() : std::vector<Array>{e.array};
      if (r.outputs.size() != outs.size() || r.axes.size() != outs.size())
        throw RuntimeError::of("vmap", "a primitive's batching rule returned the wrong number of outputs",
                               "{}", e.primitive->name());
      for (size_t j = 0; j < outs.size(); ++j)
        if (r.axes[j] >= 0) batched.emplace(&outs[j].node(), Batched{std::move(r.outputs[j]), r.axes[j]});
    }

    std::vector<Array> result;
    for (size_t j = 0; j < outputs.size(); ++j) {
      auto it = batched.find(&outputs[j].node());
      Array out;
      int axis = 0;
      if (it != batched.end()) {
        out = it->second.value;
        axis = it->second.axis;
      } else {  // independent of the batch: every example gets the same value
        Shape shape = outputs[j].shape();
        shape.insert(shape.begin(), batch);
        out = broadcast_to(expand_dims(outputs[j], 0), shape);
      }
      const int requested = out_axes.empty() ? 0 : out_axes[j];
      if (requested < -out.ndim() || requested >= out.ndim())
        throw ValueError::of("vmap", "out_axes entry out of range",
                             "out_axes[{}] is {} for an output of shape {}", j, requested,
                             shape_str(out.shape()));
      const int target = requested < 0 ? requested + out.ndim() : requested;
      result.push_back(axis == target ? out : moveaxis(out, axis, target));
    }
    return result;
  };
}

ScalarFn vmap(ScalarFn fn, int in_axis, int out_axis) {
  auto v = vmap([fn = std::move(fn)](const std::vector<Array>& x) { return std::vector<Array>{fn(x[0])}; },
                {in_axis}, {out_axis});
  return [v](const Array& x) { return v({x})[0]; };
}

}  // namespace kiln
