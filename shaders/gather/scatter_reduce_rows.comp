#version 450
// out[p, r, q] = x[p, r, q] combined with upd[p, j1, q], upd[p, j2, q], ... over the updates aimed at
// row r (positions [offsets[r], offsets[r + 1]) of `order`, which lists them in index order: the
// stable radix sort of radix_*.comp), as scatter_add_rows.comp adds them. SET keeps the last update
// (the old value when none), MAX and MIN keep the largest and smallest (NaN wins: once met it stays),
// PROD multiplies in order and rounds as the CPU does after each product (float16 and bfloat16 to
// their type; integers wrap to their width). One invocation per output element, no atomics: the
// result is deterministic and equal to the CPU's. x and upd are [P, N, Q] and [P, J, Q] blocks with
// any strides; out is contiguous. SET moves raw bits; the others know the dtype.
// kiln-variant: scatter_set_rows_u8 -DKILN_SET -DKILN_BITS8
// kiln-variant: scatter_set_rows_u16 -DKILN_SET -DKILN_BITS16
// kiln-variant: scatter_set_rows_u32 -DKILN_SET -DKILN_BITS32
// kiln-variant: scatter_set_rows_u64 -DKILN_SET -DKILN_BITS64
// kiln-variant: scatter_max_rows_f32 -DKILN_MAX -DKILN_F32
// kiln-variant: scatter_max_rows_f16 -DKILN_MAX -DKILN_F16
// kiln-variant: scatter_max_rows_bf16 -DKILN_MAX -DKILN_BF16
// kiln-variant: scatter_max_rows_f64 -DKILN_MAX -DKILN_F64
// kiln-variant: scatter_max_rows_i32 -DKILN_MAX -DKILN_I32
// kiln-variant: scatter_max_rows_u32 -DKILN_MAX -DKILN_U32
// kiln-variant: scatter_max_rows_i64 -DKILN_MAX -DKILN_I64
// kiln-variant: scatter_max_rows_i8 -DKILN_MAX -DKILN_I8
// kiln-variant: scatter_max_rows_u8 -DKILN_MAX -DKILN_U8
// kiln-variant: scatter_min_rows_f32 -DKILN_MIN -DKILN_F32
// kiln-variant: scatter_min_rows_f16 -DKILN_MIN -DKILN_F16
// kiln-variant: scatter_min_rows_bf16 -DKILN_MIN -DKILN_BF16
// kiln-variant: scatter_min_rows_f64 -DKILN_MIN -DKILN_F64
// kiln-variant: scatter_min_rows_i32 -DKILN_MIN -DKILN_I32
// kiln-variant: scatter_min_rows_u32 -DKILN_MIN -DKILN_U32
// kiln-variant: scatter_min_rows_i64 -DKILN_MIN -DKILN_I64
// kiln-variant: scatter_min_rows_i8 -DKILN_MIN -DKILN_I8
// kiln-variant: scatter_min_rows_u8 -DKILN_MIN -DKILN_U8
// kiln-variant: scatter_prod_rows_f32 -DKILN_PROD -DKILN_F32
// kiln-variant: scatter_prod_rows_f16 -DKILN_PROD -DKILN_F16
// kiln-variant: scatter_prod_rows_bf16 -DKILN_PROD -DKILN_BF16
// kiln-variant: scatter_prod_rows_f64 -DKILN_PROD -DKILN_F64
// kiln-variant: scatter_prod_rows_i32 -DKILN_PROD -DKILN_I32
// kiln-variant: scatter_prod_rows_u32 -DKILN_PROD -DKILN_U32
// kiln-variant: scatter_prod_rows_i64 -DKILN_PROD -DKILN_I64
// kiln-variant: scatter_prod_rows_i8 -DKILN_PROD -DKILN_I8
// kiln-variant: scatter_prod_rows_u8 -DKILN_PROD -DKILN_U8
#extension GL_GOOGLE_include_directive : require
#if defined(KILN_F16) || defined(KILN_BF16) || defined(KILN_BITS16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(KILN_U8) || defined(KILN_I8) || defined(KILN_BITS8)
#extension GL_EXT_shader_8bit_storage : require
#endif
#ifdef KILN_F64
#define KILN_HAS_FLOAT64
#endif
#include "../common/indexing.glsl"
#include "../common/dtype_convert.glsl"

