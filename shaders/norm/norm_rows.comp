#version 450
// y[r, :] = the normalization kKind of row r of x, a [rows, n] block with any row and column
// strides, into a row-major y; core/cpu/norm.h has the formulas. softmax and log_softmax take one
// reduction of (max, sum of exp(x - max)) pairs, layer_norm two (the mean, then the squared
// deviations: exact two-pass statistics), rms_norm one. The weight and bias (ACC_T, any stride)
// are read only when kHasWeight / kHasBias. Layout and reductions: norm_common.glsl.
// kiln-variant: norm_rows_f32 -DIN_T=float -DACC_T=float
// kiln-variant: norm_rows_f64 -DIN_T=double -DACC_T=double -DKILN_HAS_FLOAT64
// kiln-variant: norm_rows_f16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_HALF
// kiln-variant: norm_rows_bf16 -DIN_T=uint16_t -DACC_T=float -DKILN_16BIT -DKILN_BF16
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "norm_common.glsl"

layout(constant_id = 2) const bool kHasWeight = false;
layout(constant_id = 3) const bool kHasBias = false;

layout(std430, set = 0, binding = 0) readonly buffer In { IN_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight { ACC_T w[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { ACC_T b[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { IN_T y[]; };

layout(push_constant) uniform Push {
  uint rows, n, tpr;
  int x_offset, x_row_stride, x_col_stride;
  int w_offset, w_stride, b_offset, b_stride;
  uint out_offset;
  float eps;            // the float variants'
  uint eps_lo, eps_hi;  // the float64 variant's, as bits
} p;

ACC_T load_x(uint row, uint c) {
  return KILN_TO_ACC(x[p.x_offset + int(row) * p.x_row_stride + int(c) * p.x_col_stride]);
}
ACC_T weight(uint c) { return kHasWeight ? w[p.w_offset + int(c) * p.w_stride] : ACC_T(1); }
ACC_T bias(uint c) { return kHasBias ? b[p.b_offset + int(c) * p.b_stride] : ACC_T(0); }

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
  const uint out_base = p.out_offset + s.row * p.n;
  ACC_T v[KILN_ITEMS];
  for (uint k = 0u; k < KILN_ITEMS; ++k) {
    const uint c = k * s.tpr + s.lane;
    v[k] = cached && c < n ? load_x(s.row, c) : ACC_T(0);
  }

  if (kKind == KIND_SOFTMAX || kKind == KIND_LOG_SOFTMAX) {
    const ACC_T inf = kiln_acc_inf();
    ACC_T m = -inf, sum = ACC_T(0);
    if (cached) {
      for (uint k = 0u; k < KILN_ITEMS; ++k)
        if (k * s.tpr + s.lane < n) m = v[k] > m ? v[k] : m;
      for (uint k = 0u; k < KILN_ITEMS; ++k)
        if (k * s.tpr + s.lane < n && v[k] != -inf) sum += kiln_exp(v[k] - m);
    } else {
      // Online: the running sum is rescaled whenever the running max grows.
      for (uint c = s.lane; c < n; c += s.tpr) {
        const ACC_T xv = load_x(s.row, c);
        if (xv > m) {
          sum = kiln_rescale(sum, m, xv);
          m = xv;
        }
        if (xv != -inf) sum += kiln_exp(xv - m);
      }
    }
    kiln_row_softmax_stats(s, m, sum);
    const bool log_kind = kKind == KIND_LOG_SOFTMAX;
    // log_softmax as the CPU: (x - m) - log(sum), with no log term when the max is infinite.
    const ACC_T shift = log_kind ? (isinf(m) ? ACC_T(0) : kiln_log(sum)) : ACC_T(1) / sum;
    for (uint ch = 0u; ch < chunks; ++ch)
      for (uint k = 0u; k < KILN_ITEMS; ++k) {
        const uint c = ch * span + k * s.tpr + s.lane;
        if (c >= n) continue;
        const ACC_T xv = cached ? v[k] : load_x(s.row, c);
        y[out_base + c] = KILN_FROM_ACC(log_kind ? (xv - m) - shift : kiln_exp(xv - m) * shift);
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
  for (uint ch = 0u; ch < chunks; ++ch)
    for (uint k = 0u; k < KILN_ITEMS; ++k) {
      const uint c = ch * span + k * s.tpr + s.lane;
      if (c >= n) continue;
      const ACC_T xv = cached ? v[k] : load_x(s.row, c);
      y[out_base + c] = KILN_FROM_ACC(((xv - shift) - delta) * r * weight(c) + bias(c));
    }
}
