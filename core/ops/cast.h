#pragma once
// Conversions between dtypes and layouts.
#include "kiln/core/array.h"

namespace kiln {

/// The array converted to `dtype` (returns `a` itself when the dtype already matches).
/// Floats to ints truncate toward zero; anything nonzero becomes true.
Array astype(const Array& a, Dtype dtype, StreamOrDevice s = {});
/// A row-contiguous copy (returns `a` itself when it is already row-contiguous once evaluated).
Array contiguous(const Array& a, StreamOrDevice s = {});
/// Identity that blocks gradients: its vjp and jvp are zero.
Array stop_gradient(const Array& a, StreamOrDevice s = {});

}  // namespace kiln
