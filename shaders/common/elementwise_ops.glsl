// The elementwise math of the GPU, written once (STYLE.md R6): the functions the GLSL snippets of
// the elementwise primitives call (kGlsl in core/ops/unary.cpp, binary.cpp, ...). The generator
// (core/vulkan/runtime/elementwise.cpp) pastes this file in front of every generated kernel.
//
// Each function is overloaded for the value types a kernel computes in: float (float32, and
// float16/bfloat16 widened), int (int32, int8), uint (uint32, uint8, and bool as 0/1), and, when
// the device has them, double and int64_t. Results follow the CPU's loops (core/ops/*.cpp) where
// GLSL leaves a case undefined: NaN propagation, integer division by 0 or -1, signs of remainders,
// pow of negative bases, atan of (0, 0). Transcendental functions exist for float only: GLSL has
// no double-precision exp, log, sin, ... (the primitives say so for float64 on the GPU).
#ifndef KILN_ELEMENTWISE_OPS_GLSL
#define KILN_ELEMENTWISE_OPS_GLSL

float kiln_inf() { return uintBitsToFloat(0x7F800000u); }
float kiln_nan() { return uintBitsToFloat(0x7FC00000u); }

// ---------------------------------------------------------------- every type

// Per-type function bodies, stamped out for each value type by the KILN_FOR_* macros below.
#define KILN_NONZERO(T, zero) \
  bool kiln_nonzero(T x) { return x != zero; }
#define KILN_SQUARE(T) \
  T kiln_square(T x) { return x * x; }
#define KILN_SIGNED_ABS(T, zero) \
  T kiln_abs(T x) { return x < zero ? -x : x; }
#define KILN_INT_SIGN(T, zero, one) \
  T kiln_sign(T x) { return x > zero ? one : (x < zero ? -one : zero); }
#define KILN_INT_EXACT(T)                   \
  T kiln_floor(T x) { return x; }           \
  T kiln_ceil(T x) { return x; }            \
  T kiln_round(T x) { return x; }           \
  bool kiln_isnan(T x) { return false; }    \
  bool kiln_isinf(T x) { return false; }
#define KILN_ORDERED_MINMAX(T)                         \
  T kiln_maximum(T a, T b) { return a >= b ? a : b; } \
  T kiln_minimum(T a, T b) { return a <= b ? a : b; }
// a ** b by squaring (wrapping like the CPU's): KILN_POWER_BY_SQUARING is the loop both integer
// kinds share. For signed types a negative exponent gives 1 / a ** |b| truncated: 1 for a = 1, ±1
// for a = -1, else 0.
#define KILN_POWER_BY_SQUARING(T, zero, one)                   \
  T r = one;                                                   \
  for (T e = b, base = a; e > zero; e >>= one, base *= base)   \
    if ((e & one) != zero) r *= base;                          \
  return r;
#define KILN_INT_POWER(T, zero, one)                                                              \
  T kiln_power(T a, T b) {                                                                        \
    if (b < zero) return a == one ? one : (a == -one ? ((b & one) != zero ? -one : one) : zero); \
    KILN_POWER_BY_SQUARING(T, zero, one)                                                          \
  }
#define KILN_UINT_POWER(T, zero, one) \
  T kiln_power(T a, T b) { KILN_POWER_BY_SQUARING(T, zero, one) }
// Integer division and remainder on magnitudes (GLSL leaves / and % of negative operands
// undefined), then floored like the CPU's floor_divide and remainder (Python's // and %). A zero
// divisor gives 0; -1 gives -a (wrapping) and 0.
#define KILN_SIGNED_DIVISION(T, U, zero, one)                                       \
  T kiln_floor_divide(T a, T b) {                                                   \
    if (b == zero) return zero;                                                     \
    if (b == -one) return zero - a;                                                 \
    const U ua = U(a < zero ? -a : a), ub = U(b < zero ? -b : b);                   \
    T q = T(ua / ub);                                                               \
    const bool negative = (a < zero) != (b < zero);                                 \
    if (negative) q = (ua % ub != U(zero)) ? -q - one : -q;                         \
    return q;                                                                       \
  }                                                                                 \
  T kiln_remainder(T a, T b) {                                                      \
    if (b == zero || b == -one) return zero;                                        \
    const U ua = U(a < zero ? -a : a), ub = U(b < zero ? -b : b);                   \
    T r = T(ua % ub);                                                               \
    if (a < zero) r = -r;                                                           \
    if (r != zero && ((r < zero) != (b < zero))) r += b;                            \
    return r;                                                                       \
  }
