#version 450
// out[r] = column (int32) of the largest (kMax) or smallest element of row r of a [rows, cols]
// block with dense columns: the first one on ties, and the first NaN when there is one (NaN
// counts as the extreme, as on the CPU). Laid out like reduce_rows.comp: kWorkgroupSize /
// threads_per_row rows per workgroup, a strided fold per invocation, then a shared-memory tree
// whose joins keep the lower column on equal values, so the order of the joins does not matter.
// Byte inputs (KILN_IN_BYTES, signed with KILN_IN_SIGNED) are read from uint words and may have
// strided columns; bfloat16 (KILN_IN_BF16) is read as uint16_t bits. The float64 variant needs
// shaderFloat64 and the int64 one shaderInt64 (the host checks). The _sg variants (KILN_SUBGROUPS)
// join whole subgroups that lie within one row with subgroupMax/Min first, as reduce_rows.comp.
// kiln-variant: arg_reduce_rows_f32 -DIN_T=float -DVAL_T=float -DKILN_FLOAT
// kiln-variant: arg_reduce_rows_f64 -DIN_T=double -DVAL_T=double -DKILN_FLOAT -DKILN_HAS_FLOAT64
// kiln-variant: arg_reduce_rows_i32 -DIN_T=int -DVAL_T=int
// kiln-variant: arg_reduce_rows_u32 -DIN_T=uint -DVAL_T=uint -DKILN_UNSIGNED_VAL
// kiln-variant: arg_reduce_rows_i64 -DIN_T=int64_t -DVAL_T=int64_t -DKILN_INT64
// kiln-variant: arg_reduce_rows_b8 -DKILN_IN_BYTES -DVAL_T=int
// kiln-variant: arg_reduce_rows_s8 -DKILN_IN_BYTES -DKILN_IN_SIGNED -DVAL_T=int
// kiln-variant: arg_reduce_rows_f16 -DIN_T=float16_t -DVAL_T=float -DKILN_FLOAT -DKILN_16BIT
// kiln-variant: arg_reduce_rows_bf16 -DIN_T=uint16_t -DVAL_T=float -DKILN_FLOAT -DKILN_16BIT -DKILN_IN_BF16
// kiln-variant: arg_reduce_rows_f32_sg -DIN_T=float -DVAL_T=float -DKILN_FLOAT -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_f64_sg -DIN_T=double -DVAL_T=double -DKILN_FLOAT -DKILN_HAS_FLOAT64 -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_i32_sg -DIN_T=int -DVAL_T=int -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_u32_sg -DIN_T=uint -DVAL_T=uint -DKILN_UNSIGNED_VAL -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_b8_sg -DKILN_IN_BYTES -DVAL_T=int -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_s8_sg -DKILN_IN_BYTES -DKILN_IN_SIGNED -DVAL_T=int -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_f16_sg -DIN_T=float16_t -DVAL_T=float -DKILN_FLOAT -DKILN_16BIT -DKILN_SUBGROUPS
// kiln-variant: arg_reduce_rows_bf16_sg -DIN_T=uint16_t -DVAL_T=float -DKILN_FLOAT -DKILN_16BIT -DKILN_IN_BF16 -DKILN_SUBGROUPS
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

layout(constant_id = 1) const bool kMax = true;

