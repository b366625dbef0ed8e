#version 450
// out[r] = sum of in[in_offset + r * row_stride + c] over c < cols: one workgroup per row. Each
// invocation sums a strided slice, then a shared-memory tree adds the partials. The workgroup size
// (a power of two, chosen by the host) is a specialization constant; no subgroup size is assumed.
#extension GL_GOOGLE_include_directive : require
#include "../common/grid.glsl"

// Specialization constant 0 is the workgroup size (see common/indexing.glsl for why it has a name).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint kWorkgroupSize = 64;

layout(std430, set = 0, binding = 0) readonly buffer In { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint cols;
  uint row_stride;
  uint in_offset;
  uint out_offset;
} p;

shared float partial[kWorkgroupSize];

void main() {
  const uint row = kiln_group_id();
  if (row >= p.rows) return;  // uniform per workgroup: no barrier is skipped by part of a group
  const uint tid = gl_LocalInvocationID.x;
  const uint base = p.in_offset + row * p.row_stride;
  float acc = 0.0;
  for (uint c = tid; c < p.cols; c += kWorkgroupSize) acc += x[base + c];
  partial[tid] = acc;
  barrier();
  for (uint width = kWorkgroupSize / 2; width > 0; width /= 2) {
    if (tid < width) partial[tid] += partial[tid + width];
    barrier();
  }
  if (tid == 0) y[p.out_offset + row] = partial[0];
}
