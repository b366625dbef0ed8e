#version 450
// Bitonic sort of tiles in shared memory. Rows (the sorted axis of the input) are padded to a
// power of two `len` with sentinels that sort last; a workgroup holds one tile of `tile` elements:
// tile / len whole rows, or a piece of a row when len > tile. Element g of the padded [rows, len]
// block is (row g / len, column g % len), and the direction of every compare follows the bitonic
// network over the whole row, so the sort_step passes can finish rows longer than a tile.
// - k == 0: the network's first stages, up to blocks of min(len, tile): loads the input's
//   elements (any strides, any dtype: sort_common.glsl) and makes their keys.
// - k > 0: the last stages (j < tile) of the merge of blocks of k: loads (key, column) pairs
//   from the scratch buffers.
// It stores pairs back to the scratch buffers (or only the columns), or, when the rows are sorted,
// writes the output: columns (int32 indices) or the input's values (4- and 8-byte dtypes; the
// others go through sort_write.comp), the first out_len of each row.
// kiln-variant: sort_tile_k32 -DKILN_KEY_WORDS=1
// kiln-variant: sort_tile_k64 -DKILN_KEY_WORDS=2
#extension GL_GOOGLE_include_directive : require
#include "../common/indexing.glsl"
#include "sort_common.glsl"

// Elements of the largest tile (the shared arrays' size); the host checks it fits.
layout(constant_id = 3) const uint kTileMax = 2048;

