#version 450
// out[i] = x[.., idx[i], ..]: take_along_axis over a view of at most KILN_INDEX_RANK dims. The
// output is contiguous with the indices' shape; x and the indices may have any strides (0 too).
// Indices are int32, uint32, int64 or uint64 (kIndexType), read as uint words so that no 64-bit
// arithmetic is needed; negative ones count from the end. An index still outside [0, n) reads 0:
// the host checks indices it holds and throws as the CPU does, but cannot see the values of
// indices computed on the device in the same submit (index_facade.cpp).
// Values are moved as bits: uvec2 for the 8-byte dtypes (no 64-bit type needed).
// kiln-variant: take_along_axis_u64 -DVAL_T=uvec2
// kiln-variant: take_along_axis_u32 -DVAL_T=uint
// kiln-variant: take_along_axis_u16 -DVAL_T=uint16_t -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { VAL_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Idx { uint idx_words[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { VAL_T y[]; };
#include "index_common.glsl"

layout(push_constant) uniform Push {
  uint total;  // elements of the output
  uint rank;
  uint axis;
  uint n;  // x's size along the axis
  uint x_offset;
  uint idx_offset;
  uint out_offset;
  uint shape[KILN_INDEX_RANK];  // the indices' (and the output's) shape
  int x_strides[KILN_INDEX_RANK];
  int idx_strides[KILN_INDEX_RANK];
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.total) return;
  int xo = int(p.x_offset), io = int(p.idx_offset);
  uint rest = i, along = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    const uint k = rest % p.shape[d];
    rest /= p.shape[d];
    io += int(k) * p.idx_strides[d];
    if (uint(d) != p.axis) xo += int(k) * p.x_strides[d];
  }
  const int j = kiln_load_index(uint(io), p.n);
  y[p.out_offset + i] = j < 0 ? VAL_T(0) : x[xo + j * p.x_strides[p.axis]];
}
