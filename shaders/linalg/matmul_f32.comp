#version 450
// Batched float32 GEMM: C[b][m][n] = alpha * sum_k A[b][m][k] * B[b][k][n] + beta * D[b][m][n]. A, B
// and D are addressed through row and column strides (so transposed views and broadcast biases need
// no copy); C rows are contiguous. D is read only when beta != 0 (it may then alias nothing useful).
// A TILE x TILE block of C per workgroup of 256 invocations (16 x 16), TM x TM outputs per
// invocation held in registers, K in steps of 8 through double-buffered shared memory: the next
// tiles are fetched into registers while the current ones are multiplied (one barrier per step).
// Loads are scalar and bounds-checked (zero fill), so any M, N, K and strides work.
// The KILN_16BIT variants are the plain float16 / bfloat16 GEMM (kBfloat picks the format): the
// same kernel over 16-bit buffers, each element converted to float32 as it is fetched (bfloat16 by
// a shift), products accumulated in float32, and the result rounded to nearest even once, after
// the epilogue, as the CPU's GEMM does (core/cpu/gemm.cpp computes 16-bit GEMMs in float32 buffers).
// kiln-variant: matmul_f32_t128 -DTILE=128 -DTM=8
// kiln-variant: matmul_f32_t64 -DTILE=64 -DTM=4
// kiln-variant: matmul_h16_t128 -DTILE=128 -DTM=8 -DKILN_16BIT
// kiln-variant: matmul_h16_t64 -DTILE=64 -DTM=4 -DKILN_16BIT
#extension GL_EXT_control_flow_attributes : require
#ifdef KILN_16BIT
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
layout(constant_id = 1) const bool kBfloat = false;
#define STORE_T uint16_t
// 16-bit values may not be function arguments without 16-bit arithmetic: widen with uint() first.
float kiln_load16(uint bits) { return kBfloat ? kiln_bfloat_to_float(bits) : kiln_half_to_float(bits); }
#define ELEM_LOAD(v) kiln_load16(uint(v))
#define ELEM_STORE(v) uint16_t(kBfloat ? kiln_float_to_bfloat(v) : kiln_float_to_half(v))
#else
#define STORE_T float
#define ELEM_LOAD(v) (v)
#define ELEM_STORE(v) (v)
#endif

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer MatA { STORE_T A[]; };
layout(std430, set = 0, binding = 1) readonly buffer MatB { STORE_T B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer MatC { STORE_T C[]; };
layout(std430, set = 0, binding = 3) readonly buffer MatD { STORE_T D[]; };

layout(push_constant) uniform Push {
  uint M, N, K;
  uint a_row_stride, a_col_stride, b_row_stride, b_col_stride, c_row_stride;
  uint a_offset, b_offset, c_offset;
  uint a_batch_stride, b_batch_stride, c_batch_stride;
  uint d_row_stride, d_col_stride, d_offset, d_batch_stride;
  float alpha, beta;
} p;

const uint BK = 8;
const uint NV = TM / 4;                // vec4 groups per invocation along each dimension
const uint LOADS = TILE * BK / 256;    // elements of A (and of B) each invocation fetches per step
const uint AS_STRIDE = TILE / 4 + 1;   // +1 vec4 of padding: the transposing store avoids bank conflicts
const uint BS_STRIDE = TILE / 4;

shared vec4 As[2 * BK * AS_STRIDE];    // A tile transposed: As[k][m]
shared vec4 Bs[2 * BK * BS_STRIDE];    // B tile as is: Bs[k][n]

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint bm = gl_WorkGroupID.y * TILE;
  const uint bn = gl_WorkGroupID.x * TILE;
  const uint batch = gl_WorkGroupID.z;
  const uint a_base = p.a_offset + batch * p.a_batch_stride;
  const uint b_base = p.b_offset + batch * p.b_batch_stride;

  float ra[LOADS];
  float rb[LOADS];
  // Fetch step k0's tiles into registers (zero outside the matrices).
#define KILN_FETCH(k0)                                                                \
  [[unroll]] for (uint l = 0; l < LOADS; ++l) {                                      \
    const uint e = tid + l * 256;                                                    \
    const uint am = bm + e / BK, ak = (k0) + e % BK;                                 \
    ra[l] = (am < p.M && ak < p.K) ? ELEM_LOAD(A[a_base + am * p.a_row_stride + ak * p.a_col_stride]) : 0.0; \
    const uint bk = (k0) + e / TILE, bnn = bn + e % TILE;                            \
    rb[l] = (bk < p.K && bnn < p.N) ? ELEM_LOAD(B[b_base + bk * p.b_row_stride + bnn * p.b_col_stride]) : 0.0; \
  }
#define KILN_STORE(buf)                                                               \
  [[unroll]] for (uint l = 0; l < LOADS; ++l) {                                      \
    const uint e = tid + l * 256;                                                    \
    const uint m = e / BK, k = e % BK;                                               \
    As[((buf) * BK + k) * AS_STRIDE + m / 4][m % 4] = ra[l];                         \
    const uint kb = e / TILE, n = e % TILE;                                          \
    Bs[((buf) * BK + kb) * BS_STRIDE + n / 4][n % 4] = rb[l];                        \
  }

  const uint tx = tid % 16;
  const uint ty = tid / 16;
  vec4 acc[TM][NV];
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint g = 0; g < NV; ++g) acc[i][g] = vec4(0.0);

  KILN_FETCH(0)
  KILN_STORE(0)
  barrier();

  const uint steps = (p.K + BK - 1) / BK;
  for (uint s = 0; s < steps; ++s) {
    const uint cur = s % 2;
    const bool has_next = s + 1 < steps;
    if (has_next) { KILN_FETCH((s + 1) * BK) }
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      vec4 a[NV];
      vec4 b[NV];
      [[unroll]] for (uint g = 0; g < NV; ++g) {
        a[g] = As[(cur * BK + k) * AS_STRIDE + g * (TILE / 4 / NV) + ty];
        b[g] = Bs[(cur * BK + k) * BS_STRIDE + g * (TILE / 4 / NV) + tx];
      }
      [[unroll]] for (uint ga = 0; ga < NV; ++ga)
        [[unroll]] for (uint i = 0; i < 4; ++i)
          [[unroll]] for (uint gb = 0; gb < NV; ++gb)
            acc[ga * 4 + i][gb] = fma(vec4(a[ga][i]), b[gb], acc[ga * 4 + i][gb]);
    }
    if (has_next) { KILN_STORE(1 - cur) }
    barrier();
  }

  const uint c_base = p.c_offset + batch * p.c_batch_stride;
  const uint d_base = p.d_offset + batch * p.d_batch_stride;
  const bool epilogue = p.alpha != 1.0 || p.beta != 0.0;
  [[unroll]] for (uint ga = 0; ga < NV; ++ga)
    [[unroll]] for (uint i = 0; i < 4; ++i) {
      const uint row = bm + ga * (TILE / NV) + ty * 4 + i;
      if (row >= p.M) continue;
      [[unroll]] for (uint gb = 0; gb < NV; ++gb)
        [[unroll]] for (uint j = 0; j < 4; ++j) {
          const uint col = bn + gb * (TILE / NV) + tx * 4 + j;
          if (col >= p.N) continue;
          float v = acc[ga * 4 + i][gb][j];
          if (epilogue) {
            v *= p.alpha;
            if (p.beta != 0.0) v = fma(p.beta, ELEM_LOAD(D[d_base + row * p.d_row_stride + col * p.d_col_stride]), v);
          }
          C[c_base + row * p.c_row_stride + col] = ELEM_STORE(v);
        }
    }
}
