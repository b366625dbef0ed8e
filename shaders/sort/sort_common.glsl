// Shared by the sort kernels (sort_tile.comp, sort_write.comp): the input's dtype and the order
// keys; sort_rows.glsl reads the elements. An element's key is an unsigned integer (one word, or
// two: high then low) whose order is the CPU's order (core/ops/sort.cpp): NaNs after every number
// and equal to each other, -0 equal to +0. Descending sorts invert the key. The kernels sort (key, column) pairs, a
// strict total order, so the unstable bitonic network gives the CPU's stable order exactly.
#ifndef KILN_SORT_COMMON_GLSL
#define KILN_SORT_COMMON_GLSL

// Rank of the rows' index space after merging dims (kMaxSortRank in sort_kernels.cpp).
#define KILN_SORT_RANK 8

// The input's dtype, numbered as SortDtype in sort_kernels.cpp.
#define KILN_SORT_BOOL 0u
#define KILN_SORT_U8 1u
#define KILN_SORT_I8 2u
#define KILN_SORT_I32 3u
#define KILN_SORT_U32 4u
#define KILN_SORT_F16 5u
#define KILN_SORT_BF16 6u
#define KILN_SORT_F32 7u
#define KILN_SORT_I64 8u
#define KILN_SORT_F64 9u
#define KILN_SORT_I16 10u
#define KILN_SORT_U16 11u
#define KILN_SORT_U64 12u
layout(constant_id = 1) const uint kDtype = KILN_SORT_F32;
layout(constant_id = 2) const bool kDescending = false;

// Bytes per element of the input (folded by the compiler: kDtype is a constant).
uint kiln_sort_element_bytes() {
  if (kDtype <= KILN_SORT_I8) return 1u;
  if (kDtype == KILN_SORT_F16 || kDtype == KILN_SORT_BF16 || kDtype == KILN_SORT_I16 || kDtype == KILN_SORT_U16)
    return 2u;
  return kDtype == KILN_SORT_I64 || kDtype == KILN_SORT_F64 || kDtype == KILN_SORT_U64 ? 8u : 4u;
}

// Key of a float with `sign` bit, magnitude bits `mag`, `inf` the magnitude of infinity.
uint kiln_sort_float_key(uint bits, uint sign, uint mag, uint inf, uint all) {
  if (mag > inf) return 0xFFFFFFFFu;  // NaN: after every number
  if (mag == 0u) return sign;         // -0 and +0: equal
  return (bits & sign) != 0u ? (~bits & all) : (bits | sign);
}

// The key of a dtype of at most 4 bytes, from its bits.
uint kiln_sort_key32(uint b) {
  uint k = b;
  if (kDtype == KILN_SORT_I8) k = b ^ 0x80u;
  if (kDtype == KILN_SORT_I16) k = b ^ 0x8000u;
  if (kDtype == KILN_SORT_I32) k = b ^ 0x80000000u;
  if (kDtype == KILN_SORT_F16) k = kiln_sort_float_key(b, 0x8000u, b & 0x7FFFu, 0x7C00u, 0xFFFFu);
  if (kDtype == KILN_SORT_BF16) k = kiln_sort_float_key(b, 0x8000u, b & 0x7FFFu, 0x7F80u, 0xFFFFu);
  if (kDtype == KILN_SORT_F32)
    k = kiln_sort_float_key(b, 0x80000000u, b & 0x7FFFFFFFu, 0x7F800000u, 0xFFFFFFFFu);
  return kDescending ? ~k : k;
}

// The key (high, low) of an 8-byte dtype from its words (low, high).
uvec2 kiln_sort_key64(uint lo, uint hi) {
  uvec2 k = uvec2(kDtype == KILN_SORT_U64 ? hi : hi ^ 0x80000000u, lo);
  if (kDtype == KILN_SORT_F64) {
    const uint mag = hi & 0x7FFFFFFFu;
    if (mag > 0x7FF00000u || (mag == 0x7FF00000u && lo != 0u)) {
      k = uvec2(0xFFFFFFFFu);  // NaN
    } else if (mag == 0u && lo == 0u) {
      k = uvec2(0x80000000u, 0u);  // -0 and +0
    } else {
      k = (hi & 0x80000000u) != 0u ? uvec2(~hi, ~lo) : uvec2(hi | 0x80000000u, lo);
    }
  }
  return kDescending ? ~k : k;
}

#endif
