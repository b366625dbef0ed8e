#pragma once
// compile: trace a function once per input signature and replay the simplified, fused graph.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ranges>
#include <span>
#include <type_traits>

#include "kiln/core/transforms.h"

namespace kiln {

namespace detail {
struct CompileState;
/// A contiguous range of a kiln scalar type whose elements may be written and which outlives the
/// expression it appears in: a std::span<float>, a std::vector<int32_t>&, a C array.
template <class R>
concept WritableScalarRange = std::ranges::contiguous_range<R> && std::ranges::borrowed_range<R> &&
    Scalar<std::ranges::range_value_t<R>> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;
}  // namespace detail

/// Caller-owned host memory that CompiledFunction::call_into writes one output into: the output's
/// values in row-major order, in its dtype. Made from any writable contiguous range of a kiln scalar
/// type (std::span<float>, std::vector<int32_t>&, a C array: its dtype is dtype_of<T>()), or from raw
/// bytes with a dtype. It only points at the memory, which must outlive the call.
class OutputSpan {
 public:
  template <detail::WritableScalarRange R>
  OutputSpan(R&& values)  // NOLINT: implicit, so a span or a vector can be passed as it is
      : data_(std::ranges::data(values)),
        bytes_(std::ranges::size(values) * sizeof(std::ranges::range_value_t<R>)),
        dtype_(dtype_of<std::ranges::range_value_t<R>>()) {}
  /// `bytes` bytes at `data` holding values of `dtype`.
  OutputSpan(void* data, size_t bytes, Dtype dtype) : data_(data), bytes_(bytes), dtype_(dtype) {}

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Dtype dtype() const { return dtype_; }

 private:
  void* data_;
  size_t bytes_;
  Dtype dtype_;
};

/// A compiled function. Call it like the function it wraps; copies share one cache, which is
/// guarded, so one CompiledFunction may be called from many threads at once.
class CompiledFunction {
 public:
  explicit CompiledFunction(std::shared_ptr<detail::CompileState> state) : state_(std::move(state)) {}
  std::vector<Array> operator()(const std::vector<Array>& inputs) const;
  /// The serving loop's fast path: calls the function on `inputs` (by position, as operator() does),
  /// evaluates it and writes output i's values into outputs[i]. Once the input signature is cached
  /// a call allocates no host buffer for the outputs beyond the graph's own: on the GPU each output
  /// is copied from device memory straight into its span (no host copy of the array is made); on the
  /// CPU it is computed in the allocator's cached blocks and copied. The values are bit for bit those
  /// of operator()'s outputs. Throws ValueError when outputs.size() differs from the number of
  /// outputs or a span's size in bytes from its output's, DtypeError when a span's dtype differs;
  /// these are checked before anything is computed or written. Like operator(), it may be called
  /// from many threads at once, each with its own spans.
  void call_into(const std::vector<Array>& inputs, std::span<const OutputSpan> outputs) const;
  void call_into(const std::vector<Array>& inputs, std::initializer_list<OutputSpan> outputs) const {
    call_into(inputs, std::span<const OutputSpan>(outputs.begin(), outputs.size()));
  }
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
/// fn is traced once per dtypes and ranks and that graph serves every shape: a new shape is
/// inferred through it step by step (each shape-polymorphic primitive's output_shapes, see
/// core/shape_polymorphic.h), and a call whose new shapes reach a step that holds traced sizes (a
/// reshape or broadcast to a fixed shape, fixed slice bounds, a random sample's shape) throws
/// ShapeError naming that step, before anything is computed. Sizes fn reads on the host and bakes
/// into a constant (a scale 1 / x.shape(0), zeros(x.shape())) are not seen: docs/transforms.md.
/// A function that reads its inputs' values while traced (item, data, eval) throws ValueError.
/// Each key fn draws from the default sequence (random::next_key(): dropout in training mode) is an
/// implicit input: every call draws fresh keys, the ones fn would draw uncompiled, so a compiled
/// and an uncompiled loop from one seed give the same numbers. Compiled functions work under grad,
/// vjp, jvp and vmap.
///
/// On the GPU, a graph whose steps all run there is also recorded once, on its second call with a
/// signature, into a captured command buffer (a CUDA graph's analogue): later calls with the same
/// input shapes record only the copy of their inputs in, one execution of that buffer and the copy
/// of the outputs out, instead of every kernel. Results are bit for bit those of the step-by-step
/// replay. The captured program keeps its intermediate buffers for the compiled function's
/// lifetime. KILN_COMPILE_CAPTURE=0 turns it off.
CompiledFunction compile(ArrayFn fn, bool shapeless = false);

}  // namespace kiln
