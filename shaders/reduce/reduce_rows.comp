#version 450
// out[r] = reduce(kind) of the row r of a [rows, cols] block (strided columns), for every
// ReduceKind (the kind is specialization constant 1, numbered as core/cpu/reduce.h). A workgroup
// takes kWorkgroupSize / threads_per_row rows: each invocation folds a strided slice of its row,
// then a shared-memory tree joins the partials. The _sg variants (KILN_SUBGROUPS: the device has
// subgroup arithmetic) join each subgroup's partials with subgroupAdd & co. first when its
// subgroups are whole and lie within one row; no subgroup size is assumed (8 on lavapipe, 32 on
// NVIDIA), the tree runs otherwise.
//
// Columns (specialization constant 3): out[b, k] = reduce over r of x[b, r, k] (a [B, R, K] block
// with dense k, `inner` = K): threads_per_row invocations take neighbouring k (coalesced loads) and
// kWorkgroupSize / threads_per_row of them fold rows r of the same k, joined by a tree; a split
// covers rows [s * chunk, (s + 1) * chunk) and writes partials [B, splits, K]. This is the sum over
// the batch of a bias gradient, which read through a transposing copy before.
//
// Long rows are split by the host into `splits` chunks of `chunk` columns: logical row
// i = row * splits + s covers columns [s * chunk, (s + 1) * chunk) of row `row`, and a second pass
// reduces the partials. Float inputs accumulate in float (float64 in double); integer sums and
// products wrap. max/min of floats propagate NaN (a NaN wins, as on the CPU).
//
// Byte inputs (KILN_IN_BYTES: bool, uint8, and int8 with KILN_IN_SIGNED) are read as bytes of uint
// words, and byte outputs (kOutBytes: bools for all/any and max/min of bools, the low byte for
// max/min of int8/uint8) written as bytes of uint words with atomics, so neither needs 8-bit
// storage; each byte has one writer, and the atomics keep the other bytes of its word intact.
// bfloat16 (KILN_IN_BF16, KILN_OUT_BF16) is stored as uint16_t bits and converted by hand.
// The float64 variants need shaderFloat64, the int64 one shaderInt64 (the host checks).
// kiln-variant: reduce_rows_f32 -DIN_T=float -DACC_T=float -DOUT_T=float -DKILN_FLOAT
// kiln-variant: reduce_rows_f64 -DIN_T=double -DACC_T=double -DOUT_T=double -DKILN_FLOAT -DKILN_HAS_FLOAT64
// kiln-variant: reduce_rows_i32 -DIN_T=int -DACC_T=int -DOUT_T=int
// kiln-variant: reduce_rows_u32 -DIN_T=uint -DACC_T=uint -DOUT_T=uint -DKILN_UNSIGNED
// kiln-variant: reduce_rows_i64 -DIN_T=int64_t -DACC_T=int64_t -DOUT_T=int64_t -DKILN_INT64
// kiln-variant: reduce_rows_b8_i32 -DKILN_IN_BYTES -DACC_T=int -DOUT_T=int
// kiln-variant: reduce_rows_s8_i32 -DKILN_IN_BYTES -DKILN_IN_SIGNED -DACC_T=int -DOUT_T=int
// kiln-variant: reduce_rows_f16 -DIN_T=float16_t -DACC_T=float -DOUT_T=float16_t -DKILN_FLOAT -DKILN_16BIT
// kiln-variant: reduce_rows_f16_f32 -DIN_T=float16_t -DACC_T=float -DOUT_T=float -DKILN_FLOAT -DKILN_16BIT
// kiln-variant: reduce_rows_f32_f16 -DIN_T=float -DACC_T=float -DOUT_T=float16_t -DKILN_FLOAT -DKILN_16BIT
// kiln-variant: reduce_rows_bf16 -DIN_T=uint16_t -DACC_T=float -DOUT_T=uint16_t -DKILN_FLOAT -DKILN_16BIT -DKILN_IN_BF16 -DKILN_OUT_BF16
// kiln-variant: reduce_rows_bf16_f32 -DIN_T=uint16_t -DACC_T=float -DOUT_T=float -DKILN_FLOAT -DKILN_16BIT -DKILN_IN_BF16
// kiln-variant: reduce_rows_f32_bf16 -DIN_T=float -DACC_T=float -DOUT_T=uint16_t -DKILN_FLOAT -DKILN_16BIT -DKILN_OUT_BF16
// kiln-variant: reduce_rows_f32_sg -DIN_T=float -DACC_T=float -DOUT_T=float -DKILN_FLOAT -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_f64_sg -DIN_T=double -DACC_T=double -DOUT_T=double -DKILN_FLOAT -DKILN_HAS_FLOAT64 -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_i32_sg -DIN_T=int -DACC_T=int -DOUT_T=int -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_u32_sg -DIN_T=uint -DACC_T=uint -DOUT_T=uint -DKILN_UNSIGNED -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_b8_i32_sg -DKILN_IN_BYTES -DACC_T=int -DOUT_T=int -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_s8_i32_sg -DKILN_IN_BYTES -DKILN_IN_SIGNED -DACC_T=int -DOUT_T=int -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_f16_sg -DIN_T=float16_t -DACC_T=float -DOUT_T=float16_t -DKILN_FLOAT -DKILN_16BIT -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_f16_f32_sg -DIN_T=float16_t -DACC_T=float -DOUT_T=float -DKILN_FLOAT -DKILN_16BIT -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_f32_f16_sg -DIN_T=float -DACC_T=float -DOUT_T=float16_t -DKILN_FLOAT -DKILN_16BIT -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_bf16_sg -DIN_T=uint16_t -DACC_T=float -DOUT_T=uint16_t -DKILN_FLOAT -DKILN_16BIT -DKILN_IN_BF16 -DKILN_OUT_BF16 -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_bf16_f32_sg -DIN_T=uint16_t -DACC_T=float -DOUT_T=float -DKILN_FLOAT -DKILN_16BIT -DKILN_IN_BF16 -DKILN_SUBGROUPS
// kiln-variant: reduce_rows_f32_bf16_sg -DIN_T=float -DACC_T=float -DOUT_T=uint16_t -DKILN_FLOAT -DKILN_16BIT -DKILN_OUT_BF16 -DKILN_SUBGROUPS
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef KILN_INT64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#ifdef KILN_SUBGROUPS
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "../common/dtype_convert.glsl"
#include "../common/indexing.glsl"

