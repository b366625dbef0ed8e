#version 450
// The sorted values of a 1- or 2-byte dtype: out[.., j, ..] = x[.., idx[row, j], ..], one
// invocation per output word (four or two elements), so no two invocations write one word. A NaN
// of float16 or bfloat16 is written as the CPU writes it after its round trip through float
// (core/half.h: a float16 NaN becomes the quiet NaN of its sign, a bfloat16 NaN gets its quiet
// bit), and a bool as 0 or 1.
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "sort_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { uint x_words[]; };
layout(std430, set = 0, binding = 1) readonly buffer Cols { uint idx_words[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { uint out_words[]; };

layout(push_constant) uniform Push {
  uint words;     // output words
  uint total;     // output elements
  uint log2_len;  // of the padded rows of idx_words
  uint out_len;
  uint inner;
  int x_offset;
  int axis_stride;
  uint rank;
  uint shape[KILN_SORT_RANK];
  int strides[KILN_SORT_RANK];
} p;

#include "sort_rows.glsl"

// The output bits of element e.
uint element(uint e) {
  const uint in_pos = e % p.inner, rest = e / p.inner;
  const uint j = rest % p.out_len, r = (rest / p.out_len) * p.inner + in_pos;
  const uint col = idx_words[(r << p.log2_len) + j];
  uint b = kiln_sort_load_bits(uint(kiln_sort_row_offset(r) + int(col) * p.axis_stride));
  if (kDtype == KILN_SORT_BOOL) b = b != 0u ? 1u : 0u;
  if (kDtype == KILN_SORT_F16 && (b & 0x7FFFu) > 0x7C00u) b = (b & 0x8000u) | 0x7E00u;
  if (kDtype == KILN_SORT_BF16 && (b & 0x7FFFu) > 0x7F80u) b |= 0x40u;
  return b;
}

void main() {
  const uint w = kiln_global_id();
  if (w >= p.words) return;
  const uint bytes = kiln_sort_element_bytes(), per_word = 4u / bytes;
  uint word = 0u;
  for (uint s = 0u; s < per_word; ++s) {
    const uint e = w * per_word + s;
    if (e < p.total) word |= element(e) << (s * 8u * bytes);
  }
  out_words[w] = word;
}
