// kiln's dtypes as GLSL values, and conversions between them by the CPU's rules (core/half.h,
// convert() in core/cpu/dispatch.h), for kernels generated at run time (core/vulkan/runtime/
// elementwise.cpp). A value of a dtype lives in one GLSL type:
//   bool: bool      uint8, uint16, uint32: uint      int8, int16, int32: int
//   int64: int64_t  uint64: uint64_t
//   float16, bfloat16, float32: float (holding a value the dtype can represent)      float64: double
// kiln_to_<dtype>(v) converts a value of any of these GLSL types to <dtype>: floats to integers
// truncate, integers wrap to the width of the target, anything to bool is `!= 0`, and float16 and
// bfloat16 round to nearest even as the CPU does when it stores them.
// The includer defines KILN_HAS_INT64 (with GL_EXT_shader_explicit_arithmetic_types_int64
// enabled) and KILN_HAS_FLOAT64 when the device has those types.
#ifndef KILN_DTYPE_CONVERT_GLSL
#define KILN_DTYPE_CONVERT_GLSL

// NaN tests on the bits, for code that must keep NaN where GLSL leaves it undefined (min, max,
// comparisons). Without SignedZeroInfNanPreserve a Vulkan driver may assume no NaN: NVIDIA's turned
// `isnan(a) ? a : (a <= b ? a : b)` into a min that drops NaN; an integer test stays as written.
bool kiln_nan_bits(float x) { return (floatBitsToUint(x) & 0x7FFFFFFFu) > 0x7F800000u; }
#ifdef KILN_HAS_FLOAT64
bool kiln_nan_bits(double x) {
  const uvec2 w = unpackDouble2x32(x);
  const uint hi = w.y & 0x7FFFFFFFu;
  return hi > 0x7FF00000u || (hi == 0x7FF00000u && w.x != 0u);
}
#endif

// float16 bits to float, exactly (float16_t::to_float).
float kiln_half_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0u) return uintBitsToFloat(floatBitsToUint(float(m) * 5.9604644775390625e-08) | sign);
  if (e == 31u) return uintBitsToFloat(sign | 0x7F800000u | (m << 13));
  return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// float to float16 bits, rounding to nearest even (float16_t::from_float). Half subnormals are
// rounded in integers, so no float arithmetic (and no denormal flushing) is involved.
uint kiln_float_to_half(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint a = x & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u);
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds to infinity
  if (a < 0x38800000u) {
    // |f| = m * 2^(e - 150); in units of 2^-24 that is m >> (126 - e), rounded.
    const uint e = a >> 23;
    if (e < 102u) return sign;  // below a quarter of the smallest subnormal: rounds to zero
    const uint m = (a & 0x7FFFFFu) | 0x800000u;
    const uint shift = 126u - e;
    uint q = m >> shift;
    const uint rest = m & ((1u << shift) - 1u), half_unit = 1u << (shift - 1u);
    if (rest > half_unit || (rest == half_unit && (q & 1u) != 0u)) q += 1u;
    return sign | q;
  }
  return sign | ((a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13);
}

float kiln_bfloat_to_float(uint h) { return uintBitsToFloat(h << 16); }

