#version 450
// out[i] = sum over s < splits of part[s * n + i], converted to the output's type: adds
// conv_gemm.comp's split-k partial sums of a weight gradient, and converts its float32 results
// for the 16-bit variants (splits = 1). With splits = 0 it writes zeros (a convolution over no
// samples or no channels).
// kiln-variant: conv_sum_splits_f32
// kiln-variant: conv_sum_splits_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#define STORE_T uint16_t
#define KILN_STORE(v) uint16_t(kBfloat ? kiln_float_to_bfloat(v) : kiln_float_to_half(v))
#else
#define STORE_T float
#define KILN_STORE(v) (v)
#endif
#include "../common/indexing.glsl"

layout(constant_id = 2) const bool kBfloat = false;

layout(std430, set = 0, binding = 0) readonly buffer Partials { float part[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Result { STORE_T Y[]; };

layout(push_constant) uniform Push {
  uint n;
  uint splits;
  uint out_offset;
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n) return;
  float acc = 0.0;
  for (uint s = 0; s < p.splits; ++s) acc += part[s * p.n + i];
  Y[p.out_offset + i] = KILN_STORE(acc);
}
