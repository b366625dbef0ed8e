#version 450
// One pass of the stable LSD radix sort: moves each key (and its value: its position in the
// original list on the first pass) to hist[digit * tiles + tile] (scanned) plus its rank among
// the tile's earlier keys of the same digit. Ranks are counted, not claimed with atomics, so the
// sort is stable and the result never depends on timing: scatter_add sums duplicates in index
// order and matches the CPU bit for bit.
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "radix_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer KeysIn { uint keys_in[]; };
layout(std430, set = 0, binding = 1) readonly buffer ValsIn { uint vals_in[]; };
layout(std430, set = 0, binding = 2) readonly buffer Hist { uint hist[]; };
layout(std430, set = 0, binding = 3) writeonly buffer KeysOut { uint keys_out[]; };
layout(std430, set = 0, binding = 4) writeonly buffer ValsOut { uint vals_out[]; };

layout(push_constant) uniform Push {
  uint count;
  uint tiles;
  uint shift;
  uint first;  // the first pass: values are the keys' positions (vals_in is not read)
  uint items;  // keys per invocation
} p;

shared uint s_next[KILN_RADIX_BINS];  // where the tile's next key of each digit goes
shared uint s_digits[KILN_RADIX_MAX_WORKGROUP];

void main() {
  const uint tile = kiln_group_id(), lid = gl_LocalInvocationID.x;
  if (tile >= p.tiles) return;  // an excess group of a 2-D grid (the whole group leaves)
  for (uint b = lid; b < KILN_RADIX_BINS; b += kWorkgroupSize) s_next[b] = hist[b * p.tiles + tile];
  const uint begin = tile * kWorkgroupSize * p.items;
  for (uint k = 0u; k < p.items; ++k) {
    const uint e = begin + k * kWorkgroupSize + lid;
    const bool valid = e < p.count;
    const uint key = valid ? keys_in[e] : 0u;
    const uint digit = valid ? (key >> p.shift) & 0xFFu : KILN_RADIX_BINS;  // no bin: matches none
    s_digits[lid] = digit;
    barrier();
    if (valid) {
      uint rank = 0u;
      for (uint t = 0u; t < lid; ++t) rank += s_digits[t] == digit ? 1u : 0u;
      const uint at = s_next[digit] + rank;
      keys_out[at] = key;
      vals_out[at] = p.first != 0u ? e : vals_in[e];
    }
    barrier();
    if (valid) atomicAdd(s_next[digit], 1u);  // a count: the order of the adds does not matter
    barrier();
  }
}
