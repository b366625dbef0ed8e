// The elementwise math of the GPU, written once (STYLE.md R6): the functions the GLSL snippets of
// the elementwise primitives call (kGlsl in core/ops/unary.cpp, binary.cpp, ...). The generator
// (core/vulkan/runtime/elementwise.cpp) pastes this file in front of every generated kernel.
//
// Each function is overloaded for the value types a kernel computes in: float (float32, and
// float16/bfloat16 widened), int (int32, int16, int8), uint (uint32, uint16, uint8, and bool as
// 0/1), and, when the device has them, double, int64_t and uint64_t. Results follow the CPU's loops (core/ops/*.cpp) where
// GLSL leaves a case undefined: NaN propagation, integer division by 0 or -1, signs of remainders,
// pow of negative bases, atan of (0, 0). GLSL has no double-precision exp, log, sin, atan, ...:
// the double overloads at the end are fdlibm's algorithms.
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
  T kiln_round(T x) { return kiln_round_half_even(x); }                                     \
  T kiln_sqrt(T x) { return sqrt(x); }                                                     \
  T kiln_rsqrt(T x) { return one / sqrt(x); }                                              \
  bool kiln_isnan(T x) { return isnan(x); }                                                \
  bool kiln_isinf(T x) { return isinf(x); }                                                \
  /* NaN in either operand propagates (GLSL max may return either; see kiln_nan_bits). */   \
  T kiln_maximum(T a, T b) { return kiln_nan_bits(a) || kiln_nan_bits(b) ? a + b : (a >= b ? a : b); } \
  T kiln_minimum(T a, T b) { return kiln_nan_bits(a) || kiln_nan_bits(b) ? a + b : (a <= b ? a : b); } \
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

// Round half to even by the add that IEEE rounds to nearest even (Vulkan's adds are correctly
// rounded in the default round-to-nearest-even mode, which the double math below assumes too): for
// 0 <= a < 2^23 (2^52 for double), a + 2^23 lies where the spacing is 1, so the sum
// is a rounded to an integer, ties to even, and subtracting 2^23 again is exact (`precise` keeps
// the two from folding). Not GLSL's roundEven: lavapipe's roundEven of doubles depends on the
// host's vector extensions (on an AVX2-only host 0.5, 1.5 and 2.5 gave 0, 1 and 2). Past 2^23 every
// value is an integer. The sign goes back on by its bit: -0.4 and -0.5 give -0, as the CPU's
// nearbyint does.
float kiln_round_half_even(float x) {
  const float a = abs(x);
  if (!(a < 8388608.0)) return x;  // integral, infinite or NaN
  precise const float r = (a + 8388608.0) - 8388608.0;
  return uintBitsToFloat(floatBitsToUint(r) | (floatBitsToUint(x) & 0x80000000u));
}
#ifdef KILN_HAS_FLOAT64
double kiln_round_half_even(double x) {
  const double a = abs(x);
  if (!(a < 4503599627370496.0LF)) return x;
  precise const double r = (a + 4503599627370496.0LF) - 4503599627370496.0LF;
  const uvec2 rb = unpackDouble2x32(r);
  return packDouble2x32(uvec2(rb.x, rb.y | (unpackDouble2x32(x).y & 0x80000000u)));
}
#endif

// Shifts as the CPU's (core/ops/bitwise.cpp): a count outside [0, width) gives 0, or -1 for a right
// shift of a negative value (GLSL leaves such shifts undefined).
int kiln_left_shift(int a, int b) { return (b < 0 || b >= 32) ? 0 : a << b; }
int kiln_right_shift(int a, int b) { return (b < 0 || b >= 32) ? (a < 0 ? -1 : 0) : a >> b; }
uint kiln_left_shift(uint a, uint b) { return b >= 32u ? 0u : a << b; }
uint kiln_right_shift(uint a, uint b) { return b >= 32u ? 0u : a >> b; }

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

