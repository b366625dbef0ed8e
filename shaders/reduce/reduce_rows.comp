#version 450
// out[r] = reduce(kind) of the row r of a [rows, cols] block (strided columns), for every
// ReduceKind (the kind is specialization constant 1, numbered as core/cpu/reduce.h). A workgroup
// takes kWorkgroupSize / threads_per_row rows: each invocation folds a strided slice of its row,
// then a shared-memory tree joins the partials (no subgroup size is assumed).
//
// Long rows are split by the host into `splits` chunks of `chunk` columns: logical row
// i = row * splits + s covers columns [s * chunk, (s + 1) * chunk) of row `row`, and a second pass
// reduces the partials. Float inputs accumulate in float; integer sums and products wrap.
// max/min of floats propagate NaN (a NaN wins, as on the CPU).
//
// Bool input (KILN_IN_BOOL) is read as bytes of uint words, and bool output (kOutBool: all/any,
// and max/min of bools) written as bytes of uint words with atomics, so neither needs 8-bit
// storage; each byte has one writer, and the atomics keep the other bytes of its word intact.
// kiln-variant: reduce_rows_f32 -DIN_T=float -DACC_T=float -DOUT_T=float -DKILN_FLOAT
// kiln-variant: reduce_rows_i32 -DIN_T=int -DACC_T=int -DOUT_T=int
// kiln-variant: reduce_rows_b8_i32 -DKILN_IN_BOOL -DACC_T=int -DOUT_T=int
// kiln-variant: reduce_rows_f16 -DIN_T=float16_t -DACC_T=float -DOUT_T=float16_t -DKILN_FLOAT -DKILN_16BIT
// kiln-variant: reduce_rows_f16_f32 -DIN_T=float16_t -DACC_T=float -DOUT_T=float -DKILN_FLOAT -DKILN_16BIT
// kiln-variant: reduce_rows_f32_f16 -DIN_T=float -DACC_T=float -DOUT_T=float16_t -DKILN_FLOAT -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/indexing.glsl"

layout(constant_id = 1) const uint kKind = 0;  // ReduceKind: sum, prod, max, min, all, any, mean
layout(constant_id = 2) const bool kOutBool = false;

#define KIND_SUM 0
#define KIND_PROD 1
#define KIND_MAX 2
#define KIND_MIN 3
#define KIND_ALL 4
#define KIND_ANY 5
#define KIND_MEAN 6

#ifdef KILN_IN_BOOL
layout(std430, set = 0, binding = 0) readonly buffer In { uint x_words[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer In { IN_T x[]; };
#endif
layout(std430, set = 0, binding = 1) writeonly buffer Out { OUT_T y[]; };
layout(std430, set = 0, binding = 1) buffer OutWords { uint y_words[]; };

layout(push_constant) uniform Push {
  uint rows;  // logical rows (rows of the block times splits)
  uint cols;
  uint row_stride;
  uint col_stride;  // 1, except for bool inputs (which the host cannot copy densely)
  uint in_offset;
  uint out_offset;
  uint splits;
  uint chunk;
  uint threads_per_row;  // a power of two dividing kWorkgroupSize
  float divisor;         // mean: the number of elements reduced
} p;

shared ACC_T partial[kWorkgroupSize];

ACC_T load(uint i) {
#ifdef KILN_IN_BOOL
  return ACC_T((x_words[i >> 2] >> (8u * (i & 3u))) & 0xFFu);
#else
  return ACC_T(x[i]);
#endif
}

ACC_T identity() {
  if (kKind == KIND_PROD || kKind == KIND_ALL) return ACC_T(1);
#ifdef KILN_FLOAT
  if (kKind == KIND_MAX) return uintBitsToFloat(0xFF800000u);  // -inf
  if (kKind == KIND_MIN) return uintBitsToFloat(0x7F800000u);  // +inf
#else
  if (kKind == KIND_MAX) return ACC_T(0x80000000u);
  if (kKind == KIND_MIN) return ACC_T(0x7FFFFFFF);
#endif
  return ACC_T(0);
}

// The partials of all/any are 0 or 1; an input element counts as true when non-zero (NaN too).
ACC_T combine(ACC_T a, ACC_T b) {
  if (kKind == KIND_SUM || kKind == KIND_MEAN) return a + b;
  if (kKind == KIND_PROD) return a * b;
  if (kKind == KIND_ALL) return ACC_T(a != ACC_T(0) && b != ACC_T(0));
  if (kKind == KIND_ANY) return ACC_T(a != ACC_T(0) || b != ACC_T(0));
#ifdef KILN_FLOAT
  if (isnan(b)) return b;
#endif
  if (kKind == KIND_MAX) return b > a ? b : a;
  return b < a ? b : a;
}

void store(uint i, ACC_T v) {
  if (kKind == KIND_MEAN) v = ACC_T(float(v) / p.divisor);
  if (kOutBool) {
    const uint shift = 8u * (i & 3u);
    atomicAnd(y_words[i >> 2], ~(0xFFu << shift));
    atomicOr(y_words[i >> 2], (v != ACC_T(0) ? 1u : 0u) << shift);
  } else {
    y[i] = OUT_T(v);
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tpr = p.threads_per_row;
  const uint lane = tid & (tpr - 1u);
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint logical = group * (kWorkgroupSize / tpr) + tid / tpr;
  const bool in_range = logical < p.rows;
  ACC_T acc = identity();
  if (in_range) {
    const uint row = logical / p.splits, s = logical % p.splits;
    const uint c0 = s * p.chunk, c1 = min(c0 + p.chunk, p.cols);
    const uint base = p.in_offset + row * p.row_stride;
    for (uint c = c0 + lane; c < c1; c += tpr) acc = combine(acc, load(base + c * p.col_stride));
  }
  // Every invocation reaches the barriers: `in_range` only guards loads and the store.
  partial[tid] = acc;
  barrier();
  for (uint width = tpr / 2u; width > 0u; width /= 2u) {
    if (lane < width) partial[tid] = combine(partial[tid], partial[tid + width]);
    barrier();
  }
  if (in_range && lane == 0u) store(p.out_offset + logical, partial[tid]);
}
