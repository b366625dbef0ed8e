#version 450
// Cumulative sums, products, maxima, minima and logaddexps along the middle axis of an [outer, n, inner] block with
// inner > 1 (the scanned axis is not the last), any strides, into a row-major output. One
// invocation scans one column (o, i) sequentially; neighbouring invocations take neighbouring i,
// so loads and stores are coalesced whenever the inner axis is dense.
//
// When there are too few columns to fill the device the host cuts the axis into `splits` pieces
// of `chunk`: logical column t = (o * splits + s) * inner + i covers [s * chunk, s * chunk + chunk)
// and the passes are those of scan_rows.comp (kTotals writes totals[t], kCarry starts from
// carry_in[t], the totals being scanned as an [outer, splits, inner] block in between).
// kiln-variant: scan_cols_f32 -DACC_T=float -DOUT_T=float -DKILN_WORDS -DKILN_ACC_FLOAT
// kiln-variant: scan_cols_f32d -DACC_T=double -DOUT_T=float -DKILN_WORDS -DKILN_ACC_FLOAT -DKILN_HAS_FLOAT64
// kiln-variant: scan_cols_f32_h16 -DACC_T=float -DKILN_WORDS -DKILN_ACC_FLOAT -DKILN_OUT_16
// kiln-variant: scan_cols_u32 -DACC_T=uint -DOUT_T=uint -DKILN_WORDS
// kiln-variant: scan_cols_f64 -DACC_T=double -DOUT_T=double -DKILN_ACC_FLOAT -DKILN_HAS_FLOAT64
// kiln-variant: scan_cols_i32 -DACC_T=int -DOUT_T=int -DKILN_WORDS -DKILN_ACC_SIGNED
// kiln-variant: scan_cols_i64 -DACC_T=int64_t -DOUT_T=int64_t -DKILN_INT64 -DKILN_ACC_SIGNED
// kiln-variant: scan_cols_u64 -DACC_T=uint64_t -DOUT_T=uint64_t -DKILN_INT64
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_OUT_16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef KILN_INT64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#include "scan_common.glsl"

layout(push_constant) uniform Push {
  uint columns;  // logical columns: outer * splits * inner
  uint n;
  uint inner;
  uint splits;
  uint chunk;
  int in_offset;
  int outer_stride;
  int axis_stride;
  int inner_stride;
  uint out_offset;
} p;

void main() {
  const uint t = kiln_global_id();
  if (t >= p.columns) return;
  const uint i = t % p.inner, rest = t / p.inner;
  const uint o = rest / p.splits, c0 = (rest % p.splits) * p.chunk;
  const uint len = min(p.chunk, p.n - c0);
  const int in_base = p.in_offset + int(o) * p.outer_stride + int(i) * p.inner_stride;
  const uint out_base = p.out_offset + o * p.n * p.inner + i;
  ACC_T acc = kCarry ? carry_in[t] : kiln_scan_identity();
  for (uint j = 0u; j < len; ++j) {
    const uint k = kReverse ? c0 + len - 1u - j : c0 + j;
    const ACC_T next = kiln_scan_combine(acc, kiln_scan_load(in_base + int(k) * p.axis_stride));
    if (!kTotals) kiln_scan_store(out_base + k * p.inner, kInclusive ? next : acc);
    acc = next;
  }
  if (kTotals) totals[t] = acc;
}
