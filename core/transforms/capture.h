#pragma once
// compile's GPU replay (Vulkan's CUDA-graph analogue): a compiled graph whose steps all run on the
// GPU is recorded once into a captured program; later calls with the same input shapes copy their
// inputs into the program's input slots, replay it, and copy its outputs out into fresh arrays.
// Internal header.
#include <memory>
#include <vector>

#include "kiln/core/transforms/compiled_graph.h"
#include "kiln/core/vulkan/gpu_capture.h"

namespace kiln::detail {

struct CapturedGraph {
  std::shared_ptr<const gpu::CapturedProgram> program;
  std::vector<int> used_inputs;  // the inputs the steps read, in slot order
  std::vector<Array> slots_in;   // one per used input: the storage the program reads
  std::vector<Array> slots_out;  // the storage the program leaves each step output in
  std::vector<int> output_slot;  // per graph output: its index in slots_out, -1 when not a step's
  std::vector<Shape> input_shapes;
};

/// Whether g may be captured: every step runs on the GPU and none is a host callback.
bool capturable(const CompiledGraph& g);

/// Records g applied to inputs of these shapes and dtypes into a captured program (nothing runs);
/// `shapeless` as for replay(). Throws when the graph cannot be captured (a step that reads GPU
/// values on the host, no device): compile then keeps replaying it step by step.
std::shared_ptr<const CapturedGraph> capture_graph(const CompiledGraph& g, const std::vector<Array>& inputs,
                                                   bool shapeless);

/// The outputs of g for `inputs` (shapes as captured) computed by one replay of the program: lazy
/// arrays, as replay() returns.
std::vector<Array> replay_captured(const std::shared_ptr<const CapturedGraph>& c, const CompiledGraph& g,
                                   const std::vector<Array>& inputs);

}  // namespace kiln::detail
