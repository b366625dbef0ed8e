#pragma once
// Internal helpers shared by the shape and index families (slice.cpp, shape_join.cpp, index.cpp).
#include "kiln/core/ops/shape.h"

namespace kiln::detail {

/// Throws ValueError naming `op` when `a` is a default-constructed handle.
void check_array(const char* op, const Array& a);

/// A strided view a[starts[i] :: steps[i]] with `shape` elements per axis; starts and steps are
/// already normalized (in range, nonzero), one per axis.
Array slice_view(const Array& a, const Shape& starts, const Shape& steps, const Shape& shape,
                 StreamOrDevice s);
/// Copy of `a` with `update` (exactly the slice's shape and a's dtype) written at the normalized slice.
Array slice_update_view(const Array& a, const Array& update, const Shape& starts, const Shape& steps,
                        StreamOrDevice s);

/// `x` with its batch axis (or -1: none) moved to the front; an unbatched `x` gets a leading
/// axis of size `batch` (broadcast, no copy).
Array batch_front(const Array& x, int axis, int64_t batch, StreamOrDevice s);
/// The batch size of the first batched input of a vmap call.
int64_t batch_size(std::span<const Array> inputs, std::span<const int> axes);

}  // namespace kiln::detail
