#version 450
// rows[i] = the flat row number that index arrays 0..k-1 (one pass each, in order) pick from the
// leading dims of an array: rows = rows * n + wrap(idx[i]). Each pass reads one index array of
// any integer dtype and any strides (0 too) over a shared shape of up to KILN_MAX_RANK dims; the
// rows are dense. An index outside [-n, n) marks its row bad, and the last pass writes a bad row
// as `bad_row` (the product of the sizes, which no valid row reaches), so the kernels that read
// the rows read 0 for it or drop its update.
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Idx { uint idx_words[]; };
layout(std430, set = 0, binding = 1) buffer Rows { uint rows[]; };
#include "gather_common.glsl"

layout(push_constant) uniform Push {
  uint total;  // indices (and rows)
  uint rank;
  uint offset;   // the indices' element offset
  uint n;        // size of the dim this pass indexes
  uint bad_row;  // what the last pass writes for a bad row
  uint flags;    // bit 0: first pass (rows start at 0), bit 1: last pass
  uint shape[KILN_MAX_RANK];
  int strides[KILN_MAX_RANK];
} p;

const uint kBad = 0xFFFFFFFFu;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.total) return;
  const int e = int(p.offset) + kiln_strided_offset(i, p.rank, p.shape, p.strides);
  const int v = kiln_gather_index(uint(e), p.n);
  const uint before = (p.flags & 1u) != 0u ? 0u : rows[i];
  uint row = before == kBad || v < 0 ? kBad : before * p.n + uint(v);
  if ((p.flags & 2u) != 0u && row == kBad) row = p.bad_row;
  rows[i] = row;
}
