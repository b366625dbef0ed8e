#version 450
// The first pass of max pooling's gradient: idx[n, c, oy, ox] (int32, contiguous) = the argmax of
// each window as iy * w + ix, or -1 for a window without input elements (pool_common.glsl).
// max_pool_scatter.comp then gathers the gradient per input element, so no atomics are needed.
// kiln-variant: max_pool_argmax_f32
// kiln-variant: max_pool_argmax_f64 -DKILN_F64
// kiln-variant: max_pool_argmax_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#endif
#include "../common/indexing.glsl"

#ifdef KILN_16BIT
layout(std430, set = 0, binding = 0) readonly buffer X { uint16_t x[]; };
#elif defined(KILN_F64)
layout(std430, set = 0, binding = 0) readonly buffer X { double x[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
#endif
layout(std430, set = 0, binding = 1) writeonly buffer Idx { int idx[]; };
#include "pool_common.glsl"

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n * p.c * p.oh * p.ow) return;
  const uint ox = i % p.ow, oy = i / p.ow % p.oh, plane = i / (p.ow * p.oh);
  idx[p.out_offset + i] = kiln_window_argmax(kiln_x_plane(plane), oy, ox);
}
