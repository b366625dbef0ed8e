#version 450
// One stage of the bitonic network over the scratch buffers, for distances j too long for a
// tile in shared memory (sort_tile.comp does the shorter ones): every invocation compares the
// (key, column) pairs at positions i and i + j of one padded row and swaps them when out of order,
// ascending in blocks of k whose bit k of i is clear, descending where it is set. Consecutive
// invocations touch consecutive words (j >= the tile size), so loads and stores coalesce.
// kiln-variant: sort_step_k32 -DKILN_KEY_WORDS=1
// kiln-variant: sort_step_k64 -DKILN_KEY_WORDS=2
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) buffer Keys { uint key_words[]; };
layout(std430, set = 0, binding = 1) buffer Cols { uint idx_words[]; };

layout(push_constant) uniform Push {
  uint pairs;     // rows * len / 2
  uint log2_len;  // of the padded row length
  uint k;
  uint j;
} p;

#if KILN_KEY_WORDS == 1
#define KEY_T uint
KEY_T load_key(uint g) { return key_words[g]; }
void store_key(uint g, KEY_T k) { key_words[g] = k; }
bool pair_less(KEY_T ka, uint ia, KEY_T kb, uint ib) { return ka < kb || (ka == kb && ia < ib); }
#else
#define KEY_T uvec2
KEY_T load_key(uint g) { return uvec2(key_words[2u * g], key_words[2u * g + 1u]); }
void store_key(uint g, KEY_T k) {
  key_words[2u * g] = k.x;
  key_words[2u * g + 1u] = k.y;
}
bool pair_less(KEY_T ka, uint ia, KEY_T kb, uint ib) {
  return ka.x < kb.x || (ka.x == kb.x && (ka.y < kb.y || (ka.y == kb.y && ia < ib)));
}
#endif

void main() {
  const uint t = kiln_global_id();
  if (t >= p.pairs) return;
  const uint half_log = p.log2_len - 1u;
  const uint row = t >> half_log, q = t & ((1u << half_log) - 1u);
  const uint i = 2u * q - (q & (p.j - 1u));
  const uint a = (row << p.log2_len) + i, b = a + p.j;
  const bool ascending = (i & p.k) == 0u;
  const KEY_T ka = load_key(a), kb = load_key(b);
  const uint ia = idx_words[a], ib = idx_words[b];
  if (ascending ? pair_less(kb, ib, ka, ia) : pair_less(ka, ia, kb, ib)) {
    store_key(a, kb);
    store_key(b, ka);
    idx_words[a] = ib;
    idx_words[b] = ia;
  }
}
