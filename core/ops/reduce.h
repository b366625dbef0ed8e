#pragma once
// Reductions over any set of axes (all axes when none are given), with keepdims. Axes may be
// negative; an out-of-range or repeated axis throws ShapeError. An explicit empty axis list reduces
// nothing (NumPy's axis=()). Integer and bool inputs get a zero gradient.
#include "kiln/core/array.h"

namespace kiln {

/// Sum; bool/int8/int16 and uint8/uint16 accumulate into int32 and uint32 (NumPy-like), floats keep their
/// dtype (float16/bfloat16/float32 accumulate in float32, pairwise). Integer sums wrap on overflow.
Array sum(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array sum(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array sum(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Mean; integer input gives float32. Divides in the accumulator, so float16 means do not overflow.
Array mean(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array mean(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array mean(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Product, with sum's result dtypes. Its gradient (the product of the other elements) is exact
/// with zeros.
Array prod(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array prod(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array prod(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Max/min; throw ValueError when reducing an empty axis. NaN propagates. The gradient is split
/// equally among tied extremes (as JAX).
Array max(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array max(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array max(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array min(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array min(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array min(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Index (int32) of the first max/min along one axis (the flattened array when axis is absent);
/// the first NaN counts as the extreme. Throws ValueError for an empty axis.
Array argmax(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array argmax(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array argmin(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array argmin(const Array& a, bool keepdims = false, StreamOrDevice s = {});
/// Variance with `ddof` delta degrees of freedom (0: population); inf (NaN for zero spread) when
/// ddof leaves no freedom. Integer input gives float32; float16/bfloat16 compute in float32.
Array var(const Array& a, const Axes& axes, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
Array var(const Array& a, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
Array std(const Array& a, const Axes& axes, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
Array std(const Array& a, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
/// log(sum(exp(a))) computed stably (shifted by the max); -inf over an empty axis.
Array logsumexp(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array logsumexp(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array logsumexp(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Logical reductions; the result is bool.
Array all(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array all(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array any(const Array& a, const Axes& axes, bool keepdims = false, StreamOrDevice s = {});
Array any(const Array& a, bool keepdims = false, StreamOrDevice s = {});
/// softmax / log_softmax along the given axes (the last axis by default), computed stably; integer
/// input gives float32, float16/bfloat16 compute in float32.
Array softmax(const Array& a, const Axes& axes, StreamOrDevice s = {});
Array softmax(const Array& a, int axis = -1, StreamOrDevice s = {});
Array log_softmax(const Array& a, const Axes& axes, StreamOrDevice s = {});
Array log_softmax(const Array& a, int axis = -1, StreamOrDevice s = {});

/// Sums `a` down to `shape` (the inverse of broadcasting `shape` up to a.shape()); used by vjps.
/// Returns `a` itself when the shapes are equal and keeps a's dtype. Throws ShapeError if a.shape()
/// is not a broadcast of `shape`.
Array sum_to_shape(const Array& a, const Shape& shape, StreamOrDevice s = {});

}  // namespace kiln