// float to bfloat16 bits, rounding to nearest even; NaN stays a quiet NaN (bfloat16_t::from_float).
uint kiln_float_to_bfloat(float f) {
  const uint x = floatBitsToUint(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (x >> 16) | 0x40u;
  return (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
}

bool kiln_to_bool(bool v) { return v; }
bool kiln_to_bool(int v) { return v != 0; }
bool kiln_to_bool(uint v) { return v != 0u; }
bool kiln_to_bool(float v) { return v != 0.0; }

uint kiln_to_uint8(bool v) { return v ? 1u : 0u; }
uint kiln_to_uint8(int v) { return uint(v) & 0xFFu; }
uint kiln_to_uint8(uint v) { return v & 0xFFu; }
uint kiln_to_uint8(float v) { return uint(int(v)) & 0xFFu; }

int kiln_to_int8(bool v) { return v ? 1 : 0; }
int kiln_to_int8(int v) { return bitfieldExtract(v, 0, 8); }
int kiln_to_int8(uint v) { return bitfieldExtract(int(v), 0, 8); }
int kiln_to_int8(float v) { return bitfieldExtract(int(v), 0, 8); }

int kiln_to_int16(bool v) { return v ? 1 : 0; }
int kiln_to_int16(int v) { return bitfieldExtract(v, 0, 16); }
int kiln_to_int16(uint v) { return bitfieldExtract(int(v), 0, 16); }
int kiln_to_int16(float v) { return bitfieldExtract(int(v), 0, 16); }

uint kiln_to_uint16(bool v) { return v ? 1u : 0u; }
uint kiln_to_uint16(int v) { return uint(v) & 0xFFFFu; }
uint kiln_to_uint16(uint v) { return v & 0xFFFFu; }
uint kiln_to_uint16(float v) { return uint(int(v)) & 0xFFFFu; }

int kiln_to_int32(bool v) { return v ? 1 : 0; }
int kiln_to_int32(int v) { return v; }
int kiln_to_int32(uint v) { return int(v); }
int kiln_to_int32(float v) { return int(v); }

uint kiln_to_uint32(bool v) { return v ? 1u : 0u; }
uint kiln_to_uint32(int v) { return uint(v); }
uint kiln_to_uint32(uint v) { return v; }
// A negative float wraps as the CPU's conversion does (through a signed integer).
uint kiln_to_uint32(float v) { return v < 0.0 ? uint(int(v)) : uint(v); }

float kiln_to_float32(bool v) { return v ? 1.0 : 0.0; }
float kiln_to_float32(int v) { return float(v); }
float kiln_to_float32(uint v) { return float(v); }
float kiln_to_float32(float v) { return v; }

#ifdef KILN_HAS_INT64
bool kiln_to_bool(int64_t v) { return v != int64_t(0); }
uint kiln_to_uint8(int64_t v) { return uint(v) & 0xFFu; }
int kiln_to_int8(int64_t v) { return bitfieldExtract(int(v), 0, 8); }
int kiln_to_int16(int64_t v) { return bitfieldExtract(int(v), 0, 16); }
uint kiln_to_uint16(int64_t v) { return uint(v) & 0xFFFFu; }
int kiln_to_int32(int64_t v) { return int(v); }
uint kiln_to_uint32(int64_t v) { return uint(v); }
float kiln_to_float32(int64_t v) { return float(v); }

int64_t kiln_to_int64(bool v) { return v ? int64_t(1) : int64_t(0); }
int64_t kiln_to_int64(int v) { return int64_t(v); }
int64_t kiln_to_int64(uint v) { return int64_t(v); }
int64_t kiln_to_int64(float v) { return int64_t(v); }
int64_t kiln_to_int64(int64_t v) { return v; }

// uint64 wraps to and from the other integers bit for bit; a negative float goes through int64.
bool kiln_to_bool(uint64_t v) { return v != uint64_t(0); }
uint kiln_to_uint8(uint64_t v) { return uint(v) & 0xFFu; }
int kiln_to_int8(uint64_t v) { return bitfieldExtract(int(v), 0, 8); }
int kiln_to_int16(uint64_t v) { return bitfieldExtract(int(v), 0, 16); }
uint kiln_to_uint16(uint64_t v) { return uint(v) & 0xFFFFu; }
int kiln_to_int32(uint64_t v) { return int(v); }
uint kiln_to_uint32(uint64_t v) { return uint(v); }
float kiln_to_float32(uint64_t v) { return float(v); }
int64_t kiln_to_int64(uint64_t v) { return int64_t(v); }

uint64_t kiln_to_uint64(bool v) { return v ? uint64_t(1) : uint64_t(0); }
uint64_t kiln_to_uint64(int v) { return uint64_t(int64_t(v)); }
uint64_t kiln_to_uint64(uint v) { return uint64_t(v); }
uint64_t kiln_to_uint64(float v) { return v < 0.0 ? uint64_t(int64_t(v)) : uint64_t(v); }
uint64_t kiln_to_uint64(int64_t v) { return uint64_t(v); }
uint64_t kiln_to_uint64(uint64_t v) { return v; }
#endif

#ifdef KILN_HAS_FLOAT64
// The CPU tests a value for bool after converting it to float (tiny doubles are false).
bool kiln_to_bool(double v) { return float(v) != 0.0; }
uint kiln_to_uint8(double v) { return uint(int(v)) & 0xFFu; }
int kiln_to_int8(double v) { return bitfieldExtract(int(v), 0, 8); }
int kiln_to_int16(double v) { return bitfieldExtract(int(v), 0, 16); }
uint kiln_to_uint16(double v) { return uint(int(v)) & 0xFFFFu; }
int kiln_to_int32(double v) { return int(v); }
uint kiln_to_uint32(double v) { return v < 0.0LF ? uint(int(v)) : uint(v); }
float kiln_to_float32(double v) { return float(v); }

double kiln_to_float64(bool v) { return v ? 1.0LF : 0.0LF; }
double kiln_to_float64(int v) { return double(v); }
double kiln_to_float64(uint v) { return double(v); }
double kiln_to_float64(float v) { return double(v); }
double kiln_to_float64(double v) { return v; }
#ifdef KILN_HAS_INT64
int64_t kiln_to_int64(double v) { return int64_t(v); }
double kiln_to_float64(int64_t v) { return double(v); }
uint64_t kiln_to_uint64(double v) { return v < 0.0LF ? uint64_t(int64_t(v)) : uint64_t(v); }
double kiln_to_float64(uint64_t v) { return double(v); }
#endif
#endif

// The 16-bit floats go through float32, as the CPU converts them.
#define KILN_ROUND_16(name, to_bits, from_bits, T) \
  float name(T v) { return from_bits(to_bits(kiln_to_float32(v))); }
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, bool)
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, int)
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, uint)
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, float)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, bool)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, int)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, uint)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, float)
#ifdef KILN_HAS_INT64
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, int64_t)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, int64_t)
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, uint64_t)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, uint64_t)
#endif
#ifdef KILN_HAS_FLOAT64
KILN_ROUND_16(kiln_to_float16, kiln_float_to_half, kiln_half_to_float, double)
KILN_ROUND_16(kiln_to_bfloat16, kiln_float_to_bfloat, kiln_bfloat_to_float, double)
#endif
#undef KILN_ROUND_16

#endif
