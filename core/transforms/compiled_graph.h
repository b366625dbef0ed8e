#pragma once
// The graph compile caches: steps (primitive applications) wired by references to the function's
// inputs, to captured constants, or to earlier steps' outputs. Internal header.
#include <memory>
#include <vector>

#include "kiln/core/primitive.h"

namespace kiln::detail {

struct Ref {
  enum class Kind : uint8_t { input, constant, step };
  Kind kind;
  int index;       // input number, constant slot or step number
  int output = 0;  // which output of a step
  bool operator==(const Ref&) const = default;
};

struct Step {
  std::shared_ptr<const Primitive> primitive;
  std::vector<Ref> inputs;
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
};

struct CompiledGraph {
  // The inputs as traced: the function's own, then `keys` keys (uint32, shape (2,)) standing for
  // the random::next_key() draws of its trace, which every call fills with fresh keys.
  std::vector<Dtype> input_dtypes;
  std::vector<Shape> input_shapes;
  int keys = 0;
  std::vector<Step> steps;
  std::vector<Array> constants;
  std::vector<Ref> outputs;
};

/// Replaces connected elementwise steps of one shape, whose intermediates are used only inside
/// the group and are not outputs, by fused steps.
CompiledGraph fuse_elementwise(const CompiledGraph& g);

/// Builds the arrays of `g` applied to `inputs`; with `shapeless`, output shapes come from each
/// shape-polymorphic primitive's output_shapes instead of the traced shapes, and a step of any other
/// primitive whose input shapes differ from the traced ones throws ShapeError (nothing is evaluated).
std::vector<Array> replay(const CompiledGraph& g, const std::vector<Array>& inputs, bool shapeless);

}  // namespace kiln::detail
