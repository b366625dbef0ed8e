// Shared by the max-pooling shaders (max_pool.comp, max_pool_argmax.comp, max_pool_scatter.comp):
// the push constants (one layout, PoolPush in core/vulkan/runtime/pool_kernels.cpp), the element
// type's loads and the window's argmax. Layout is PyTorch's: x (n, c, h, w), pooled (n, c, oh, ow).
// The includer defines KILN_16BIT (float16 or bfloat16 bits, by kBfloat), KILN_F64 or neither
// (float32), and declares `STORE_T x[]` before including this file.
#ifndef KILN_POOL_COMMON_GLSL
#define KILN_POOL_COMMON_GLSL

// Constant 0 is the workgroup size (common/indexing.glsl).
layout(constant_id = 1) const bool kBfloat = false;

#include "../common/typed_storage.glsl"

// Strides are in elements in (n, c, h, w) order and may be anything (views are read in place);
// `s` is the second operand: src (max_pool.comp) or the output gradient g (max_pool_scatter.comp).
layout(push_constant) uniform Push {
  uint n, c, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int x_strides[4];
  int x_offset;
  int s_strides[4];
  int s_offset;
  uint out_offset;
} p;

// Offset in x of the plane (n, c) of `plane` = n * c + c.
int kiln_x_plane(uint plane) {
  return p.x_offset + int(plane / p.c) * p.x_strides[0] + int(plane % p.c) * p.x_strides[1];
}

// The argmax of window (oy, ox) of x's plane at `base`, as iy * w + ix, or -1 for a window without
// input elements. The CPU's rule (core/ops/pooling.cpp): taps in row-major order, a greater value
// or a NaN replaces the maximum, so the first maximum wins, or the last NaN when there is one.
int kiln_window_argmax(int base, uint oy, uint ox) {
  const int y0 = int(oy) * p.sh - p.ph, x0 = int(ox) * p.sw - p.pw;
  int best = -1;
  ACC_T m = ACC_T(0);
  for (int a = 0; a < p.kh; ++a) {
    const int iy = y0 + a * p.dh;
    if (uint(iy) >= p.h) continue;  // negative ones wrap to large
    for (int b = 0; b < p.kw; ++b) {
      const int ix = x0 + b * p.dw;
      if (uint(ix) >= p.w) continue;
      const ACC_T v = KILN_LOAD(x[base + iy * p.x_strides[2] + ix * p.x_strides[3]]);
      if (best < 0 || v > m || isnan(v)) {
        m = v;
        best = iy * int(p.w) + ix;
      }
    }
  }
  return best;
}

#endif
