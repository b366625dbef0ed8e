#pragma once
// Elementwise functions of one array. Float-only functions promote integer input to float32.
#include "kiln/core/array.h"

namespace kiln {

Array negative(const Array& x, StreamOrDevice s = {});
Array abs(const Array& x, StreamOrDevice s = {});
/// -1, 0 or 1 (0 for NaN's sign is NaN); gradient zero.
Array sign(const Array& x, StreamOrDevice s = {});
Array exp(const Array& x, StreamOrDevice s = {});
/// exp(x) - 1, accurate near 0.
Array expm1(const Array& x, StreamOrDevice s = {});
Array log(const Array& x, StreamOrDevice s = {});
/// log(1 + x), accurate near 0.
Array log1p(const Array& x, StreamOrDevice s = {});
Array sqrt(const Array& x, StreamOrDevice s = {});
/// 1 / sqrt(x).
Array rsqrt(const Array& x, StreamOrDevice s = {});
Array square(const Array& x, StreamOrDevice s = {});
Array sin(const Array& x, StreamOrDevice s = {});
Array cos(const Array& x, StreamOrDevice s = {});
Array tan(const Array& x, StreamOrDevice s = {});
Array tanh(const Array& x, StreamOrDevice s = {});
/// 1 / (1 + exp(-x)).
Array sigmoid(const Array& x, StreamOrDevice s = {});
Array erf(const Array& x, StreamOrDevice s = {});
/// Inverse of erf on (-1, 1); +-inf at +-1.
Array erfinv(const Array& x, StreamOrDevice s = {});
Array floor(const Array& x, StreamOrDevice s = {});
Array ceil(const Array& x, StreamOrDevice s = {});
/// Rounds half to even, as NumPy does.
Array round(const Array& x, StreamOrDevice s = {});
/// Elementwise not; the result is bool.
Array logical_not(const Array& x, StreamOrDevice s = {});
Array isnan(const Array& x, StreamOrDevice s = {});
Array isinf(const Array& x, StreamOrDevice s = {});

}  // namespace kiln
