#pragma once
// Cumulative sums and products along one axis.
#include "kiln/core/array.h"

namespace kiln {

/// Cumulative sum along `axis`: inclusive (y_i includes x_i) or exclusive (starts at 0); `reverse`
/// scans from the end. bool/int8 give int32 and uint8 gives uint32; a bad axis throws ShapeError.
Array cumsum(const Array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
/// Cumulative product, with the same options and dtypes. Its gradient is exact with zeros; the second
/// derivative is exact except at inputs that are exactly zero.
Array cumprod(const Array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});

}  // namespace kiln
