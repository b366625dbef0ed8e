// The elementwise math of the GPU, continued (included at the end of elementwise_ops.glsl, whose
// exp, log, expm1, log1p and arctan2 it builds on, float and double): the functions the GLSL
// snippets of core/ops/unary_more.cpp and binary.cpp (logaddexp) call.
#ifndef KILN_ELEMENTWISE_INVERSE_GLSL
#define KILN_ELEMENTWISE_INVERSE_GLSL

// ---------------------------------------------------------------- inverse trig, hyperbolic, logs
//
// One body for float and double (stamped by KILN_MORE_FLOAT after each type's exp, log, expm1,
// log1p and arctan2 exist): fdlibm's forms, accurate near 0 and free of overflow for large |x|.
// Past 2^28 asinh and acosh are log(|x|) + ln 2. arcsin and arccos are arctan2 of
// (x, sqrt((1 - x)(1 + x))); log2 splits off the exponent (exact at powers of 2).
#define KILN_MORE_FLOAT(T, LN2, INV_LN2, INV_LN10, INF, NAN, NORMAL_MIN, SUBNORMAL_SCALE, SUBNORMAL_BITS) \
  T kiln_with_sign_of(T r, T x) { return x < T(0) ? -r : (x == T(0) ? x : r); }                 \
  /* Outside [-1, 1] (and NaN) sqrt of a negative is left undefined by Vulkan: NaN explicitly. */  \
  T kiln_arcsin(T x) {                                                                          \
    if (!(abs(x) <= T(1))) return NAN;                                                          \
    return kiln_with_sign_of(kiln_arctan2(abs(x), sqrt((T(1) - x) * (T(1) + x))), x);           \
  }                                                                                             \
  T kiln_arccos(T x) {                                                                          \
    if (!(abs(x) <= T(1))) return NAN;                                                          \
    return kiln_arctan2(sqrt((T(1) - x) * (T(1) + x)), x);                                      \
  }                                                                                             \
  T kiln_arctan(T x) { return kiln_with_sign_of(kiln_arctan2(abs(x), T(1)), x); }               \
  T kiln_sinh(T x) {                                                                            \
    const T a = abs(x);                                                                         \
    T r;                                                                                        \
    if (a < T(22)) {                                                                            \
      const T t = kiln_expm1(a);                                                                \
      r = T(0.5) * (t + t / (t + T(1)));                                                        \
    } else {                                                                                    \
      const T h = kiln_exp(T(0.5) * a);                                                         \
      r = (T(0.5) * h) * h;                                                                     \
    }                                                                                           \
    return kiln_with_sign_of(r, x);                                                             \
  }                                                                                             \
  T kiln_cosh(T x) {                                                                            \
    const T a = abs(x);                                                                         \
    if (a < T(22)) {                                                                            \
      const T e = kiln_exp(a);                                                                  \
      return T(0.5) * (e + T(1) / e);                                                           \
    }                                                                                           \
    const T h = kiln_exp(T(0.5) * a);                                                           \
    return (T(0.5) * h) * h;                                                                    \
  }                                                                                             \
  T kiln_arcsinh(T x) {                                                                         \
    const T a = abs(x);                                                                         \
    T r;                                                                                        \
    if (a > T(268435456))                                                                       \
      r = kiln_log(a) + LN2;                                                                    \
    else if (a > T(2))                                                                          \
      r = kiln_log(T(2) * a + T(1) / (sqrt(a * a + T(1)) + a));                                 \
    else                                                                                        \
      r = kiln_log1p(a + a * a / (T(1) + sqrt(T(1) + a * a)));                                  \
    return kiln_with_sign_of(r, x);                                                             \
  }                                                                                             \
  T kiln_arccosh(T x) {                                                                         \
    if (!(x >= T(1))) return NAN;                                                               \
    if (x > T(268435456)) return kiln_log(x) + LN2;                                             \
    if (x > T(2)) return kiln_log(T(2) * x - T(1) / (x + sqrt(x * x - T(1))));                  \
    const T t = x - T(1);                                                                       \
    return kiln_log1p(t + sqrt(T(2) * t + t * t));                                              \
  }                                                                                             \
  T kiln_arctanh(T x) {                                                                         \
    const T a = abs(x);                                                                         \
    if (!(a <= T(1))) return NAN;                                                               \
    if (a == T(1)) return x > T(0) ? INF : -INF;                                                \
    const T r = a < T(0.5) ? T(0.5) * kiln_log1p(T(2) * a + T(2) * a * a / (T(1) - a))          \
                           : T(0.5) * kiln_log1p(T(2) * a / (T(1) - a));                        \
    return kiln_with_sign_of(r, x);                                                             \
  }                                                                                             \
  /* x = m 2^e with m in [sqrt(1/2), sqrt(2)): e + log1p(m - 1) / ln 2, m - 1 exact (Sterbenz), */ \
  /* so powers of 2 are exact and nothing cancels below them; subnormals are scaled up first.   */ \
  T kiln_log2(T x) {                                                                            \
    if (!(x > T(0)) || isinf(x)) return kiln_log(x) * INV_LN2; /* 0, < 0, inf, NaN */           \
    int shift = 0;                                                                              \
    if (x < NORMAL_MIN) {                                                                       \
      x *= SUBNORMAL_SCALE;                                                                     \
      shift = SUBNORMAL_BITS;                                                                   \
    }                                                                                           \
    int e;                                                                                      \
    T m = frexp(x, e); /* m in [0.5, 1) */                                                      \
    if (m < T(0.70710678118654752)) {                                                           \
      m *= T(2);                                                                                \
      e -= 1;                                                                                   \
    }                                                                                           \
    return T(e - shift) + kiln_log1p(m - T(1)) * INV_LN2;                                       \
  }                                                                                             \
  T kiln_log10(T x) { return kiln_log(x) * INV_LN10; }                                          \
  T kiln_logaddexp(T a, T b) {                                                                  \
    if (kiln_nan_bits(a) || kiln_nan_bits(b)) return a + b;                                     \
    if (a == b) return a + LN2; /* also equal infinities, where a - b is NaN */                 \
    return max(a, b) + kiln_log1p(kiln_exp(-abs(a - b)));                                       \
  }

KILN_MORE_FLOAT(float, 0.6931471805599453, 1.4426950408889634, 0.4342944819032518, kiln_inf(), kiln_nan(),
                1.1754943508222875e-38, 16777216.0, 24)

#ifdef KILN_HAS_FLOAT64
KILN_MORE_FLOAT(double, 0.6931471805599453094LF, 1.4426950408889634074LF, 0.43429448190325182765LF,
                kiln_inf_d(), kiln_nan_d(), 2.2250738585072014e-308LF, 18014398509481984.0LF, 54)
#endif

#undef KILN_MORE_FLOAT

#endif
