#version 450
// Max pooling's forward pass and gather mode, one invocation per output element (n, c, oy, ox):
// out = x (kFromSrc false) or src (true) at the window's argmax (pool_common.glsl); an empty window
// gives -inf, or 0 from src (the derivative of the constant -inf). The value is copied, not
// recomputed, so NaN payloads and 16-bit bits pass unchanged. out is contiguous.
// kiln-variant: max_pool_f32
// kiln-variant: max_pool_f64 -DKILN_F64
// kiln-variant: max_pool_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#endif
#include "../common/indexing.glsl"

#ifdef KILN_16BIT
layout(std430, set = 0, binding = 0) readonly buffer X { uint16_t x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Src { uint16_t src[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { uint16_t y[]; };
#elif defined(KILN_F64)
layout(std430, set = 0, binding = 0) readonly buffer X { double x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Src { double src[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { double y[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Src { float src[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float y[]; };
#endif
#include "pool_common.glsl"

layout(constant_id = 2) const bool kFromSrc = false;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n * p.c * p.oh * p.ow) return;
  const uint ox = i % p.ow, oy = i / p.ow % p.oh, plane = i / (p.ow * p.oh);
  const int at = kiln_window_argmax(kiln_x_plane(plane), oy, ox);
  const uint o = p.out_offset + i;
  if (at < 0) {
    y[o] = kFromSrc ? STORE_T(0) : KILN_STORE(ACC_T(uintBitsToFloat(0xFF800000u)));
    return;
  }
  const int iy = at / int(p.w), ix = at % int(p.w);
  if (kFromSrc) {
    const int base = p.s_offset + int(plane / p.c) * p.s_strides[0] + int(plane % p.c) * p.s_strides[1];
    y[o] = src[base + iy * p.s_strides[2] + ix * p.s_strides[3]];
  } else {
    y[o] = x[kiln_x_plane(plane) + iy * p.x_strides[2] + ix * p.x_strides[3]];
  }
}
