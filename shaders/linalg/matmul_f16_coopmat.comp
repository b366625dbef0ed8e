#version 450
// Batched float16 GEMM on tensor cores (GL_NV_cooperative_matrix), float32 accumulation:
// C[b][m][n] = alpha * sum_k A[b][m][k] * B[b][k][n] + beta * D[b][m][n], with matmul_f32.comp's push
// constants and epilogue; the result is rounded to float16 once, after the epilogue, as the CPU does.
//
// Tiling: a BM x BN block of C per workgroup of NSG subgroups of 32 invocations (NVIDIA's size; the
// host checks it), each subgroup owning a WM x WN block as lM x lN float32 accumulator fragments
// (the fragment shape lM x lN x lK is specialization constants 1-3, chosen by the host from the
// shapes the driver lists). K advances in steps of BK through shared memory: with STAGES 2 the
// tiles are double buffered and the next step is fetched into registers while the current one is
// multiplied (one barrier per step); with STAGES 1 one buffer and two barriers per step.
//
// Operands are read as uvec4 (8 halves): 16-byte global loads, and shared tiles whose rows are
// padded by one uvec4 so that fragment loads spread over the banks. Each operand is staged in its
// memory order and loaded as row- or column-major fragments: A as [m][k] (K contiguous) or, with
// kATrans, [k][m] (M contiguous); B as [k][n] or, with kBTrans, [n][k]. coopMatLoadNV counts its
// offset and stride in the array's element type, uvec4 here, as GL_NV_cooperative_matrix says.
// Host guarantees (record_matmul): the contiguous dimension of each operand has stride 1 and a
// length that is a multiple of 8, the other strides, the batch strides and the offsets are multiples
// of 8 elements, so every uvec4 lies wholly inside or wholly outside the matrix (zero fill).
// Edges in M, N and K are bounds-checked, so any sizes work; whole tiles (kAligned) skip the checks.
//
// The epilogue goes through shared memory (the tiles' array, free by then) one band of 16 rows per
// subgroup at a time: the band's fragments are stored, then the workgroup applies alpha, beta * D
// and the rounding to its elements and writes the rows and columns that lie inside C.
//
// EMULATE builds the same kernel with the three cooperative-matrix operations done in plain code
// (32 "lanes" per subgroup taken from the invocation index), so that a device without the
// extension (lavapipe) checks this shader's tiling, layouts and epilogue. It measures nothing.
// kiln-variant: matmul_f16_coopmat_128x128 -DBM=128 -DBN=128 -DWM=64 -DWN=64 -DBK=32 -DSTAGES=2
// kiln-variant: matmul_f16_coopmat_128x128_w64x32 -DBM=128 -DBN=128 -DWM=64 -DWN=32 -DBK=32 -DSTAGES=2
// kiln-variant: matmul_f16_coopmat_128x256 -DBM=128 -DBN=256 -DWM=64 -DWN=64 -DBK=16 -DSTAGES=2
// kiln-variant: matmul_f16_coopmat_128x256_k32 -DBM=128 -DBN=256 -DWM=64 -DWN=64 -DBK=32 -DSTAGES=1
// kiln-variant: matmul_f16_coopmat_64x64 -DBM=64 -DBN=64 -DWM=32 -DWN=32 -DBK=32 -DSTAGES=2
// kiln-variant: matmul_f16_coopmat_128x128_w64x32_s1 -DBM=128 -DBN=128 -DWM=64 -DWN=32 -DBK=32 -DSTAGES=1
// kiln-variant: matmul_f16_coopemu_128x128 -DBM=128 -DBN=128 -DWM=64 -DWN=64 -DBK=16 -DSTAGES=2 -DEMULATE
// kiln-variant: matmul_f16_coopemu_128x128_w64x32 -DBM=128 -DBN=128 -DWM=64 -DWN=32 -DBK=16 -DSTAGES=2 -DEMULATE
// kiln-variant: matmul_f16_coopemu_128x256 -DBM=128 -DBN=256 -DWM=64 -DWN=64 -DBK=8 -DSTAGES=2 -DEMULATE
// kiln-variant: matmul_f16_coopemu_128x256_k32 -DBM=128 -DBN=256 -DWM=64 -DWN=64 -DBK=16 -DSTAGES=1 -DEMULATE
// kiln-variant: matmul_f16_coopemu_64x64 -DBM=64 -DBN=64 -DWM=32 -DWN=32 -DBK=16 -DSTAGES=2 -DEMULATE
// kiln-variant: matmul_f16_coopemu_128x128_w64x32_s1 -DBM=128 -DBN=128 -DWM=64 -DWN=32 -DBK=16 -DSTAGES=1 -DEMULATE
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#ifndef EMULATE
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#include "../common/dtype_convert.glsl"

