// Elementwise binary ops with broadcasting (STYLE R6): math, dtypes and partials stated once.
#include "kiln/core/ops/binary.h"

#include <cmath>
#include <functional>
#include <type_traits>

#include "kiln/core/ops/elementwise_impl.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace detail {
namespace {

std::pair<Array, Array> no_partials() { return {Array(), Array()}; }

// a op b for integers in an unsigned type, which wraps where signed overflow is undefined
// behaviour (narrower types than int promote to int, where uint16 * uint16 can overflow); floats as
// they are. Integer sums, differences and products wrap, as documented.
template <class T, class F>
T wrapping(T a, T b, F op) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(op(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return static_cast<T>(op(a, b));
  }
}

struct Add : BinaryOp<Add> {
  using BinaryOp::BinaryOp;
  static constexpr bool kSimdF32 = true;
  static constexpr const char* kName = "Add";
  static constexpr const char* kGlsl = "x0 + x1";
  static constexpr TileOp kTileOp = TileOp::add;
  static constexpr const char* kOpName = "add";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T a, T b) {
    return wrapping(a, b, std::plus<>());
  }
  static std::pair<Array, Array> partials(const Array&, const Array&, const Array&) { return no_partials(); }
};
struct Subtract : BinaryOp<Subtract> {
  using BinaryOp::BinaryOp;
  static constexpr bool kSimdF32 = true;
  static constexpr const char* kName = "Subtract";
  static constexpr const char* kGlsl = "x0 - x1";
  static constexpr TileOp kTileOp = TileOp::subtract;
  static constexpr const char* kOpName = "subtract";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T a, T b) {
    return wrapping(a, b, std::minus<>());
  }
  static std::pair<Array, Array> partials(const Array& x, const Array&, const Array&) {
    return {Array(), Array(-1.0, x.dtype())};
  }
};
struct Multiply : BinaryOp<Multiply> {
  using BinaryOp::BinaryOp;
  static constexpr bool kSimdF32 = true;
  static constexpr const char* kName = "Multiply";
  static constexpr const char* kGlsl = "x0 * x1";
  static constexpr TileOp kTileOp = TileOp::multiply;
  static constexpr const char* kOpName = "multiply";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T a, T b) {
    return wrapping(a, b, std::multiplies<>());
  }
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array&) { return {y, x}; }
};
struct Divide : BinaryOp<Divide> {
  using BinaryOp::BinaryOp;
  static constexpr bool kSimdF32 = true;
  static constexpr const char* kName = "Divide";
  static constexpr const char* kGlsl = "x0 / x1";
  static constexpr TileOp kTileOp = TileOp::divide;
  static constexpr const char* kOpName = "divide";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kIntToFloat = true;
  template <class T>
  static T apply(T a, T b) {
    return a / b;
  }
  static std::pair<Array, Array> partials(const Array&, const Array& y, const Array& out) {
    return {1.0 / y, negative(out / y)};
  }
};
struct Power : BinaryOp<Power> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "Power";
  static constexpr const char* kGlsl = "kiln_power(x0, x1)";
  static constexpr const char* kOpName = "power";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {
      if constexpr (std::is_signed_v<T>)
        if (b < 0) return a == 1 ? 1 : (a == -1 ? (b % 2 ? -1 : 1) : 0);
      // Squaring in an unsigned type at least as wide as int: it wraps like the result, where a
      // signed product overflowing (also int's, which uint16's promotes to) is undefined behaviour.
      using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      U r = 1;
      for (U e = static_cast<U>(b), base = static_cast<U>(a); e > 0;
           e >>= 1, base = static_cast<U>(base * base))
        if (e & 1) r = static_cast<U>(r * base);
      return static_cast<T>(r);
    }
  }
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array& out) {
    // d/dy = out * log(x); taken as 0 where x <= 0 (0^y is flat in y, and x < 0 has no real log).
    return {y * power(x, y - 1.0), where(x > 0.0, out * log(where(x > 0.0, x, 1.0)), 0.0)};
  }
};
struct Maximum : BinaryOp<Maximum> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "Maximum";
  static constexpr const char* kGlsl = "kiln_maximum(x0, x1)";
  static constexpr const char* kOpName = "maximum";
  static constexpr DtypeSet kTypes = kAllTypes;
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a)) return a;
    return a >= b ? a : b;  // NaN in b propagates too: NaN >= x is false
  }
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array&) {
    return {astype(x >= y, x.dtype()), astype(x < y, x.dtype())};  // ties go to x
  }
};
struct Minimum : BinaryOp<Minimum> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "Minimum";
  static constexpr const char* kGlsl = "kiln_minimum(x0, x1)";
  static constexpr const char* kOpName = "minimum";
  static constexpr DtypeSet kTypes = kAllTypes;
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a)) return a;
    return a <= b ? a : b;
  }
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array&) {
    return {astype(x <= y, x.dtype()), astype(x > y, x.dtype())};
  }
};
struct Remainder : BinaryOp<Remainder> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "Remainder";
  static constexpr const char* kGlsl = "kiln_remainder(x0, x1)";
  static constexpr const char* kOpName = "remainder";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;  // INT_MIN % -1 traps
        T r = static_cast<T>(a % b);
        if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
        return r;
      } else {
        return static_cast<T>(a % b);
      }
    }
  }
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array&) {
    return {Array(), negative(floor_divide(x, y))};
  }
};
struct FloorDivide : BinaryOp<FloorDivide> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "FloorDivide";
  static constexpr const char* kGlsl = "kiln_floor_divide(x0, x1)";
  static constexpr const char* kOpName = "floor_divide";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::floor(a / b);
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return static_cast<T>(T(0) - a);
        T q = static_cast<T>(a / b);
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return q;
      } else {
        return static_cast<T>(a / b);
      }
    }
  }
};
struct Arctan2 : BinaryOp<Arctan2> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "Arctan2";
  static constexpr const char* kGlsl = "kiln_arctan2(x0, x1)";
  static constexpr const char* kOpName = "arctan2";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kIntToFloat = true;
  template <class T>
  static T apply(T a, T b) {
    return std::atan2(a, b);
  }
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array&) {
    const Array r2 = square(x) + square(y);
    return {y / r2, negative(x) / r2};
  }
};

