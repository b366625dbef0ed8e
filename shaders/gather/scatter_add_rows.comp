#version 450
// out[p, r, q] = x[p, r, q] + upd[p, j1, q] + upd[p, j2, q] + ... over the updates aimed at row r
// (positions [offsets[r], offsets[r + 1]) of `order`, which lists them in index order: the stable
// radix sort of radix_*.comp). One invocation per output element adds in the CPU's order and
// rounds as the CPU does after each add (float16 and bfloat16 to their type), so the result is
// deterministic and equal to the CPU's; no atomics. x and upd are [P, N, Q] and [P, J, Q] blocks
// with any strides; out is contiguous. Integers add modulo their width, as on the CPU.
// kiln-variant: scatter_add_rows_f32 -DKILN_F32
// kiln-variant: scatter_add_rows_f16 -DKILN_F16
// kiln-variant: scatter_add_rows_bf16 -DKILN_BF16
// kiln-variant: scatter_add_rows_f64 -DKILN_F64
// kiln-variant: scatter_add_rows_u32 -DKILN_U32
// kiln-variant: scatter_add_rows_u64 -DKILN_U64
// kiln-variant: scatter_add_rows_u8 -DKILN_U8
#extension GL_GOOGLE_include_directive : require
#if defined(KILN_F16) || defined(KILN_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef KILN_U8
#extension GL_EXT_shader_8bit_storage : require
#endif
#include "../common/indexing.glsl"
#include "../common/dtype_convert.glsl"

#if defined(KILN_F32)
#define VAL_T float
#define ACC_T float
#define LOAD(v) (v)
#define ADD(a, b) ((a) + (b))
#define STORE(a) (a)
#elif defined(KILN_F16)
#define VAL_T uint16_t
#define ACC_T float
#define LOAD(v) kiln_half_to_float(uint(v))
#define ADD(a, b) kiln_to_float16((a) + (b))
#define STORE(a) uint16_t(kiln_float_to_half(a))
#elif defined(KILN_BF16)
#define VAL_T uint16_t
#define ACC_T float
#define LOAD(v) kiln_bfloat_to_float(uint(v))
#define ADD(a, b) kiln_to_bfloat16((a) + (b))
#define STORE(a) uint16_t(kiln_float_to_bfloat(a))
#elif defined(KILN_F64)
#define VAL_T double
#define ACC_T double
#define LOAD(v) (v)
#define ADD(a, b) ((a) + (b))
#define STORE(a) (a)
#elif defined(KILN_U32)
#define VAL_T uint
#define ACC_T uint
#define LOAD(v) (v)
#define ADD(a, b) ((a) + (b))
#define STORE(a) (a)
#elif defined(KILN_U64)
// Two's-complement 64-bit adds in two words (low first), so no 64-bit integer type is needed.
#define VAL_T uvec2
#define ACC_T uvec2
#define LOAD(v) (v)
#define ADD(a, b) kiln_add64(a, b)
#define STORE(a) (a)
uvec2 kiln_add64(uvec2 a, uvec2 b) {
  uint carry;
  const uint lo = uaddCarry(a.x, b.x, carry);
  return uvec2(lo, a.y + b.y + carry);
}
#elif defined(KILN_U8)
#define VAL_T uint8_t
#define ACC_T uint
#define LOAD(v) uint(v)
#define ADD(a, b) (((a) + (b)) & 0xFFu)
#define STORE(a) uint8_t(a)
#endif

layout(std430, set = 0, binding = 0) readonly buffer X { VAL_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Upd { VAL_T upd[]; };
layout(std430, set = 0, binding = 2) readonly buffer Offsets { uint offsets[]; };
layout(std430, set = 0, binding = 3) readonly buffer Order { uint order[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out { VAL_T y[]; };

layout(push_constant) uniform Push {
  uint total;  // elements of the output
  uint n;      // rows
  uint q_count;
  uint j_count;  // updates per row block (the sorted order's length)
  uint x_offset;
  int x_p_stride;
  int x_n_stride;
  int x_q_stride;
  uint upd_offset;
  int upd_p_stride;
  int upd_j_stride;
  int upd_q_stride;
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.total) return;
  const uint q = i % p.q_count, t = i / p.q_count;
  const uint r = t % p.n, b = t / p.n;
  ACC_T acc = LOAD(x[int(p.x_offset) + int(b) * p.x_p_stride + int(r) * p.x_n_stride + int(q) * p.x_q_stride]);
  const int base = int(p.upd_offset) + int(b) * p.upd_p_stride + int(q) * p.upd_q_stride;
  const uint end = offsets[r + 1u];
  for (uint k = offsets[r]; k < end; ++k) acc = ADD(acc, LOAD(upd[base + int(order[k]) * p.upd_j_stride]));
  y[i] = STORE(acc);
}