#define KILN_UNSIGNED_DIVISION(T, zero)                                     \
  T kiln_floor_divide(T a, T b) { return b == zero ? zero : a / b; }        \
  T kiln_remainder(T a, T b) { return b == zero ? zero : a % b; }
#define KILN_FLOAT_COMMON(T, zero, one)                                                    \
  T kiln_abs(T x) { return abs(x); }                                                       \
  T kiln_sign(T x) { return isnan(x) ? x : sign(x); }                                      \
  T kiln_floor(T x) { return floor(x); }                                                   \
  T kiln_ceil(T x) { return ceil(x); }                                                     \
  T kiln_round(T x) { return roundEven(x); }                                               \
  T kiln_sqrt(T x) { return sqrt(x); }                                                     \
  T kiln_rsqrt(T x) { return one / sqrt(x); }                                              \
  bool kiln_isnan(T x) { return isnan(x); }                                                \
  bool kiln_isinf(T x) { return isinf(x); }                                                \
  /* NaN in either operand propagates (GLSL max may return either operand for NaN). */     \
  T kiln_maximum(T a, T b) { return isnan(a) ? a : (a >= b ? a : b); }                     \
  T kiln_minimum(T a, T b) { return isnan(a) ? a : (a <= b ? a : b); }                     \
  T kiln_floor_divide(T a, T b) { return floor(a / b); }                                   \
  /* fmod's sign moved to the divisor's; |r| < |b| also where a / b rounded up. */          \
  T kiln_remainder(T a, T b) {                                                             \
    if (isnan(a) || isnan(b) || isinf(a) || b == zero) return T(kiln_nan());                \
    if (isinf(b)) return (a == zero || (a < zero) == (b < zero)) ? a : b;                   \
    /* fmod: a - b * q is exact for the true quotient q; a / b may round across an integer, \
       which leaves r one |b| off, of the wrong sign or too large. */                       \
    const T step = a < zero ? -abs(b) : abs(b);                                             \
    T r = fma(-b, trunc(a / b), a);                                                         \
    if (r != zero && (r < zero) != (a < zero)) r += step;                                   \
    if (abs(r) >= abs(b)) r -= step;                                                        \
    if (r != zero && ((r < zero) != (b < zero))) r += b;                                    \
    return r;                                                                               \
  }

KILN_NONZERO(float, 0.0)
KILN_NONZERO(int, 0)
KILN_NONZERO(uint, 0u)
KILN_SQUARE(float)
KILN_SQUARE(int)
KILN_SQUARE(uint)
KILN_SIGNED_ABS(int, 0)
uint kiln_abs(uint x) { return x; }
KILN_INT_SIGN(int, 0, 1)
uint kiln_sign(uint x) { return x > 0u ? 1u : 0u; }
KILN_INT_EXACT(int)
KILN_INT_EXACT(uint)
KILN_ORDERED_MINMAX(int)
KILN_ORDERED_MINMAX(uint)
KILN_INT_POWER(int, 0, 1)
KILN_UINT_POWER(uint, 0u, 1u)
KILN_SIGNED_DIVISION(int, uint, 0, 1)
KILN_UNSIGNED_DIVISION(uint, 0u)
KILN_FLOAT_COMMON(float, 0.0, 1.0)

#ifdef KILN_HAS_INT64
KILN_NONZERO(int64_t, int64_t(0))
KILN_SQUARE(int64_t)
KILN_SIGNED_ABS(int64_t, int64_t(0))
KILN_INT_SIGN(int64_t, int64_t(0), int64_t(1))
KILN_INT_EXACT(int64_t)
KILN_ORDERED_MINMAX(int64_t)
KILN_INT_POWER(int64_t, int64_t(0), int64_t(1))
KILN_SIGNED_DIVISION(int64_t, uint64_t, int64_t(0), int64_t(1))
#endif
#ifdef KILN_HAS_FLOAT64
KILN_NONZERO(double, 0.0LF)
KILN_SQUARE(double)
KILN_FLOAT_COMMON(double, 0.0LF, 1.0LF)
#endif

#undef KILN_NONZERO
#undef KILN_SQUARE
#undef KILN_SIGNED_ABS
#undef KILN_INT_SIGN
#undef KILN_INT_EXACT
#undef KILN_ORDERED_MINMAX
#undef KILN_POWER_BY_SQUARING
#undef KILN_INT_POWER
#undef KILN_UINT_POWER
#undef KILN_SIGNED_DIVISION
#undef KILN_UNSIGNED_DIVISION
#undef KILN_FLOAT_COMMON

