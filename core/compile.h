#pragma once
// compile: trace a function once per input signature and replay the simplified, fused graph.
#include <cstdint>
#include <memory>

#include "kiln/core/transforms.h"

namespace kiln {

namespace detail {
struct CompileState;
}

/// A compiled function. Call it like the function it wraps; copies share one cache, which is
/// guarded, so one CompiledFunction may be called from many threads at once.
class CompiledFunction {
 public:
  explicit CompiledFunction(std::shared_ptr<detail::CompileState> state) : state_(std::move(state)) {}
  std::vector<Array> operator()(const std::vector<Array>& inputs) const;
  /// How many times the wrapped function has been run to trace it.
  int64_t trace_count() const;
  /// How many graphs have been built (simplified, fused) and cached.
  int64_t compile_count() const;
  /// How many GPU programs have been captured for replay (see compile()).
  int64_t capture_count() const;

 private:
  std::shared_ptr<detail::CompileState> state_;
};

/// Compiles `fn`. The first call with a given input signature (shapes and dtypes) traces fn on
/// placeholders; the graph is simplified (common subexpressions, duplicate scalar constants) and
/// chains of elementwise ops are fused into one primitive that makes a single pass over memory.
/// Later calls with that signature replay the cached graph without running fn. With `shapeless`,
/// one graph serves every shape of the same dtypes and ranks: a new shape is checked by tracing once
/// more and comparing graphs, and a function whose graph depends on its input shapes throws
/// ShapeError instead of giving wrong results. A function that reads its inputs' values while
/// traced (item, data, eval) throws ValueError. Compiled functions work under grad, vjp, jvp and vmap.
///
/// On the GPU, a graph whose steps all run there is also recorded once, on its second call with a
/// signature, into a captured command buffer (a CUDA graph's analogue): later calls with the same
/// input shapes record only the copy of their inputs in, one execution of that buffer and the copy
/// of the outputs out, instead of every kernel. Results are bit for bit those of the step-by-step
/// replay. The captured program keeps its intermediate buffers for the compiled function's
/// lifetime. KILN_COMPILE_CAPTURE=0 turns it off.
CompiledFunction compile(ArrayFn fn, bool shapeless = false);

}  // namespace kiln
