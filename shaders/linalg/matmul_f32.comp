#version 450
// Batched float32 GEMM: C[b][m][n] = alpha * sum_k A[b][m][k] * B[b][k][n] + beta * D[b][m][n]. A, B
// and D are addressed through row and column strides (so transposed views and broadcast biases need
// no copy); C rows are contiguous. D is read only when beta != 0.
// A BM x BN block of C per workgroup of (BM / TM) x (BN / TN) invocations, TM x TN outputs per
// invocation held in registers, K in steps of BK through double-buffered shared memory: the next
// tiles are fetched into registers while the current ones are multiplied (one barrier per step).
// Loads are bounds-checked (zero fill), so any M, N, K and strides work (whole tiles, kAligned, skip
// the checks); scalar, or 16-byte where the host allows (kAVec, kBVec); consecutive
// invocations read along the operand's contiguous dimension (kATrans: A's M has stride 1, kBTrans:
// B's K has stride 1), so that global loads coalesce for transposed views too.
//
// Split-K (kSplit): workgroup z is batch * splits + split; the workgroup sums only K's slice
// [split * k_chunk, (split + 1) * k_chunk) and writes its raw sums to the float32 scratch P
// ([batch * splits][M][N]); matmul_splitk_reduce.comp adds the slices and applies the epilogue.
//
// The KILN_16BIT variants are the plain float16 / bfloat16 GEMM (kBfloat picks the format): the
// same kernel over 16-bit buffers, each element converted to float32 as it is fetched (bfloat16 by
// a shift), products accumulated in float32, and the result rounded to nearest even once, after
// the epilogue, as the CPU's GEMM does (core/cpu/gemm.cpp computes 16-bit GEMMs in float32 buffers).
// Tiles (matmul_kernels.cpp's names): kiln picks 64w (64 x 64 with 8 x 8 per invocation, 64
// invocations), and for large products 128wk16 (128 x 128 with 8 x 16 per invocation, 128
// invocations, K steps of 16); 128, 128k16, 128x64, 64x128, 64 and 32 remain for
// KILN_VULKAN_MATMUL_TILE, to compare on other devices.
// kiln-variant: matmul_f32_t128 -Os -DBM=128 -DBN=128 -DTM=8 -DTN=8 -DBK=8
// kiln-variant: matmul_f32_t128k16 -Os -DBM=128 -DBN=128 -DTM=8 -DTN=8 -DBK=16
// kiln-variant: matmul_f32_t128x64 -Os -DBM=128 -DBN=64 -DTM=8 -DTN=4 -DBK=16
// kiln-variant: matmul_f32_t64x128 -Os -DBM=64 -DBN=128 -DTM=4 -DTN=8 -DBK=16
// kiln-variant: matmul_f32_t64 -Os -DBM=64 -DBN=64 -DTM=4 -DTN=4 -DBK=16
// kiln-variant: matmul_f32_t64w -Os -DBM=64 -DBN=64 -DTM=8 -DTN=8 -DBK=16
// kiln-variant: matmul_f32_t32 -Os -DBM=32 -DBN=32 -DTM=4 -DTN=4 -DBK=16
// kiln-variant: matmul_f32_t128wk16 -Os -DBM=128 -DBN=128 -DTM=8 -DTN=16 -DBK=16
// kiln-variant: matmul_h16_t128 -Os -DBM=128 -DBN=128 -DTM=8 -DTN=8 -DBK=8 -DKILN_16BIT
// kiln-variant: matmul_h16_t128k16 -Os -DBM=128 -DBN=128 -DTM=8 -DTN=8 -DBK=16 -DKILN_16BIT
// kiln-variant: matmul_h16_t128x64 -Os -DBM=128 -DBN=64 -DTM=8 -DTN=4 -DBK=16 -DKILN_16BIT
// kiln-variant: matmul_h16_t64x128 -Os -DBM=64 -DBN=128 -DTM=4 -DTN=8 -DBK=16 -DKILN_16BIT
// kiln-variant: matmul_h16_t64 -Os -DBM=64 -DBN=64 -DTM=4 -DTN=4 -DBK=16 -DKILN_16BIT
// kiln-variant: matmul_h16_t64w -Os -DBM=64 -DBN=64 -DTM=8 -DTN=8 -DBK=16 -DKILN_16BIT
// kiln-variant: matmul_h16_t32 -Os -DBM=32 -DBN=32 -DTM=4 -DTN=4 -DBK=16 -DKILN_16BIT
// kiln-variant: matmul_h16_t128wk16 -Os -DBM=128 -DBN=128 -DTM=8 -DTN=16 -DBK=16 -DKILN_16BIT
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#define STORE_T uint16_t
// 16-bit values may not be function arguments without 16-bit arithmetic: widen with uint() first.
#define ELEM_LOAD(v) kiln_load16(uint(v))
#define ELEM_STORE(v) uint16_t(kBfloat ? kiln_float_to_bfloat(v) : kiln_float_to_half(v))
#else
#define STORE_T float
#define ELEM_LOAD(v) (v)
#define ELEM_STORE(v) (v)
#endif

