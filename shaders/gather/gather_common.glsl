// Index loading for the gather kernels; the includer declares `uint idx_words[]` first. Indices of
// every integer dtype are read as 32-bit words (the 8-bit ones as bytes of them), so that neither
// 8-bit storage nor 64-bit arithmetic is needed.
#ifndef KILN_GATHER_COMMON_GLSL
#define KILN_GATHER_COMMON_GLSL

// The indices' dtype, numbered as gather_index_type() in core/vulkan/runtime/gather_kernels.cpp.
layout(constant_id = 1) const uint kIndexType = 0;  // 0 int32, 1 uint32, 2 int64, 3 int8, 4 uint8

// Element e of the indices wrapped into [0, n) (negative ones count from the end), or -1 when it
// lies outside [-n, n). n < 2^31.
int kiln_gather_index(uint e, uint n) {
  int v;
  if (kIndexType == 1u) {
    const uint w = idx_words[e];
    return w < n ? int(w) : -1;
  } else if (kIndexType == 2u) {
    const uint lo = idx_words[2u * e], hi = idx_words[2u * e + 1u];
    if (hi == 0u) return lo < n ? int(lo) : -1;
    if (hi != 0xFFFFFFFFu || int(lo) >= 0) return -1;  // below -2^31
    v = int(lo);
  } else if (kIndexType == 3u || kIndexType == 4u) {
    const uint byte = (idx_words[e >> 2u] >> (8u * (e & 3u))) & 0xFFu;
    v = kIndexType == 3u ? bitfieldExtract(int(byte), 0, 8) : int(byte);
  } else {
    v = int(idx_words[e]);
  }
  if (v < 0) v += int(n);
  return v >= 0 && uint(v) < n ? v : -1;
}
#endif
