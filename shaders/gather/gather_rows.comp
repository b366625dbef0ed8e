#version 450
// out[p, j, q] = x[p, rows[j], q]: take along one axis (or gather over the leading dims) of x seen
// as a [P, N, Q] block with any strides (0 and negative too); out is contiguous [P, J, Q]. A row
// >= N (a bad index computed on the device, index_rows.comp) reads 0. Values move as raw units of
// 1 to 16 bytes: the host widens the unit when rows are contiguous and aligned (an embedding row of
// float32 moves as uvec4s), so one variant per unit size serves every dtype.
// kiln-variant: gather_rows_u8 -DVAL_T=uint8_t -DKILN_8BIT
// kiln-variant: gather_rows_u16 -DVAL_T=uint16_t -DKILN_16BIT
// kiln-variant: gather_rows_u32 -DVAL_T=uint
// kiln-variant: gather_rows_u64 -DVAL_T=uvec2
// kiln-variant: gather_rows_u128 -DVAL_T=uvec4
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_8BIT
#extension GL_EXT_shader_8bit_storage : require
#endif
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { VAL_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Rows { uint rows[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { VAL_T y[]; };

layout(push_constant) uniform Push {
  uint total;  // units of the output
  uint j_count;
  uint q_count;  // units per row
  uint n;        // x's rows
  uint x_offset;
  int p_stride;
  int n_stride;
  int q_stride;
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.total) return;
  const uint q = i % p.q_count, t = i / p.q_count;
  const uint row = rows[t % p.j_count], b = t / p.j_count;
  if (row >= p.n) {
    y[i] = VAL_T(0);
    return;
  }
  y[i] = x[int(p.x_offset) + int(b) * p.p_stride + int(row) * p.n_stride + int(q) * p.q_stride];
}
