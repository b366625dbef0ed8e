#include "kiln/core/transforms/trace.h"

#include <mutex>

#include "kiln/core/shape_polymorphic.h"

namespace kiln::detail {
namespace {

// The node a transform traces from: a view of the primal, so the walk can stop exactly here.
class TraceInput final : public PrimitiveWithParams<TraceInput> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "TraceInput"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].set_view(in[0], in[0].strides(), 0);
  }
  // The same view on the GPU: a tracer on the primal's device never makes eval submit the GPU's
  // work early for a CPU step that reads nothing (and keeps a compiled GPU step capturable).
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override { return {a.cotangents[0]}; }
  std::vector<Array> jvp(const JvpArgs& a) const override { return {a.tangents[0]}; }
  VmapResult vmap(const VmapArgs& a) const override { return {{a.inputs[0]}, {a.axes[0]}}; }
};

}  // namespace

Array make_tracer(const Array& p, const char* transform) {
  if (!p.valid()) throw ValueError::of(transform, "a primal is an empty (default-constructed) array");
  // One read of the primitive: an asynchronous evaluation may detach p between two.
  const std::shared_ptr<const Primitive> primitive = p.primitive();
  const Device device = primitive ? primitive->device() : default_device();
  Array t = Array::make(p.shape(), p.dtype(), std::make_shared<TraceInput>(default_stream(device)), {p});
  t.node().tracer = true;
  return t;
}

std::vector<TapeEntry> build_tape(const std::vector<Array>& outputs,
                                  const std::unordered_set<const ArrayNode*>& stop) {
  std::vector<TapeEntry> tape;
  std::unordered_set<const ArrayNode*> seen;
  struct Frame {
    TapeEntry entry;
    bool expanded;
  };
  std::vector<Frame> stack;
  for (const Array& o : outputs) stack.push_back({{o, {}, nullptr}, false});
  while (!stack.empty()) {
    if (stack.back().expanded) {
      tape.push_back(std::move(stack.back().entry));
      stack.pop_back();
      continue;
    }
    Frame f = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(&f.entry.array.node()).second) continue;
    const bool is_primal = stop.count(&f.entry.array.node()) > 0;
    if (!is_primal) {
      std::lock_guard lock(f.entry.array.node().lock);
      f.entry.inputs = f.entry.array.node().inputs;
      f.entry.primitive = f.entry.array.node().primitive;
    }
    f.expanded = true;
    stack.push_back(std::move(f));
    // Indexed, not by reference: pushing may move the frame.
    const size_t top = stack.size() - 1;
    for (size_t i = stack[top].entry.inputs.size(); i-- > 0;) {
      Array in = stack[top].entry.inputs[i];
      if (!seen.count(&in.node())) stack.push_back({{std::move(in), {}, nullptr}, false});
    }
  }
  return tape;
}

bool is_first_of_group(const std::vector<TapeEntry>& tape, size_t k, const std::vector<Array>& outputs) {
  for (size_t j = 0; j < k; ++j)
    for (const Array& o : outputs)
      if (&tape[j].array.node() == &o.node()) return false;
  return true;
}

}  // namespace kiln::detail
