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
Array power(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array maximum(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array minimum(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// Python-style remainder: the result has the sign of b.
Array remainder(const Operand& a, const Operand& b, StreamOrDevice s = {});
/// floor(a / b); integer inputs stay integers.
Array floor_divide(const Operand& a, const Operand& b, StreamOrDevice s = {});
Array arctan2(const Operand& a, const Operand& b, StreamOrDevice s = {});
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

}  // namespace kiln
