// What scan_rows.comp and scan_cols.comp share: the buffers, the specialization constants, and
// loads, stores and arithmetic by variant. The includer enables the extensions its variant needs
// and defines:
//   ACC_T             the accumulator: double (float32 and float64 inputs; float32 too where the
//                     device lacks float64), float (float16 and bfloat16; float32 max and min),
//                     uint (8- and 32-bit integers and bool: sums and products wrap mod 2^32, as the
//                     CPU's do in the unsigned type of the output; unsigned max and min), int
//                     (signed max and min of int8 and int32), uint64_t (int64 sums and products),
//                     int64_t (int64 max and min)
//   KILN_ACC_SIGNED   ACC_T is int or int64_t
//   KILN_HAS_FLOAT64  ACC_T is double (elementwise_ops.glsl's double exp and log for logaddexp)
//   KILN_WORDS        the input is read as uint words (kInType says how), so 8- and 16-bit inputs
//                     need no 8- or 16-bit storage; otherwise it is an ACC_T array
//   KILN_ACC_FLOAT    ACC_T is a float type (a 32-bit word is its bits)
//   KILN_OUT_16       the output is float16 or bfloat16 (kOutType), stored as uint16_t from the
//                     float accumulator with the CPU's rounding; otherwise it is OUT_T
// Binding 1 is the output, or (kTotals) the ACC_T total of each logical row; binding 2 holds the
// ACC_T value each logical row starts from (kCarry): the combined totals of the pieces before it.
#ifndef KILN_SCAN_COMMON_GLSL
#define KILN_SCAN_COMMON_GLSL
#include "../common/indexing.glsl"
#include "../common/dtype_convert.glsl"
#ifdef KILN_ACC_FLOAT
#include "../common/elementwise_ops.glsl"
#endif

// The combine: 0 sum, 1 product, 2 max, 3 min, 4 logaddexp (vk::ScanOp).
layout(constant_id = 1) const uint kOp = 0u;
// KILN_WORDS: 0 a 32-bit word, 1 float16, 2 bfloat16, 3 uint8 or bool, 4 int8.
layout(constant_id = 2) const uint kInType = 0;
layout(constant_id = 3) const uint kOutType = 0;  // KILN_OUT_16: 0 float16, 1 bfloat16
layout(constant_id = 4) const bool kTotals = false;
layout(constant_id = 5) const bool kCarry = false;
layout(constant_id = 6) const bool kInclusive = true;
layout(constant_id = 7) const bool kReverse = false;

#ifdef KILN_WORDS
layout(std430, set = 0, binding = 0) readonly buffer In { uint x_words[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer In { ACC_T x[]; };
#endif
#ifdef KILN_OUT_16
layout(std430, set = 0, binding = 1) writeonly buffer Out { uint16_t y[]; };
#else
layout(std430, set = 0, binding = 1) writeonly buffer Out { OUT_T y[]; };
#endif
layout(std430, set = 0, binding = 1) writeonly buffer Totals { ACC_T totals[]; };
layout(std430, set = 0, binding = 2) readonly buffer Carry { ACC_T carry_in[]; };

#ifdef KILN_ACC_FLOAT
#define KILN_FROM_WORD(w) uintBitsToFloat(w)
#else
#define KILN_FROM_WORD(w) (w)
#endif

// The lowest and highest values of ACC_T: what max and min scans start from.
#if defined(KILN_ACC_FLOAT)
#define KILN_ACC_LOWEST ACC_T(uintBitsToFloat(0xFF800000u))
#define KILN_ACC_HIGHEST ACC_T(uintBitsToFloat(0x7F800000u))
#elif defined(KILN_INT64) && defined(KILN_ACC_SIGNED)
#define KILN_ACC_LOWEST int64_t(0x8000000000000000ul)
#define KILN_ACC_HIGHEST int64_t(0x7FFFFFFFFFFFFFFFul)
#elif defined(KILN_INT64)
#define KILN_ACC_LOWEST uint64_t(0ul)
#define KILN_ACC_HIGHEST uint64_t(0xFFFFFFFFFFFFFFFFul)
#elif defined(KILN_ACC_SIGNED)
#define KILN_ACC_LOWEST int(0x80000000u)
#define KILN_ACC_HIGHEST int(0x7FFFFFFF)
#else
#define KILN_ACC_LOWEST 0u
#define KILN_ACC_HIGHEST 0xFFFFFFFFu
#endif

// 0, 1, the lowest and highest values, and -inf (the logaddexp of nothing).
ACC_T kiln_scan_identity() {
  if (kOp == 1u) return ACC_T(1);
  if (kOp == 2u || kOp == 4u) return KILN_ACC_LOWEST;
  if (kOp == 3u) return KILN_ACC_HIGHEST;
  return ACC_T(0);
}
// a (what comes before) combined with b: max and min keep the earlier of equal values and
// propagate NaN, logaddexp is elementwise_ops.glsl's (the CPU's scan_combine in core/ops/scan.cpp).
ACC_T kiln_scan_combine(ACC_T a, ACC_T b) {
  if (kOp == 1u) return a * b;
#ifdef KILN_ACC_FLOAT
  if ((kOp == 2u || kOp == 3u) && (kiln_nan_bits(a) || kiln_nan_bits(b))) return a + b;
  if (kOp == 4u) return kiln_logaddexp(a, b);
#endif
  if (kOp == 2u) return a >= b ? a : b;
  if (kOp == 3u) return a <= b ? a : b;
  return a + b;
}

// Element i (in elements of the input's dtype) as an ACC_T.
ACC_T kiln_scan_load(int i) {
#ifdef KILN_WORDS
  const uint e = uint(i);
  if (kInType == 1u || kInType == 2u) {
    const uint h = bitfieldExtract(x_words[e >> 1], int(e & 1u) * 16, 16);
    return ACC_T(kInType == 1u ? kiln_half_to_float(h) : kiln_bfloat_to_float(h));
  }
  if (kInType == 3u) return ACC_T(bitfieldExtract(x_words[e >> 2], int(e & 3u) * 8, 8));
  if (kInType == 4u) return ACC_T(uint(bitfieldExtract(int(x_words[e >> 2]), int(e & 3u) * 8, 8)));
  return ACC_T(KILN_FROM_WORD(x_words[e]));
#else
  return x[i];
#endif
}

void kiln_scan_store(uint i, ACC_T v) {
#ifdef KILN_OUT_16
  y[i] = uint16_t(kOutType == 0u ? kiln_float_to_half(v) : kiln_float_to_bfloat(v));
#else
  y[i] = OUT_T(v);
#endif
}
#endif