const uint TX = BN / TN;  // invocations along N
const uint TY = BM / TM;  // ... along M
const uint THREADS = TX * TY;
layout(local_size_x = THREADS) in;

// Constant 0 is the workgroup size by the shaders' convention (fixed here by the variant).
layout(constant_id = 1) const bool kBfloat = false;
layout(constant_id = 2) const bool kATrans = false;
layout(constant_id = 3) const bool kBTrans = false;
layout(constant_id = 4) const bool kSplit = false;
// 16-byte loads (float32 only): the host sets these when the operand's contiguous dimension has a
// length, and its other strides and offset are, multiples of 4 (every vec4 wholly in or out).
layout(constant_id = 5) const bool kAVec = false;
layout(constant_id = 6) const bool kBVec = false;
// 16-byte stores of C (float32 only, not with split-K): the host sets it when N, and C's row stride,
// batch stride and offset, are multiples of 4. An invocation's 4 neighbouring columns go out as one vec4, so a
// subgroup writes whole rows of the tile: with scalar stores each 16 bytes took four partial
// writes, a large part of a small-K product's time (attention's per-head products).
layout(constant_id = 7) const bool kCVec = false;
layout(constant_id = 8) const bool kTwoBatchDims = false;  // matmul_push.glsl
// Every tile lies wholly inside the matrices (the host sets it when K > 0, BM divides M, BN divides N
// and BK divides K and the K slice): loads and stores need no bounds checks.
layout(constant_id = 9) const bool kAligned = false;

#ifdef KILN_16BIT
float kiln_load16(uint bits) { return kBfloat ? kiln_bfloat_to_float(bits) : kiln_half_to_float(bits); }
#endif

