#version 450
// Batched float64 GEMM: C[b][m][n] = alpha * sum_k A[b][m][k] * B[b][k][n] + beta * D[b][m][n], with
// matmul_f32.comp's push constants (the host packs one struct for both) and the same addressing:
// A, B and D through row and column strides, C's rows contiguous, D read only when beta != 0.
// Simpler than the float32 kernel (float64 is rare and slow on GPUs): a 64 x 64 block of C per
// workgroup of 256 invocations (16 x 16), 4 x 4 outputs per invocation spaced 16 apart (so that
// neighbouring invocations read neighbouring shared words), K in steps of 16 through shared memory.
// Loads are bounds-checked (zero fill), so any M, N, K and strides work. Needs shaderFloat64.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 256) in;
// Constant 0 (the workgroup size by the shaders' convention) is fixed here.
layout(constant_id = 1) const bool kTwoBatchDims = false;  // matmul_push.glsl

layout(std430, set = 0, binding = 0) readonly buffer MatA { double A[]; };
layout(std430, set = 0, binding = 1) readonly buffer MatB { double B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer MatC { double C[]; };
layout(std430, set = 0, binding = 3) readonly buffer MatD { double D[]; };

#include "matmul_push.glsl"

const uint TILE = 64;
const uint TM = TILE / 16;           // outputs per invocation along each dimension
const uint BK = 16;
const uint LOADS = TILE * BK / 256;  // elements of A (and of B) each invocation fetches per step

shared double As[BK][TILE + 1];  // A tile transposed: As[k][m] (+1: the transposing store spreads banks)
shared double Bs[BK][TILE];      // B tile as is: Bs[k][n]

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint tx = tid % 16, ty = tid / 16;
  const uint bm = gl_WorkGroupID.y * TILE;
  const uint bn = gl_WorkGroupID.x * TILE;
  const uint batch = gl_WorkGroupID.z;
  const uint a_base = p.a_offset + kiln_batch_offset(batch, p.a_batch_stride, p.a_inner_stride);
  const uint b_base = p.b_offset + kiln_batch_offset(batch, p.b_batch_stride, p.b_inner_stride);

  double acc[TM][TM];
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint j = 0; j < TM; ++j) acc[i][j] = 0.0LF;

  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    [[unroll]] for (uint l = 0; l < LOADS; ++l) {
      const uint e = tid + l * 256;
      // A: consecutive invocations walk k (A's rows are usually contiguous); B: they walk n.
      const uint am = bm + e / BK, ak = k0 + e % BK;
      As[e % BK][e / BK] = (am < p.M && ak < p.K) ? A[a_base + am * p.a_row_stride + ak * p.a_col_stride] : 0.0LF;
      const uint bk = k0 + e / TILE, bnn = bn + e % TILE;
      Bs[e / TILE][e % TILE] = (bk < p.K && bnn < p.N) ? B[b_base + bk * p.b_row_stride + bnn * p.b_col_stride] : 0.0LF;
    }
    barrier();
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      double a[TM], b[TM];
      [[unroll]] for (uint i = 0; i < TM; ++i) {
        a[i] = As[k][ty + 16 * i];
        b[i] = Bs[k][tx + 16 * i];
      }
      [[unroll]] for (uint i = 0; i < TM; ++i)
        [[unroll]] for (uint j = 0; j < TM; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier();
  }

  const uint c_base = p.c_offset + batch * p.c_batch_stride;
  const uint d_base = p.d_offset + kiln_batch_offset(batch, p.d_batch_stride, p.d_inner_stride);
  const double alpha = packDouble2x32(p.alpha64), beta = packDouble2x32(p.beta64);
  const bool epilogue = alpha != 1.0LF || beta != 0.0LF;
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint row = bm + ty + 16 * i;
    if (row >= p.M) continue;
    [[unroll]] for (uint j = 0; j < TM; ++j) {
      const uint col = bn + tx + 16 * j;
      if (col >= p.N) continue;
      double v = acc[i][j];
      if (epilogue) {
        v *= alpha;
        if (beta != 0.0LF) v = fma(beta, D[d_base + row * p.d_row_stride + col * p.d_col_stride], v);
      }
      C[c_base + row * p.c_row_stride + col] = v;
    }
  }
}
