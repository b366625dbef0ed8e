#include "kiln/core/dtype.h"

#include <array>

namespace kiln {

std::string_view dtype_name(Dtype t) {
  constexpr std::string_view kNames[] = {"bool",     "uint8",   "int8",   "int16",  "uint16",
                                         "int32",    "int64",   "uint32", "uint64", "float16",
                                         "bfloat16", "float32", "float64"};
  return kNames[static_cast<int>(t)];
}

std::ostream& operator<<(std::ostream& os, Dtype t) { return os << dtype_name(t); }

namespace {
constexpr int bits_of(Dtype t) { return size_of(t) * 8; }
constexpr Dtype signed_of_bits(int bits) {
  return bits <= 8 ? int8 : bits <= 16 ? int16 : bits <= 32 ? int32 : int64;
}

// NumPy's rules between integers, JAX's and MLX's where a float meets an integer (the float wins,
// whatever the integer's width): the float width is the user's choice.
constexpr Dtype promote_rule(Dtype a, Dtype b) {
  if (a == b || b == bool_) return a;
  if (a == bool_) return b;
  if (is_floating(a) || is_floating(b)) {
    if (!is_floating(b)) return a;
    if (!is_floating(a)) return b;
    // float16 with bfloat16: the smallest float holding both is float32, as in JAX.
    if (size_of(a) == size_of(b)) return size_of(a) == 2 ? float32 : a;
    return size_of(a) > size_of(b) ? a : b;
  }
  if (is_unsigned(a) == is_unsigned(b)) return size_of(a) > size_of(b) ? a : b;
  const Dtype u = is_unsigned(a) ? a : b, i = is_unsigned(a) ? b : a;
  if (bits_of(i) > bits_of(u)) return i;
  // A signed type twice the unsigned one's width holds both; past 64 bits only a float does.
  return bits_of(u) == 64 ? float64 : signed_of_bits(2 * bits_of(u));
}

constexpr auto kPromote = [] {
  std::array<std::array<Dtype, kNumDtypes>, kNumDtypes> table{};
  for (int a = 0; a < kNumDtypes; ++a)
    for (int b = 0; b < kNumDtypes; ++b)
      table[a][b] = promote_rule(static_cast<Dtype>(a), static_cast<Dtype>(b));
  return table;
}();
}  // namespace

Dtype promote_types(Dtype a, Dtype b) { return kPromote[static_cast<int>(a)][static_cast<int>(b)]; }

Dtype default_dtype(ScalarKind k) {
  switch (k) {
    case ScalarKind::boolean:
      return bool_;
    case ScalarKind::integer:
      return int32;
    case ScalarKind::floating:
      return float32;
  }
  return float32;
}

Dtype promote_weak(Dtype array, ScalarKind scalar) {
  switch (scalar) {
    case ScalarKind::boolean:
      return array;
    case ScalarKind::integer:
      return array == bool_ ? int32 : array;
    case ScalarKind::floating:
      return is_floating(array) ? array : float32;
  }
  return array;
}

}  // namespace kiln
