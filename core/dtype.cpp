#include "kiln/core/dtype.h"

#include <array>

namespace kiln {

std::string_view dtype_name(Dtype t) {
  constexpr std::string_view kNames[] = {"bool",   "uint8",   "int8",     "int32",   "int64",
                                         "uint32", "float16", "bfloat16", "float32", "float64"};
  return kNames[static_cast<int>(t)];
}

std::ostream& operator<<(std::ostream& os, Dtype t) { return os << dtype_name(t); }

namespace {
// Rows and columns in Dtype order. int16 is absent, so uint8+int8 and int8+uint32 widen further
// than NumPy would (int32 and int64).
constexpr Dtype b = bool_, u8 = uint8, i8 = int8, i32 = int32, i64 = int64, u32 = uint32, f16 = float16,
                bf = bfloat16, f32 = float32, f64 = float64;
constexpr std::array<std::array<Dtype, kNumDtypes>, kNumDtypes> kPromote = {{
    /* bool */ {b, u8, i8, i32, i64, u32, f16, bf, f32, f64},
    /* u8   */ {u8, u8, i32, i32, i64, u32, f16, bf, f32, f64},
    /* i8   */ {i8, i32, i8, i32, i64, i64, f16, bf, f32, f64},
    /* i32  */ {i32, i32, i32, i32, i64, i64, f16, bf, f32, f64},
    /* i64  */ {i64, i64, i64, i64, i64, i64, f16, bf, f32, f64},
    /* u32  */ {u32, u32, i64, i64, i64, u32, f16, bf, f32, f64},
    /* f16  */ {f16, f16, f16, f16, f16, f16, f16, f32, f32, f64},
    /* bf16 */ {bf, bf, bf, bf, bf, bf, f32, bf, f32, f64},
    /* f32  */ {f32, f32, f32, f32, f32, f32, f32, f32, f32, f64},
    /* f64  */ {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64},
}};
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
