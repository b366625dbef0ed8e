#pragma once
// float16 and bfloat16 storage types. Arithmetic happens in float: kernels convert on load and
// round (to nearest even) on store, as PyTorch's and MLX's CPU paths do.
#include <bit>
#include <compare>
#include <cstdint>
#include <type_traits>

namespace kiln {

/// IEEE 754 binary16.
struct float16_t {
  uint16_t bits = 0;
  float16_t() = default;
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  float16_t(T v) : bits(from_float(static_cast<float>(v))) {}  // NOLINT: numeric conversion
  operator float() const { return to_float(bits); }            // NOLINT
  // Compared as floats (NaN unordered, -0 == 0). Stated here so that `a == b` does not weigh
  // float's built-in == against the array operators' (const Operand&, const Operand&).
  friend bool operator==(float16_t a, float16_t b) { return float(a) == float(b); }
  friend std::partial_ordering operator<=>(float16_t a, float16_t b) { return float(a) <=> float(b); }
  // Against a number (h == 1.0f, h < 0), compared in double.
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator==(float16_t a, T b) {
    return static_cast<double>(float(a)) == static_cast<double>(b);
  }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend std::partial_ordering operator<=>(float16_t a, T b) {
    return static_cast<double>(float(a)) <=> static_cast<double>(b);
  }
  static constexpr float16_t from_bits(uint16_t b) {
    float16_t h;
    h.bits = b;
    return h;
  }

  static uint16_t from_float(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {                                               // subnormal or zero
      const float m = std::bit_cast<float>(abs) + 0.5f;  // adds 2^-1 so the low bits are 2^-24 units
      return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(m) - 0x3f000000u));
    }
    const uint32_t odd = (abs >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((abs + 0xc8000fffu + odd) >> 13));
  }
  static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: man * 2^-24
      const float v = static_cast<float>(man) * 5.9604644775390625e-08f;
      return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
  }
};

/// bfloat16: the top half of a float32.
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  bfloat16_t(T v) : bits(from_float(static_cast<float>(v))) {}                                // NOLINT
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }  // NOLINT
  friend bool operator==(bfloat16_t a, bfloat16_t b) { return float(a) == float(b); }  // as float16_t's
  friend std::partial_ordering operator<=>(bfloat16_t a, bfloat16_t b) { return float(a) <=> float(b); }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator==(bfloat16_t a, T b) {
    return static_cast<double>(float(a)) == static_cast<double>(b);
  }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend std::partial_ordering operator<=>(bfloat16_t a, T b) {
    return static_cast<double>(float(a)) <=> static_cast<double>(b);
  }
  static constexpr bfloat16_t from_bits(uint16_t b) {
    bfloat16_t h;
    h.bits = b;
    return h;
  }
  static uint16_t from_float(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
};

/// The type kernels compute in: float for the 16-bit floats, the type itself otherwise.
template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<float16_t> {
  using type = float;
};
template <>
struct ComputeType<bfloat16_t> {
  using type = float;
};
template <class T>
using compute_t = typename ComputeType<T>::type;

}  // namespace kiln
