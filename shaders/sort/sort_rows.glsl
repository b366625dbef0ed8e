// Reading the sort kernels' input and placing their output (after sort_common.glsl). The input's
// elements are read from 32-bit words, so no 8-, 16- or 64-bit storage or arithmetic is needed.
// The includer declares `uint x_words[]` and a push block `p` with x_offset, rank, shape[],
// strides[], out_len and inner.
#ifndef KILN_SORT_ROWS_GLSL
#define KILN_SORT_ROWS_GLSL

// The bits of element e (an element index in the input's dtype) of a dtype of at most 4 bytes,
// zero-extended. The includer declares `uint x_words[]`.
uint kiln_sort_load_bits(uint e) {
  if (kiln_sort_element_bytes() == 1u) return (x_words[e >> 2] >> ((e & 3u) * 8u)) & 0xFFu;
  if (kiln_sort_element_bytes() == 2u) return (x_words[e >> 1] >> ((e & 1u) * 16u)) & 0xFFFFu;
  return x_words[e];
}

// Element offset of row r's first element: r walks the rows' index space row-major.
int kiln_sort_row_offset(uint r) {
  int offset = p.x_offset;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    offset += int(r % p.shape[d]) * p.strides[d];
    r /= p.shape[d];
  }
  return offset;
}

// Word index in the output of row r's column j: rows are the output's index space without the
// sorted axis, which has out_len columns and `inner` elements after it (from p).
uint kiln_sort_out_position(uint r, uint j) {
  return ((r / p.inner) * p.out_len + j) * p.inner + r % p.inner;
}
#endif
