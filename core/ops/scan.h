#pragma once
// Cumulative sums, products, maxima, minima and logsumexps along one axis.
#include "kiln/core/array.h"

namespace kiln {

/// Cumulative sum along `axis`: inclusive (y_i includes x_i) or exclusive (starts at 0); `reverse`
/// scans from the end. bool/int8/int16 give int32 and uint8/uint16 give uint32; a bad axis throws ShapeError.
Array cumsum(const Array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
/// Cumulative product, with the same options and dtypes. Its gradient is exact with zeros; the second
/// derivative is exact except at inputs that are exactly zero.
Array cumprod(const Array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
/// Running maximum (NumPy's maximum.accumulate, MLX's cummax) with cumsum's options; exclusive
/// scans start at the dtype's lowest value (-inf, false for bool). Every dtype, kept; NaN
/// propagates. Each output's gradient goes to the first element in scan order that reached its
/// value (argmax's first maximum); a bad axis throws ShapeError.
Array cummax(const Array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
/// Running minimum, as cummax (exclusive scans start at +inf, the dtype's highest value).
Array cummin(const Array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
/// log(cumsum(exp(a))) as a running logaddexp: stable for any spread of values (no shift by a
/// maximum); exclusive scans start at -inf. Floats keep their dtype (float32 accumulates in float64,
/// float16/bfloat16 in float32); integers and bool give float32. A bad axis throws ShapeError.
Array logcumsumexp(const Array& a, int axis, bool reverse = false, bool inclusive = true,
                   StreamOrDevice s = {});

}  // namespace kiln
