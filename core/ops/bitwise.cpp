// Bitwise ops of integer (and, for and/or/xor/invert, bool) arrays, in the style of binary.cpp.
// None is differentiable: their integer outputs take the zero tangent.
#include <type_traits>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/elementwise_impl.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace detail {
namespace {

constexpr DtypeSet kBitTypes = kIntTypes | DtypeSet{bool_};

#define KILN_BITWISE(Name, op_name, glsl, expr)     \
  struct Name : BinaryOp<Name> {                    \
    using BinaryOp::BinaryOp;                       \
    static constexpr const char* kName = #Name;     \
    static constexpr const char* kOpName = op_name; \
    static constexpr const char* kGlsl = glsl;      \
    static constexpr DtypeSet kTypes = kBitTypes;   \
    template <class T>                              \
    static T apply(T a, T b) {                      \
      return static_cast<T>(expr);                  \
    }                                               \
  };
KILN_BITWISE(BitwiseAnd, "bitwise_and", "x0 & x1", a& b)
KILN_BITWISE(BitwiseOr, "bitwise_or", "x0 | x1", a | b)
KILN_BITWISE(BitwiseXor, "bitwise_xor", "x0 ^ x1", a ^ b)
#undef KILN_BITWISE

// Shifts compute in the promoted type (int for the 8-bit types, as C++ and the GPU's int/uint
// values do); a count outside [0, its width) gives 0, or -1 for a right shift of a negative value.
template <class T>
constexpr bool shift_in_range(T count) {
  using W = decltype(count + count);
  if constexpr (std::is_signed_v<T>)
    if (count < 0) return false;
  return static_cast<int64_t>(count) < static_cast<int64_t>(sizeof(W) * 8);
}
struct LeftShift : BinaryOp<LeftShift> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "LeftShift";
  static constexpr const char* kOpName = "left_shift";
  static constexpr const char* kGlsl = "kiln_left_shift(x0, x1)";
  static constexpr DtypeSet kTypes = kIntTypes;
  template <class T>
  static T apply(T a, T b) {
    using W = decltype(a + b);
    if (!shift_in_range(b)) return T(0);
    // In the unsigned type: a negative value shifted left is defined there (and wraps the same).
    using U = std::make_unsigned_t<W>;
    return static_cast<T>(static_cast<W>(static_cast<U>(static_cast<W>(a)) << b));
  }
};
struct RightShift : BinaryOp<RightShift> {
  using BinaryOp::BinaryOp;
  static constexpr const char* kName = "RightShift";
  static constexpr const char* kOpName = "right_shift";
  static constexpr const char* kGlsl = "kiln_right_shift(x0, x1)";
  static constexpr DtypeSet kTypes = kIntTypes;
  template <class T>
  static T apply(T a, T b) {
    using W = decltype(a + b);
    if (!shift_in_range(b)) {
      if constexpr (std::is_signed_v<T>)
        if (a < 0) return T(-1);
      return T(0);
    }
    return static_cast<T>(static_cast<W>(a) >> b);  // arithmetic for signed W (C++20)
  }
};

struct BitwiseInvert : UnaryOp<BitwiseInvert> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "BitwiseInvert";
  static constexpr const char* kGlsl = "~x0";
  static constexpr const char* kOpName = "bitwise_invert";
  static constexpr DtypeSet kTypes = kIntTypes;
  template <class T>
  static T apply(T x) {
    return static_cast<T>(~x);
  }
};

}  // namespace
}  // namespace detail

Array bitwise_and(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::BitwiseAnd::build(a, b, s);
}
Array bitwise_or(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::BitwiseOr::build(a, b, s);
}
Array bitwise_xor(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::BitwiseXor::build(a, b, s);
}
Array left_shift(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::LeftShift::build(a, b, s);
}
Array right_shift(const Operand& a, const Operand& b, StreamOrDevice s) {
  return detail::RightShift::build(a, b, s);
}
Array bitwise_invert(const Array& x, StreamOrDevice s) {
  if (x.valid() && x.dtype() == bool_) return logical_not(x, s);
  return detail::BitwiseInvert::build(x, s);
}
Array operator&(const Operand& a, const Operand& b) { return bitwise_and(a, b); }
Array operator|(const Operand& a, const Operand& b) { return bitwise_or(a, b); }
Array operator^(const Operand& a, const Operand& b) { return bitwise_xor(a, b); }
Array operator~(const Array& x) { return bitwise_invert(x); }

}  // namespace kiln