layout(constant_id = 1) const uint kKind = 0;  // ReduceKind: sum, prod, max, min, all, any, mean
layout(constant_id = 2) const uint kOutBytes = 0;  // 0: OUT_T, 1: bools, 2: the low byte
layout(constant_id = 3) const bool kColumns = false;  // reduce the middle axis of [B, R, K]

#define KIND_SUM 0
#define KIND_PROD 1
#define KIND_MAX 2
#define KIND_MIN 3
#define KIND_ALL 4
#define KIND_ANY 5
#define KIND_MEAN 6

#ifdef KILN_IN_BYTES
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
  uint count;            // mean: the number of elements reduced
  uint inner;            // columns: K
} p;

shared ACC_T partial[kWorkgroupSize];

ACC_T load(uint i) {
#if defined(KILN_IN_BYTES) && defined(KILN_IN_SIGNED)
  return ACC_T(bitfieldExtract(int(x_words[i >> 2]), int(8u * (i & 3u)), 8));
#elif defined(KILN_IN_BYTES)
  return ACC_T((x_words[i >> 2] >> (8u * (i & 3u))) & 0xFFu);
#elif defined(KILN_IN_BF16)
  return kiln_bfloat_to_float(uint(x[i]));
#else
  return ACC_T(x[i]);
#endif
}

ACC_T identity() {
  if (kKind == KIND_PROD || kKind == KIND_ALL) return ACC_T(1);
#if defined(KILN_FLOAT)
  if (kKind == KIND_MAX) return ACC_T(uintBitsToFloat(0xFF800000u));  // -inf
  if (kKind == KIND_MIN) return ACC_T(uintBitsToFloat(0x7F800000u));  // +inf
#elif defined(KILN_INT64)
  if (kKind == KIND_MAX) return int64_t(0x8000000000000000ul);
  if (kKind == KIND_MIN) return int64_t(0x7FFFFFFFFFFFFFFFl);
#elif defined(KILN_UNSIGNED)
  if (kKind == KIND_MAX) return 0u;
  if (kKind == KIND_MIN) return 0xFFFFFFFFu;
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
  if (kiln_nan_bits(a) || kiln_nan_bits(b)) return a + b;  // NaN propagates
#endif
  if (kKind == KIND_MAX) return b > a ? b : a;
  return b < a ? b : a;
}

void store(uint i, ACC_T v) {
  if (kKind == KIND_MEAN) v = v / ACC_T(p.count);
  if (kOutBytes != 0u) {
    const uint shift = 8u * (i & 3u);
    const uint byte = kOutBytes == 1u ? (v != ACC_T(0) ? 1u : 0u) : uint(v) & 0xFFu;
    atomicAnd(y_words[i >> 2], ~(0xFFu << shift));
    atomicOr(y_words[i >> 2], byte << shift);
  } else {
#ifdef KILN_OUT_BF16
    y[i] = uint16_t(kiln_float_to_bfloat(v));
#else
    y[i] = OUT_T(v);
#endif
  }
}

