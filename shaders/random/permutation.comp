#version 450
// RandomPermutation: per key, the CPU's Fisher-Yates shuffle of 0..n-1 (core/random.cpp), whose
// i-th swap index is floor(bits64(key, i) * (i + 1) / 2^64). The shuffle is sequential, so one
// invocation owns one key's row (the rows of a batch of keys run in parallel), and it is split
// over dispatches of at most kiln's chunk of swaps each: lavapipe stops any invocation after 65535
// loop iterations. A first dispatch (fill) writes 0..n-1 with one invocation per element.
// kiln-variant: random_permutation
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "../common/random.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(std430, set = 0, binding = 1) buffer Out { int perm[]; };

layout(push_constant) uniform Push {
  uint rows;  // keys
  uint n;
  uint keys_offset;  // of word 0 of key 0; the keys are contiguous (2 words each)
  uint fill;         // 1: write the identity; 0: the swaps at i = first, first - 1, ..., last + 1
  uint first;
  uint last;
} p;

void main() {
  const uint g = kiln_global_id();
  if (p.fill != 0u) {
    if (g < p.rows * p.n) perm[g] = int(g % p.n);
    return;
  }
  if (g >= p.rows) return;
  const uvec2 key = uvec2(keys[p.keys_offset + 2u * g], keys[p.keys_offset + 2u * g + 1u]);
  const uint base = g * p.n;
  for (uint i = p.first; i > p.last; --i) {
    const uint j = kiln_multiply_high64(kiln_random_bits64(key, i), uvec2(0u, i + 1u)).y;
    const int t = perm[base + i];
    perm[base + i] = perm[base + j];
    perm[base + j] = t;
  }
}