#ifdef KILN_IN_BYTES
layout(std430, set = 0, binding = 0) readonly buffer In { uint x_words[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer In { IN_T x[]; };
#endif
layout(std430, set = 0, binding = 1) writeonly buffer Out { int y[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint cols;
  uint row_stride;
  uint col_stride;  // 1, except for byte inputs (which the host cannot copy densely)
  uint in_offset;
  uint out_offset;
  uint threads_per_row;  // a power of two dividing kWorkgroupSize
} p;

shared VAL_T best_value[kWorkgroupSize];
shared uint best_index[kWorkgroupSize];

VAL_T load(uint i) {
#if defined(KILN_IN_BYTES) && defined(KILN_IN_SIGNED)
  return bitfieldExtract(int(x_words[i >> 2]), int(8u * (i & 3u)), 8);
#elif defined(KILN_IN_BYTES)
  return int((x_words[i >> 2] >> (8u * (i & 3u))) & 0xFFu);
#elif defined(KILN_IN_BF16)
  return kiln_bfloat_to_float(uint(x[i]));
#else
  return VAL_T(x[i]);
#endif
}

bool is_nan(VAL_T v) {
#ifdef KILN_FLOAT
  return kiln_nan_bits(v);
#else
  return false;
#endif
}

// Whether (bv, bi) should replace (av, ai). An index of 0xFFFFFFFF marks an empty slot.
bool better(VAL_T av, uint ai, VAL_T bv, uint bi) {
  if (bi == 0xFFFFFFFFu) return false;
  if (ai == 0xFFFFFFFFu) return true;
  const bool an = is_nan(av), bn = is_nan(bv);
  if (an || bn) return bn && (!an || bi < ai);
  if (bv == av) return bi < ai;
  return kMax ? bv > av : bv < av;
}

#ifdef KILN_SUBGROUPS
// The best (value, index) of this subgroup's, all invocations active: the lowest index of a NaN
// if there is one, else the lowest index holding the largest (smallest) value. Returns the index
// (0xFFFFFFFF: none); `value` becomes the best value in the invocation holding it.
uint subgroup_best(VAL_T value, uint index) {
  const bool valid = index != 0xFFFFFFFFu;
  const bool nan = valid && is_nan(value);
  if (subgroupOr(nan)) return subgroupMin(nan ? index : 0xFFFFFFFFu);
#if defined(KILN_FLOAT)
  const VAL_T lowest = VAL_T(uintBitsToFloat(0xFF800000u)), highest = VAL_T(uintBitsToFloat(0x7F800000u));
#elif defined(KILN_UNSIGNED_VAL)
  const VAL_T lowest = 0u, highest = 0xFFFFFFFFu;
#else
  const VAL_T lowest = VAL_T(0x80000000u), highest = VAL_T(0x7FFFFFFF);
#endif
  VAL_T best;
  if (kMax)
    best = subgroupMax(valid ? value : lowest);
  else
    best = subgroupMin(valid ? value : highest);
  return subgroupMin(valid && value == best ? index : 0xFFFFFFFFu);
}
#endif

void main() {
  const uint tpr = p.threads_per_row;
#ifdef KILN_SUBGROUPS
  // Whole subgroups, each within one row: invocations numbered subgroup by subgroup.
  const bool subgroups = gl_NumSubgroups * gl_SubgroupSize == kWorkgroupSize && tpr % gl_SubgroupSize == 0u;
  const uint tid = subgroups ? gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID : gl_LocalInvocationID.x;
#else
  const uint tid = gl_LocalInvocationID.x;
#endif
  const uint lane = tid & (tpr - 1u);
  const uint group = kiln_group_id();
  const uint row = group * (kWorkgroupSize / tpr) + tid / tpr;
  const bool in_range = row < p.rows;
  VAL_T value = VAL_T(0);
  uint index = 0xFFFFFFFFu;
  if (in_range) {
    const uint base = p.in_offset + row * p.row_stride;
    for (uint c = lane; c < p.cols; c += tpr) {
      const VAL_T v = load(base + c * p.col_stride);
      if (better(value, index, v, c)) {
        value = v;
        index = c;
      }
    }
  }
#ifdef KILN_SUBGROUPS
  if (subgroups) {
    // Every invocation reaches the barrier (`subgroups` is uniform over the workgroup).
    const uint best = subgroup_best(value, index);
    if (subgroupElect()) best_index[gl_SubgroupID] = best;
    if (best != 0xFFFFFFFFu && index == best) best_value[gl_SubgroupID] = value;
    barrier();
    if (in_range && lane == 0u) {
      const uint per_row = tpr / gl_SubgroupSize, first = gl_SubgroupID;
      VAL_T v = best_value[first];
      uint i = best_index[first];
      for (uint j = first + 1u; j < first + per_row; ++j) {
        if (better(v, i, best_value[j], best_index[j])) {
          v = best_value[j];
          i = best_index[j];
        }
      }
      y[p.out_offset + row] = int(i);
    }
    return;
  }
#endif
  best_value[tid] = value;
  best_index[tid] = index;
  barrier();
  for (uint width = tpr / 2u; width > 0u; width /= 2u) {
    if (lane < width && better(best_value[tid], best_index[tid], best_value[tid + width], best_index[tid + width])) {
      best_value[tid] = best_value[tid + width];
      best_index[tid] = best_index[tid + width];
    }
    barrier();
  }
  if (in_range && lane == 0u) y[p.out_offset + row] = int(best_index[tid]);
}