// acc joined with x[at + i * step] for i < n, four loads in flight at a time.
ACC_T fold(ACC_T acc, uint at, uint n, uint step) {
  uint i = 0u;
  for (; i + 4u <= n; i += 4u) {
    const ACC_T a = load(at + i * step), b = load(at + (i + 1u) * step);
    const ACC_T c = load(at + (i + 2u) * step), d = load(at + (i + 3u) * step);
    acc = combine(combine(acc, a), combine(b, c));
    acc = combine(acc, d);
  }
  for (; i < n; ++i) acc = combine(acc, load(at + i * step));
  return acc;
}

#ifdef KILN_SUBGROUPS
// The join of v over the invocations of this subgroup (all active: the subgroup is whole).
ACC_T subgroup_combine(ACC_T v) {
  if (kKind == KIND_SUM || kKind == KIND_MEAN) return subgroupAdd(v);
  if (kKind == KIND_PROD) return subgroupMul(v);
  if (kKind == KIND_ALL) return ACC_T(subgroupAnd(v != ACC_T(0)));
  if (kKind == KIND_ANY) return ACC_T(subgroupOr(v != ACC_T(0)));
#ifdef KILN_FLOAT
  // subgroupMax/Min leave NaN undefined: a NaN anywhere gives NaN, tested on the bits.
  if (subgroupOr(kiln_nan_bits(v))) return ACC_T(uintBitsToFloat(0x7FC00000u));
#endif
  if (kKind == KIND_MAX) return subgroupMax(v);
  return subgroupMin(v);
}
#endif

void reduce_columns(uint group, uint tid) {
  const uint tx = p.threads_per_row, ty = kWorkgroupSize / tx;
  const uint lx = tid % tx, ly = tid / tx;
  const uint blocks = (p.inner + tx - 1u) / tx;
  const uint s = (group / blocks) % p.splits, b = group / blocks / p.splits;
  const uint k = (group % blocks) * tx + lx;
  const bool in_range = b < p.rows && k < p.inner;
  ACC_T acc = identity();
  if (in_range) {
    const uint r0 = s * p.chunk + ly, r1 = min(s * p.chunk + p.chunk, p.cols);
    if (r0 < r1)
      acc = fold(acc, p.in_offset + b * p.row_stride + r0 * p.col_stride + k, (r1 - r0 + ty - 1u) / ty,
                 ty * p.col_stride);
  }
  partial[tid] = acc;
  barrier();
  for (uint width = ty / 2u; width > 0u; width /= 2u) {
    if (ly < width) partial[tid] = combine(partial[tid], partial[tid + width * tx]);
    barrier();
  }
  if (in_range && ly == 0u) store(p.out_offset + (b * p.splits + s) * p.inner + k, partial[tid]);
}

void main() {
  const uint group = kiln_group_id();
  if (kColumns) {
    reduce_columns(group, gl_LocalInvocationID.x);
    return;
  }
  const uint tpr = p.threads_per_row;
#ifdef KILN_SUBGROUPS
  // Whole subgroups, each within one row: number the invocations subgroup by subgroup, so that
  // they are (the order of invocations within a workgroup is the driver's).
  const bool subgroups = gl_NumSubgroups * gl_SubgroupSize == kWorkgroupSize && tpr % gl_SubgroupSize == 0u;
  const uint tid = subgroups ? gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID : gl_LocalInvocationID.x;
#else
  const uint tid = gl_LocalInvocationID.x;
#endif
  const uint lane = tid & (tpr - 1u);
  const uint logical = group * (kWorkgroupSize / tpr) + tid / tpr;
  const bool in_range = logical < p.rows;
  ACC_T acc = identity();
  if (in_range) {
    const uint row = logical / p.splits, s = logical % p.splits;
    const uint c0 = s * p.chunk + lane, c1 = min(s * p.chunk + p.chunk, p.cols);
    if (c0 < c1)
      acc = fold(acc, p.in_offset + row * p.row_stride + c0 * p.col_stride, (c1 - c0 + tpr - 1u) / tpr,
                 tpr * p.col_stride);
  }
#ifdef KILN_SUBGROUPS
  if (subgroups) {
    // Every invocation reaches the barrier (`subgroups` is uniform over the workgroup).
    acc = subgroup_combine(acc);
    if (subgroupElect()) partial[gl_SubgroupID] = acc;
    barrier();
    if (in_range && lane == 0u) {
      const uint per_row = tpr / gl_SubgroupSize, first = gl_SubgroupID;
      ACC_T v = partial[first];
      for (uint i = 1u; i < per_row; ++i) v = combine(v, partial[first + i]);
      store(p.out_offset + logical, v);
    }
    return;
  }
#endif
  // Every invocation reaches the barriers: `in_range` only guards loads and the store.
  partial[tid] = acc;
  barrier();
  for (uint width = tpr / 2u; width > 0u; width /= 2u) {
    if (lane < width) partial[tid] = combine(partial[tid], partial[tid + width]);
    barrier();
  }
  if (in_range && lane == 0u) store(p.out_offset + logical, partial[tid]);
}
