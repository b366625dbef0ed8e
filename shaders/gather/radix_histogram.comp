#version 450
// One pass of the stable LSD radix sort of row numbers (scatter_add's deterministic accumulation,
// gather_kernels.cpp): counts each tile's keys per 8-bit digit into hist[digit * tiles + tile], the
// order radix_scan.comp scans in, so that a digit's keys from earlier tiles come first.
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "radix_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Hist { uint hist[]; };

layout(push_constant) uniform Push {
  uint count;  // keys
  uint tiles;
  uint shift;  // of this pass's digit
  uint first;  // unused here (radix_scatter.comp's push constants)
  uint items;  // keys per invocation
} p;

shared uint s_bins[KILN_RADIX_BINS];

void main() {
  const uint tile = kiln_group_id(), lid = gl_LocalInvocationID.x;
  if (tile >= p.tiles) return;  // an excess group of a 2-D grid (the whole group leaves)
  for (uint b = lid; b < KILN_RADIX_BINS; b += kWorkgroupSize) s_bins[b] = 0u;
  barrier();
  const uint begin = tile * kWorkgroupSize * p.items;
  for (uint k = 0u; k < p.items; ++k) {
    const uint e = begin + k * kWorkgroupSize + lid;
    if (e < p.count) atomicAdd(s_bins[(keys[e] >> p.shift) & 0xFFu], 1u);
  }
  barrier();
  for (uint b = lid; b < KILN_RADIX_BINS; b += kWorkgroupSize) hist[b * p.tiles + tile] = s_bins[b];
}
