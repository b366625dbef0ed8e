#version 450
// out = x with upd[.., j, ..] added at x[.., idx[.., j, ..], ..] along the axis: the vjp of
// take_along_axis. One invocation per output element loops over the indices' axis and adds every
// update aimed at it, in order of j: no atomics, deterministic, and duplicates accumulate. The
// cost is x's size times the indices' axis length, which is what cross-entropy's gradient needs
// (one index per row); a wide index axis would want a sort-based kernel instead.
// x, idx and upd may have any strides (0 too); out is contiguous with x's shape. Indices are
// loaded as in take_along_axis.comp; updates at indices outside [-n, n) are dropped (the host
// checks the indices it holds and throws as the CPU does).
// int32 adds serve uint32 too (the same bits); int64 is added as two uint words with a carry
// (KILN_WORDS64), so it needs no shaderInt64; float64 needs shaderFloat64 (the host checks).
// kiln-variant: scatter_add_along_axis_f32 -DVAL_T=float
// kiln-variant: scatter_add_along_axis_f64 -DVAL_T=double
// kiln-variant: scatter_add_along_axis_i32 -DVAL_T=int
// kiln-variant: scatter_add_along_axis_i64 -DVAL_T=uvec2 -DKILN_WORDS64
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { VAL_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Idx { uint idx_words[]; };
layout(std430, set = 0, binding = 2) readonly buffer Upd { VAL_T upd[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { VAL_T y[]; };
#include "index_common.glsl"

layout(push_constant) uniform Push {
  uint total;  // elements of the output
  uint rank;
  uint axis;
  uint updates;  // the indices' size along the axis
  uint x_offset;
  uint idx_offset;
  uint upd_offset;
  uint shape[KILN_INDEX_RANK];  // x's (and the output's) shape
  int x_strides[KILN_INDEX_RANK];
  int idx_strides[KILN_INDEX_RANK];  // over the indices' shape: x's with the axis sized `updates`
  int upd_strides[KILN_INDEX_RANK];
} p;

VAL_T add(VAL_T a, VAL_T b) {
#ifdef KILN_WORDS64
  uint carry;
  const uint lo = uaddCarry(a.x, b.x, carry);
  return uvec2(lo, a.y + b.y + carry);
#else
  return a + b;
#endif
}

void main() {
  const uint i = kiln_global_id();
  if (i >= p.total) return;
  int xo = int(p.x_offset), io = int(p.idx_offset), uo = int(p.upd_offset);
  uint rest = i, target = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    const uint k = rest % p.shape[d];
    rest /= p.shape[d];
    xo += int(k) * p.x_strides[d];
    if (uint(d) == p.axis) {
      target = k;
    } else {
      io += int(k) * p.idx_strides[d];
      uo += int(k) * p.upd_strides[d];
    }
  }
  const uint n = p.shape[p.axis];
  VAL_T acc = x[xo];
  for (uint j = 0; j < p.updates; ++j) {
    if (kiln_load_index(uint(io + int(j) * p.idx_strides[p.axis]), n) == int(target))
      acc = add(acc, upd[uo + int(j) * p.upd_strides[p.axis]]);
  }
  y[i] = acc;
}