// ---------------------------------------------------------------- float only

float kiln_exp(float x) { return exp(x); }
float kiln_log(float x) { return log(x); }
// Kahan's forms: exact near 0, where exp(x) - 1 and log(1 + x) lose every digit.
float kiln_expm1(float x) {
  const float u = exp(x);
  if (u == 1.0) return x;
  const float um1 = u - 1.0;
  if (um1 == -1.0) return -1.0;
  if (isinf(u)) return u;
  return um1 * x / log(u);
}
float kiln_log1p(float x) {
  const float u = 1.0 + x;
  if (u == 1.0) return x;
  if (isinf(u)) return u > 0.0 ? u : kiln_nan();
  return log(u) * x / (u - 1.0);
}
float kiln_sin(float x) { return sin(x); }
float kiln_cos(float x) { return cos(x); }
float kiln_tan(float x) { return tan(x); }
// tanh(±9.1) is ±1 in float32; clamping first keeps drivers that lower tanh through exp(2x)
// from computing inf/inf = NaN for large |x|.
float kiln_tanh(float x) { return isnan(x) ? x : tanh(clamp(x, -15.0, 15.0)); }
// exp of -|x| never overflows.
float kiln_sigmoid(float x) {
  const float e = exp(-abs(x));
  return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}
// Numerical Recipes' erfc approximation (fractional error below 1.2e-7) away from 0; near 0, where
// 1 - erfc(x) would cancel, the Taylor series to x^13 (relative error below 1e-8 for |x| < 0.5).
float kiln_erf(float x) {
  const float a = abs(x);
  if (a < 0.5) {
    const float z = x * x;
    const float s =
        1.0 + z * (-1.0 / 3.0 + z * (1.0 / 10.0 + z * (-1.0 / 42.0 + z * (1.0 / 216.0 + z * (-1.0 / 1320.0 + z / 9360.0)))));
    return 1.1283791670955126 * x * s;
  }
  const float t = 1.0 / (1.0 + 0.5 * a);
  const float p =
      -1.26551223 +
      t * (1.00002368 +
           t * (0.37409196 +
                t * (0.09678418 +
                     t * (-0.18628806 +
                          t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  const float r = 1.0 - t * exp(-a * a + p);
  return isnan(x) ? x : (x < 0.0 ? -r : r);
}
// Giles' single-precision approximation ("Approximating the erfinv function", 2010).
float kiln_erfinv(float y) {
  if (!(y > -1.0 && y < 1.0)) {
    if (y == 1.0) return kiln_inf();
    if (y == -1.0) return -kiln_inf();
    return kiln_nan();
  }
  float w = -log((1.0 - y) * (1.0 + y));
  float p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  return p * y;
}
// The C library's pow where GLSL's is undefined: x < 0 (real only for integral y, odd y keeps the
// sign), x = 0, infinities, and pow(1, NaN) = pow(NaN, 0) = 1.
float kiln_power(float x, float y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (isnan(x) || isnan(y)) return kiln_nan();
  const float a = abs(x);
  const bool integral = floor(y) == y;
  const bool odd = integral && abs(y) < 16777216.0 && mod(y, 2.0) == 1.0;
  if (x < 0.0 && !isinf(x) && !integral && !isinf(y)) return kiln_nan();
  float r;
  if (a == 0.0)
    r = y > 0.0 ? 0.0 : kiln_inf();
  else if (isinf(a))
    r = y > 0.0 ? kiln_inf() : 0.0;
  else if (isinf(y))
    r = (a == 1.0) ? 1.0 : ((a > 1.0) == (y > 0.0) ? kiln_inf() : 0.0);
  else
    r = pow(a, y);
  const bool negative_base = x < 0.0 || (x == 0.0 && floatBitsToUint(x) != 0u);
  return (negative_base && odd) ? -r : r;
}
// atan2 with the C library's signed zeros: GLSL leaves atan(0, 0) undefined.
float kiln_arctan2(float y, float x) {
  if (isnan(y) || isnan(x)) return y + x;
  if (y == 0.0 && x == 0.0) {
    const bool x_negative = floatBitsToUint(x) != 0u;
    const float pi = 3.14159265358979;
    const float r = x_negative ? pi : 0.0;
    return floatBitsToUint(y) != 0u ? -r : r;
  }
  return atan(y, x);
}

#endif
