#pragma once
// Ops that rearrange elements without computing on them. Most return views (no copy).
#include <optional>

#include "kiln/core/operand.h"

namespace kiln {

/// Same elements, new shape; one dimension may be -1 (inferred). Throws ShapeError on a size mismatch.
Array reshape(const Array& a, Shape shape, StreamOrDevice s = {});
/// Permutes axes; the default reverses them.
Array transpose(const Array& a, const Axes& axes, StreamOrDevice s = {});
Array transpose(const Array& a, StreamOrDevice s = {});
Array swapaxes(const Array& a, int axis1, int axis2, StreamOrDevice s = {});
Array moveaxis(const Array& a, int source, int destination, StreamOrDevice s = {});
/// Removes size-1 axes (the given ones, or all). Throws ShapeError for an axis whose size is not 1.
Array squeeze(const Array& a, const Axes& axes, StreamOrDevice s = {});
Array squeeze(const Array& a, StreamOrDevice s = {});
Array squeeze(const Array& a, int axis, StreamOrDevice s = {});
Array expand_dims(const Array& a, const Axes& axes, StreamOrDevice s = {});
Array expand_dims(const Array& a, int axis, StreamOrDevice s = {});
Array broadcast_to(const Array& a, const Shape& shape, StreamOrDevice s = {});
/// Merges axes start_axis..end_axis (both included) into one. Nothing is clamped: both axes must
/// lie in [-ndim, ndim) (flatten(x, 1, 3) of a 3-d x throws ShapeError) and start_axis must not
/// come after end_axis (ShapeError); a 0-d array, taken as 1-d here, flattens to shape (1).
Array flatten(const Array& a, int start_axis = 0, int end_axis = -1, StreamOrDevice s = {});

/// Python slice with optional start/stop and a nonzero step; negative values count from the end.
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
};
/// Slices along each axis in order (missing trailing axes are taken whole).
Array slice(const Array& a, const std::vector<Slice>& slices, StreamOrDevice s = {});
/// a[start[i]:stop[i]:strides[i]] along every axis.
Array slice(const Array& a, const Shape& start, const Shape& stop, const Shape& strides = {},
            StreamOrDevice s = {});
/// Writes `update` into a copy of `a` at the slice; the rest of `a` is kept.
Array slice_update(const Array& a, const Array& update, const std::vector<Slice>& slices,
                   StreamOrDevice s = {});

/// Joins arrays along an existing axis; dtypes promote.
Array concatenate(const std::vector<Array>& arrays, int axis = 0, StreamOrDevice s = {});
/// Joins arrays along a new axis.
Array stack(const std::vector<Array>& arrays, int axis = 0, StreamOrDevice s = {});
/// Splits into `sections` equal parts (ValueError if they do not divide the axis).
std::vector<Array> split(const Array& a, int sections, int axis = 0, StreamOrDevice s = {});
/// Splits before each of the given indices.
std::vector<Array> split(const Array& a, const Shape& indices, int axis = 0, StreamOrDevice s = {});

/// Pads with a constant: pad_width[i] = {before, after} for axis i.
Array pad(const Array& a, const std::vector<std::pair<int64_t, int64_t>>& pad_width, const Operand& value = 0,
          StreamOrDevice s = {});
/// Repeats each element `repeats` times along `axis` (flattened input when axis is absent).
Array repeat(const Array& a, int repeats, int axis, StreamOrDevice s = {});
Array repeat(const Array& a, int repeats, StreamOrDevice s = {});
/// Tiles the whole array `reps[i]` times along each axis.
Array tile(const Array& a, const Shape& reps, StreamOrDevice s = {});

}  // namespace kiln