#include "elementwise_int64.glsl"
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
  precise const float um1 = u - 1.0;
  if (um1 == -1.0) return -1.0;
  if (isinf(u)) return u;
  return um1 * (x / log(u));  // um1 * x would overflow near the threshold
}
float kiln_log1p(float x) {
  precise const float u = 1.0 + x;  // precise: (1 + x) - 1 must not fold to x (Mesa's NIR does)
  if (u == 1.0) return x;
  if (isinf(u)) return u > 0.0 ? u : kiln_nan();
  precise const float um1 = u - 1.0;
  return log(u) * x / um1;
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

// ---------------------------------------------------------------- double transcendentals
//
// GLSL has no double-precision exp, log, sin, ...: these are fdlibm's algorithms (Sun
// Microsystems, freely distributable; glibc's erf is the same) in double arithmetic, within a few
// ulp of the C library. `precise` keeps the compensated differences (a - b) - c from being
// reassociated or fused; Vulkan does not promise a fused fma (lavapipe rounds the product), so
// exact products are Dekker's. sin, cos and tan reduce by pi/2 with a three-part constant: they
// are accurate for |x| < 2^20 * pi/2 (about 1.6e6) and NaN beyond, where the C library's
// Payne-Hanek reduction would be needed.
#ifdef KILN_HAS_FLOAT64

double kiln_inf_d() { return packDouble2x32(uvec2(0u, 0x7FF00000u)); }
double kiln_nan_d() { return packDouble2x32(uvec2(0u, 0x7FF80000u)); }
// a * b = p + (returned) exactly, for |a|, |b| below 2^996 (Dekker's product, Veltkamp's split).
double kiln_product_error(double a, double b, double p) {
  precise const double ca = 134217729.0LF * a, cb = 134217729.0LF * b;  // 2^27 + 1
  precise const double a_hi = ca - (ca - a), b_hi = cb - (cb - b);
  precise const double a_lo = a - a_hi, b_lo = b - b_hi;
  precise const double e = (((a_hi * b_hi - p) + a_hi * b_lo) + a_lo * b_hi) + a_lo * b_lo;
  return e;
}
// The biased exponent of |x|.
int kiln_exponent_bits(double x) { return int((unpackDouble2x32(x).y >> 20) & 0x7FFu); }
// 2^k for k in [-1022, 1023].
double kiln_pow2(int k) { return packDouble2x32(uvec2(0u, uint(k + 1023) << 20)); }
// y * 2^k for k in [-1076, 1024] with one rounding: y * 2^(k/2) is exact for y near 1.
double kiln_scale(double y, int k) {
  const int h = k / 2;
  precise const double r = (y * kiln_pow2(h)) * kiln_pow2(k - h);
  return r;
}

// e^(hi - lo) * 2^k for |hi - lo| <= ln2 / 2 (e_exp.c's kernel).
double kiln_exp_reduced(double hi, double lo, int k) {
  precise const double r = hi - lo;
  const double t = r * r;
  const double c =
      r - t * (1.66666666666666019037e-01LF +
               t * (-2.77777777770155933842e-03LF +
                    t * (6.61375632143793436117e-05LF +
                         t * (-1.65339022054652515390e-06LF + t * 4.13813679705723846039e-08LF))));
  precise const double y = 1.0LF - ((lo - (r * c) / (2.0LF - c)) - hi);
  return kiln_scale(y, k);
}
// e^(x + x_lo), x_lo below an ulp of x: k = round(x / ln2), x - k * ln2_hi exact (ln2_hi has 32
// significant bits). Past the thresholds the result is inf or 0; near them kiln_scale rounds.
double kiln_exp_of_sum(double x, double x_lo) {
  if (isnan(x)) return x;
  if (x > 709.8LF) return kiln_inf_d();
  if (x < -745.2LF) return 0.0LF;
  const double k = kiln_round_half_even(x * 1.44269504088896338700e+00LF);
  precise const double hi = x - k * 6.93147180369123816490e-01LF;
  precise const double lo = k * 1.90821492927058770002e-10LF - x_lo;
  return kiln_exp_reduced(hi, lo, int(k));
}
double kiln_exp(double x) { return kiln_exp_of_sum(x, 0.0LF); }

// x = 2^k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); x positive and finite.
double kiln_log_reduce(double x, out int k) {
  k = 0;
  if (x < 2.2250738585072014e-308LF) {  // subnormal: scale up by 2^54
    x *= 18014398509481984.0LF;
    k = -54;
  }
  uvec2 w = unpackDouble2x32(x);
  const int hx = int(w.y & 0x000FFFFFu);
  const int i = (hx + 0x95F64) & 0x100000;  // 1 where the mantissa is past sqrt(2): halve it
  k += int(w.y >> 20) - 1023 + (i >> 20);
  w.y = uint(hx | (i ^ 0x3FF00000));
  return packDouble2x32(w) - 1.0LF;
}
// fdlibm's R(s^2): log(1 + f) = 2s + s * R with s = f / (2 + f).
double kiln_log_series(double s) {
  const double z = s * s, w = z * z;
  const double t1 = w * (3.999999999940941908e-01LF + w * (2.222219843214978396e-01LF + w * 1.531383769920937332e-01LF));
  const double t2 =
      z * (6.666666666666735130e-01LF +
           w * (2.857142874366239149e-01LF + w * (1.818357216161805012e-01LF + w * 1.479819860511658591e-01LF)));
  return t1 + t2;
}
double kiln_log(double x) {
  if (isnan(x) || x == kiln_inf_d()) return x;
  if (x < 0.0LF) return kiln_nan_d();
  if (x == 0.0LF) return -kiln_inf_d();
  int k;
  const double f = kiln_log_reduce(x, k);
  const double dk = double(k);
  const double s = f / (2.0LF + f);
  const double hfsq = 0.5LF * f * f;
  precise const double r =
      dk * 6.93147180369123816490e-01LF -
      ((hfsq - (s * (hfsq + kiln_log_series(s)) + dk * 1.90821492927058770002e-10LF)) - f);
  return r;
}
// log(x) as hi + lo to about 2^-60 relative, for pow: s = f / (2 + f) carried as s_hi + s_lo.
double kiln_log_extended(double x, out double lo) {
  int k;
  const double f = kiln_log_reduce(x, k);
  const double dk = double(k);
  precise const double t = 2.0LF + f;
  precise const double t_err = f - (t - 2.0LF);  // 2 + f = t + t_err exactly
  const double s_hi = f / t;
  precise const double st = s_hi * t;
  precise const double rem = (f - st) - kiln_product_error(s_hi, t, st);  // f - s_hi * t, exact
  const double s_lo = (rem - s_hi * t_err) / t;
  // k * ln2_hi + 2 s_hi as a two-sum, then the small terms.
  precise const double a = dk * 6.93147180369123816490e-01LF, b = 2.0LF * s_hi;
  precise const double sum = a + b;
  precise const double bb = sum - a;
  precise const double sum_err = (a - (sum - bb)) + (b - bb);
  precise const double small =
      sum_err + (dk * 1.90821492927058770002e-10LF + (2.0LF * s_lo + s_hi * kiln_log_series(s_hi)));
  precise const double hi = sum + small;
  precise const double hi_err = small - (hi - sum);  // an out parameter is not precise: a variable
  lo = hi_err;
  return hi;
}

// Kahan's forms (as for float): exact near 0, a few ulp elsewhere.
double kiln_expm1(double x) {
  const double u = kiln_exp(x);
  if (u == 1.0LF) return x;
  precise const double um1 = u - 1.0LF;
  if (um1 == -1.0LF) return -1.0LF;
  if (isinf(u)) return u;
  return um1 * (x / kiln_log(u));  // um1 * x would overflow near the threshold
}
double kiln_log1p(double x) {
  precise const double u = 1.0LF + x;  // precise: (1 + x) - 1 must not fold to x
  if (u == 1.0LF) return x;
  if (isinf(u)) return u > 0.0LF ? u : kiln_nan_d();
  precise const double um1 = u - 1.0LF;
  return kiln_log(u) * x / um1;
}
// s_tanh.c: through expm1, ±1 from |x| = 22.
double kiln_tanh(double x) {
  const double a = abs(x);
  if (isnan(x) || a < 2.7755575615628914e-17LF) return x;
  double z;
  if (a >= 22.0LF) {
    z = 1.0LF;
  } else if (a >= 1.0LF) {
    z = 1.0LF - 2.0LF / (kiln_expm1(2.0LF * a) + 2.0LF);
  } else {
    const double t = kiln_expm1(-2.0LF * a);
    z = -t / (t + 2.0LF);
  }
  return x < 0.0LF ? -z : z;
}
// The CPU's two forms: exp of -|x| never overflows.
double kiln_sigmoid(double x) {
  if (x >= 0.0LF) return 1.0LF / (1.0LF + kiln_exp(-x));
  const double e = kiln_exp(x);
  return e / (1.0LF + e);
}

// x = n * pi/2 + (y0 + y1) with |y0 + y1| <= pi/4 (e_rem_pio2.c's medium case): pi/2 in three
// parts of 33 bits, so n * part is exact for n < 2^20; a second and third part only where the
// first cancels.
int kiln_rem_pio2(double x, out double y0, out double y1) {
  const double fn = kiln_round_half_even(x * 6.36619772367581382433e-01LF);
  precise double r = x - fn * 1.57079632673412561417e+00LF;
  precise double w = fn * 6.07710050650619224932e-11LF;
  precise double y = r - w;
  const int j = kiln_exponent_bits(x);
  if (j - kiln_exponent_bits(y) > 16) {
    precise double t = r;
    w = fn * 6.07710050630396597660e-11LF;
    r = t - w;
    w = fn * 2.02226624879595063154e-21LF - ((t - r) - w);
    y = r - w;
    if (j - kiln_exponent_bits(y) > 49) {
      t = r;
      w = fn * 2.02226624871116645580e-21LF;
      r = t - w;
      w = fn * 8.47842766036889956997e-32LF - ((t - r) - w);
      y = r - w;
    }
  }
  // Out parameters are not precise: the compensated tail goes through a precise variable, or a
  // driver may simplify (r - (r - w)) - w to 0 (NVIDIA's reassociates and fuses where GLSL lets it).
  precise const double tail = (r - y) - w;
  y0 = y;
  y1 = tail;
  return int(fn);
}
// sin and cos of x + y on [-pi/4, pi/4] (k_sin.c, k_cos.c).
double kiln_sin_reduced(double x, double y) {
  const double z = x * x, w = z * z;
  const double r = 8.33333333332248946124e-03LF + z * (-1.98412698298579493134e-04LF + z * 2.75573137070700676789e-06LF) +
                   z * w * (-2.50507602534068634195e-08LF + z * 1.58969099521155010221e-10LF);
  const double v = z * x;
  precise const double s = x - ((z * (0.5LF * y - v * r) - y) - v * -1.66666666666666324348e-01LF);
  return s;
}
double kiln_cos_reduced(double x, double y) {
  const double z = x * x, w = z * z;
  const double r = z * (4.16666666666666019037e-02LF + z * (-1.38888888888741095749e-03LF + z * 2.48015872894767294178e-05LF)) +
                   w * w * (-2.75573143513906633035e-07LF + z * (2.08757232129817482790e-09LF + z * -1.13596475577881948265e-11LF));
  const double hz = 0.5LF * z;
  precise const double v = 1.0LF - hz;
  precise const double c = v + (((1.0LF - v) - hz) + (z * r - x * y));
  return c;
}
const double kiln_reduction_limit = 1647099.3291652855LF;  // 2^20 * pi/2
double kiln_sin(double x) {
  if (!(abs(x) <= kiln_reduction_limit)) return isnan(x) ? x : kiln_nan_d();
  if (x == 0.0LF) return x;
  double y0, y1;
  const int n = kiln_rem_pio2(x, y0, y1) & 3;
  const double s = (n & 1) == 0 ? kiln_sin_reduced(y0, y1) : kiln_cos_reduced(y0, y1);
  return n >= 2 ? -s : s;
}
double kiln_cos(double x) {
  if (!(abs(x) <= kiln_reduction_limit)) return isnan(x) ? x : kiln_nan_d();
  double y0, y1;
  const int n = kiln_rem_pio2(x, y0, y1) & 3;
  const double c = (n & 1) == 0 ? kiln_cos_reduced(y0, y1) : kiln_sin_reduced(y0, y1);
  return (n == 1 || n == 2) ? -c : c;
}
// sin / cos of the reduced argument (-cos / sin in odd quadrants): within 2 ulp.
double kiln_tan(double x) {
  if (!(abs(x) <= kiln_reduction_limit)) return isnan(x) ? x : kiln_nan_d();
  if (x == 0.0LF) return x;
  double y0, y1;
  const int n = kiln_rem_pio2(x, y0, y1);
  const double s = kiln_sin_reduced(y0, y1), c = kiln_cos_reduced(y0, y1);
  return (n & 1) == 0 ? s / c : -c / s;
}

// s_erf.c's erf: rational approximations on [0, 0.84375), [0.84375, 1.25), and erfc's asymptotic
// forms through exp up to 6, where erf rounds to ±1.
double kiln_erf(double x) {
  if (isnan(x)) return x;
  const double a = abs(x);
  if (a < 0.84375LF) {
    if (a < 3.725290298461914e-09LF)  // 2^-28
      return 0.125LF * (8.0LF * x + 1.02703333676410069053e+00LF * x);
    const double z = x * x;
    const double r = 1.28379167095512558561e-01LF +
                     z * (-3.25042107247001499370e-01LF +
                          z * (-2.84817495755985104766e-02LF + z * (-5.77027029648944159157e-03LF + z * -2.37630166566501626084e-05LF)));
    const double s =
        1.0LF + z * (3.97917223959155352819e-01LF +
                     z * (6.50222499887672944485e-02LF +
                          z * (5.08130628187576562776e-03LF + z * (1.32494738004321644526e-04LF + z * -3.96022827877536812320e-06LF))));
    return x + x * (r / s);
  }
  double e;
  if (a < 1.25LF) {
    const double s = a - 1.0LF;
    const double p =
        -2.36211856075265944077e-03LF +
        s * (4.14856118683748331666e-01LF +
             s * (-3.72207876035701323847e-01LF +
                  s * (3.18346619901161753674e-01LF +
                       s * (-1.10894694282396677476e-01LF + s * (3.54783043256182359371e-02LF + s * -2.16637559486879084300e-03LF)))));
    const double q =
        1.0LF + s * (1.06420880400844228286e-01LF +
                     s * (5.40397917702171048937e-01LF +
                          s * (7.18286544141962662868e-02LF +
                               s * (1.26171219808761642112e-01LF + s * (1.36370839120290507362e-02LF + s * 1.19844998467991074170e-02LF)))));
    e = 8.45062911510467529297e-01LF + p / q;
  } else if (a >= 6.0LF) {
    e = 1.0LF;
  } else {
    const double s = 1.0LF / (a * a);
    double r, q;
    if (a < 2.857142857142857LF) {  // 1 / 0.35
      r = -9.86494403484714822705e-03LF +
          s * (-6.93858572707181764372e-01LF +
               s * (-1.05586262253232909814e+01LF +
                    s * (-6.23753324503260060396e+01LF +
                         s * (-1.62396669462573470355e+02LF +
                              s * (-1.84605092906711035994e+02LF + s * (-8.12874355063065934246e+01LF + s * -9.81432934416914548592e+00LF))))));
      q = 1.0LF + s * (1.96512716674392571292e+01LF +
                       s * (1.37657754143519042600e+02LF +
                            s * (4.34565877475229228821e+02LF +
                                 s * (6.45387271733267880336e+02LF +
                                      s * (4.29008140027567833386e+02LF +
                                           s * (1.08635005541779435134e+02LF +
                                                s * (6.57024977031928170135e+00LF + s * -6.04244152148580987438e-02LF)))))));
    } else {
      r = -9.86494292470009928597e-03LF +
          s * (-7.99283237680523006574e-01LF +
               s * (-1.77579549177547519889e+01LF +
                    s * (-1.60636384855821916062e+02LF +
                         s * (-6.37566443368389627722e+02LF + s * (-1.02509513161107724954e+03LF + s * -4.83519191608651397019e+02LF)))));
      q = 1.0LF + s * (3.03380607434824582924e+01LF +
                       s * (3.25792512996573918826e+02LF +
                            s * (1.53672958608443695994e+03LF +
                                 s * (3.19985821950859553908e+03LF +
                                      s * (2.55305040643316442583e+03LF + s * (4.74528541206955367215e+02LF + s * -2.24409524465858183362e+01LF))))));
    }
    // -a^2 = -z^2 + (z - a)(z + a) with z = a cut to its high word: z^2 exact.
    const double z = packDouble2x32(uvec2(0u, unpackDouble2x32(a).y));
    const double t = kiln_exp(-z * z - 0.5625LF) * kiln_exp((z - a) * (z + a) + r / q);
    e = 1.0LF - t / a;
  }
  return x < 0.0LF ? -e : e;
}
// The CPU's erfinv_value: Giles' approximation, then two Newton steps on erf(x) - y.
double kiln_erfinv(double y) {
  if (!(y > -1.0LF && y < 1.0LF)) {
    if (y == 1.0LF) return kiln_inf_d();
    if (y == -1.0LF) return -kiln_inf_d();
    return kiln_nan_d();
  }
  const double w0 = -kiln_log((1.0LF - y) * (1.0LF + y));
  double p;
  if (w0 < 5.0LF) {
    const double w = w0 - 2.5LF;
    p = 2.81022636e-08LF;
    p = 3.43273939e-07LF + p * w;
    p = -3.5233877e-06LF + p * w;
    p = -4.39150654e-06LF + p * w;
    p = 0.00021858087LF + p * w;
    p = -0.00125372503LF + p * w;
    p = -0.00417768164LF + p * w;
    p = 0.246640727LF + p * w;
    p = 1.50140941LF + p * w;
  } else {
    const double w = sqrt(w0) - 3.0LF;
    p = -0.000200214257LF;
    p = 0.000100950558LF + p * w;
    p = 0.00134934322LF + p * w;
    p = -0.00367342844LF + p * w;
    p = 0.00573950773LF + p * w;
    p = -0.0076224613LF + p * w;
    p = 0.00943887047LF + p * w;
    p = 1.00167406LF + p * w;
    p = 2.83297682LF + p * w;
  }
  double x = p * y;
  const double two_over_sqrt_pi = 2.0LF / sqrt(3.141592653589793LF);
  for (int i = 0; i < 2; ++i) x -= (kiln_erf(x) - y) / (two_over_sqrt_pi * kiln_exp(-x * x));
  return x;
}
// s_atan.c's kernel: atan(t + c) for finite t >= 0 and c below an ulp of t. The argument is
// reduced to |t'| < 7/16 around 0, 1/2, 1, 3/2 or inf, whose atan is atanhi + atanlo, and an odd
// polynomial of degree 23 takes the rest; c, the caller's first-order correction, joins the small
// terms before the last rounding.
double kiln_atan_kernel(double t, double c) {
  if (t < 3.725290298461914e-09LF) {  // 2^-29: atan(t) = t to the last bit
    precise const double r = t + c;
    return r;
  }
  int id = -1;
  if (t >= 0.4375LF) {
    if (t < 1.1875LF) {
      if (t < 0.6875LF) {
        id = 0;
        t = (2.0LF * t - 1.0LF) / (2.0LF + t);
      } else {
        id = 1;
        t = (t - 1.0LF) / (t + 1.0LF);
      }
    } else if (t < 2.4375LF) {
      id = 2;
      t = (t - 1.5LF) / (1.0LF + 1.5LF * t);
    } else {
      id = 3;
      t = -1.0LF / t;
    }
  }
  const double z = t * t, w = z * z;
  const double s1 =
      z * (3.33333333333329318027e-01LF +
           w * (1.42857142725034663711e-01LF +
                w * (9.09088713343650656196e-02LF +
                     w * (6.66107313738753120669e-02LF +
                          w * (4.97687799461593236017e-02LF + w * 1.62858201153657823623e-02LF)))));
  const double s2 = w * (-1.99999999998764832476e-01LF +
                         w * (-1.11111104054623557880e-01LF +
                              w * (-7.69187620504482999495e-02LF +
                                   w * (-5.83357013379057348645e-02LF + w * -3.65315727442169155270e-02LF))));
  precise const double tail = t * (s1 + s2);
  if (id < 0) {
    precise const double r = t - (tail - c);
    return r;
  }
  // atan(1/2), atan(1), atan(3/2), atan(inf) as hi + lo.
  const double atan_hi[4] = double[4](4.63647609000806093515e-01LF, 7.85398163397448278999e-01LF,
                                      9.82793723247329054082e-01LF, 1.57079632679489655800e+00LF);
  const double atan_lo[4] = double[4](2.26987774529616870924e-17LF, 3.06161699786838301793e-17LF,
                                      1.39033110312309984516e-17LF, 6.12323399573676603587e-17LF);
  precise const double r = atan_hi[id] - (((tail - atan_lo[id]) - c) - t);
  return r;
}
// NaN by its bits: a comparison-based test may be folded away or turned into a min.
bool kiln_isnan_bits(double x) {
  const uvec2 b = unpackDouble2x32(x);
  const uint h = b.y & 0x7FFFFFFFu;
  return h > 0x7FF00000u || (h == 0x7FF00000u && b.x != 0u);
}
// e_atan2.c's cases (signed zeros, infinities, NaN, |y/x| past 2^60) around the kernel, within an
// ulp of the C library. Both operands are first scaled by the same power of two, |x| into [1, 2),
// so y/x cannot overflow even where a division is a reciprocal multiply, and the quotient's
// rounding error, (y - q x) / x with q x exact (Dekker), goes into the kernel as its correction:
// the result does not depend on how the device rounds the division.
double kiln_arctan2(double y, double x) {
  if (kiln_isnan_bits(x) || kiln_isnan_bits(y)) return x + y;
  const double pi = 3.1415926535897931160e+00LF, pi_lo = 1.2246467991473531772e-16LF;
  const double pi_o_2 = 1.5707963267948965580e+00LF, pi_o_4 = 7.8539816339744827900e-01LF;
  const bool x_negative = (unpackDouble2x32(x).y >> 31) != 0u;
  double ax = abs(x), ay = abs(y);
  double r;  // the angle of (|y|, x), in [0, pi]; y's sign is put on it at the end
  if (ay == 0.0LF) {
    r = x_negative ? pi : 0.0LF;
  } else if (ax == 0.0LF) {
    r = pi_o_2;
  } else if (kiln_exponent_bits(ax) == 0x7FF) {
    r = kiln_exponent_bits(ay) == 0x7FF ? (x_negative ? 3.0LF * pi_o_4 : pi_o_4) : (x_negative ? pi : 0.0LF);
  } else if (kiln_exponent_bits(ay) == 0x7FF) {
    r = pi_o_2;
  } else {
    int ex = 0, ey = 0;
    if (kiln_exponent_bits(ax) == 0) {  // subnormal: scale up by 2^54
      ax *= 18014398509481984.0LF;
      ex = -54;
    }
    if (kiln_exponent_bits(ay) == 0) {
      ay *= 18014398509481984.0LF;
      ey = -54;
    }
    ex += kiln_exponent_bits(ax) - 1023;
    ey += kiln_exponent_bits(ay) - 1023;
    const double mx = ax * kiln_pow2(-(kiln_exponent_bits(ax) - 1023));  // in [1, 2), exact
    const double my = ay * kiln_pow2(-(kiln_exponent_bits(ay) - 1023));
    const int k = ey - ex;  // |y/x| = my / mx * 2^k
    const double q = my / mx;
    if (k > 60) {  // atan within 2^-60 of pi/2 on either side: pi/2 rounded
      r = pi_o_2;
    } else {
      double z;
      if (k < -60) {  // atan(t) = t; pi - t rounds to pi
        z = x_negative ? 0.0LF : kiln_scale(q, max(k, -1080));
      } else {
        precise const double p = q * mx;
        precise const double rem = (my - p) - kiln_product_error(q, mx, p);  // my - q mx, exact
        const double t = q * kiln_pow2(k);
        const double c = (rem / mx) * kiln_pow2(k) / (1.0LF + t * t);  // atan' = 1 / (1 + t^2)
        z = kiln_atan_kernel(t, c);
      }
      precise const double supplement = pi - (z - pi_lo);
      r = x_negative ? supplement : z;
    }
  }
  const uvec2 b = unpackDouble2x32(r);
  return packDouble2x32(uvec2(b.x, b.y | (unpackDouble2x32(y).y & 0x80000000u)));
}
// pow as the float version, |x|^y = e^(y log|x|) with log|x| and the product carried in two
// parts: the exponent's absolute error stays near 2^-60 * |y log x|, a few ulp of the result.
double kiln_power(double x, double y) {
  if (y == 0.0LF || x == 1.0LF) return 1.0LF;
  if (isnan(x) || isnan(y)) return kiln_nan_d();
  const double a = abs(x);
  // From 2^52 on every double is an integer (and floor of a double that large is not trusted).
  const bool integral = abs(y) >= 4503599627370496.0LF || floor(y) == y;
  const bool odd = integral && abs(y) < 9007199254740992.0LF && mod(y, 2.0LF) == 1.0LF;
  if (x < 0.0LF && !isinf(x) && !integral && !isinf(y)) return kiln_nan_d();
  double r;
  if (a == 0.0LF) {
    r = y > 0.0LF ? 0.0LF : kiln_inf_d();
  } else if (isinf(a)) {
    r = y > 0.0LF ? kiln_inf_d() : 0.0LF;
  } else if (isinf(y) || a == 1.0LF) {
    r = (a == 1.0LF) ? 1.0LF : ((a > 1.0LF) == (y > 0.0LF) ? kiln_inf_d() : 0.0LF);
  } else {  // log a != 0, so |y| < 2^63 below the thresholds: Dekker's split cannot overflow
    double l_lo;
    const double l_hi = kiln_log_extended(a, l_lo);
    precise const double p_hi = y * l_hi;
    if (abs(p_hi) > 746.0LF) {  // past both thresholds
      r = p_hi > 0.0LF ? kiln_inf_d() : 0.0LF;
    } else {
      precise const double p_lo = kiln_product_error(y, l_hi, p_hi) + y * l_lo;
      r = kiln_exp_of_sum(p_hi, p_lo);
    }
  }
  const bool negative_base = x < 0.0LF || (x == 0.0LF && unpackDouble2x32(x).y != 0u);
  return (negative_base && odd) ? -r : r;
}

#endif  // KILN_HAS_FLOAT64

// Inverse trigonometric and hyperbolic functions, log2, log10 and logaddexp, for float and double.
#include "elementwise_inverse.glsl"

#endif
