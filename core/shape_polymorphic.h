#pragma once
// The shape-polymorphic primitive trait, which shapeless compile relies on (core/compile.h).
#include "kiln/core/primitive.h"

namespace kiln {

/// A trait (Primitive::traits()) of a primitive whose parameters hold no absolute size or position
/// (axes, flags, scales, epsilons are fine; a target shape, slice bounds, a pad width, a sample
/// shape are not): applied to inputs of other shapes of the same ranks, it computes what the op
/// that made it would have computed for them, and output_shapes() gives its output shapes. A
/// shapeless compiled function re-derives the shapes of such steps on new input shapes and rejects
/// new shapes that reach any other step. Elementwise primitives (Trait::elementwise) have it
/// implicitly.
inline constexpr Trait shape_polymorphic_trait = Trait::shape_polymorphic;

/// Whether `p` has shape_polymorphic_trait or Trait::elementwise.
inline bool is_shape_polymorphic(const Primitive& p) {
  return p.has(shape_polymorphic_trait) || p.has(Trait::elementwise);
}

}  // namespace kiln
