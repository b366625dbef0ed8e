#version 450
// Convolution, one invocation per output element, summing its taps in a loop: the float64 path
// (no tiling: float64 is rare and slow on GPUs) and the float32/16-bit path where a group's GEMM
// is too narrow for conv_gemm.comp's tiles (depthwise convolutions: one channel per group).
// kPass forward: y[img, o, oy, ox] = sum over (c, ki, kj) of w[o, c, ki, kj] * x[img, g*cg + c,
// oy*sh - ph + ki*dh, ox*sw - pw + kj*dw]; grad_input: dx[img, c, iy, ix] = sum over (o, ki, kj)
// with (iy + ph - ki*dh) / sh = oy exact and in range of w[o, c, ki, kj] * gy[img, o, oy, ox].
// Operand A is the weight, B is x (forward) or gy (grad_input); see conv_common.glsl.
// kiln-variant: conv_direct_f32
// kiln-variant: conv_direct_f64 -DKILN_F64
// kiln-variant: conv_direct_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#include "conv_common.glsl"
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer OperandA { STORE_T A[]; };
layout(std430, set = 0, binding = 1) readonly buffer OperandB { STORE_T B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Result { STORE_T Y[]; };

void main() {
  const uint i = kiln_global_id();
  const uint cg = p.c / p.groups, og = p.o / p.groups;
  ACC_T acc = ACC_T(0);
  if (kPass == kForward) {
    if (i >= p.n * p.o * p.oh * p.ow) return;
    const uint ox = i % p.ow, oy = i / p.ow % p.oh, oc = i / (p.ow * p.oh) % p.o, img = i / (p.ow * p.oh * p.o);
    const uint g = oc / og;
    const int y0 = int(oy) * p.sh - p.ph, x0 = int(ox) * p.sw - p.pw;
    const int a_base = p.a_offset + int(oc) * p.a_strides[0];
    const int b_base = p.b_offset + int(img) * p.b_strides[0] + int(g * cg) * p.b_strides[1];
    for (uint c = 0; c < cg; ++c)
      for (uint ki = 0; ki < p.kh; ++ki) {
        const int y = y0 + int(ki) * p.dh;
        if (uint(y) >= p.h) continue;  // negative ones wrap to large
        for (uint kj = 0; kj < p.kw; ++kj) {
          const int x = x0 + int(kj) * p.dw;
          if (uint(x) >= p.w) continue;
          const ACC_T wv = ACC_T(KILN_LOAD(
              A[a_base + int(c) * p.a_strides[1] + int(ki) * p.a_strides[2] + int(kj) * p.a_strides[3]]));
          const ACC_T xv =
              ACC_T(KILN_LOAD(B[b_base + int(c) * p.b_strides[1] + y * p.b_strides[2] + x * p.b_strides[3]]));
          acc = fma(wv, xv, acc);
        }
      }
  } else {
    if (i >= p.n * p.c * p.h * p.w) return;
    const uint ix = i % p.w, iy = i / p.w % p.h, ic = i / (p.w * p.h) % p.c, img = i / (p.w * p.h * p.c);
    const uint g = ic / cg, c = ic % cg;
    const int a_base = p.a_offset + int(g * og) * p.a_strides[0] + int(c) * p.a_strides[1];
    const int b_base = p.b_offset + int(img) * p.b_strides[0] + int(g * og) * p.b_strides[1];
    for (uint o = 0; o < og; ++o)
      for (uint ki = 0; ki < p.kh; ++ki) {
        const int ty = int(iy) + p.ph - int(ki) * p.dh;
        if (ty < 0) break;  // ty only falls as ki grows
        const int oy = ty / p.sh;
        if (oy * p.sh != ty || oy >= int(p.oh)) continue;
        for (uint kj = 0; kj < p.kw; ++kj) {
          const int tx = int(ix) + p.pw - int(kj) * p.dw;
          if (tx < 0) break;
          const int ox = tx / p.sw;
          if (ox * p.sw != tx || ox >= int(p.ow)) continue;
          const ACC_T wv = ACC_T(KILN_LOAD(
              A[a_base + int(o) * p.a_strides[0] + int(ki) * p.a_strides[2] + int(kj) * p.a_strides[3]]));
          const ACC_T gv =
              ACC_T(KILN_LOAD(B[b_base + int(o) * p.b_strides[1] + oy * p.b_strides[2] + ox * p.b_strides[3]]));
          acc = fma(wv, gv, acc);
        }
      }
  }
  Y[p.out_offset + i] = KILN_STORE(acc);
}
