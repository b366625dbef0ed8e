#version 450
// The weight gradient, one workgroup per element of dw: dw[o, c, ki, kj] = sum over (img, oy, ox)
// of gy[img, o, oy, ox] * x[img, g*cg + c, oy*sh - ph + ki*dh, ox*sw - pw + kj*dw]. Each
// invocation sums a strided slice of the (img, oy, ox) positions (consecutive invocations read
// consecutive pixels), then a shared-memory tree adds the partials. The float64 path, and the
// float32/16-bit one where conv_gemm.comp's tiles would be mostly empty (depthwise convolutions).
// Operand A is gy, B is x; see conv_common.glsl.
// kiln-variant: conv_direct_wgrad_f32
// kiln-variant: conv_direct_wgrad_f64 -DKILN_F64
// kiln-variant: conv_direct_wgrad_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#include "conv_common.glsl"
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer OperandA { STORE_T A[]; };
layout(std430, set = 0, binding = 1) readonly buffer OperandB { STORE_T B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Result { STORE_T Y[]; };

shared ACC_T partial[kWorkgroupSize];

void main() {
  const uint cg = p.c / p.groups, og = p.o / p.groups;
  const uint taps = p.kh * p.kw;
  const uint e = kiln_group_id();
  if (e >= p.o * cg * taps) return;  // uniform per workgroup: no barrier is skipped by part of it
  const uint kj = e % p.kw, ki = e / p.kw % p.kh, c = e / taps % cg, oc = e / (taps * cg);
  const uint g = oc / og;
  const int dy = int(ki) * p.dh - p.ph, dx = int(kj) * p.dw - p.pw;
  const int a_base = p.a_offset + int(oc) * p.a_strides[1];
  const int b_base = p.b_offset + int(g * cg + c) * p.b_strides[1];
  const uint tid = gl_LocalInvocationID.x;
  const uint plane = p.oh * p.ow;
  ACC_T acc = ACC_T(0);
  for (uint q = tid; q < p.n * plane; q += kWorkgroupSize) {
    const uint img = q / plane, oy = q % plane / p.ow, ox = q % p.ow;
    const int y = int(oy) * p.sh + dy, x = int(ox) * p.sw + dx;
    if (uint(y) >= p.h || uint(x) >= p.w) continue;  // negative ones wrap to large
    const ACC_T gv = ACC_T(KILN_LOAD(
        A[a_base + int(img) * p.a_strides[0] + int(oy) * p.a_strides[2] + int(ox) * p.a_strides[3]]));
    const ACC_T xv =
        ACC_T(KILN_LOAD(B[b_base + int(img) * p.b_strides[0] + y * p.b_strides[2] + x * p.b_strides[3]]));
    acc = fma(gv, xv, acc);
  }
  partial[tid] = acc;
  barrier();
  for (uint width = kWorkgroupSize / 2; width > 0; width /= 2) {
    if (tid < width) partial[tid] += partial[tid + width];
    barrier();
  }
  if (tid == 0) Y[p.out_offset + e] = KILN_STORE(partial[0]);
}