const uint WARPS_N = BN / WN;
const uint NSG = (BM / WM) * WARPS_N;  // subgroups per workgroup
const uint NTHREADS = 32 * NSG;
layout(local_size_x = NTHREADS) in;

// The fragment shape (A lM x lK, B lK x lN, accumulator lM x lN; the host checks lM == 16,
// lN in {8, 16}, lK in {8, 16} dividing BK) and the operands' layouts.
layout(constant_id = 1) const uint lM = 16;
layout(constant_id = 2) const uint lN = 8;
layout(constant_id = 3) const uint lK = 16;
layout(constant_id = 4) const bool kATrans = false;
layout(constant_id = 5) const bool kBTrans = false;
layout(constant_id = 6) const bool kTwoBatchDims = false;  // matmul_push.glsl
// Every tile lies wholly inside the matrices (K > 0, BM divides M, BN divides N, BK divides K; the
// host checks): loads and the epilogue need no bounds checks.
layout(constant_id = 7) const bool kAligned = false;

layout(std430, set = 0, binding = 0) readonly buffer MatA { uvec4 A[]; };
layout(std430, set = 0, binding = 1) readonly buffer MatB { uvec4 B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer MatC { uint16_t C[]; };
layout(std430, set = 0, binding = 3) readonly buffer MatD { uint16_t D[]; };

#include "matmul_push.glsl"

const uint CR = WM / 16;  // accumulator fragments of a subgroup along M (lM is 16: the host checks)
const uint CC = WN / lN;  // ... along N

// Shared tiles, in uvec4s. Rows of A: [m][k] has BM rows of BK / 8 (+1 padding), [k][m] BK rows of
// BM / 8 (+1); likewise B. A stage holds either layout.
const uint A_ROW = BK / 8 + 1, AT_ROW = BM / 8 + 1;
const uint B_ROW = BN / 8 + 1, BT_ROW = BK / 8 + 1;
const uint A_STAGE = max(BM * A_ROW, BK * AT_ROW);
const uint B_STAGE = max(BK * B_ROW, BN * BT_ROW);
// One array: A's stages, then B's (from B_BASE); after the K loop the same memory stages the
// accumulators for the epilogue, one 16-row band of every subgroup at a time: ROUND floats, [BM / WM]
// [16][BN], written by coopMatStoreNV as float bits.
const uint B_BASE = STAGES * A_STAGE;
const uint ROUND = (BM / WM) * 16 * BN;
const uint SH_VECS = max(STAGES * (A_STAGE + B_STAGE), ROUND / 4);
shared uvec4 Sh[SH_VECS];

// uvec4s of A and of B per step, and how many each invocation moves (the last round may be partial).
const uint A_VECS = BM * BK / 8, B_VECS = BK * BN / 8;
const uint A_LOADS = (A_VECS + NTHREADS - 1) / NTHREADS;
const uint B_LOADS = (B_VECS + NTHREADS - 1) / NTHREADS;

uint bm, bn, a_base, b_base;

// The i-th uvec4 of step k0's A tile, in the tile's stored order (zero outside A). The address is
// m * row stride + k * column stride in halves for either layout (one of the strides is 1).
uvec4 fetch_a(uint i, uint k0) {
  const uint m = kATrans ? bm + (i % (BM / 8)) * 8 : bm + i / (BK / 8);
  const uint k = kATrans ? k0 + i / (BM / 8) : k0 + (i % (BK / 8)) * 8;
  if (!kAligned && (m >= p.M || k >= p.K)) return uvec4(0);
  return A[(a_base + m * p.a_row_stride + k * p.a_col_stride) >> 3];
}
uvec4 fetch_b(uint i, uint k0) {
  const uint k = kBTrans ? k0 + (i % (BK / 8)) * 8 : k0 + i / (BN / 8);
  const uint n = kBTrans ? bn + i / (BK / 8) : bn + (i % (BN / 8)) * 8;
  if (!kAligned && (k >= p.K || n >= p.N)) return uvec4(0);
  return B[(b_base + k * p.b_row_stride + n * p.b_col_stride) >> 3];
}
void put_a(uint stage, uint i, uvec4 v) {
  const uint per_row = kATrans ? BM / 8 : BK / 8;
  Sh[stage * A_STAGE + (i / per_row) * (kATrans ? AT_ROW : A_ROW) + i % per_row] = v;
}
void put_b(uint stage, uint i, uvec4 v) {
  const uint per_row = kBTrans ? BK / 8 : BN / 8;
  Sh[B_BASE + stage * B_STAGE + (i / per_row) * (kBTrans ? BT_ROW : B_ROW) + i % per_row] = v;
}
// Where fragment loads start (uvec4s) and their strides: A's rows m0.. at k kk, B's columns n0.. at kk.
uint a_frag(uint stage, uint m0, uint kk) {
  return stage * A_STAGE + (kATrans ? kk * AT_ROW + m0 / 8 : m0 * A_ROW + kk / 8);
}
uint b_frag(uint stage, uint n0, uint kk) {
  return B_BASE + stage * B_STAGE + (kBTrans ? n0 * BT_ROW + kk / 8 : kk * B_ROW + n0 / 8);
}
const uint A_STRIDE = kATrans ? AT_ROW : A_ROW;
const uint B_STRIDE = kBTrans ? BT_ROW : B_ROW;

#ifdef EMULATE
// Loops stay rolled: lavapipe compiles fully unrolled emulation slowly.
#define UNROLL [[dont_unroll]]
const uint ELEMS = lM * lN / 32;  // accumulator elements per lane; lane l owns l, l + 32, ...
float eacc[CR][CC][ELEMS];
uint fa_off[CR];  // a "fragment" is where it starts in shared memory
uint fb_off;
uint lane_id() { return gl_LocalInvocationIndex % 32u; }
uint subgroup_id() { return gl_LocalInvocationIndex / 32u; }
float half_at(uvec4 v, uint h) {
  const vec2 f = unpackHalf2x16(v[h >> 1]);
  return (h & 1u) == 0u ? f.x : f.y;
}
// Element (r, c) of a fragment stored from uvec4 `off` with row (or, colMajor, column) stride `str`.
float a_elem(uint off, uint r, uint c) {
  const uint h = off * 8u + (kATrans ? c * A_STRIDE * 8u + r : r * A_STRIDE * 8u + c);
  return half_at(Sh[h >> 3], h & 7u);
}
float b_elem(uint off, uint r, uint c) {
  const uint h = off * 8u + (kBTrans ? c * B_STRIDE * 8u + r : r * B_STRIDE * 8u + c);
  return half_at(Sh[h >> 3], h & 7u);
}
void emu_mma(uint i, uint j) {
  for (uint e = 0; e < ELEMS; ++e) {
    const uint idx = lane_id() + 32u * e, r = idx / lN, c = idx % lN;
    float s = eacc[i][j][e];
    for (uint k = 0; k < lK; ++k) s += a_elem(fa_off[i], r, k) * b_elem(fb_off, k, c);
    eacc[i][j][e] = s;
  }
}
// As coopMatStoreNV into Sh: from uvec4 `off`, rows BN floats apart.
void emu_store(uint i, uint j, uint off) {
  for (uint e = 0; e < ELEMS; ++e) {
    const uint idx = lane_id() + 32u * e, f = off * 4u + (idx / lN) * BN + idx % lN;
    Sh[f / 4u][f % 4u] = floatBitsToUint(eacc[i][j][e]);
  }
}
#define DECLARE_FRAGMENTS
#define ZERO_ACC(i, j) for (uint e_ = 0; e_ < ELEMS; ++e_) eacc[i][j][e_] = 0.0;
#define LOAD_A(i, off) fa_off[i] = (off);
#define LOAD_B(off) fb_off = (off);
#define MMA(i, j) emu_mma(i, j);
#define STORE_ACC(i, j, off) emu_store(i, j, off);
#else
#define UNROLL [[unroll]]
uint lane_id() { return gl_SubgroupInvocationID; }
uint subgroup_id() { return gl_SubgroupID; }
#define DECLARE_FRAGMENTS                                 \
  fcoopmatNV<32, gl_ScopeSubgroup, lM, lN> acc[CR][CC];   \
  fcoopmatNV<16, gl_ScopeSubgroup, lM, lK> fa[CR];        \
  fcoopmatNV<16, gl_ScopeSubgroup, lK, lN> fb;
#define ZERO_ACC(i, j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, lM, lN>(0.0);
// colMajor must be a constant expression: one call per layout, the branch on a spec constant. The
// stride is a literal in each call: with a specialization-constant stride (A_STRIDE) NVIDIA's
// driver 580 may not fold it before choosing how to load (kiln ran 5x slower than a probe with
// literal strides on the H200).
#define LOAD_A(i, off)                                   \
  if (kATrans)                                           \
    coopMatLoadNV(fa[i], Sh, off, AT_ROW, true);         \
  else                                                   \
    coopMatLoadNV(fa[i], Sh, off, A_ROW, false);
#define LOAD_B(off)                                      \
  if (kBTrans)                                           \
    coopMatLoadNV(fb, Sh, off, BT_ROW, true);            \
  else                                                   \
    coopMatLoadNV(fb, Sh, off, B_ROW, false);
#define MMA(i, j) acc[i][j] = coopMatMulAddNV(fa[i], fb, acc[i][j]);
// A float32 fragment into the uvec4 array (offset and stride in uvec4s, as for loads).
#define STORE_ACC(i, j, off) coopMatStoreNV(acc[i][j], Sh, off, BN / 4, false);
#endif

// One band of the epilogue: the staged floats of every subgroup's fragment row i, scaled, added to
// beta * D, rounded once and written to C (consecutive invocations along a row of C). A rolled loop
// that touches no accumulator.
void write_band(uint i, uint c_base, uint d_base, bool epilogue) {
  for (uint f = gl_LocalInvocationIndex; f < ROUND; f += NTHREADS) {
    const uint row = bm + (f / (16 * BN)) * WM + i * 16 + (f / BN) % 16;
    const uint col = bn + f % BN;
    if (!kAligned && (row >= p.M || col >= p.N)) continue;
    float v = uintBitsToFloat(Sh[f / 4][f % 4]);
    if (epilogue) {
      v *= p.alpha;
      if (p.beta != 0.0)
        v = fma(p.beta, kiln_half_to_float(uint(D[d_base + row * p.d_row_stride + col * p.d_col_stride])), v);
    }
    C[c_base + row * p.c_row_stride + col] = uint16_t(kiln_float_to_half(v));
  }
}

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = subgroup_id(), lane = lane_id();
  const uint wm = sg / WARPS_N, wn = sg % WARPS_N;
  bm = gl_WorkGroupID.y * BM;
  bn = gl_WorkGroupID.x * BN;
  const uint batch = gl_WorkGroupID.z;
  a_base = p.a_offset + kiln_batch_offset(batch, p.a_batch_stride, p.a_inner_stride);
  b_base = p.b_offset + kiln_batch_offset(batch, p.b_batch_stride, p.b_inner_stride);

  DECLARE_FRAGMENTS
  UNROLL for (uint i = 0; i < CR; ++i)
    UNROLL for (uint j = 0; j < CC; ++j) { ZERO_ACC(i, j) }

  uvec4 ra[A_LOADS];
  uvec4 rb[B_LOADS];
#define FETCH(k0)                                                                  \
  [[unroll]] for (uint l = 0; l < A_LOADS; ++l) {                                  \
    const uint i = tid + l * NTHREADS;                                             \
    if (A_VECS % NTHREADS == 0 || i < A_VECS) ra[l] = fetch_a(i, k0);              \
  }                                                                                \
  [[unroll]] for (uint l = 0; l < B_LOADS; ++l) {                                  \
    const uint i = tid + l * NTHREADS;                                             \
    if (B_VECS % NTHREADS == 0 || i < B_VECS) rb[l] = fetch_b(i, k0);              \
  }
#define PUT(stage)                                                                 \
  [[unroll]] for (uint l = 0; l < A_LOADS; ++l) {                                  \
    const uint i = tid + l * NTHREADS;                                             \
    if (A_VECS % NTHREADS == 0 || i < A_VECS) put_a(stage, i, ra[l]);              \
  }                                                                                \
  [[unroll]] for (uint l = 0; l < B_LOADS; ++l) {                                  \
    const uint i = tid + l * NTHREADS;                                             \
    if (B_VECS % NTHREADS == 0 || i < B_VECS) put_b(stage, i, rb[l]);              \
  }
#define COMPUTE(stage)                                                             \
  UNROLL for (uint kk = 0; kk < BK; kk += lK) {                                    \
    UNROLL for (uint i = 0; i < CR; ++i) { LOAD_A(i, a_frag(stage, wm * WM + i * lM, kk)) } \
    UNROLL for (uint j = 0; j < CC; ++j) {                                         \
      LOAD_B(b_frag(stage, wn * WN + j * lN, kk))                                  \
      UNROLL for (uint i = 0; i < CR; ++i) { MMA(i, j) }                           \
    }                                                                              \
  }

  const uint steps = (p.K + BK - 1) / BK;
  FETCH(0)
#if STAGES == 2
  PUT(0)
  barrier();
  for (uint s = 0; s < steps; ++s) {
    const uint cur = s & 1u;
    const bool more = s + 1 < steps;
    if (more) { FETCH((s + 1) * BK) }
    COMPUTE(cur)
    if (more) { PUT(cur ^ 1u) }
    barrier();
  }
#else
  for (uint s = 0; s < steps; ++s) {
    barrier();  // the previous step's fragments are loaded
    PUT(0)
    barrier();
    if (s + 1 < steps) { FETCH((s + 1) * BK) }
    COMPUTE(0)
  }
#endif

  const uint c_base = p.c_offset + batch * p.c_batch_stride;
  const uint d_base = p.d_offset + kiln_batch_offset(batch, p.d_batch_stride, p.d_inner_stride);
  const bool epilogue = p.alpha != 1.0 || p.beta != 0.0;
  // The accumulators leave through shared memory one 16-row band at a time. Each band is a
  // literal (lM is 16, so CR = WM / 16): acc is indexed only by unrolled constants, never by a
  // loop the compiler might keep rolled (which would move the accumulators to local memory). An
  // earlier epilogue looped over every fragment with barriers and the element loop inside: it ran
  // every tile at about 36 TFLOP/s on the H200 whatever the tiling, and twice as slow with K
  // fragments of 8, as accumulators spilled to memory would.
#define EPILOGUE_BAND(i)                                                              \
  barrier(); /* the K loop's (or the previous band's) reads of Sh are done */         \
  UNROLL for (uint j = 0; j < CC; ++j) {                                             \
    STORE_ACC(i, j, (wm * 16 * BN + wn * WN + j * lN) / 4)                            \
  }                                                                                  \
  barrier();                                                                         \
  write_band(i, c_base, d_base, epilogue);
  EPILOGUE_BAND(0)
  EPILOGUE_BAND(1)
#if WM > 32
  EPILOGUE_BAND(2)
  EPILOGUE_BAND(3)
#endif
}