// VAL_T: the stored type; ACC_T: the type values combine in. LESS(a, b) orders them, IS_NAN(v) tests
// for NaN, MUL(a, b) is the product as the CPU rounds it.
#if defined(KILN_BITS8)
#define VAL_T uint8_t
#elif defined(KILN_BITS16)
#define VAL_T uint16_t
#elif defined(KILN_BITS32)
#define VAL_T uint
#elif defined(KILN_BITS64)
#define VAL_T uvec2
#elif defined(KILN_F32)
#define VAL_T float
#define ACC_T float
#define LOAD(v) (v)
#define STORE(a) (a)
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) kiln_nan_bits(v)
#define MUL(a, b) ((a) * (b))
#elif defined(KILN_F16)
#define VAL_T uint16_t
#define ACC_T float
#define LOAD(v) kiln_half_to_float(uint(v))
#define STORE(a) uint16_t(kiln_float_to_half(a))
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) kiln_nan_bits(v)
#define MUL(a, b) kiln_to_float16((a) * (b))
#elif defined(KILN_BF16)
#define VAL_T uint16_t
#define ACC_T float
#define LOAD(v) kiln_bfloat_to_float(uint(v))
#define STORE(a) uint16_t(kiln_float_to_bfloat(a))
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) kiln_nan_bits(v)
#define MUL(a, b) kiln_to_bfloat16((a) * (b))
#elif defined(KILN_F64)
#define VAL_T double
#define ACC_T double
#define LOAD(v) (v)
#define STORE(a) (a)
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) kiln_nan_bits(v)
#define MUL(a, b) ((a) * (b))
#elif defined(KILN_I32)
#define VAL_T int
#define ACC_T int
#define LOAD(v) (v)
#define STORE(a) (a)
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) false
#define MUL(a, b) int(uint(a) * uint(b))
#elif defined(KILN_U32)
#define VAL_T uint
#define ACC_T uint
#define LOAD(v) (v)
#define STORE(a) (a)
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) false
#define MUL(a, b) ((a) * (b))
#elif defined(KILN_I64)
// Two's-complement 64-bit values in two words (low first), so no 64-bit integer type is needed.
#define VAL_T uvec2
#define ACC_T uvec2
#define LOAD(v) (v)
#define STORE(a) (a)
#define LESS(a, b) kiln_less64(a, b)
#define IS_NAN(v) false
#define MUL(a, b) kiln_mul64(a, b)
bool kiln_less64(uvec2 a, uvec2 b) { return int(a.y) < int(b.y) || (a.y == b.y && a.x < b.x); }
uvec2 kiln_mul64(uvec2 a, uvec2 b) {
  uint hi, lo;
  umulExtended(a.x, b.x, hi, lo);
  return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}
#elif defined(KILN_I8)
#define VAL_T uint8_t
#define ACC_T int
#define LOAD(v) bitfieldExtract(int(uint(v)), 0, 8)
#define STORE(a) uint8_t(uint(a) & 0xFFu)
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) false
#define MUL(a, b) bitfieldExtract((a) * (b), 0, 8)
#elif defined(KILN_U8)
#define VAL_T uint8_t
#define ACC_T uint
#define LOAD(v) uint(v)
#define STORE(a) uint8_t(a)
#define LESS(a, b) ((a) < (b))
#define IS_NAN(v) false
#define MUL(a, b) (((a) * (b)) & 0xFFu)
#endif

#if defined(KILN_MAX)
// A NaN, old or new, stays; the tests are on the bits (dtype_convert.glsl says why).
#define COMBINE(acc, v) (IS_NAN(acc) ? (acc) : ((IS_NAN(v) || LESS(acc, v)) ? (v) : (acc)))
#elif defined(KILN_MIN)
#define COMBINE(acc, v) (IS_NAN(acc) ? (acc) : ((IS_NAN(v) || LESS(v, acc)) ? (v) : (acc)))
#elif defined(KILN_PROD)
#define COMBINE(acc, v) MUL(acc, v)
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
  const int at = int(p.x_offset) + int(b) * p.x_p_stride + int(r) * p.x_n_stride + int(q) * p.x_q_stride;
  const int base = int(p.upd_offset) + int(b) * p.upd_p_stride + int(q) * p.upd_q_stride;
  const uint begin = offsets[r], end = offsets[r + 1u];
#ifdef KILN_SET
  y[i] = end > begin ? upd[base + int(order[end - 1u]) * p.upd_j_stride] : x[at];
#else
  ACC_T acc = LOAD(x[at]);
  for (uint k = begin; k < end; ++k) acc = COMBINE(acc, LOAD(upd[base + int(order[k]) * p.upd_j_stride]));
  y[i] = STORE(acc);
#endif
}