layout(std430, set = 0, binding = 0) readonly buffer X { uint x_words[]; };
layout(std430, set = 0, binding = 1) buffer Keys { uint key_words[]; };
layout(std430, set = 0, binding = 2) buffer Cols { uint idx_words[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { uint out_words[]; };

// flags
#define KILN_SORT_FROM_SCRATCH 1u
#define KILN_SORT_TO_OUTPUT 2u
#define KILN_SORT_STORE_KEYS 4u
#define KILN_SORT_VALUES 8u

layout(push_constant) uniform Push {
  uint rows;
  uint n;         // the row length before padding
  uint log2_len;  // len = 1 << log2_len >= n
  uint tile;      // elements per workgroup, a power of two <= kTileMax
  uint k;         // 0: sort tiles; else the size of the blocks being merged (> tile)
  uint flags;
  int x_offset;
  int axis_stride;
  uint out_len;  // output columns per row (n, or k of top-k)
  uint inner;    // output elements after the sorted axis
  uint rank;     // of the rows' index space
  uint shape[KILN_SORT_RANK];
  int strides[KILN_SORT_RANK];
} p;

#include "sort_rows.glsl"

#if KILN_KEY_WORDS == 1
#define KEY_T uint
shared uint s_key[kTileMax];
#else
#define KEY_T uvec2
shared uint s_key[kTileMax];  // high words
shared uint s_key_lo[kTileMax];
#endif
shared uint s_idx[kTileMax];

KEY_T shared_key(uint e) {
#if KILN_KEY_WORDS == 1
  return s_key[e];
#else
  return uvec2(s_key[e], s_key_lo[e]);
#endif
}

void set_shared(uint e, KEY_T key, uint idx) {
#if KILN_KEY_WORDS == 1
  s_key[e] = key;
#else
  s_key[e] = key.x;
  s_key_lo[e] = key.y;
#endif
  s_idx[e] = idx;
}

bool pair_less(KEY_T ka, uint ia, KEY_T kb, uint ib) {
#if KILN_KEY_WORDS == 1
  return ka < kb || (ka == kb && ia < ib);
#else
  return ka.x < kb.x || (ka.x == kb.x && (ka.y < kb.y || (ka.y == kb.y && ia < ib)));
#endif
}

// Loads padded element g into shared slot e.
void load(uint e, uint g) {
  if ((p.flags & KILN_SORT_FROM_SCRATCH) != 0u) {
#if KILN_KEY_WORDS == 1
    set_shared(e, key_words[g], idx_words[g]);
#else
    set_shared(e, uvec2(key_words[2u * g], key_words[2u * g + 1u]), idx_words[g]);
#endif
    return;
  }
  const uint row = g >> p.log2_len, col = g & ((1u << p.log2_len) - 1u);
  if (row >= p.rows || col >= p.n) {
    set_shared(e, KEY_T(0xFFFFFFFFu), 0xFFFFFFFFu);  // padding: after every element
    return;
  }
  const uint x = uint(kiln_sort_row_offset(row) + int(col) * p.axis_stride);
#if KILN_KEY_WORDS == 1
  set_shared(e, kiln_sort_key32(kiln_sort_load_bits(x)), col);
#else
  set_shared(e, kiln_sort_key64(x_words[2u * x], x_words[2u * x + 1u]), col);
#endif
}

// Stores shared slot e, padded element g.
void store(uint e, uint g) {
  const uint row = g >> p.log2_len, col = g & ((1u << p.log2_len) - 1u);
  if (row >= p.rows) return;
  const uint idx = s_idx[e];
  if ((p.flags & KILN_SORT_TO_OUTPUT) == 0u) {
    idx_words[g] = idx;
    if ((p.flags & KILN_SORT_STORE_KEYS) != 0u) {
#if KILN_KEY_WORDS == 1
      key_words[g] = s_key[e];
#else
      key_words[2u * g] = s_key[e];
      key_words[2u * g + 1u] = s_key_lo[e];
#endif
    }
    return;
  }
  if (col >= p.out_len) return;
  const uint o = kiln_sort_out_position(row, col);
  if ((p.flags & KILN_SORT_VALUES) == 0u) {
    out_words[o] = idx;
    return;
  }
  const uint x = uint(kiln_sort_row_offset(row) + int(idx) * p.axis_stride);
  if (kiln_sort_element_bytes() == 8u) {
    out_words[2u * o] = x_words[2u * x];
    out_words[2u * o + 1u] = x_words[2u * x + 1u];
  } else {
    out_words[o] = x_words[x];
  }
}

// One stage of the network: the pairs (i, i + j) of the tile, in blocks of k sorted ascending
// where bit k of the position in the row is clear, descending where it is set.
void stage(uint base, uint k, uint j) {
  const uint row_mask = (1u << p.log2_len) - 1u;
  for (uint t = gl_LocalInvocationID.x; t < p.tile / 2u; t += kWorkgroupSize) {
    const uint i = 2u * t - (t & (j - 1u)), l = i + j;
    const bool ascending = (((base + i) & row_mask) & k) == 0u;
    const KEY_T ki = shared_key(i), kl = shared_key(l);
    const uint ii = s_idx[i], il = s_idx[l];
    if (ascending ? pair_less(kl, il, ki, ii) : pair_less(ki, ii, kl, il)) {
      set_shared(i, kl, il);
      set_shared(l, ki, ii);
    }
  }
}

void main() {
  const uint group = kiln_group_id();
  const uint base = group * p.tile;  // the tile's first padded element
  // Groups past the last tile (a 2-D grid rounds up) have nothing to do.
  if (base >= (p.rows << p.log2_len)) return;
  for (uint e = gl_LocalInvocationID.x; e < p.tile; e += kWorkgroupSize) load(e, base + e);
  barrier();
  if (p.k == 0u) {
    const uint top = min(1u << p.log2_len, p.tile);
    for (uint k = 2u; k <= top; k <<= 1u) {
      for (uint j = k >> 1u; j > 0u; j >>= 1u) {
        stage(base, k, j);
        barrier();
      }
    }
  } else {
    for (uint j = p.tile >> 1u; j > 0u; j >>= 1u) {
      stage(base, p.k, j);
      barrier();
    }
  }
  for (uint e = gl_LocalInvocationID.x; e < p.tile; e += kWorkgroupSize) store(e, base + e);
}
