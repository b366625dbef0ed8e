// Index helpers shared by the elementwise kernels. Grids are 2-D so that more than 65535 groups
// (the guaranteed maxComputeWorkGroupCount[0]) fit: the host splits a 1-D count over x and y.
#ifndef KILN_INDEXING_GLSL
#define KILN_INDEXING_GLSL

#include "grid.glsl"

// The workgroup size is specialization constant 0. Shaders read it as kWorkgroupSize, never as
// gl_WorkGroupSize: Mesa 22.3's lavapipe evaluates gl_WorkGroupSize.x in expressions with the
// default 1 even when local_size_x_id is specialised (the dispatch itself has the right size).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint kWorkgroupSize = 64;

// Highest rank the strided kernels take; the host checks (kMaxStridedRank in kernels.h).
#define KILN_MAX_RANK 8

uint kiln_global_id() {
  return kiln_group_id() * kWorkgroupSize + gl_LocalInvocationID.x;
}

// Element offset of row-major linear index i in a view of `rank` dims with the given strides.
int kiln_strided_offset(uint i, uint rank, uint shape[KILN_MAX_RANK], int strides[KILN_MAX_RANK]) {
  int offset = 0;
  for (int d = int(rank) - 1; d >= 0; --d) {
    const uint n = shape[d];
    offset += int(i % n) * strides[d];
    i /= n;
  }
  return offset;
}
#endif
