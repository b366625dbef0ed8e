#version 450
// Many buffer-to-buffer copies in one dispatch: row y of the grid copies entry y of the table, its
// workgroups striding over the entry's 16-byte words (then its 4-byte tail). The buffers are
// reached through device addresses (GL_EXT_buffer_reference), so one dispatch copies any number
// of them: a replayed program's inputs and outputs (core/vulkan/runtime/capture_facade.cpp) move
// in two dispatches instead of one command each, which on the H200 cost ~5 us apiece.
// Entry y is table[2y] = (source address, destination address) as uvec2 pairs and table[2y + 1].x
// = the byte count, a multiple of 4; addresses are multiples of 4 (the host checks both).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#include "../common/indexing.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint w[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Quads { uvec4 q[]; };

layout(std430, set = 0, binding = 0) readonly buffer Table { uvec4 table[]; };

void main() {
  const uint e = gl_WorkGroupID.y;
  const uvec4 where = table[2 * e];
  const uint words = table[2 * e + 1].x / 4;
  const uint stride = gl_NumWorkGroups.x * kWorkgroupSize;
  const uint first = gl_WorkGroupID.x * kWorkgroupSize + gl_LocalInvocationID.x;
  // 16-byte moves when both addresses allow them.
  const bool aligned = ((where.x | where.z) & 15u) == 0u;
  const uint quads = aligned ? words / 4 : 0;
  if (quads > 0) {
    Quads src = Quads(where.xy), dst = Quads(where.zw);
    for (uint i = first; i < quads; i += stride) dst.q[i] = src.q[i];
  }
  Words src = Words(where.xy), dst = Words(where.zw);
  for (uint i = 4 * quads + first; i < words; i += stride) dst.w[i] = src.w[i];
}
