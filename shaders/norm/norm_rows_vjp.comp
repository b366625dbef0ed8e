#version 450
// The backward pass of norm_rows.comp (core/cpu/norm.h's norm_rows_vjp): dx[r, :] for the
// cotangent g, x being the forward output for softmax/log_softmax and its input for the norms,
// both [rows, n] blocks with any row and column strides (a broadcast g has stride 0); and with
// kWantGxhat, gxhat = g * normalized x in ACC_T (the terms of the weight's gradient). dx and
// gxhat are row-major. Layout and reductions: norm_common.glsl.
// kiln-variant: norm_rows_vjp_f32 -DIN_T=float -DACC_T=float
// kiln-variant: norm_rows_vjp_f64 -DIN_T=double -DACC_T=double -DKILN_HAS_FLOAT64
// kiln-variant: norm_rows_vjp_f16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_HALF
// kiln-variant: norm_rows_vjp_bf16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_BF16
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "norm_common.glsl"

layout(constant_id = 2) const bool kHasWeight = false;
layout(constant_id = 3) const bool kWantGxhat = false;

layout(std430, set = 0, binding = 0) readonly buffer In { IN_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight { ACC_T w[]; };
layout(std430, set = 0, binding = 2) readonly buffer Cotangent { IN_T g[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Dx { IN_T dx[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Gxhat { ACC_T gxhat[]; };

layout(push_constant) uniform Push {
  uint rows, n, tpr;
  int x_offset, x_row_stride, x_col_stride;
  int w_offset, w_stride;
  int g_offset, g_row_stride, g_col_stride;
  uint dx_offset, gxhat_offset;
  float eps;            // the float variants'
  uint eps_lo, eps_hi;  // the float64 variant's, as bits
} p;

ACC_T load_x(uint row, uint c) {
  return KILN_TO_ACC(x[p.x_offset + int(row) * p.x_row_stride + int(c) * p.x_col_stride]);
}
ACC_T load_g(uint row, uint c) {
  return KILN_TO_ACC(g[p.g_offset + int(row) * p.g_row_stride + int(c) * p.g_col_stride]);
}
ACC_T weight(uint c) { return kHasWeight ? w[p.w_offset + int(c) * p.w_stride] : ACC_T(1); }

ACC_T eps() {
#ifdef KILN_HAS_FLOAT64
  return packDouble2x32(uvec2(p.eps_lo, p.eps_hi));
#else
  return p.eps;
#endif
}

void main() {
  const RowSlot s = kiln_row_slot(p.tpr);
  // An invocation past the last row sees an empty row: it loads nothing but reaches every barrier.
  const uint n = s.row < p.rows ? p.n : 0u;
  const uint span = s.tpr * KILN_ITEMS;
  const bool cached = p.n <= span;
  const uint chunks = (n + span - 1u) / span;
  const uint base = s.row * p.n;
  ACC_T v[KILN_ITEMS], u[KILN_ITEMS];  // x and g, when the row fits one chunk
  for (uint k = 0u; k < KILN_ITEMS; ++k) {
    const uint c = k * s.tpr + s.lane;
    const bool here = cached && c < n;
    v[k] = here ? load_x(s.row, c) : ACC_T(0);
    u[k] = here ? load_g(s.row, c) : ACC_T(0);
  }

  if (kKind == KIND_SOFTMAX || kKind == KIND_LOG_SOFTMAX) {
    const bool log_kind = kKind == KIND_LOG_SOFTMAX;
    // softmax: sum(g * y); log_softmax: sum(g).
    ACC_T part = ACC_T(0);
    for (uint ch = 0u; ch < chunks; ++ch)
      for (uint k = 0u; k < KILN_ITEMS; ++k) {
        const uint c = ch * span + k * s.tpr + s.lane;
        if (c >= n) continue;
        const ACC_T gv = cached ? u[k] : load_g(s.row, c);
        part += log_kind ? gv : gv * (cached ? v[k] : load_x(s.row, c));
      }
    const ACC_T total = kiln_row_sum(s, part);
    for (uint ch = 0u; ch < chunks; ++ch)
      for (uint k = 0u; k < KILN_ITEMS; ++k) {
        const uint c = ch * span + k * s.tpr + s.lane;
        if (c >= n) continue;
        const ACC_T yv = cached ? v[k] : load_x(s.row, c), gv = cached ? u[k] : load_g(s.row, c);
        dx[p.dx_offset + base + c] = KILN_FROM_ACC(log_kind ? gv - kiln_exp(yv) * total : yv * (gv - total));
      }
    return;
  }

  // The mean as shift + delta, shift = the row's first element (core/cpu/norm.cpp's RowStats):
  // exact for rows far from zero. rms_norm: both 0.
  ACC_T shift = ACC_T(0), delta = ACC_T(0);
  if (kKind == KIND_LAYER_NORM) {
    shift = n > 0u ? load_x(s.row, 0u) : ACC_T(0);
    ACC_T part = ACC_T(0);
    for (uint ch = 0u; ch < chunks; ++ch)
      for (uint k = 0u; k < KILN_ITEMS; ++k) {
        const uint c = ch * span + k * s.tpr + s.lane;
        if (c < n) part += (cached ? v[k] : load_x(s.row, c)) - shift;
      }
    delta = kiln_row_sum(s, part) / ACC_T(p.n);
  }
  ACC_T squares = ACC_T(0);
  for (uint ch = 0u; ch < chunks; ++ch)
    for (uint k = 0u; k < KILN_ITEMS; ++k) {
      const uint c = ch * span + k * s.tpr + s.lane;
      if (c >= n) continue;
      const ACC_T d = ((cached ? v[k] : load_x(s.row, c)) - shift) - delta;
      squares += d * d;
    }
  const ACC_T r = ACC_T(1) / sqrt(kiln_row_sum(s, squares) / ACC_T(p.n) + eps());
  // a = mean(g * w) (layer_norm only), c = mean(g * w * xhat).
  ACC_T a = ACC_T(0), cw = ACC_T(0);
  for (uint ch = 0u; ch < chunks; ++ch)
    for (uint k = 0u; k < KILN_ITEMS; ++k) {
      const uint c = ch * span + k * s.tpr + s.lane;
      if (c >= n) continue;
      const ACC_T gw = (cached ? u[k] : load_g(s.row, c)) * weight(c);
      a += gw;
      cw += gw * ((((cached ? v[k] : load_x(s.row, c)) - shift) - delta) * r);
    }
  kiln_row_sum2(s, a, cw);
  a = kKind == KIND_LAYER_NORM ? a / ACC_T(p.n) : ACC_T(0);
  cw /= ACC_T(p.n);
  for (uint ch = 0u; ch < chunks; ++ch)
    for (uint k = 0u; k < KILN_ITEMS; ++k) {
      const uint c = ch * span + k * s.tpr + s.lane;
      if (c >= n) continue;
      const ACC_T gv = cached ? u[k] : load_g(s.row, c);
      const ACC_T xhat = (((cached ? v[k] : load_x(s.row, c)) - shift) - delta) * r;
      dx[p.dx_offset + base + c] = KILN_FROM_ACC(r * (gv * weight(c) - a - xhat * cw));
      if (kWantGxhat) gxhat[p.gxhat_offset + base + c] = gv * xhat;
    }
}
