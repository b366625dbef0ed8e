#pragma once
// Gathers and scatters by integer index arrays. Negative indices count from the end; an index out
// of range throws ValueError from the op when the indices are already evaluated, and from eval
// otherwise (nothing is read or written out of bounds, and nothing is clamped).
#include "kiln/core/array.h"

namespace kiln {

/// Elements of `a` at `indices` along `axis` (NumPy take): result shape is
/// a.shape[:axis] + indices.shape + a.shape[axis+1:].
Array take(const Array& a, const Array& indices, int axis, StreamOrDevice s = {});
/// take on the flattened array.
Array take(const Array& a, const Array& indices, StreamOrDevice s = {});
/// NumPy take_along_axis: indices has a's rank and broadcasts against it except along `axis`.
Array take_along_axis(const Array& a, const Array& indices, int axis, StreamOrDevice s = {});
/// Copy of `a` with `values` written at `indices` along `axis` (the inverse of take_along_axis).
Array put_along_axis(const Array& a, const Array& indices, const Array& values, int axis,
                     StreamOrDevice s = {});
/// Copy of `a` with `updates` added at `indices` along `axis`; repeated indices accumulate.
/// updates has shape a.shape[:axis] + indices.shape + a.shape[axis+1:] (take's output shape).
Array scatter_add(const Array& a, const Array& indices, const Array& updates, int axis,
                  StreamOrDevice s = {});
/// Advanced indexing a[i0, i1, ...] with index arrays for the leading axes: the index arrays
/// broadcast together to shape B; the result has shape B + a.shape[len(indices):].
Array gather(const Array& a, const std::vector<Array>& indices, StreamOrDevice s = {});

}  // namespace kiln