layout(std430, set = 0, binding = 0) readonly buffer MatA { STORE_T A[]; };
layout(std430, set = 0, binding = 1) readonly buffer MatB { STORE_T B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer MatC { STORE_T C[]; };
layout(std430, set = 0, binding = 3) readonly buffer MatD { STORE_T D[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Partial { float P[]; };
// A and B again, as vec4s (the same buffers; read only with kAVec / kBVec).
#ifdef KILN_16BIT
layout(std430, set = 0, binding = 5) readonly buffer MatA4 { uint A4[]; };
layout(std430, set = 0, binding = 6) readonly buffer MatB4 { uint B4[]; };
layout(std430, set = 0, binding = 7) writeonly buffer MatC4 { uint C4[]; };
#else
layout(std430, set = 0, binding = 5) readonly buffer MatA4 { vec4 A4[]; };
layout(std430, set = 0, binding = 6) readonly buffer MatB4 { vec4 B4[]; };
layout(std430, set = 0, binding = 7) writeonly buffer MatC4 { vec4 C4[]; };
#endif

#include "matmul_push.glsl"

const uint NVM = TM / 4;               // vec4 groups per invocation along M
const uint NVN = TN / 4;               // ... along N
const uint A_LOADS = BM * BK / THREADS;  // elements of A each invocation fetches per step
const uint B_LOADS = BN * BK / THREADS;
const uint AS_STRIDE = BM / 4 + 1;     // +1 vec4 of padding: the transposing stores avoid bank conflicts
const uint BS_STRIDE = BN / 4 + 1;

shared vec4 As[2 * BK * AS_STRIDE];    // A tile transposed: As[k][m]
shared vec4 Bs[2 * BK * BS_STRIDE];    // B tile: Bs[k][n]

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint bm = gl_WorkGroupID.y * BM;
  const uint bn = gl_WorkGroupID.x * BN;
  const uint z = gl_WorkGroupID.z;
  const uint batch = z / p.splits;
  const uint k_begin = (z % p.splits) * p.k_chunk;
  const uint k_end = min(p.K, k_begin + p.k_chunk);
  const uint a_base = p.a_offset + kiln_batch_offset(batch, p.a_batch_stride, p.a_inner_stride);
  const uint b_base = p.b_offset + kiln_batch_offset(batch, p.b_batch_stride, p.b_inner_stride);

  float ra[A_LOADS];
  float rb[B_LOADS];
  vec4 va[A_LOADS / 4];
  vec4 vb[B_LOADS / 4];
  // Element e of a step's A tile is (m, k) = (e / BK, e % BK), or with kATrans (e % BM, e / BM):
  // consecutive invocations step along the dimension of stride 1. Likewise B's (k, n).
#define A_M(e) (kATrans ? (e) % BM : (e) / BK)
#define A_K(e) (kATrans ? (e) / BM : (e) % BK)
#define B_K(e) (kBTrans ? (e) % BK : (e) / BN)
#define B_N(e) (kBTrans ? (e) / BK : (e) % BN)
  // Fetch the tiles of the step at k0 into registers (zero outside the matrices and the K slice).
  // The vec4 forms: vector e of A's tile starts at (e / (BK / 4), 4 (e % (BK / 4))), or with kATrans
  // at (4 (e % (BM / 4)), e / (BM / 4)); B's at (e / (BN / 4), 4 (e % (BN / 4))), or with kBTrans
  // (4 (e % (BK / 4)), e / (BK / 4)) as (k, n). Offsets in floats are multiples of 4 (host).
#define AV_M(e) (kATrans ? ((e) % (BM / 4)) * 4 : (e) / (BK / 4))
#define AV_K(e) (kATrans ? (e) / (BM / 4) : ((e) % (BK / 4)) * 4)
#define BV_K(e) (kBTrans ? ((e) % (BK / 4)) * 4 : (e) / (BN / 4))
#define BV_N(e) (kBTrans ? (e) / (BK / 4) : ((e) % (BN / 4)) * 4)
#ifdef KILN_16BIT
#define KILN_VFETCH(k0)
#define KILN_VSTORE(buf)
#else
#define KILN_VFETCH(k0)                                                                     \
  if (kAVec) {                                                                             \
    [[unroll]] for (uint l = 0; l < A_LOADS / 4; ++l) {                                    \
      const uint e = tid + l * THREADS;                                                    \
      const uint am = bm + AV_M(e), ak = (k0) + AV_K(e);                                   \
      /* the host sets kAVec only where the contiguous dimension has stride 1 */            \
      const uint ai = a_base + (kATrans ? am + ak * p.a_col_stride : am * p.a_row_stride + ak); \
      va[l] = (kAligned || (am < p.M && ak < k_end)) ? A4[ai / 4] : vec4(0.0);             \
    }                                                                                      \
  }                                                                                        \
  if (kBVec) {                                                                             \
    [[unroll]] for (uint l = 0; l < B_LOADS / 4; ++l) {                                    \
      const uint e = tid + l * THREADS;                                                    \
      const uint bk = (k0) + BV_K(e), bnn = bn + BV_N(e);                                  \
      const uint bi = b_base + (kBTrans ? bk + bnn * p.b_col_stride : bk * p.b_row_stride + bnn); \
      vb[l] = (kAligned || (bk < k_end && bnn < p.N)) ? B4[bi / 4] : vec4(0.0);            \
    }                                                                                      \
  }
#define KILN_VSTORE(buf)                                                                    \
  if (kAVec) {                                                                             \
    [[unroll]] for (uint l = 0; l < A_LOADS / 4; ++l) {                                    \
      const uint e = tid + l * THREADS;                                                    \
      const uint m = AV_M(e), k = AV_K(e);                                                 \
      if (kATrans) {                                                                       \
        As[((buf) * BK + k) * AS_STRIDE + m / 4] = va[l];                                  \
      } else {                                                                             \
        [[unroll]] for (uint j = 0; j < 4; ++j) As[((buf) * BK + k + j) * AS_STRIDE + m / 4][m % 4] = va[l][j]; \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  if (kBVec) {                                                                             \
    [[unroll]] for (uint l = 0; l < B_LOADS / 4; ++l) {                                    \
      const uint e = tid + l * THREADS;                                                    \
      const uint k = BV_K(e), n = BV_N(e);                                                 \
      if (kBTrans) {                                                                       \
        [[unroll]] for (uint j = 0; j < 4; ++j) Bs[((buf) * BK + k + j) * BS_STRIDE + n / 4][n % 4] = vb[l][j]; \
      } else {                                                                             \
        Bs[((buf) * BK + k) * BS_STRIDE + n / 4] = vb[l];                                  \
      }                                                                                    \
    }                                                                                      \
  }
#endif
#define KILN_FETCH(k0)                                                                      \
  KILN_VFETCH(k0)                                                                          \
  if (!kAVec) [[unroll]] for (uint l = 0; l < A_LOADS; ++l) {                              \
    const uint e = tid + l * THREADS;                                                      \
    const uint am = bm + A_M(e), ak = (k0) + A_K(e);                                       \
    ra[l] = (kAligned || (am < p.M && ak < k_end)) ? ELEM_LOAD(A[a_base + am * p.a_row_stride + ak * p.a_col_stride]) : 0.0; \
  }                                                                                        \
  if (!kBVec) [[unroll]] for (uint l = 0; l < B_LOADS; ++l) {                              \
    const uint e = tid + l * THREADS;                                                      \
    const uint bk = (k0) + B_K(e), bnn = bn + B_N(e);                                      \
    rb[l] = (kAligned || (bk < k_end && bnn < p.N)) ? ELEM_LOAD(B[b_base + bk * p.b_row_stride + bnn * p.b_col_stride]) : 0.0; \
  }
#define KILN_STORE(buf)                                                                     \
  KILN_VSTORE(buf)                                                                         \
  if (!kAVec) [[unroll]] for (uint l = 0; l < A_LOADS; ++l) {                              \
    const uint e = tid + l * THREADS;                                                      \
    const uint m = A_M(e), k = A_K(e);                                                     \
    As[((buf) * BK + k) * AS_STRIDE + m / 4][m % 4] = ra[l];                               \
  }                                                                                        \
  if (!kBVec) [[unroll]] for (uint l = 0; l < B_LOADS; ++l) {                              \
    const uint e = tid + l * THREADS;                                                      \
    const uint k = B_K(e), n = B_N(e);                                                     \
    Bs[((buf) * BK + k) * BS_STRIDE + n / 4][n % 4] = rb[l];                               \
  }

  const uint tx = tid % TX;
  const uint ty = tid / TX;
  vec4 acc[TM][NVN];
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint g = 0; g < NVN; ++g) acc[i][g] = vec4(0.0);

  KILN_FETCH(k_begin)
  KILN_STORE(0)
  barrier();

  const uint steps = k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0;
  for (uint s = 0; s < steps; ++s) {
    const uint cur = s % 2;
    const bool has_next = s + 1 < steps;
    if (has_next) { KILN_FETCH(k_begin + (s + 1) * BK) }
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      vec4 a[NVM];
      vec4 b[NVN];
      [[unroll]] for (uint g = 0; g < NVM; ++g) a[g] = As[(cur * BK + k) * AS_STRIDE + g * TY + ty];
      [[unroll]] for (uint g = 0; g < NVN; ++g) b[g] = Bs[(cur * BK + k) * BS_STRIDE + g * TX + tx];
      [[unroll]] for (uint ga = 0; ga < NVM; ++ga)
        [[unroll]] for (uint i = 0; i < 4; ++i)
          [[unroll]] for (uint gb = 0; gb < NVN; ++gb)
            acc[ga * 4 + i][gb] = fma(vec4(a[ga][i]), b[gb], acc[ga * 4 + i][gb]);
    }
    if (has_next) { KILN_STORE(1 - cur) }
    barrier();
  }

  const uint c_base = p.c_offset + batch * p.c_batch_stride;
  const uint d_base = p.d_offset + kiln_batch_offset(batch, p.d_batch_stride, p.d_inner_stride);
  const bool epilogue = p.alpha != 1.0 || p.beta != 0.0;
#ifndef KILN_16BIT
  if (kCVec && !kSplit) {
    [[unroll]] for (uint ga = 0; ga < NVM; ++ga)
      [[unroll]] for (uint i = 0; i < 4; ++i) {
        const uint row = bm + ga * (BM / NVM) + ty * 4 + i;
        if (!kAligned && row >= p.M) continue;
        [[unroll]] for (uint gb = 0; gb < NVN; ++gb) {
          const uint col = bn + gb * (BN / NVN) + tx * 4;
          if (!kAligned && col >= p.N) continue;  // N is a multiple of 4: the whole vec4 is in or out
          vec4 v = acc[ga * 4 + i][gb];
          if (epilogue) {
            v *= p.alpha;
            if (p.beta != 0.0)
              [[unroll]] for (uint j = 0; j < 4; ++j)
                v[j] = fma(p.beta, D[d_base + row * p.d_row_stride + (col + j) * p.d_col_stride], v[j]);
          }
          C4[(c_base + row * p.c_row_stride + col) / 4] = v;
        }
      }
    return;
  }
#endif
  [[unroll]] for (uint ga = 0; ga < NVM; ++ga)
    [[unroll]] for (uint i = 0; i < 4; ++i) {
      const uint row = bm + ga * (BM / NVM) + ty * 4 + i;
      if (!kAligned && row >= p.M) continue;
      [[unroll]] for (uint gb = 0; gb < NVN; ++gb)
        [[unroll]] for (uint j = 0; j < 4; ++j) {
          const uint col = bn + gb * (BN / NVN) + tx * 4 + j;
          if (!kAligned && col >= p.N) continue;
          float v = acc[ga * 4 + i][gb][j];
          if (kSplit) {
            P[(z * p.M + row) * p.N + col] = v;
            continue;
          }
          if (epilogue) {
            v *= p.alpha;
            if (p.beta != 0.0) v = fma(p.beta, ELEM_LOAD(D[d_base + row * p.d_row_stride + col * p.d_col_stride]), v);
          }
          C[c_base + row * p.c_row_stride + col] = ELEM_STORE(v);
        }
    }
}
