// Index loading shared by the along-axis kernels; the includer declares `uint idx_words[]` first.
#ifndef KILN_INDEX_COMMON_GLSL
#define KILN_INDEX_COMMON_GLSL

// Highest rank of the along-axis kernels after merging dims (kMaxIndexRank in index_kernels.h).
#define KILN_INDEX_RANK 6

// The indices' dtype, numbered as IndexType in index_kernels.h.
layout(constant_id = 1) const uint kIndexType = 0;  // 0 int32, 1 uint32, 2 int64, 3 uint64

// Element e of the indices wrapped into [0, n) (negative ones count from the end), or -1 when it
// lies outside [-n, n). 64-bit indices are two words, low first; n < 2^31.
int kiln_load_index(uint e, uint n) {
  if (kIndexType == 0u || kIndexType == 1u) {
    const uint w = idx_words[e];
    if (kIndexType == 1u) return w < n ? int(w) : -1;
    const int v = int(w) < 0 ? int(w) + int(n) : int(w);
    return v >= 0 && uint(v) < n ? v : -1;
  }
  const uint lo = idx_words[2u * e], hi = idx_words[2u * e + 1u];
  if (hi == 0u) return lo < n ? int(lo) : -1;
  if (kIndexType == 2u && hi == 0xFFFFFFFFu && int(lo) < 0) {
    const int v = int(lo) + int(n);
    return v >= 0 ? v : -1;
  }
  return -1;
}
#endif
