#pragma once
// Element types, their sets and NumPy/MLX type promotion.
#include <cstdint>
#include <ostream>
#include <string_view>

#include "kiln/core/half.h"

namespace kiln {

// Floats come last (is_floating); the order is in memory only (files use their own codes).
enum class Dtype : uint8_t {
  bool_,
  uint8,
  int8,
  int16,
  uint16,
  int32,
  int64,
  uint32,
  uint64,
  float16,
  bfloat16,
  float32,
  float64
};
inline constexpr int kNumDtypes = 13;

inline constexpr Dtype bool_ = Dtype::bool_;
inline constexpr Dtype uint8 = Dtype::uint8;
inline constexpr Dtype int8 = Dtype::int8;
inline constexpr Dtype int16 = Dtype::int16;
inline constexpr Dtype uint16 = Dtype::uint16;
inline constexpr Dtype int32 = Dtype::int32;
inline constexpr Dtype int64 = Dtype::int64;
inline constexpr Dtype uint32 = Dtype::uint32;
inline constexpr Dtype uint64 = Dtype::uint64;
inline constexpr Dtype float16 = Dtype::float16;
inline constexpr Dtype bfloat16 = Dtype::bfloat16;
inline constexpr Dtype float32 = Dtype::float32;
inline constexpr Dtype float64 = Dtype::float64;

/// Bytes per element.
constexpr int size_of(Dtype t) {
  constexpr int kSizes[] = {1, 1, 1, 2, 2, 4, 8, 4, 8, 2, 2, 4, 8};
  return kSizes[static_cast<int>(t)];
}
constexpr bool is_floating(Dtype t) { return t >= Dtype::float16; }
constexpr bool is_integral(Dtype t) { return t != Dtype::bool_ && t < Dtype::float16; }
constexpr bool is_unsigned(Dtype t) {
  return t == Dtype::bool_ || t == Dtype::uint8 || t == Dtype::uint16 || t == Dtype::uint32 ||
         t == Dtype::uint64;
}

/// The dtype's name as NumPy spells it ("float32", "bool").
std::string_view dtype_name(Dtype t);
std::ostream& operator<<(std::ostream& os, Dtype t);

/// A constexpr set of dtypes, used to state which dtypes an op's kernel accepts.
class DtypeSet {
 public:
  constexpr DtypeSet() = default;
  constexpr DtypeSet(std::initializer_list<Dtype> ts) {
    for (Dtype t : ts) bits_ |= 1u << static_cast<int>(t);
  }
  constexpr bool has(Dtype t) const { return (bits_ >> static_cast<int>(t)) & 1u; }
  constexpr DtypeSet operator|(DtypeSet o) const {
    DtypeSet s;
    s.bits_ = bits_ | o.bits_;
    return s;
  }

  uint32_t bits_ = 0;  // public so DtypeSet can be a template argument (a structural type)
};
inline constexpr DtypeSet kFloatTypes{float16, bfloat16, float32, float64};
inline constexpr DtypeSet kIntTypes{uint8, int8, int16, uint16, int32, int64, uint32, uint64};
inline constexpr DtypeSet kSignedTypes = DtypeSet{int8, int16, int32, int64} | kFloatTypes;
inline constexpr DtypeSet kNumericTypes = kIntTypes | kFloatTypes;
inline constexpr DtypeSet kAllTypes = kNumericTypes | DtypeSet{bool_};

/// NumPy/MLX promotion of two array dtypes (int32 + float16 -> float16, uint32 + int32 -> int64,
/// uint8 + int8 -> int16; uint64 + a signed integer -> float64, as NumPy and JAX with x64).
Dtype promote_types(Dtype a, Dtype b);

/// Kind of a C++ scalar used as an operand; scalars are weak-typed and adopt the array's dtype
/// when they fit its kind (x_bf16 * 2.0 stays bfloat16; x_int * 2.5 becomes float32).
enum class ScalarKind : uint8_t { boolean, integer, floating };
Dtype promote_weak(Dtype array, ScalarKind scalar);
/// The dtype a lone scalar of this kind takes (bool, int32, float32).
Dtype default_dtype(ScalarKind k);

/// The dtype of a C++ type: dtype_of<float>() == float32.
template <class T>
constexpr Dtype dtype_of() {
  if constexpr (std::is_same_v<T, bool>)
    return bool_;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return uint8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return int8;
  else if constexpr (std::is_same_v<T, int16_t>)
    return int16;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return uint16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return int32;
  else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, long long>)
    return int64;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return uint32;
  else if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, unsigned long long>)
    return uint64;
  else if constexpr (std::is_same_v<T, float16_t>)
    return float16;
  else if constexpr (std::is_same_v<T, bfloat16_t>)
    return bfloat16;
  else if constexpr (std::is_same_v<T, float>)
    return float32;
  else if constexpr (std::is_same_v<T, double>)
    return float64;
  else
    static_assert(sizeof(T) == 0, "no kiln dtype for this C++ type");
}

/// True for C++ types that can be a scalar operand (arithmetic types and kiln's halves).
template <class T>
concept Scalar = std::is_arithmetic_v<T> || std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

template <Scalar T>
constexpr ScalarKind scalar_kind() {
  if constexpr (std::is_same_v<T, bool>)
    return ScalarKind::boolean;
  else if constexpr (std::is_integral_v<T>)
    return ScalarKind::integer;
  else
    return ScalarKind::floating;
}

}  // namespace kiln
