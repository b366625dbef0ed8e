// What the attention kernels share: storage by variant, the layout of (batch, head) pairs, tiles
// and push constants. The includer defines
//   IN_T   the stored element: float, double, or uint16_t (float16/bfloat16 bits)
//   ACC_T  what is computed in: float, or double for float64
//   KILN_HALF / KILN_BF16 (with KILN_16BIT) for 16-bit storage, KILN_HAS_FLOAT64 for float64
//   KILN_BR, KILN_BC  rows of a workgroup's own block and of the tiles it streams through shared memory
// Every operand is a 4-d view (N0, N1, L, X) with unit stride along X (the host copies others);
// pair n = n0 * N1 + n1. KILN_T invocations share a row of the own block: each keeps the output
// columns c = lane + KILN_T * i in registers and the scores of keys lane + KILN_T * j. The
// workgroup size (specialization constant 0, set to KILN_BR * KILN_T) is never read from
// gl_WorkGroupSize, and no subgroup size is assumed.
#ifndef KILN_ATTENTION_COMMON_GLSL
#define KILN_ATTENTION_COMMON_GLSL
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/dtype_convert.glsl"
#include "../common/elementwise_ops.glsl"
#include "../common/indexing.glsl"

// Widest head dim (core/ops/attention.cpp sends wider ones to the unfused ops).
#define KILN_MAX_D 128
#define KILN_T 4
#define KILN_PER_T (KILN_MAX_D / KILN_T)

layout(constant_id = 1) const bool kCausal = false;
layout(constant_id = 2) const bool kHasMask = false;

#if defined(KILN_BF16)
#define KILN_TO_ACC(v) kiln_bfloat_to_float(uint(v))
#define KILN_FROM_ACC(v) uint16_t(kiln_float_to_bfloat(v))
#elif defined(KILN_HALF)
#define KILN_TO_ACC(v) kiln_half_to_float(uint(v))
#define KILN_FROM_ACC(v) uint16_t(kiln_float_to_half(v))
#else
#define KILN_TO_ACC(v) ACC_T(v)
#define KILN_FROM_ACC(v) IN_T(v)
#endif

#ifdef KILN_HAS_FLOAT64
ACC_T kiln_acc_inf() { return kiln_inf_d(); }
ACC_T kiln_acc_nan() { return kiln_nan_d(); }
#else
ACC_T kiln_acc_inf() { return kiln_inf(); }
ACC_T kiln_acc_nan() { return kiln_nan(); }
#endif

// A view's place: element (n0, n1, i, x) at off + n0 * s0 + n1 * s1 + i * row + x.
struct Operand {
  int off, s0, s1, row;
};
int kiln_at(Operand o, uint n0, uint n1, uint i) {
  return o.off + int(n0) * o.s0 + int(n1) * o.s1 + int(i) * o.row;
}
// The mask's, with a column stride (0 where broadcast).
struct MaskOperand {
  int off, s0, s1, row, col;
};

// The key limit of query i: keys j <= i + lk - lq are visible under kCausal.
bool kiln_visible(uint i, uint j, uint lq, uint lk) {
  return !kCausal || int(j) <= int(i) + int(lk) - int(lq);
}

ACC_T kiln_scale(uint lo, uint hi) {
#ifdef KILN_HAS_FLOAT64
  return packDouble2x32(uvec2(lo, hi));
#else
  return uintBitsToFloat(lo);
#endif
}

#endif
