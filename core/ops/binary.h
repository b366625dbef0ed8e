#pragma once
// Elementwise functions of two operands with NumPy broadcasting and promotion; C++ scalars are
// weak-typed (see operand.h). Each throws ShapeError if the shapes do not broadcast.
#include "kiln/core/operand.h"

namespace kiln {

Array add(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array subtract(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array multiply(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// True division: integer inputs give float32.
Array divide(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// a ** b; two bool operands compute in int8 (NumPy's result dtype for them).
Array power(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array maximum(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array minimum(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// Python-style remainder: the result has the sign of b.
Array remainder(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// floor(a / b); integer inputs stay integers.
Array floor_divide(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array arctan2(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// log(exp(a) + exp(b)) without overflow (ties and equal infinities included); integers promote
/// to float32. The gradient is exp(a - out), exp(b - out): 1/2 each at a tie, NaN where both are
/// the same infinity.
Array logaddexp(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// Bitwise and, or, xor of integer or bool operands (bool stays bool). Throws DtypeError for floats.
Array bitwise_and(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array bitwise_or(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array bitwise_xor(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// a << b and a >> b of integer operands, as NumPy's: a shift by the width of the type the
/// operands compute in (int32 for 8-bit ones) or more, or by a negative count, gives 0 (and -1 for
/// a right shift of a negative value); right shifts of signed values are arithmetic. Throws
/// DtypeError for floats and bool.
Array left_shift(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array right_shift(const Operand& a, const Operand& b, StreamOrDevice s = {});
// Comparisons and logic give bool.
Array equal(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array not_equal(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array less(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array less_equal(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array greater(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array greater_equal(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array logical_and(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array logical_or(const Operand& a, const Operand& b, StreamOrDevice s = {});

Array operator+(const Operand& a, const Operand& b);
Array operator-(const Operand& a, const Operand& b);
Array operator*(const Operand& a, const Operand& b);
Array operator/(const Operand& a, const Operand& b);
Array operator%(const Operand& a, const Operand& b);
Array operator-(const Array& a);
Array operator==(const Operand& a, const Operand& b);
Array operator!=(const Operand& a, const Operand& b);
Array operator<(const Operand& a, const Operand& b);
Array operator<=(const Operand& a, const Operand& b);
Array operator>(const Operand& a, const Operand& b);
Array operator>=(const Operand& a, const Operand& b);
Array operator&&(const Operand& a, const Operand& b);
Array operator||(const Operand& a, const Operand& b);
Array operator!(const Array& a);
Array operator&(const Operand& a, const Operand& b);
Array operator|(const Operand& a, const Operand& b);
Array operator^(const Operand& a, const Operand& b);

}  // namespace kiln
