#version 450
// out[p, r, q] = vals[p, j, q] for the last j with rows[p, j, q] == r, else x[p, r, q]: put_along_axis,
// whose last write wins on the CPU. One invocation per output element scans its column of indices
// from the end (x's size times the indices' axis length; no atomics, deterministic). rows are the
// wrapped indices, dense [P, J, Q] (index_rows.comp; a bad one is N and matches no row); x and vals
// are [P, N, Q] and [P, J, Q] blocks with any strides; out is contiguous. Values move as raw bits.
// kiln-variant: put_along_axis_u8 -DVAL_T=uint8_t -DKILN_8BIT
// kiln-variant: put_along_axis_u16 -DVAL_T=uint16_t -DKILN_16BIT
// kiln-variant: put_along_axis_u32 -DVAL_T=uint
// kiln-variant: put_along_axis_u64 -DVAL_T=uvec2
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
layout(std430, set = 0, binding = 2) readonly buffer Vals { VAL_T vals[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { VAL_T y[]; };

layout(push_constant) uniform Push {
  uint total;  // elements of the output
  uint n;      // x's size along the axis
  uint q_count;
  uint j_count;  // the indices' size along the axis
  uint x_offset;
  int x_p_stride;
  int x_n_stride;
  int x_q_stride;
  uint vals_offset;
  int vals_p_stride;
  int vals_j_stride;
  int vals_q_stride;
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.total) return;
  const uint q = i % p.q_count, t = i / p.q_count;
  const uint r = t % p.n, b = t / p.n;
  const uint column = b * p.j_count * p.q_count + q;
  for (uint j = p.j_count; j-- > 0u;) {
    if (rows[column + j * p.q_count] == r) {
      y[i] = vals[int(p.vals_offset) + int(b) * p.vals_p_stride + int(j) * p.vals_j_stride +
                  int(q) * p.vals_q_stride];
      return;
    }
  }
  y[i] = x[int(p.x_offset) + int(b) * p.x_p_stride + int(r) * p.x_n_stride + int(q) * p.x_q_stride];
}
