// More elementwise unary ops: inverse trigonometric and hyperbolic functions, base-2 and base-10
// logarithms, and the finite-value predicates, each a struct in the style of unary.cpp (STYLE R6);
// then the ops made of other ops (degrees, radians, reciprocal, nan_to_num, round to decimals).
#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/core/ops/elementwise_impl.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace detail {
namespace {

// The GLSL of each is in shaders/common/elementwise_ops.glsl (KILN_MORE_FLOAT), float and double.
#define KILN_FLOAT_UNARY(Name, op_name, glsl, expr)          \
  struct Name : UnaryOp<Name> {                              \
    using UnaryOp::UnaryOp;                                  \
    static constexpr const char* kName = #Name;              \
    static constexpr const char* kGlsl = glsl;               \
    static constexpr const char* kOpName = op_name;          \
    static constexpr DtypeSet kTypes = kFloatTypes;          \
    static constexpr bool kFloatOnly = true;                 \
    template <class T>                                       \
    static T apply(T x) {                                    \
      return expr;                                           \
    }                                                        \
    static Array derivative(const Array& x, const Array& y); \
  };

KILN_FLOAT_UNARY(Arcsin, "arcsin", "kiln_arcsin(x0)", std::asin(x))
KILN_FLOAT_UNARY(Arccos, "arccos", "kiln_arccos(x0)", std::acos(x))
KILN_FLOAT_UNARY(Arctan, "arctan", "kiln_arctan(x0)", std::atan(x))
KILN_FLOAT_UNARY(Sinh, "sinh", "kiln_sinh(x0)", std::sinh(x))
KILN_FLOAT_UNARY(Cosh, "cosh", "kiln_cosh(x0)", std::cosh(x))
KILN_FLOAT_UNARY(Arcsinh, "arcsinh", "kiln_arcsinh(x0)", std::asinh(x))
KILN_FLOAT_UNARY(Arccosh, "arccosh", "kiln_arccosh(x0)", std::acosh(x))
KILN_FLOAT_UNARY(Arctanh, "arctanh", "kiln_arctanh(x0)", std::atanh(x))
KILN_FLOAT_UNARY(Log2, "log2", "kiln_log2(x0)", std::log2(x))
KILN_FLOAT_UNARY(Log10, "log10", "kiln_log10(x0)", std::log10(x))
#undef KILN_FLOAT_UNARY

// d/dx, from x and y = f(x).
Array Arcsin::derivative(const Array& x, const Array&) { return rsqrt(1.0 - square(x)); }
Array Arccos::derivative(const Array& x, const Array&) { return negative(rsqrt(1.0 - square(x))); }
Array Arctan::derivative(const Array& x, const Array&) { return 1.0 / (1.0 + square(x)); }
Array Sinh::derivative(const Array& x, const Array&) { return cosh(x); }
Array Cosh::derivative(const Array& x, const Array&) { return sinh(x); }
Array Arcsinh::derivative(const Array& x, const Array&) { return rsqrt(square(x) + 1.0); }
Array Arccosh::derivative(const Array& x, const Array&) { return rsqrt(square(x) - 1.0); }
Array Arctanh::derivative(const Array& x, const Array&) { return 1.0 / (1.0 - square(x)); }
Array Log2::derivative(const Array& x, const Array&) { return (1.0 / std::numbers::ln2) / x; }
Array Log10::derivative(const Array& x, const Array&) { return (1.0 / std::numbers::ln10) / x; }

// Integers and bool are always finite.
#define KILN_FLOAT_PREDICATE(Name, op_name, glsl, expr, integer_result) \
  struct Name : UnaryOp<Name> {                                         \
    using UnaryOp::UnaryOp;                                             \
    static constexpr const char* kName = #Name;                         \
    static constexpr const char* kGlsl = glsl;                          \
    static constexpr const char* kOpName = op_name;                     \
    static constexpr DtypeSet kTypes = kAllTypes;                       \
    static constexpr bool kOutBool = true;                              \
    template <class T>                                                  \
    static bool apply(T x) {                                            \
      if constexpr (std::is_floating_point_v<T>)                        \
        return expr;                                                    \
      else                                                              \
        return integer_result;                                          \
    }                                                                   \
  };
KILN_FLOAT_PREDICATE(IsFinite, "isfinite", "!(kiln_isnan(x0) || kiln_isinf(x0))", std::isfinite(x), true)
KILN_FLOAT_PREDICATE(IsPosInf, "isposinf", "(kiln_isinf(x0) && x0 > 0)", std::isinf(x) && x > 0, false)
KILN_FLOAT_PREDICATE(IsNegInf, "isneginf", "(kiln_isinf(x0) && x0 < 0)", std::isinf(x) && x < 0, false)
#undef KILN_FLOAT_PREDICATE

// The largest and lowest finite values of a float dtype.
std::pair<double, double> finite_range(Dtype t) {
  switch (t) {
    case float16:
      return {65504.0, -65504.0};
    case bfloat16:
      return {3.3895313892515355e38, -3.3895313892515355e38};
    case float32:
      return {std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()};
    default:
      return {std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest()};
  }
}

}  // namespace
}  // namespace detail

