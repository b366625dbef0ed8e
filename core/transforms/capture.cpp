// compile's GPU replay: see capture.h.
#include "kiln/core/transforms/capture.h"

#include <algorithm>

#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln::detail {
namespace {

// Storage for one input slot: device memory of the input's shape, contents undefined until a
// replay copies the input in.
class CaptureSlot final : public PrimitiveWithParams<CaptureSlot> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "CaptureSlot"; }
  auto params() const { return std::tuple<>(); }
  void eval_cpu(std::span<const Array>, std::span<Array>) const override {
    throw RuntimeError::of("compile", "a GPU capture slot was evaluated on the CPU");
  }
  void eval_gpu(std::span<const Array>, std::span<Array> outputs) const override {
    gpu::allocate(outputs[0]);
  }
};

// One replay of a captured graph: its inputs are the call's inputs the graph reads, its outputs
// the graph's step outputs.
class CapturedStep final : public Primitive {
 public:
  CapturedStep(Stream stream, std::shared_ptr<const CapturedGraph> graph)
      : Primitive(stream), graph_(std::move(graph)) {}
  const char* name() const override { return "CapturedStep"; }
  void eval_cpu(std::span<const Array>, std::span<Array>) const override {
    throw RuntimeError::of("compile", "a captured GPU step was evaluated on the CPU");
  }
  void eval_gpu(std::span<const Array> inputs, std::span<Array> outputs) const override {
    gpu::run_captured(graph_->program, inputs, graph_->slots_in, graph_->slots_out, outputs);
  }
  bool is_equivalent(const Primitive& other) const override { return &other == this; }

 private:
  std::shared_ptr<const CapturedGraph> graph_;
};

std::vector<int> used_inputs(const CompiledGraph& g) {
  std::vector<int> used;
  for (const Step& s : g.steps)
    for (const Ref& r : s.inputs)
      if (r.kind == Ref::Kind::input) used.push_back(r.index);
  std::ranges::sort(used);
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

}  // namespace

bool capturable(const CompiledGraph& g) {
  if (g.steps.empty()) return false;
  return std::ranges::all_of(g.steps, [](const Step& s) {
    return s.primitive->device().type == Device::Type::gpu && !s.primitive->has(Trait::side_effect);
  });
}

std::shared_ptr<const CapturedGraph> capture_graph(const CompiledGraph& g, const std::vector<Array>& inputs,
                                                   bool shapeless) {
  auto c = std::make_shared<CapturedGraph>();
  const Stream gpu_stream = default_stream(Device::gpu);
  // Constants are computed once, outside the program (a weight the function closed over).
  eval(g.constants);
  c->used_inputs = used_inputs(g);
  std::vector<Array> args = inputs;
  for (int i : c->used_inputs) {
    const Array& x = inputs[static_cast<size_t>(i)];
    c->slots_in.push_back(Array::make(x.shape(), x.dtype(), std::make_shared<CaptureSlot>(gpu_stream), {}));
    args[static_cast<size_t>(i)] = c->slots_in.back();
  }
  eval(c->slots_in);
  for (const Array& x : inputs) c->input_shapes.push_back(x.shape());

  const std::vector<Array> outputs = replay(g, args, shapeless);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (g.outputs[k].kind != Ref::Kind::step) {
      c->output_slot.push_back(-1);
      continue;
    }
    c->output_slot.push_back(static_cast<int>(c->slots_out.size()));
    c->slots_out.push_back(outputs[k]);
  }
  c->program = capture_eval(c->slots_out);
  return c;
}

std::vector<Array> replay_captured(const std::shared_ptr<const CapturedGraph>& c, const CompiledGraph& g,
                                   const std::vector<Array>& inputs) {
  std::vector<Array> step_outputs;
  if (!c->slots_out.empty()) {
    std::vector<Array> args;
    for (int i : c->used_inputs) args.push_back(inputs[static_cast<size_t>(i)]);
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
    for (const Array& s : c->slots_out) {
      shapes.push_back(s.shape());
      dtypes.push_back(s.dtype());
    }
    step_outputs =
        Array::make_many(std::move(shapes), std::move(dtypes),
                         std::make_shared<CapturedStep>(default_stream(Device::gpu), c), std::move(args));
  }
  std::vector<Array> out;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Ref& r = g.outputs[k];
    if (c->output_slot[k] >= 0)
      out.push_back(step_outputs[static_cast<size_t>(c->output_slot[k])]);
    else if (r.kind == Ref::Kind::input)
      out.push_back(inputs[static_cast<size_t>(r.index)]);
    else
      out.push_back(g.constants[static_cast<size_t>(r.index)]);
  }
  return out;
}

}  // namespace kiln::detail
