#version 450
// FusedAdamStep (optim/fused_adam.cpp) in one pass: m1 = lerp(m, g, w), v1 = b2 v + (1 - b2) g^2,
// [vmax1 = maximum(vmax, v1)], p1 = p [* decay] - step (m1 / (sqrt(second) / bc2 + eps)), with the CPU loop's
// rounding: each product and sum rounded on its own (precise: no fused multiply-add), lerp by
// torch's two formulas (lerp_from_m when w < 0.5), a NaN in vmax propagating. step and bc2 are
// 0-d arrays on the device (a traced step keeps them as inputs), as is AdamW's decay (1 - lr wd) when
// c.decay is set. The float64 variant is used only
// on devices with shaderFloat64; the float32 one needs no 64-bit type.
// kiln-variant: adam_step_f32 -DT=float
// kiln-variant: adam_step_f64 -DT=double -DKILN_F64
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer P { T p[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { T g[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { T m[]; };
layout(std430, set = 0, binding = 3) readonly buffer V { T v[]; };
layout(std430, set = 0, binding = 4) readonly buffer VMax { T vmax[]; };
layout(std430, set = 0, binding = 5) readonly buffer Step { T step_size[]; };
layout(std430, set = 0, binding = 6) readonly buffer Bc2 { T bc2_sqrt[]; };
layout(std430, set = 0, binding = 7) writeonly buffer P1 { T p1[]; };
layout(std430, set = 0, binding = 8) writeonly buffer M1 { T m1[]; };
layout(std430, set = 0, binding = 9) writeonly buffer V1 { T v1[]; };
layout(std430, set = 0, binding = 10) writeonly buffer VMax1 { T vmax1[]; };
layout(std430, set = 0, binding = 11) readonly buffer Decay { T decay[]; };

// Element offsets of the inputs, and the constants rounded to T on the host: a float32's bits in
// .x, or a float64's (low word, high word).
layout(push_constant) uniform Push {
  uint n;
  uint amsgrad;
  uint lerp_from_m;
  uint step_offset, bc2_offset;
  uint offsets[5];  // p, g, m, v, vmax
  uvec2 w, one_minus_w, b2, one_minus_b2, eps;
  uint decay, decay_offset;
} c;

#ifdef KILN_F64
T constant_of(uvec2 bits) { return packDouble2x32(bits); }
#else
T constant_of(uvec2 bits) { return uintBitsToFloat(bits.x); }
#endif

void main() {
  const uint i = kiln_global_id();
  if (i >= c.n) return;
  const T gi = g[c.offsets[1] + i], mi0 = m[c.offsets[2] + i];
  const T w = constant_of(c.w), one_minus_w = constant_of(c.one_minus_w);
  precise T mi;
  if (c.lerp_from_m != 0u) {
    precise T d = gi - mi0;
    precise T s = w * d;
    mi = mi0 + s;
  } else {
    precise T d = gi - mi0;
    precise T s = d * one_minus_w;
    mi = gi - s;
  }
  precise T a = constant_of(c.b2) * v[c.offsets[3] + i];
  precise T gg = gi * gi;
  precise T b = constant_of(c.one_minus_b2) * gg;
  precise T vi = a + b;
  T second = vi;
  if (c.amsgrad != 0u) {
    const T vm = vmax[c.offsets[4] + i];
    second = (vm > vi || vm != vm) ? vm : vi;
    vmax1[i] = second;
  }
  m1[i] = mi;
  v1[i] = vi;
  precise T root = sqrt(second);
  precise T scaled = root / bc2_sqrt[c.bc2_offset];
  precise T denom = scaled + constant_of(c.eps);
  precise T q = mi / denom;
  precise T upd = step_size[c.step_offset] * q;
  precise T base = p[c.offsets[0] + i];
  if (c.decay != 0u) base = base * decay[c.decay_offset];
  p1[i] = base - upd;
}
