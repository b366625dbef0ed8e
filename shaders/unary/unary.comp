#version 450
// out[i] = op(in[view at i]) for float32; op is a specialization constant (op_codes.h), so each op
// compiles to its own straight-line pipeline. The output is contiguous; the input view may be
// strided (broadcast inputs have 0 strides).
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "../common/elementwise_ops.glsl"

layout(constant_id = 1) const uint kOp = 0;
layout(constant_id = 2) const bool kStrided = false;

layout(std430, set = 0, binding = 0) readonly buffer In { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
  uint n;
  uint rank;
  uint in_offset;
  uint out_offset;
  uint shape[KILN_MAX_RANK];
  int strides[KILN_MAX_RANK];
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n) return;
  int s = int(p.in_offset + i);
  if (kStrided) s = int(p.in_offset) + kiln_strided_offset(i, p.rank, p.shape, p.strides);
  y[p.out_offset + i] = kiln_unary(kOp, x[s]);
}
