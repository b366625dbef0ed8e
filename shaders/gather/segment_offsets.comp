#version 450
// offsets[r] = the first position of sorted `keys` holding a key >= r, for r in [0, n]: row r's
// updates are positions [offsets[r], offsets[r + 1]) of the sorted order (bad rows, keyed n, sort
// last and are never read). A binary search per row, so rows of any multiplicity cost the same.
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Offsets { uint offsets[]; };

layout(push_constant) uniform Push {
  uint count;  // keys
  uint n;      // rows
} p;

void main() {
  const uint r = kiln_global_id();
  if (r > p.n) return;
  uint lo = 0u, hi = p.count;
  while (lo < hi) {
    const uint mid = lo + (hi - lo) / 2u;
    if (keys[mid] < r)
      lo = mid + 1u;
    else
      hi = mid;
  }
  offsets[r] = lo;
}
