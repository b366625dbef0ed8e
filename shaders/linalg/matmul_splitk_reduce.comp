#version 450
// The second pass of a split-K GEMM (matmul_f32.comp with kSplit): C[b][m][n] = alpha * sum over
// the splits s of P[b * splits + s][m][n] + beta * D[b][m][n], one output element per invocation,
// with matmul_f32.comp's push constants. P is the float32 scratch the first pass wrote; the sum and
// the epilogue run in float32, and 16-bit outputs are rounded once at the end, as the unsplit
// kernel does. Workgroups: x over M * N (in WG-sized chunks), z over the batch.
// kiln-variant: matmul_splitk_reduce_f32
// kiln-variant: matmul_splitk_reduce_h16 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#define STORE_T uint16_t
#define ELEM_LOAD(v) kiln_load16(uint(v))
#define ELEM_STORE(v) uint16_t(kBfloat ? kiln_float_to_bfloat(v) : kiln_float_to_half(v))
#else
#define STORE_T float
#define ELEM_LOAD(v) (v)
#define ELEM_STORE(v) (v)
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const bool kBfloat = false;
layout(constant_id = 2) const bool kTwoBatchDims = false;  // matmul_push.glsl

#ifdef KILN_16BIT
float kiln_load16(uint bits) { return kBfloat ? kiln_bfloat_to_float(bits) : kiln_half_to_float(bits); }
#endif

layout(std430, set = 0, binding = 0) readonly buffer Partial { float P[]; };
layout(std430, set = 0, binding = 1) writeonly buffer MatC { STORE_T C[]; };
layout(std430, set = 0, binding = 2) readonly buffer MatD { STORE_T D[]; };

#include "matmul_push.glsl"

void main() {
  const uint mn = p.M * p.N;
  const uint i = gl_WorkGroupID.x * WG + gl_LocalInvocationIndex;
  if (i >= mn) return;
  const uint batch = gl_WorkGroupID.z;
  const uint row = i / p.N, col = i % p.N;
  uint at = batch * p.splits * mn + i;
  float v = 0.0;
  for (uint s = 0; s < p.splits; ++s, at += mn) v += P[at];
  v *= p.alpha;
  if (p.beta != 0.0)
    v = fma(p.beta, ELEM_LOAD(D[p.d_offset + kiln_batch_offset(batch, p.d_batch_stride, p.d_inner_stride) + row * p.d_row_stride + col * p.d_col_stride]), v);
  C[p.c_offset + batch * p.c_batch_stride + row * p.c_row_stride + col] = ELEM_STORE(v);
}
