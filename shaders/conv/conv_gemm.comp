#version 450
// Convolution as an implicit GEMM: C[m][n] = sum_k A[m][k] * B[k][n] per group (gl_WorkGroupID.z
// is split * groups + group), where the operands are read straight from the convolution's arrays
// and no column matrix is ever written. The three passes (kPass) are three GEMMs:
//   forward      y[img, o, oy, ox]:   m = o,  n = (img, oy, ox), k = (c, ki, kj); A = w,  B = x
//   grad_input   dx[img, c, iy, ix]:  m = c,  n = (img, iy, ix), k = (o, ki, kj); A = w,  B = gy
//   grad_weight  dw[o, c, ki, kj]:    m = o,  n = (c, ki, kj),   k = (img, oy, ox); A = gy, B = x
// (channels within the group). grad_weight's reduction is long and its output small, so the host
// splits k into chunks (p.k_chunk) whose partial sums conv_sum_splits.comp adds.
// The tiling is matmul_f32.comp's: a BM x BN block of C per workgroup of 256 invocations, TM x TN
// outputs per invocation in registers, k in steps of 8 through double-buffered shared memory with
// the next step fetched into registers while the current one is multiplied. Blocks of 16 and 32
// rows serve groups with few channels (a 64-row block would be mostly zeros). Decoding
// a k index into (A offset, B offset, row, column) takes integer divisions, so each step's 8 are
// decoded once into a shared table (two steps ahead) instead of in every invocation; each
// invocation decodes its own rows and columns once. Loads are bounds-checked (zero fill: padding,
// dilation holes, and grad_input's positions that no output reads when the stride is > 1).
// C is float32: the output itself (float32), or a temporary for the 16-bit variants, which
// conv_sum_splits.comp converts.
// kiln-variant: conv_gemm_f32_64x64 -DBM=64 -DBN=64 -DTM=4 -DTN=4
// kiln-variant: conv_gemm_f32_128x128 -DBM=128 -DBN=128 -DTM=8 -DTN=8
// kiln-variant: conv_gemm_f32_32x128 -DBM=32 -DBN=128 -DTM=4 -DTN=4
// kiln-variant: conv_gemm_f32_16x256 -DBM=16 -DBN=256 -DTM=4 -DTN=4
// kiln-variant: conv_gemm_h16_64x64 -DBM=64 -DBN=64 -DTM=4 -DTN=4 -DKILN_16BIT
// kiln-variant: conv_gemm_h16_128x128 -DBM=128 -DBN=128 -DTM=8 -DTN=8 -DKILN_16BIT
// kiln-variant: conv_gemm_h16_32x128 -DBM=32 -DBN=128 -DTM=4 -DTN=4 -DKILN_16BIT
// kiln-variant: conv_gemm_h16_16x256 -DBM=16 -DBN=256 -DTM=4 -DTN=4 -DKILN_16BIT
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "../common/grid.glsl"
#include "conv_common.glsl"

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer OperandA { STORE_T A[]; };
layout(std430, set = 0, binding = 1) readonly buffer OperandB { STORE_T B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Result { float C[]; };

const uint BK = 8;
const uint THREADS_N = BN / TN;         // invocations along n; BM / TM along m (256 in all)
const uint NVM = TM / 4, NVN = TN / 4;  // vec4 groups per invocation along m and n
// Elements of A and of B each invocation fetches per step; a 16-row block of A has 128, fetched
// by the first 128 invocations.
const uint A_ELEMS = BM * BK, LOADS_A = A_ELEMS < 256 ? 1 : A_ELEMS / 256;
const uint LOADS_B = BN * BK / 256;
const uint AS_STRIDE = BM / 4 + 1;  // +1 vec4 of padding: the transposing stores avoid bank conflicts
const uint BS_STRIDE = BN / 4 + 1;

shared vec4 As[2 * BK * AS_STRIDE];  // A tile transposed: As[k][m]
shared vec4 Bs[2 * BK * BS_STRIDE];  // B tile: Bs[k][n]
shared ivec4 ktab[2 * BK];           // per k of a step: (A offset, B offset, row, column)

uint cg, og;  // channels of a group: input, output

// A row's offset (row m of this group's A, g the group).
int a_row(uint m, uint g) {
  if (kPass == kForward) return p.a_offset + int(g * og + m) * p.a_strides[0];
  if (kPass == kGradInput) return p.a_offset + int(g * og) * p.a_strides[0] + int(m) * p.a_strides[1];
  return p.a_offset + int(g * og + m) * p.a_strides[1];
}

// Reduction index k as (offset into A past its row, offset into B past its column, and the
// position's row and column parts that a B column's parts complete; see b_value).
ivec4 k_entry(uint k) {
  if (kPass == kGradWeight) {  // k = (img, oy, ox)
    const uint plane = p.oh * p.ow, img = k / plane, r = k % plane, oy = r / p.ow, ox = r % p.ow;
    const int y = int(oy) * p.sh - p.ph, x = int(ox) * p.sw - p.pw;
    return ivec4(int(img) * p.a_strides[0] + int(oy) * p.a_strides[2] + int(ox) * p.a_strides[3],
                 int(img) * p.b_strides[0] + y * p.b_strides[2] + x * p.b_strides[3], y, x);
  }
  // forward: k = (c, ki, kj); grad_input: k = (o, ki, kj)
  const uint taps = p.kh * p.kw, ch = k / taps, r = k % taps, ki = r / p.kw, kj = r % p.kw;
  const int y = int(ki) * p.dh, x = int(kj) * p.dw;
  if (kPass == kForward)
    return ivec4(int(ch) * p.a_strides[1] + int(ki) * p.a_strides[2] + int(kj) * p.a_strides[3],
                 int(ch) * p.b_strides[1] + y * p.b_strides[2] + x * p.b_strides[3], y, x);
  return ivec4(int(ch) * p.a_strides[0] + int(ki) * p.a_strides[2] + int(kj) * p.a_strides[3],
               int(ch) * p.b_strides[1], y, x);
}

// Column n of this group's B as (offset, row part, column part).
ivec3 n_entry(uint n, uint g) {
  if (kPass == kGradWeight) {  // n = (c, ki, kj)
    const uint taps = p.kh * p.kw, ch = n / taps, r = n % taps, ki = r / p.kw, kj = r % p.kw;
    const int y = int(ki) * p.dh, x = int(kj) * p.dw;
    return ivec3(p.b_offset + int(g * cg + ch) * p.b_strides[1] + y * p.b_strides[2] + x * p.b_strides[3], y,
                 x);
  }
  if (kPass == kForward) {  // n = (img, oy, ox)
    const uint plane = p.oh * p.ow, img = n / plane, r = n % plane, oy = r / p.ow, ox = r % p.ow;
    const int y = int(oy) * p.sh - p.ph, x = int(ox) * p.sw - p.pw;
    return ivec3(p.b_offset + int(img) * p.b_strides[0] + int(g * cg) * p.b_strides[1] + y * p.b_strides[2] +
                     x * p.b_strides[3],
                 y, x);
  }
  // grad_input: n = (img, iy, ix); gy's position (oy, ox) is ((iy + ph - ki * dh) / sh, ...)
  const uint plane = p.h * p.w, img = n / plane, r = n % plane, iy = r / p.w, ix = r % p.w;
  return ivec3(p.b_offset + int(img) * p.b_strides[0] + int(g * og) * p.b_strides[1], int(iy) + p.ph,
               int(ix) + p.pw);
}

// B[k][n], zero where the position falls outside the image (padding) or, for grad_input, where no
// output reads the input position through this tap.
float b_value(ivec4 k, ivec3 n) {
  if (kPass == kGradInput) {
    const int ty = n.y - k.z, tx = n.z - k.w;
    if (ty < 0 || tx < 0) return 0.0;
    const int oy = p.sh == 1 ? ty : ty / p.sh, ox = p.sw == 1 ? tx : tx / p.sw;
    if (oy * p.sh != ty || ox * p.sw != tx || oy >= int(p.oh) || ox >= int(p.ow)) return 0.0;
    return float(KILN_LOAD(B[n.x + k.y + oy * p.b_strides[2] + ox * p.b_strides[3]]));
  }
  const int y = n.y + k.z, x = n.z + k.w;
  if (uint(y) >= p.h || uint(x) >= p.w) return 0.0;  // negative ones wrap to large
  return float(KILN_LOAD(B[n.x + k.y]));
}

void main() {
  cg = p.c / p.groups;
  og = p.o / p.groups;
  uint M, N, K;
  if (kPass == kForward) {
    M = og;
    N = p.n * p.oh * p.ow;
    K = cg * p.kh * p.kw;
  } else if (kPass == kGradInput) {
    M = cg;
    N = p.n * p.h * p.w;
    K = og * p.kh * p.kw;
  } else {
    M = og;
    N = cg * p.kh * p.kw;
    K = p.n * p.oh * p.ow;
  }
  const uint n_tiles = (N + BN - 1) / BN, m_tiles = (M + BM - 1) / BM;
  const uint tile = kiln_group_id();
  if (tile >= n_tiles * m_tiles) return;  // the excess of a 2-D grid: uniform per workgroup
  const uint bm = tile / n_tiles * BM, bn = tile % n_tiles * BN;
  const uint g = gl_WorkGroupID.z % p.groups, split = gl_WorkGroupID.z / p.groups;
  const uint kbeg = split * p.k_chunk, kend = min(K, kbeg + p.k_chunk);
  const uint tid = gl_LocalInvocationIndex;

  // What each invocation fetches, per load l: A at row tid / BK + l * 32, reduction index tid % BK;
  // B along n (forward, grad_input: pixels are contiguous; one column per invocation) or, for
  // grad_weight, along k (there the pixels are k, and n walks channels and taps).
  const bool b_along_k = kPass == kGradWeight;
  int arow[LOADS_A];
  bool a_ok[LOADS_A];
  [[unroll]] for (uint l = 0; l < LOADS_A; ++l) {
    const uint m = bm + tid / BK + l * (256 / BK);
    a_ok[l] = tid + l * 256 < A_ELEMS && m < M;
    arow[l] = a_ok[l] ? a_row(m, g) : 0;
  }
  ivec3 bcol[LOADS_B];
  bool b_ok[LOADS_B];
  [[unroll]] for (uint l = 0; l < LOADS_B; ++l) {
    const uint n = bn + (b_along_k ? tid / BK + l * (256 / BK) : tid % BN);
    b_ok[l] = n < N;
    bcol[l] = b_ok[l] && (b_along_k || l == 0) ? n_entry(n, g) : ivec3(0);
  }
  const uint b_col0 = b_along_k ? 1 : 0;  // bcol[l * b_col0]: the load's column

  float ra[LOADS_A];
  float rb[LOADS_B];
#define KILN_TABLE(slot, k0)                                      \
  if (tid < BK) {                                                 \
    const uint kt = (k0) + tid;                                   \
    ktab[(slot) * BK + tid] = kt < kend ? k_entry(kt) : ivec4(0); \
  }
#define KILN_FETCH(slot, k0)                                                                          \
  [[unroll]] for (uint l = 0; l < LOADS_A; ++l) {                                                    \
    const uint ka = tid % BK;                                                                        \
    ra[l] = (a_ok[l] && (k0) + ka < kend) ? float(KILN_LOAD(A[arow[l] + ktab[(slot) * BK + ka].x])) : 0.0; \
  }                                                                                                  \
  [[unroll]] for (uint l = 0; l < LOADS_B; ++l) {                                                    \
    const uint kb = b_along_k ? tid % BK : tid / BN + l * (256 / BN);                                \
    rb[l] = (b_ok[l] && (k0) + kb < kend) ? b_value(ktab[(slot) * BK + kb], bcol[l * b_col0]) : 0.0; \
  }
#define KILN_SHARE(buf)                                                            \
  [[unroll]] for (uint l = 0; l < LOADS_A; ++l) {                                 \
    const uint m = tid / BK + l * (256 / BK), k = tid % BK;                       \
    if (tid + l * 256 < A_ELEMS) As[((buf) * BK + k) * AS_STRIDE + m / 4][m % 4] = ra[l]; \
  }                                                                               \
  [[unroll]] for (uint l = 0; l < LOADS_B; ++l) {                                 \
    const uint n = b_along_k ? tid / BK + l * (256 / BK) : tid % BN;              \
    const uint kb = b_along_k ? tid % BK : tid / BN + l * (256 / BN);             \
    Bs[((buf) * BK + kb) * BS_STRIDE + n / 4][n % 4] = rb[l];                     \
  }

  const uint tx = tid % THREADS_N;
  const uint ty = tid / THREADS_N;
  vec4 acc[TM][NVN];
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint v = 0; v < NVN; ++v) acc[i][v] = vec4(0.0);

  const uint steps = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  // Table slot s % 2 holds step s; step s + 2's is written while step s is multiplied, after
  // step s's fetch (the iteration before) read that slot.
  KILN_TABLE(0, kbeg)
  KILN_TABLE(1, kbeg + BK)
  barrier();
  if (steps > 0) {
    KILN_FETCH(0, kbeg)
    KILN_SHARE(0)
  }
  barrier();

  for (uint s = 0; s < steps; ++s) {
    const uint cur = s % 2;
    const bool has_next = s + 1 < steps;
    if (has_next) { KILN_FETCH(1 - cur, kbeg + (s + 1) * BK) }
    KILN_TABLE(cur, kbeg + (s + 2) * BK)
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      vec4 a[NVM];
      vec4 b[NVN];
      [[unroll]] for (uint v = 0; v < NVM; ++v) a[v] = As[(cur * BK + k) * AS_STRIDE + v * (BM / TM) + ty];
      [[unroll]] for (uint v = 0; v < NVN; ++v) b[v] = Bs[(cur * BK + k) * BS_STRIDE + v * (BN / TN) + tx];
      [[unroll]] for (uint va = 0; va < NVM; ++va)
        [[unroll]] for (uint i = 0; i < 4; ++i)
          [[unroll]] for (uint vb = 0; vb < NVN; ++vb)
            acc[va * 4 + i][vb] = fma(vec4(a[va][i]), b[vb], acc[va * 4 + i][vb]);
    }
    if (has_next) { KILN_SHARE(1 - cur) }
    barrier();
  }

  // C[m][n] goes to out[(img * channels + g * M + m) * plane + pix], n = (img, pix); grad_weight's
  // n is all pix (img 0), and its splits follow one another.
  uint plane, channels;
  if (kPass == kForward) {
    plane = p.oh * p.ow;
    channels = p.o;
  } else if (kPass == kGradInput) {
    plane = p.h * p.w;
    channels = p.c;
  } else {
    plane = N;
    channels = p.o;
  }
  const uint out_base = p.out_offset + split * channels * plane + g * M * plane;
  uint col_at[TN];
  [[unroll]] for (uint vb = 0; vb < NVN; ++vb)
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      const uint col = bn + vb * (BN / NVN) + tx * 4 + j;
      col_at[vb * 4 + j] = col < N ? col / plane * channels * plane + col % plane : 0xFFFFFFFFu;
    }
  [[unroll]] for (uint va = 0; va < NVM; ++va)
    [[unroll]] for (uint i = 0; i < 4; ++i) {
      const uint row = bm + va * (BM / NVM) + ty * 4 + i;
      if (row >= M) continue;
      [[unroll]] for (uint vb = 0; vb < NVN; ++vb)
        [[unroll]] for (uint j = 0; j < 4; ++j)
          if (col_at[vb * 4 + j] != 0xFFFFFFFFu)
            C[out_base + row * plane + col_at[vb * 4 + j]] = acc[va * 4 + i][vb][j];
    }
}
