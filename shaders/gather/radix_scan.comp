#version 450
// Exclusive prefix sum of `count` words in place, by one workgroup: each invocation sums a
// contiguous chunk, the chunk sums are scanned in shared memory, and each invocation then writes
// its chunk's prefixes. Scans the radix sort's digit-major histograms (a few words per key tile).
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "radix_common.glsl"

layout(std430, set = 0, binding = 0) buffer Data { uint data[]; };

layout(push_constant) uniform Push { uint count; } p;

shared uint s_sums[KILN_RADIX_MAX_WORKGROUP];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint chunk = (p.count + kWorkgroupSize - 1u) / kWorkgroupSize;
  const uint begin = min(lid * chunk, p.count), end = min(begin + chunk, p.count);
  uint sum = 0u;
  for (uint e = begin; e < end; ++e) sum += data[e];
  s_sums[lid] = sum;
  barrier();
  if (lid == 0u) {
    uint run = 0u;
    for (uint t = 0u; t < kWorkgroupSize; ++t) {
      const uint v = s_sums[t];
      s_sums[t] = run;
      run += v;
    }
  }
  barrier();
  uint run = s_sums[lid];
  for (uint e = begin; e < end; ++e) {
    const uint v = data[e];
    data[e] = run;
    run += v;
  }
}
