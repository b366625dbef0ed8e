#version 450
// dst[i] = int(src[view(i)]): a view of bytes (bool or uint8, zero-extended; int8 with KILN_SIGNED,
// sign-extended; read through uint words, so no 8-bit storage is needed; any strides >= 0, up to
// KILN_MAX_RANK dims) widened into a dense int32 buffer, for reductions of bytes whose axes do not
// merge into rows and columns (record_copy moves no bytes).
// kiln-variant: widen_bool
// kiln-variant: widen_int8 -DKILN_SIGNED
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src_words[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { int dst[]; };

layout(push_constant) uniform Push {
  uint n;
  uint rank;
  uint src_offset;
  uint shape[KILN_MAX_RANK];
  int strides[KILN_MAX_RANK];
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n) return;
  const uint s = p.src_offset + uint(kiln_strided_offset(i, p.rank, p.shape, p.strides));
#ifdef KILN_SIGNED
  dst[i] = bitfieldExtract(int(src_words[s >> 2]), int(8u * (s & 3u)), 8);
#else
  dst[i] = int((src_words[s >> 2] >> (8u * (s & 3u))) & 0xFFu);
#endif
}
