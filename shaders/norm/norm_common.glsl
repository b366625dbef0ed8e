// What norm_rows.comp and norm_rows_vjp.comp share: the kinds, the layout of rows over a
// workgroup, loads and stores by variant, and the shared-memory reductions of a row. The includer
// defines:
//   IN_T          the stored element: float, double, or uint16_t (float16/bfloat16 bits)
//   ACC_T         what a row is computed in: float, or double for float64
//   KILN_HALF     IN_T holds float16 bits      KILN_BF16   IN_T holds bfloat16 bits
//   KILN_16BIT    with either of them (16-bit storage; the host checks the device has it)
//   KILN_HAS_FLOAT64  for the float64 variant (elementwise_ops.glsl's double exp and log)
//
// Layout: p.tpr invocations take one row (a power of two dividing the workgroup, so short rows
// share one), and each walks its row in chunks of tpr * KILN_ITEMS elements, element
// c = chunk * span + k * tpr + lane: coalesced loads. A row of at most one chunk stays in
// registers after its first read; a longer one is read again by each pass. Reductions join the
// invocations' partials in a shared-memory tree, with no subgroup size assumed.
#ifndef KILN_NORM_COMMON_GLSL
#define KILN_NORM_COMMON_GLSL
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/dtype_convert.glsl"
#include "../common/elementwise_ops.glsl"
#include "../common/indexing.glsl"

// detail::RowNorm (core/cpu/norm.h).
#define KIND_SOFTMAX 0u
#define KIND_LOG_SOFTMAX 1u
#define KIND_LAYER_NORM 2u
#define KIND_RMS_NORM 3u
layout(constant_id = 1) const uint kKind = 0u;

// Elements one invocation keeps per chunk.
#define KILN_ITEMS 16

shared ACC_T kiln_part_a[kWorkgroupSize];
shared ACC_T kiln_part_b[kWorkgroupSize];

// Loads and stores of IN_T. 16-bit values are bits (uint16_t exists only in buffers), converted
// by hand, rounding as the CPU stores float16/bfloat16 (to nearest even).
#if defined(KILN_BF16)
float kiln_bits_to_acc(uint h) { return kiln_bfloat_to_float(h); }
uint kiln_acc_to_bits(float v) { return kiln_float_to_bfloat(v); }
#elif defined(KILN_HALF)
float kiln_bits_to_acc(uint h) { return kiln_half_to_float(h); }
uint kiln_acc_to_bits(float v) { return kiln_float_to_half(v); }
#endif
#ifdef KILN_16BIT
#define KILN_TO_ACC(v) kiln_bits_to_acc(uint(v))
#define KILN_FROM_ACC(v) uint16_t(kiln_acc_to_bits(v))
#else
#define KILN_TO_ACC(v) (v)
#define KILN_FROM_ACC(v) (v)
#endif

#ifdef KILN_HAS_FLOAT64
ACC_T kiln_acc_inf() { return kiln_inf_d(); }
#else
ACC_T kiln_acc_inf() { return kiln_inf(); }
#endif

// This invocation's place: its row (>= rows past the last one) and lane within it.
struct RowSlot {
  uint tid, lane, tpr, row;
};
RowSlot kiln_row_slot(uint tpr) {
  RowSlot s;
  s.tid = gl_LocalInvocationID.x;
  s.tpr = tpr;
  s.lane = s.tid & (tpr - 1u);
  const uint group = kiln_group_id();
  s.row = group * (kWorkgroupSize / tpr) + s.tid / tpr;
  return s;
}

// The sum of v over the invocations of this row, for each of them. Every invocation of the
// workgroup must call it (it holds barriers); the first barrier lets a call follow another.
ACC_T kiln_row_sum(RowSlot s, ACC_T v) {
  barrier();
  kiln_part_a[s.tid] = v;
  barrier();
  for (uint width = s.tpr / 2u; width > 0u; width /= 2u) {
    if (s.lane < width) kiln_part_a[s.tid] += kiln_part_a[s.tid + width];
    barrier();
  }
  return kiln_part_a[s.tid - s.lane];
}

// Two sums at once.
void kiln_row_sum2(RowSlot s, inout ACC_T a, inout ACC_T b) {
  barrier();
  kiln_part_a[s.tid] = a;
  kiln_part_b[s.tid] = b;
  barrier();
  for (uint width = s.tpr / 2u; width > 0u; width /= 2u) {
    if (s.lane < width) {
      kiln_part_a[s.tid] += kiln_part_a[s.tid + width];
      kiln_part_b[s.tid] += kiln_part_b[s.tid + width];
    }
    barrier();
  }
  a = kiln_part_a[s.tid - s.lane];
  b = kiln_part_b[s.tid - s.lane];
}

// s * exp(m - m_new): a partial sum of exponentials relative to m, moved to m_new >= m. An empty
// partial (s = 0, m = -inf) stays 0 rather than 0 * exp(-inf + inf) = NaN.
ACC_T kiln_rescale(ACC_T s, ACC_T m, ACC_T m_new) {
  return s == ACC_T(0) ? ACC_T(0) : s * kiln_exp(m - m_new);
}

// Joins the invocations' (max, sum of exp(x - max)) pairs of this row; NaN and +inf elements
// make the sum NaN, as on the CPU. Every invocation must call it.
void kiln_row_softmax_stats(RowSlot s, inout ACC_T m, inout ACC_T sum) {
  barrier();
  kiln_part_a[s.tid] = m;
  kiln_part_b[s.tid] = sum;
  barrier();
  for (uint width = s.tpr / 2u; width > 0u; width /= 2u) {
    if (s.lane < width) {
      const ACC_T m1 = kiln_part_a[s.tid], m2 = kiln_part_a[s.tid + width];
      const ACC_T top = m2 > m1 ? m2 : m1;
      kiln_part_b[s.tid] =
          kiln_rescale(kiln_part_b[s.tid], m1, top) + kiln_rescale(kiln_part_b[s.tid + width], m2, top);
      kiln_part_a[s.tid] = top;
    }
    barrier();
  }
  m = kiln_part_a[s.tid - s.lane];
  sum = kiln_part_b[s.tid - s.lane];
}

#endif
