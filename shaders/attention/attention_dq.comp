#version 450
// The backward pass for the queries: dq = scale * dS K with dS = P * (dO V^T - delta), the weights
// P = exp(scale * q k^T + mask - lse) recomputed from the forward pass's lse, delta_i = dO_i . O_i.
// A workgroup takes KILN_BR queries of one pair and streams K and V as the forward kernel does; it
// also writes delta for attention_dkdv.comp. A row whose lse is -inf (it saw no key) gets NaN.
// kiln-variant: attention_dq_f32 -DIN_T=float -DACC_T=float -DKILN_BR=16 -DKILN_BC=8
// kiln-variant: attention_dq_f64 -DIN_T=double -DACC_T=double -DKILN_HAS_FLOAT64 -DKILN_BR=8 -DKILN_BC=4
// kiln-variant: attention_dq_f16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_HALF -DKILN_BR=16 -DKILN_BC=8
// kiln-variant: attention_dq_bf16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_BF16 -DKILN_BR=16 -DKILN_BC=8
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
layout(std430, set = 0, binding = 5) readonly buffer O { IN_T o_[]; };
layout(std430, set = 0, binding = 6) readonly buffer Lse { ACC_T lse[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Delta { ACC_T delta_out[]; };
layout(std430, set = 0, binding = 8) writeonly buffer Dq { IN_T dq[]; };

// o and lse, dq and delta are dense (N, Lq, ..): their offsets in `offs` (o, lse, delta, dq).
layout(push_constant) uniform Push {
  uint lq, lk, dims, n1, groups;
  Operand q, k, v, g;
  MaskOperand m;
  uint offs_o, offs_lse, offs_delta, offs_dq;
  uint scale_lo, scale_hi;
} p;

shared ACC_T sq[KILN_BR * KILN_MAX_D];
shared ACC_T sg[KILN_BR * KILN_MAX_D];
shared ACC_T sk[KILN_BC * KILN_MAX_D];
shared ACC_T sv[KILN_BC * KILN_MAX_D];
shared ACC_T ss[KILN_BR * KILN_BC];

void main() {
  const uint group = kiln_group_id();
  if (group >= p.groups) return;
  const uint d = p.dims & 0xFFFFu, dv = p.dims >> 16;
  const uint blocks = (p.lq + KILN_BR - 1u) / KILN_BR;
  const uint n = group / blocks, i0 = (group % blocks) * KILN_BR;
  const uint n0 = n / p.n1, n1 = n % p.n1;
  const uint tid = gl_LocalInvocationID.x, r = tid / KILN_T, lane = tid % KILN_T;
  const uint i = i0 + r;
  const ACC_T scale = kiln_scale(p.scale_lo, p.scale_hi), inf = kiln_acc_inf();

  for (uint e = tid; e < KILN_BR * d; e += kWorkgroupSize) {
    const uint rr = e / d, c = e % d;
    sq[rr * KILN_MAX_D + c] = i0 + rr < p.lq ? KILN_TO_ACC(q[kiln_at(p.q, n0, n1, i0 + rr) + int(c)]) * scale : ACC_T(0);
  }
  for (uint e = tid; e < KILN_BR * dv; e += kWorkgroupSize) {
    const uint rr = e / dv, c = e % dv;
    sg[rr * KILN_MAX_D + c] = i0 + rr < p.lq ? KILN_TO_ACC(g[kiln_at(p.g, n0, n1, i0 + rr) + int(c)]) : ACC_T(0);
  }
  barrier();
  ACC_T delta = ACC_T(0), row_lse = ACC_T(0);
  if (i < p.lq) {
    const uint base = p.offs_o + (n * p.lq + i) * dv;
    for (uint c = 0u; c < dv; ++c) delta += sg[r * KILN_MAX_D + c] * KILN_TO_ACC(o_[base + c]);
    row_lse = lse[p.offs_lse + n * p.lq + i];
    if (lane == 0u) delta_out[p.offs_delta + n * p.lq + i] = delta;
  }
  const bool none = row_lse == -inf;
  ACC_T acc[KILN_PER_T];
  for (uint t = 0u; t < KILN_PER_T; ++t) acc[t] = ACC_T(0);

  uint key_end = p.lk;
  if (kCausal) key_end = uint(clamp(int(i0 + KILN_BR) + int(p.lk) - int(p.lq), 0, int(p.lk)));
  for (uint j0 = 0u; j0 < key_end; j0 += KILN_BC) {
    barrier();
    for (uint e = tid; e < KILN_BC * d; e += kWorkgroupSize) {
      const uint jj = e / d, c = e % d;
      sk[jj * KILN_MAX_D + c] = j0 + jj < p.lk ? KILN_TO_ACC(k[kiln_at(p.k, n0, n1, j0 + jj) + int(c)]) : ACC_T(0);
    }
    for (uint e = tid; e < KILN_BC * dv; e += kWorkgroupSize) {
      const uint jj = e / dv, c = e % dv;
      sv[jj * KILN_MAX_D + c] = j0 + jj < p.lk ? KILN_TO_ACC(v[kiln_at(p.v, n0, n1, j0 + jj) + int(c)]) : ACC_T(0);
    }
    barrier();
    for (uint jj = lane; jj < KILN_BC; jj += KILN_T) {
      const uint j = j0 + jj;
      ACC_T ds = ACC_T(0);
      if (i < p.lq && j < p.lk && kiln_visible(i, j, p.lq, p.lk)) {
        ACC_T s = ACC_T(0), dp = ACC_T(0);
        for (uint c = 0u; c < d; ++c) s += sq[r * KILN_MAX_D + c] * sk[jj * KILN_MAX_D + c];
        for (uint c = 0u; c < dv; ++c) dp += sg[r * KILN_MAX_D + c] * sv[jj * KILN_MAX_D + c];
        if (kHasMask)
          s += mask[p.m.off + int(n0) * p.m.s0 + int(n1) * p.m.s1 + int(i) * p.m.row + int(j) * p.m.col];
        const ACC_T pij = s == -inf ? ACC_T(0) : kiln_exp(s - row_lse);
        ds = pij * (dp - delta);
      }
      ss[r * KILN_BC + jj] = ds;
    }
    barrier();
    for (uint jj = 0u; jj < KILN_BC; ++jj) {
      const ACC_T ds = ss[r * KILN_BC + jj];
      for (uint t = 0u; t < KILN_PER_T; ++t) {
        const uint c = lane + KILN_T * t;
        if (c < d) acc[t] += ds * sk[jj * KILN_MAX_D + c];
      }
    }
  }
  if (i >= p.lq) return;
  const uint base = p.offs_dq + (n * p.lq + i) * d;
  for (uint t = 0u; t < KILN_PER_T; ++t) {
    const uint c = lane + KILN_T * t;
    if (c < d) dq[base + c] = KILN_FROM_ACC(none ? kiln_acc_nan() : acc[t] * scale);
  }
}
