// Elementwise unary ops: each struct states its math, dtypes and derivative once (STYLE R6).
#include "kiln/core/ops/unary.h"

#include <cmath>
#include <numbers>

#include "kiln/core/cpu/math.h"
#include "kiln/core/ops/elementwise_impl.h"

namespace kiln {
namespace detail {
namespace {

template <class T>
T erfinv_value(T y) {
  if (!(y > -1 && y < 1)) {
    if (y == 1) return std::numeric_limits<T>::infinity();
    if (y == -1) return -std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::quiet_NaN();
  }
  // Giles' single-precision approximation, then two Newton steps on erf(x) - y in double.
  const double w0 = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w0 < 5.0) {
    const double w = w0 - 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * w;
    x = p * y;
  } else {
    const double w = std::sqrt(w0) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      p = c + p * w;
    x = p * y;
  }
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  return static_cast<T>(x);
}

struct Negative : UnaryOp<Negative> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Negative";
  static constexpr const char* kGlsl = "-x0";
  static constexpr TileOp kTileOp = TileOp::negative;
  static constexpr const char* kOpName = "negative";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T x) {
    return static_cast<T>(-x);
  }
  static Array derivative(const Array& x, const Array&) { return Array(-1.0, x.dtype()); }
};
struct Abs : UnaryOp<Abs> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Abs";
  static constexpr const char* kGlsl = "kiln_abs(x0)";
  static constexpr const char* kOpName = "abs";
  static constexpr DtypeSet kTypes = kAllTypes;  // bool is its own absolute value (NumPy's)
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < 0 ? static_cast<T>(-x) : x;
  }
  static Array derivative(const Array& x, const Array&) { return sign(x); }
};
struct Sign : UnaryOp<Sign> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Sign";
  static constexpr const char* kGlsl = "kiln_sign(x0)";
  static constexpr const char* kOpName = "sign";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(x)) return x;
    return static_cast<T>((T(0) < x) - (x < T(0)));
  }
};
struct Exp : UnaryOp<Exp> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Exp";
  static constexpr const char* kGlsl = "kiln_exp(x0)";
  static constexpr TileOp kTileOp = TileOp::exp;
  static constexpr const char* kOpName = "exp";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_same_v<T, float>)
      return exp_f32(x);
    else
      return std::exp(x);
  }
  static Array derivative(const Array&, const Array& y) { return y; }
  static constexpr bool kSimdF32 = true;
};
struct Expm1 : UnaryOp<Expm1> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Expm1";
  static constexpr const char* kGlsl = "kiln_expm1(x0)";
  static constexpr const char* kOpName = "expm1";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::expm1(x);
  }
  static Array derivative(const Array&, const Array& y) { return y + 1.0; }
};
struct Log : UnaryOp<Log> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Log";
  static constexpr const char* kGlsl = "kiln_log(x0)";
  static constexpr const char* kOpName = "log";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::log(x);
  }
  static Array derivative(const Array& x, const Array&) { return 1.0 / x; }
};
struct Log1p : UnaryOp<Log1p> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Log1p";
  static constexpr const char* kGlsl = "kiln_log1p(x0)";
  static constexpr const char* kOpName = "log1p";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::log1p(x);
  }
  static Array derivative(const Array& x, const Array&) { return 1.0 / (x + 1.0); }
};
struct Sqrt : UnaryOp<Sqrt> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Sqrt";
  static constexpr const char* kGlsl = "kiln_sqrt(x0)";
  static constexpr const char* kOpName = "sqrt";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::sqrt(x);
  }
  static Array derivative(const Array&, const Array& y) { return 0.5 / y; }
};
struct Rsqrt : UnaryOp<Rsqrt> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Rsqrt";
  static constexpr const char* kGlsl = "kiln_rsqrt(x0)";
  static constexpr const char* kOpName = "rsqrt";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return T(1) / std::sqrt(x);
  }
  static Array derivative(const Array& x, const Array& y) { return -0.5 * y / x; }
};
struct Square : UnaryOp<Square> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Square";
  static constexpr const char* kGlsl = "kiln_square(x0)";
  static constexpr const char* kOpName = "square";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // Wraps in an unsigned type: a signed (or promoted uint16) product overflowing is undefined.
      using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(x) * static_cast<U>(x));
    } else {
      return static_cast<T>(x * x);
    }
  }
  static Array derivative(const Array& x, const Array&) { return 2.0 * x; }
};
struct Sin : UnaryOp<Sin> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Sin";
  static constexpr const char* kGlsl = "kiln_sin(x0)";
  static constexpr const char* kOpName = "sin";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::sin(x);
  }
  static Array derivative(const Array& x, const Array&) { return cos(x); }
};
struct Cos : UnaryOp<Cos> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Cos";
  static constexpr const char* kGlsl = "kiln_cos(x0)";
  static constexpr const char* kOpName = "cos";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::cos(x);
  }
  static Array derivative(const Array& x, const Array&) { return negative(sin(x)); }
};
struct Tan : UnaryOp<Tan> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Tan";
  static constexpr const char* kGlsl = "kiln_tan(x0)";
  static constexpr const char* kOpName = "tan";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::tan(x);
  }
  static Array derivative(const Array&, const Array& y) { return 1.0 + square(y); }
};
struct Tanh : UnaryOp<Tanh> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Tanh";
  static constexpr const char* kGlsl = "kiln_tanh(x0)";
  static constexpr TileOp kTileOp = TileOp::tanh;
  static constexpr const char* kOpName = "tanh";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_same_v<T, float>)
      return tanh_f32(x);
    else
      return std::tanh(x);
  }
  static Array derivative(const Array&, const Array& y) { return 1.0 - square(y); }
  static constexpr bool kSimdF32 = true;
};
struct Sigmoid : UnaryOp<Sigmoid> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Sigmoid";
  static constexpr const char* kGlsl = "kiln_sigmoid(x0)";
  static constexpr const char* kOpName = "sigmoid";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) {
      // exp of -|x| never overflows; branch-free so the loop vectorizes.
      const float e = exp_f32(x >= 0 ? -x : x);
      return (x >= 0 ? 1.0f : e) / (1.0f + e);  // one rounding less than e * (1 / (1 + e))
    } else {
      if (x >= 0) return T(1) / (T(1) + std::exp(-x));
      const T e = std::exp(x);
      return e / (T(1) + e);
    }
  }
  static Array derivative(const Array&, const Array& y) { return y * (1.0 - y); }
  static constexpr bool kSimdF32 = true;
};
struct Erf : UnaryOp<Erf> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Erf";
  static constexpr const char* kGlsl = "kiln_erf(x0)";
  static constexpr const char* kOpName = "erf";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return std::erf(x);
  }
  static Array derivative(const Array& x, const Array&) {
    return (2.0 / std::sqrt(std::numbers::pi)) * exp(negative(square(x)));
  }
};
struct Erfinv : UnaryOp<Erfinv> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Erfinv";
  static constexpr const char* kGlsl = "kiln_erfinv(x0)";
  static constexpr const char* kOpName = "erfinv";
  static constexpr DtypeSet kTypes = kFloatTypes;
  static constexpr bool kFloatOnly = true;
  template <class T>
  static T apply(T x) {
    return erfinv_value(x);
  }
  static Array derivative(const Array&, const Array& y) {
    return (std::sqrt(std::numbers::pi) / 2.0) * exp(square(y));
  }
};
struct Floor : UnaryOp<Floor> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Floor";
  static constexpr const char* kGlsl = "kiln_floor(x0)";
  static constexpr const char* kOpName = "floor";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      return std::floor(x);
    else
      return x;
  }
};
struct Ceil : UnaryOp<Ceil> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Ceil";
  static constexpr const char* kGlsl = "kiln_ceil(x0)";
  static constexpr const char* kOpName = "ceil";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      return std::ceil(x);
    else
      return x;
  }
};
struct Round : UnaryOp<Round> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "Round";
  static constexpr const char* kGlsl = "kiln_round(x0)";
  static constexpr const char* kOpName = "round";
  static constexpr DtypeSet kTypes = kNumericTypes;
  template <class T>
  static T apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      return std::nearbyint(x);  // half to even
    else
      return x;
  }
};
struct LogicalNot : UnaryOp<LogicalNot> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "LogicalNot";
  static constexpr const char* kGlsl = "!kiln_nonzero(x0)";
  static constexpr const char* kOpName = "logical_not";
  static constexpr DtypeSet kTypes = kAllTypes;
  static constexpr bool kOutBool = true;
  template <class T>
  static bool apply(T x) {
    return x == T(0);
  }
};
struct IsNan : UnaryOp<IsNan> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "IsNan";
  static constexpr const char* kGlsl = "kiln_isnan(x0)";
  static constexpr const char* kOpName = "isnan";
  static constexpr DtypeSet kTypes = kAllTypes;
  static constexpr bool kOutBool = true;
  template <class T>
  static bool apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      return std::isnan(x);
    else
      return false;
  }
};
struct IsInf : UnaryOp<IsInf> {
  using UnaryOp::UnaryOp;
  static constexpr const char* kName = "IsInf";
  static constexpr const char* kGlsl = "kiln_isinf(x0)";
  static constexpr const char* kOpName = "isinf";
  static constexpr DtypeSet kTypes = kAllTypes;
  static constexpr bool kOutBool = true;
  template <class T>
  static bool apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      return std::isinf(x);
    else
      return false;
  }
};

}  // namespace
}  // namespace detail

