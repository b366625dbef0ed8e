#pragma once
// Elementwise functions of one array. Float-only functions promote integer input to float32.
#include <optional>

#include "kiln/core/array.h"

namespace kiln {

Array negative(const Array& x, StreamOrDevice s = {});
/// |x|; a bool array is its own absolute value (NumPy's abs of bool).
Array abs(const Array& x, StreamOrDevice s = {});
/// -1, 0 or 1 (NaN's sign is NaN); gradient zero. Throws DtypeError for bool, as NumPy's sign does.
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
/// Rounds to `decimals` decimal places, half to even, as NumPy's round: rint(x * 10^d) / 10^d
/// (negative `decimals` round to tens, hundreds, ...). Integers are returned as they are for
/// decimals >= 0 and rounded to multiples of 10^-d otherwise. Gradient zero.
Array round(const Array& x, int decimals, StreamOrDevice s = {});
/// Elementwise not; the result is bool.
Array logical_not(const Array& x, StreamOrDevice s = {});
Array isnan(const Array& x, StreamOrDevice s = {});
Array isinf(const Array& x, StreamOrDevice s = {});
/// Neither infinite nor NaN (always true for integers and bool); the result is bool.
Array isfinite(const Array& x, StreamOrDevice s = {});
/// x == +inf / x == -inf; the result is bool.
Array isposinf(const Array& x, StreamOrDevice s = {});
Array isneginf(const Array& x, StreamOrDevice s = {});

// Inverse trigonometric and hyperbolic functions (float; integers promote to float32). Outside
// their domains (|x| > 1 for arcsin, arccos, arctanh; x < 1 for arccosh) the result is NaN; arctanh
// of +-1 is +-inf. The forms are fdlibm's (accurate near 0, no overflow for large |x|), on both
// devices.
Array arcsin(const Array& x, StreamOrDevice s = {});
Array arccos(const Array& x, StreamOrDevice s = {});
Array arctan(const Array& x, StreamOrDevice s = {});
Array sinh(const Array& x, StreamOrDevice s = {});
Array cosh(const Array& x, StreamOrDevice s = {});
Array arcsinh(const Array& x, StreamOrDevice s = {});
Array arccosh(const Array& x, StreamOrDevice s = {});
Array arctanh(const Array& x, StreamOrDevice s = {});
/// Logarithms in base 2 and 10; integers promote to float32. log2 is exact at powers of 2 on both
/// devices, log10 at powers of 10 on the CPU (within 2 ulp of them on the GPU).
Array log2(const Array& x, StreamOrDevice s = {});
Array log10(const Array& x, StreamOrDevice s = {});
/// Radians to degrees (x * 180 / pi) and back; integers promote to float32.
Array degrees(const Array& x, StreamOrDevice s = {});
Array radians(const Array& x, StreamOrDevice s = {});
/// 1 / x; integers promote to float32 (as true division).
Array reciprocal(const Array& x, StreamOrDevice s = {});
/// NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (absent: the dtype's largest and
/// lowest finite values), as NumPy's nan_to_num. Integer and bool arrays are returned as they are.
/// The gradient passes where x was finite.
Array nan_to_num(const Array& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                 std::optional<double> neginf = std::nullopt, StreamOrDevice s = {});
/// Bitwise not of an integer array; logical not of a bool array (NumPy's invert). Throws DtypeError
/// for floats.
Array bitwise_invert(const Array& x, StreamOrDevice s = {});
Array operator~(const Array& x);

}  // namespace kiln
