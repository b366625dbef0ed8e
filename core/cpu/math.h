#pragma once
// Branch-free float32 math that GCC vectorizes (glibc's scalar expf does not), so exp-bound loops
// run near memory speed. The library is built with -fno-trapping-math, without which GCC will not
// turn the float selections below into vector code. Accuracy: within 1 ulp of std::exp (checked
// at every 1e-4 step over [-103, 88.7]); NaN, +-inf and under/overflow handled.
#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::detail {

/// e^c = 2^n * (returned value), with n = round(c / ln2) stored in `n`; for finite c in the float
/// range of exp. The shared core of exp_f32 and tanh_f32.
inline float exp_mantissa_f32(float c, float& n) {
  // n = round(c / ln2) by the 1.5 * 2^23 trick (no SSE4.1 round instruction needed).
  n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // Cody-Waite reduction: r = c - n * ln2 in two parts, so r keeps full precision.
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float exp_f32(float x) {
  const float lo = x < -104.0f ? -104.0f : x;
  const float c = lo > 88.8f ? 88.8f : lo;
  float n;
  const float e = exp_mantissa_f32(c, n);
  // 2^n in two factors so n = 128 (near FLT_MAX) and n = -150 (subnormal results) stay representable.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t h = ni >> 1;
  const float v = e * std::bit_cast<float>((h + 127) << 23) * std::bit_cast<float>((ni - h + 127) << 23);
  const float over = x > 88.8f ? __builtin_inff() : v;
  const float under = x < -104.0f ? 0.0f : over;
  return x != x ? x : under;
}

/// tanh: an odd polynomial for |x| < 0.625 (where 1 - 2/(e^2x + 1) would cancel), the exp form
/// above it, +-1 past 10 (float rounds tanh to 1 from 9.01 on). Within 1.4 ulp of std::tanh
/// (tests/core/unary_test.cpp sweeps exp, tanh and sigmoid against libm).
inline float tanh_f32(float x) {
  // Written for the fewest vector instructions, since compile's fused chains spend most of their
  // time here: fabs, min and copysign are one instruction each where selections were two or
  // three, and a NaN x takes the polynomial branch, which returns it without a separate test.
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  // e^(2a) for 2a in [0, 20]: no overflow, underflow or NaN to handle, and 2^n fits one factor;
  // fewer ops than exp_f32.
  const float c = a < 10.0f ? a : 10.0f;
  float n;
  const float m = exp_mantissa_f32(c + c, n);
  const float e = m * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float big = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return a >= 0.625f ? big : small;
}

}  // namespace kiln::detail