struct LogAddExp : BinaryOp<LogAddExp> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "LogAddExp";
  static constexpr const char* kGlsl = "kiln_logaddexp(x0, x1)";
  static constexpr const char* kOpName = "logaddexp";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kIntToFloat = true;
  template <class T>
  static T apply(T a, T b) {
    if (std::isnan(a) || std::isnan(b)) return a + b;
    if (a == b) return a + static_cast<T>(0.693147180559945309417);  // equal infinities too
    return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b)));
  }
  // exp(x - out) and exp(y - out): the softmax weights of the two, 1/2 each at a tie.
  static std::pair<Array, Array> partials(const Array& x, const Array& y, const Array& out) {
    return {exp(x - out), exp(y - out)};
  }
};

#define KILN_COMPARISON(Name, op_name, expr, glsl)  \
  struct Name : BinaryOp<Name> {                    \
    using BinaryOp::BinaryOp;                       \
    static constexpr const char* kName = #Name;     \
    static constexpr const char* kOpName = op_name; \
    static constexpr const char* kGlsl = glsl;      \
    static constexpr DtypeSet kTypes = kAllTypes;   \
    static constexpr bool kOutBool = true;          \
    template <class T>                              \
    static bool apply(T a, T b) {                   \
      return expr;                                  \
    }                                               \
  };
KILN_COMPARISON(Equal, "equal", a == b, "x0 == x1")
KILN_COMPARISON(NotEqual, "not_equal", a != b, "x0 != x1")
KILN_COMPARISON(Less, "less", a < b, "x0 < x1")
KILN_COMPARISON(LessEqual, "less_equal", a <= b, "x0 <= x1")
KILN_COMPARISON(Greater, "greater", a > b, "x0 > x1")
KILN_COMPARISON(GreaterEqual, "greater_equal", a >= b, "x0 >= x1")
KILN_COMPARISON(LogicalAnd, "logical_and", a != T(0) && b != T(0), "kiln_nonzero(x0) && kiln_nonzero(x1)")
KILN_COMPARISON(LogicalOr, "logical_or", a != T(0) || b != T(0), "kiln_nonzero(x0) || kiln_nonzero(x1)")
#undef KILN_COMPARISON

}  // namespace
}  // namespace detail

Array add(const Operand& a, const Operand& b, StreamOrDevice s) { return detail::Add::build(a, b, s); }
Array subtract(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Subtract::build(a, b, s);
}
Array multiply(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Multiply::build(a, b, s);
}
Array divide(const Operand& a, const Operand& b, StreamOrDevice s) { return detail::Divide::build(a, b, s); }
Array power(const Operand& a, const Operand& b, StreamOrDevice s) {
  // Two bools compute in int8, as NumPy's power does (bool has no power of its own).
  if (result_type({&a, &b}) == bool_) {
    auto as_int8 = [&](const Operand& o) {
      return o.is_scalar() ? o.to_array(int8, s) : astype(o.array(), int8, s);
    };
    return detail::Power::build(as_int8(a), as_int8(b), s);
  }
  return detail::Power::build(a, b, s);
}
Array maximum(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Maximum::build(a, b, s);
}
Array minimum(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Minimum::build(a, b, s);
}
Array remainder(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Remainder::build(a, b, s);
}
Array floor_divide(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::FloorDivide::build(a, b, s);
}
Array arctan2(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Arctan2::build(a, b, s);
}
Array logaddexp(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::LogAddExp::build(a, b, s);
}
Array equal(const Operand& a, const Operand& b, StreamOrDevice s) { return detail::Equal::build(a, b, s); }
Array not_equal(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::NotEqual::build(a, b, s);
}
Array less(const Operand& a, const Operand& b, StreamOrDevice s) { return detail::Less::build(a, b, s); }
Array less_equal(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::LessEqual::build(a, b, s);
}
Array greater(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::Greater::build(a, b, s);
}
Array greater_equal(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::GreaterEqual::build(a, b, s);
}
Array logical_and(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::LogicalAnd::build(a, b, s);
}
Array logical_or(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::LogicalOr::build(a, b, s);
}

Array operator+(const Operand& a, const Operand& b) { return add(a, b); }
Array operator-(const Operand& a, const Operand& b) { return subtract(a, b); }
Array operator*(const Operand& a, const Operand& b) { return multiply(a, b); }
Array operator/(const Operand& a, const Operand& b) { return divide(a, b); }
Array operator%(const Operand& a, const Operand& b) { return remainder(a, b); }
Array operator-(const Array& a) { return negative(a); }
Array operator==(const Operand& a, const Operand& b) { return equal(a, b); }
Array operator!=(const Operand& a, const Operand& b) { return not_equal(a, b); }
Array operator<(const Operand& a, const Operand& b) { return less(a, b); }
Array operator<=(const Operand& a, const Operand& b) { return less_equal(a, b); }
Array operator>(const Operand& a, const Operand& b) { return greater(a, b); }
Array operator>=(const Operand& a, const Operand& b) { return greater_equal(a, b); }
Array operator&&(const Operand& a, const Operand& b) { return logical_and(a, b); }
Array operator||(const Operand& a, const Operand& b) { return logical_or(a, b); }
Array operator!(const Array& a) { return logical_not(a); }

}  // namespace kiln
