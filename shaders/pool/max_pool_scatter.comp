#version 450
// The second pass of max pooling's gradient, one invocation per input element (n, c, iy, ix):
// out (contiguous, x's shape) = the sum of g over the windows whose argmax (idx, from
// max_pool_argmax.comp) is this element, in row-major window order from 0, as the CPU adds them
// (16-bit types accumulate in float32): deterministic and equal to the CPU's bit for bit.
// kiln-variant: max_pool_scatter_f32
// kiln-variant: max_pool_scatter_f64 -DKILN_F64
// kiln-variant: max_pool_scatter_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#endif
#include "../common/indexing.glsl"

#ifdef KILN_16BIT
layout(std430, set = 0, binding = 0) readonly buffer X { uint16_t x[]; };  // unread: pool_common's loads
layout(std430, set = 0, binding = 1) readonly buffer G { uint16_t g[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { uint16_t y[]; };
#elif defined(KILN_F64)
layout(std430, set = 0, binding = 0) readonly buffer X { double x[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { double g[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { double y[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { float y[]; };
#endif
layout(std430, set = 0, binding = 2) readonly buffer Idx { int idx[]; };
#include "pool_common.glsl"

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n * p.c * p.h * p.w) return;
  const uint ix = i % p.w, iy = i / p.w % p.h, plane = i / (p.w * p.h);
  const int self = int(iy * p.w + ix);
  const uint idx_plane = plane * p.oh * p.ow;
  const int g_base = p.s_offset + int(plane / p.c) * p.s_strides[0] + int(plane % p.c) * p.s_strides[1];
  ACC_T acc = ACC_T(0);
  // Taps from the last to the first give the windows holding this element in ascending order.
  for (int a = p.kh - 1; a >= 0; --a) {
    const int ty = int(iy) + p.ph - a * p.dh;
    if (ty < 0) continue;
    const int oy = ty / p.sh;
    if (oy * p.sh != ty || oy >= int(p.oh)) continue;
    for (int b = p.kw - 1; b >= 0; --b) {
      const int tx = int(ix) + p.pw - b * p.dw;
      if (tx < 0) continue;
      const int ox = tx / p.sw;
      if (ox * p.sw != tx || ox >= int(p.ow)) continue;
      if (idx[idx_plane + uint(oy) * p.ow + uint(ox)] == self)
        acc += KILN_LOAD(g[g_base + oy * p.s_strides[2] + ox * p.s_strides[3]]);
    }
  }
  y[p.out_offset + i] = KILN_STORE(acc);
}