Array arcsin(const Array& x, StreamOrDevice s) { return detail::Arcsin::build(x, s); }
Array arccos(const Array& x, StreamOrDevice s) { return detail::Arccos::build(x, s); }
Array arctan(const Array& x, StreamOrDevice s) { return detail::Arctan::build(x, s); }
Array sinh(const Array& x, StreamOrDevice s) { return detail::Sinh::build(x, s); }
Array cosh(const Array& x, StreamOrDevice s) { return detail::Cosh::build(x, s); }
Array arcsinh(const Array& x, StreamOrDevice s) { return detail::Arcsinh::build(x, s); }
Array arccosh(const Array& x, StreamOrDevice s) { return detail::Arccosh::build(x, s); }
Array arctanh(const Array& x, StreamOrDevice s) { return detail::Arctanh::build(x, s); }
Array log2(const Array& x, StreamOrDevice s) { return detail::Log2::build(x, s); }
Array log10(const Array& x, StreamOrDevice s) { return detail::Log10::build(x, s); }
Array isfinite(const Array& x, StreamOrDevice s) { return detail::IsFinite::build(x, s); }
Array isposinf(const Array& x, StreamOrDevice s) { return detail::IsPosInf::build(x, s); }
Array isneginf(const Array& x, StreamOrDevice s) { return detail::IsNegInf::build(x, s); }

namespace {
// x promoted to float32 when it is not a float, for the ops below that scale it.
Array as_float(const char* op, const Array& x, StreamOrDevice s) {
  if (!x.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
  return is_floating(x.dtype()) ? x : astype(x, float32, s);
}
}  // namespace

Array degrees(const Array& x, StreamOrDevice s) {
  return multiply(as_float("degrees", x, s), 180.0 / std::numbers::pi, s);
}
Array radians(const Array& x, StreamOrDevice s) {
  return multiply(as_float("radians", x, s), std::numbers::pi / 180.0, s);
}
Array reciprocal(const Array& x, StreamOrDevice s) { return divide(1.0, as_float("reciprocal", x, s), s); }

Array nan_to_num(const Array& x, double nan, std::optional<double> posinf, std::optional<double> neginf,
                 StreamOrDevice s) {
  if (!x.valid()) throw ValueError::of("nan_to_num", "the array is empty (default-constructed)");
  if (!is_floating(x.dtype())) return x;
  const auto [hi, lo] = detail::finite_range(x.dtype());
  const Array big(posinf.value_or(hi), x.dtype()), small(neginf.value_or(lo), x.dtype());
  Array y = where(isnan(x, s), Array(nan, x.dtype()), x, s);
  y = where(isposinf(x, s), big, y, s);
  return where(isneginf(x, s), small, y, s);
}

Array round(const Array& x, int decimals, StreamOrDevice s) {
  if (!x.valid()) throw ValueError::of("round", "the array is empty (default-constructed)");
  if (decimals == 0) return round(x, s);
  if (!is_floating(x.dtype()) && decimals > 0) return x;
  const double scale = std::pow(10.0, std::abs(decimals));
  if (!is_floating(x.dtype())) {  // to a multiple of 10^-decimals, in float64, then back
    const Array f = astype(x, float64, s);
    return astype(multiply(round(divide(f, scale, s), s), scale, s), x.dtype(), s);
  }
  // NumPy's order: multiply first for decimals > 0 (x * 10^d, not x / 10^-d), divide for < 0.
  if (decimals > 0) return divide(round(multiply(x, scale, s), s), scale, s);
  return multiply(round(divide(x, scale, s), s), scale, s);
}

}  // namespace kiln
