#version 450
// The backward pass for the keys and values: dv = P^T dO and dk = scale * dS^T Q (attention_dq.comp
// has P and dS), a workgroup per KILN_BR keys of one pair streaming the queries (with their dO, lse
// and the delta attention_dq.comp wrote) through shared memory KILN_BC at a time.
// kiln-variant: attention_dkdv_f32 -DIN_T=float -DACC_T=float -DKILN_BR=16 -DKILN_BC=8
// kiln-variant: attention_dkdv_f64 -DIN_T=double -DACC_T=double -DKILN_HAS_FLOAT64 -DKILN_BR=8 -DKILN_BC=4
// kiln-variant: attention_dkdv_f16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_HALF -DKILN_BR=16 -DKILN_BC=8
// kiln-variant: attention_dkdv_bf16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_BF16 -DKILN_BR=16 -DKILN_BC=8
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "attention_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Q { IN_T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { IN_T k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { IN_T v[]; };
layout(std430, set = 0, binding = 3) readonly buffer Mask { ACC_T mask[]; };
layout(std430, set = 0, binding = 4) readonly buffer G { IN_T g[]; };
layout(std430, set = 0, binding = 5) readonly buffer Lse { ACC_T lse[]; };
layout(std430, set = 0, binding = 6) readonly buffer Delta { ACC_T delta[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Dk { IN_T dk[]; };
layout(std430, set = 0, binding = 8) writeonly buffer Dv { IN_T dv_[]; };

// lse and delta are dense (N, Lq), dk (N, Lk, D) and dv (N, Lk, Dv): offsets in `offs`.
layout(push_constant) uniform Push {
  uint lq, lk, dims, n1, groups;
  Operand q, k, v, g;
  MaskOperand m;
  uint offs_lse, offs_delta, offs_dk, offs_dv;
  uint scale_lo, scale_hi;
} p;

shared ACC_T sk[KILN_BR * KILN_MAX_D];
shared ACC_T sv[KILN_BR * KILN_MAX_D];
shared ACC_T sq[KILN_BC * KILN_MAX_D];
shared ACC_T sg[KILN_BC * KILN_MAX_D];
shared ACC_T sp[KILN_BR * KILN_BC];
shared ACC_T sds[KILN_BR * KILN_BC];
shared ACC_T slse[KILN_BC];
shared ACC_T sdelta[KILN_BC];

void main() {
  const uint group = kiln_group_id();
  if (group >= p.groups) return;
  const uint d = p.dims & 0xFFFFu, dv = p.dims >> 16;
  const uint blocks = (p.lk + KILN_BR - 1u) / KILN_BR;
  const uint n = group / blocks, j0 = (group % blocks) * KILN_BR;
  const uint n0 = n / p.n1, n1 = n % p.n1;
  const uint tid = gl_LocalInvocationID.x, r = tid / KILN_T, lane = tid % KILN_T;
  const uint j = j0 + r;
  const ACC_T scale = kiln_scale(p.scale_lo, p.scale_hi), inf = kiln_acc_inf();

  for (uint e = tid; e < KILN_BR * d; e += kWorkgroupSize) {
    const uint rr = e / d, c = e % d;
    sk[rr * KILN_MAX_D + c] = j0 + rr < p.lk ? KILN_TO_ACC(k[kiln_at(p.k, n0, n1, j0 + rr) + int(c)]) : ACC_T(0);
  }
  for (uint e = tid; e < KILN_BR * dv; e += kWorkgroupSize) {
    const uint rr = e / dv, c = e % dv;
    sv[rr * KILN_MAX_D + c] = j0 + rr < p.lk ? KILN_TO_ACC(v[kiln_at(p.v, n0, n1, j0 + rr) + int(c)]) : ACC_T(0);
  }
  ACC_T acc_k[KILN_PER_T], acc_v[KILN_PER_T];
  for (uint t = 0u; t < KILN_PER_T; ++t) {
    acc_k[t] = ACC_T(0);
    acc_v[t] = ACC_T(0);
  }
  // Under kCausal key j is seen by queries i >= j - (lk - lq): the block's first key bounds the start.
  uint q_begin = 0u;
  if (kCausal) q_begin = uint(clamp(int(j0) - (int(p.lk) - int(p.lq)), 0, int(p.lq))) / KILN_BC * KILN_BC;
  for (uint i0 = q_begin; i0 < p.lq; i0 += KILN_BC) {
    barrier();
    for (uint e = tid; e < KILN_BC * d; e += kWorkgroupSize) {
      const uint ii = e / d, c = e % d;
      sq[ii * KILN_MAX_D + c] = i0 + ii < p.lq ? KILN_TO_ACC(q[kiln_at(p.q, n0, n1, i0 + ii) + int(c)]) * scale : ACC_T(0);
    }
    for (uint e = tid; e < KILN_BC * dv; e += kWorkgroupSize) {
      const uint ii = e / dv, c = e % dv;
      sg[ii * KILN_MAX_D + c] = i0 + ii < p.lq ? KILN_TO_ACC(g[kiln_at(p.g, n0, n1, i0 + ii) + int(c)]) : ACC_T(0);
    }
    for (uint ii = tid; ii < KILN_BC; ii += kWorkgroupSize) {
      const bool in_range = i0 + ii < p.lq;
      slse[ii] = in_range ? lse[p.offs_lse + n * p.lq + i0 + ii] : ACC_T(0);
      sdelta[ii] = in_range ? delta[p.offs_delta + n * p.lq + i0 + ii] : ACC_T(0);
    }
    barrier();
    for (uint ii = lane; ii < KILN_BC; ii += KILN_T) {
      const uint i = i0 + ii;
      ACC_T pij = ACC_T(0), ds = ACC_T(0);
      if (j < p.lk && i < p.lq) {
        const ACC_T l = slse[ii];
        if (l == -inf) {  // the query saw no key: NaN, as the unfused gradient
          pij = kiln_acc_nan();
          ds = pij;
        } else if (kiln_visible(i, j, p.lq, p.lk)) {
          ACC_T s = ACC_T(0), dp = ACC_T(0);
          for (uint c = 0u; c < d; ++c) s += sq[ii * KILN_MAX_D + c] * sk[r * KILN_MAX_D + c];
          for (uint c = 0u; c < dv; ++c) dp += sg[ii * KILN_MAX_D + c] * sv[r * KILN_MAX_D + c];
          if (kHasMask)
            s += mask[p.m.off + int(n0) * p.m.s0 + int(n1) * p.m.s1 + int(i) * p.m.row + int(j) * p.m.col];
          pij = s == -inf ? ACC_T(0) : kiln_exp(s - l);
          ds = pij * (dp - sdelta[ii]);
        }
      }
      sp[r * KILN_BC + ii] = pij;
      sds[r * KILN_BC + ii] = ds;
    }
    barrier();
    for (uint ii = 0u; ii < KILN_BC; ++ii) {
      const ACC_T pij = sp[r * KILN_BC + ii], ds = sds[r * KILN_BC + ii];
      for (uint t = 0u; t < KILN_PER_T; ++t) {
        const uint c = lane + KILN_T * t;
        if (c < dv) acc_v[t] += pij * sg[ii * KILN_MAX_D + c];
        if (c < d) acc_k[t] += ds * sq[ii * KILN_MAX_D + c];
      }
    }
  }
  if (j >= p.lk) return;
  for (uint t = 0u; t < KILN_PER_T; ++t) {
    const uint c = lane + KILN_T * t;
    if (c < d) dk[p.offs_dk + (n * p.lk + j) * d + c] = KILN_FROM_ACC(acc_k[t]);
    if (c < dv) dv_[p.offs_dv + (n * p.lk + j) * dv + c] = KILN_FROM_ACC(acc_v[t]);
  }
}
