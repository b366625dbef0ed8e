#version 450
// out = softmax(scale * q k^T + mask) v and lse = the row logsumexp of the scores, flash-attention
// style: a workgroup takes KILN_BR queries of one (batch, head) pair, streams the keys and values
// through shared memory KILN_BC at a time, and keeps a running max, sum and output per query
// (online softmax), so the weights never reach memory and the output is written once. A query
// that sees no key gets NaN (and lse -inf), as the unfused softmax. Layout: attention_common.glsl.
// kiln-variant: attention_forward_f32 -DIN_T=float -DACC_T=float -DKILN_BR=16 -DKILN_BC=16
// kiln-variant: attention_forward_f64 -DIN_T=double -DACC_T=double -DKILN_HAS_FLOAT64 -DKILN_BR=8 -DKILN_BC=8
// kiln-variant: attention_forward_f16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_HALF -DKILN_BR=16 -DKILN_BC=16
// kiln-variant: attention_forward_bf16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_BF16 -DKILN_BR=16 -DKILN_BC=16
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "attention_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Q { IN_T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { IN_T k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { IN_T v[]; };
layout(std430, set = 0, binding = 3) readonly buffer Mask { ACC_T mask[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out { IN_T out_[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Lse { ACC_T lse[]; };

layout(push_constant) uniform Push {
  uint lq, lk, dims, n1, groups;  // dims: d | dv << 16
  Operand q, k, v;
  MaskOperand m;
  uint out_off, lse_off;
  uint scale_lo, scale_hi;
} p;

shared ACC_T sq[KILN_BR * KILN_MAX_D];
shared ACC_T sk[KILN_BC * KILN_MAX_D];
shared ACC_T sv[KILN_BC * KILN_MAX_D];
shared ACC_T ss[KILN_BR * KILN_BC];

void main() {
  const uint group = kiln_group_id();
  if (group >= p.groups) return;  // whole surplus workgroups: no barrier is split
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
  ACC_T o[KILN_PER_T];
  for (uint t = 0u; t < KILN_PER_T; ++t) o[t] = ACC_T(0);
  ACC_T m = -inf, l = ACC_T(0);

  // Under kCausal the block's last query sees keys up to i0 + KILN_BR - 1 + lk - lq.
  uint key_end = p.lk;
  if (kCausal) key_end = uint(clamp(int(i0 + KILN_BR) + int(p.lk) - int(p.lq), 0, int(p.lk)));
  for (uint j0 = 0u; j0 < key_end; j0 += KILN_BC) {
    barrier();  // the previous tile is no longer read
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
      ACC_T s = -inf;
      if (i < p.lq && j < p.lk && kiln_visible(i, j, p.lq, p.lk)) {
        s = ACC_T(0);
        for (uint c = 0u; c < d; ++c) s += sq[r * KILN_MAX_D + c] * sk[jj * KILN_MAX_D + c];
        if (kHasMask)
          s += mask[p.m.off + int(n0) * p.m.s0 + int(n1) * p.m.s1 + int(i) * p.m.row + int(j) * p.m.col];
      }
      ss[r * KILN_BC + jj] = s;
    }
    barrier();
    ACC_T tile_max = -inf;
    for (uint jj = 0u; jj < KILN_BC; ++jj) tile_max = max(tile_max, ss[r * KILN_BC + jj]);
    const ACC_T m_new = max(m, tile_max);
    if (m_new == -inf) continue;  // nothing seen yet
    const ACC_T alpha = m == -inf ? ACC_T(0) : kiln_exp(m - m_new);
    l *= alpha;
    for (uint t = 0u; t < KILN_PER_T; ++t) o[t] *= alpha;
    for (uint jj = 0u; jj < KILN_BC; ++jj) {
      const ACC_T s = ss[r * KILN_BC + jj];
      if (s == -inf) continue;
      const ACC_T pj = kiln_exp(s - m_new);
      l += pj;
      for (uint t = 0u; t < KILN_PER_T; ++t) {
        const uint c = lane + KILN_T * t;
        if (c < dv) o[t] += pj * sv[jj * KILN_MAX_D + c];
      }
    }
    m = m_new;
  }
  if (i >= p.lq) return;
  const uint base = p.out_off + (n * p.lq + i) * dv;
  const bool none = l == ACC_T(0);  // no key seen: softmax of all -inf is NaN
  const ACC_T inv = none ? kiln_acc_nan() : ACC_T(1) / l;
  for (uint t = 0u; t < KILN_PER_T; ++t) {
    const uint c = lane + KILN_T * t;
    if (c < dv) out_[base + c] = KILN_FROM_ACC(o[t] * inv);
  }
  if (lane == 0u) lse[p.lse_off + n * p.lq + i] = none ? -inf : m + kiln_log(l);
}