Array negative(const Array& x, StreamOrDevice s) { return detail::Negative::build(x, s); }
Array abs(const Array& x, StreamOrDevice s) { return detail::Abs::build(x, s); }
Array sign(const Array& x, StreamOrDevice s) { return detail::Sign::build(x, s); }
Array exp(const Array& x, StreamOrDevice s) { return detail::Exp::build(x, s); }
Array expm1(const Array& x, StreamOrDevice s) { return detail::Expm1::build(x, s); }
Array log(const Array& x, StreamOrDevice s) { return detail::Log::build(x, s); }
Array log1p(const Array& x, StreamOrDevice s) { return detail::Log1p::build(x, s); }
Array sqrt(const Array& x, StreamOrDevice s) { return detail::Sqrt::build(x, s); }
Array rsqrt(const Array& x, StreamOrDevice s) { return detail::Rsqrt::build(x, s); }
Array square(const Array& x, StreamOrDevice s) { return detail::Square::build(x, s); }
Array sin(const Array& x, StreamOrDevice s) { return detail::Sin::build(x, s); }
Array cos(const Array& x, StreamOrDevice s) { return detail::Cos::build(x, s); }
Array tan(const Array& x, StreamOrDevice s) { return detail::Tan::build(x, s); }
Array tanh(const Array& x, StreamOrDevice s) { return detail::Tanh::build(x, s); }
Array sigmoid(const Array& x, StreamOrDevice s) { return detail::Sigmoid::build(x, s); }
Array erf(const Array& x, StreamOrDevice s) { return detail::Erf::build(x, s); }
Array erfinv(const Array& x, StreamOrDevice s) { return detail::Erfinv::build(x, s); }
Array floor(const Array& x, StreamOrDevice s) { return detail::Floor::build(x, s); }
Array ceil(const Array& x, StreamOrDevice s) { return detail::Ceil::build(x, s); }
Array round(const Array& x, StreamOrDevice s) { return detail::Round::build(x, s); }
Array logical_not(const Array& x, StreamOrDevice s) { return detail::LogicalNot::build(x, s); }
Array isnan(const Array& x, StreamOrDevice s) { return detail::IsNan::build(x, s); }
Array isinf(const Array& x, StreamOrDevice s) { return detail::IsInf::build(x, s); }

}  // namespace kiln
