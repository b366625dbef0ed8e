#version 450
// out[i] = op(a[view at i], b[view at i]) for float32 with broadcasting: the host gives both inputs
// strides over the output's shape, 0 along broadcast dimensions. op is a specialization constant
// (op_codes.h). kStrided = false: both inputs contiguous with the output's shape.
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "../common/elementwise_ops.glsl"

layout(constant_id = 1) const uint kOp = 0;
layout(constant_id = 2) const bool kStrided = false;

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
  uint n;
  uint rank;
  uint a_offset;
  uint b_offset;
  uint out_offset;
  uint shape[KILN_MAX_RANK];
  int a_strides[KILN_MAX_RANK];
  int b_strides[KILN_MAX_RANK];
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n) return;
  int ia = int(p.a_offset + i);
  int ib = int(p.b_offset + i);
  if (kStrided) {
    ia = int(p.a_offset);
    ib = int(p.b_offset);
    uint rest = i;
    for (int k = int(p.rank) - 1; k >= 0; --k) {
      const uint idx = rest % p.shape[k];
      rest /= p.shape[k];
      ia += int(idx) * p.a_strides[k];
      ib += int(idx) * p.b_strides[k];
    }
  }
  y[p.out_offset + i] = kiln_binary(kOp, a[ia], b[ib]);
}
