#version 450
// Cumulative sums, products, maxima, minima and logaddexps along the rows of a [rows, n] block (any row and column strides)
// into a row-major output. tpr invocations take one logical row (a power of two up to the
// workgroup: many short rows share a workgroup) and walk it in tiles of tpr * KILN_ITEMS
// elements: coalesced loads into shared memory, a sequential scan of KILN_ITEMS consecutive
// elements per invocation, a shared-memory (Hillis-Steele) scan of the invocations' totals, and a
// carried prefix from tile to tile, so rows of any length take one pass. No subgroup size is
// assumed.
//
// Long rows with too few rows to fill the device are cut by the host into `splits` pieces of
// `chunk` columns: logical row l = row * splits + s covers columns [s * chunk, s * chunk + chunk)
// of row `row`. A first pass (kTotals) writes each piece's total, a scan of those gives each
// piece's carry, and a last pass (kCarry) scans the pieces starting from their carries. kReverse
// scans each piece from its end (the host scans the totals in reverse too).
// kiln-variant: scan_rows_f32 -DACC_T=float -DOUT_T=float -DKILN_WORDS -DKILN_ACC_FLOAT
// kiln-variant: scan_rows_f32d -DACC_T=double -DOUT_T=float -DKILN_WORDS -DKILN_ACC_FLOAT -DKILN_HAS_FLOAT64
// kiln-variant: scan_rows_f32_h16 -DACC_T=float -DKILN_WORDS -DKILN_ACC_FLOAT -DKILN_OUT_16
// kiln-variant: scan_rows_u32 -DACC_T=uint -DOUT_T=uint -DKILN_WORDS
// kiln-variant: scan_rows_f64 -DACC_T=double -DOUT_T=double -DKILN_ACC_FLOAT -DKILN_HAS_FLOAT64
// kiln-variant: scan_rows_i32 -DACC_T=int -DOUT_T=int -DKILN_WORDS -DKILN_ACC_SIGNED
// kiln-variant: scan_rows_i64 -DACC_T=int64_t -DOUT_T=int64_t -DKILN_INT64 -DKILN_ACC_SIGNED
// kiln-variant: scan_rows_u64 -DACC_T=uint64_t -DOUT_T=uint64_t -DKILN_INT64
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_OUT_16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef KILN_INT64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#include "scan_common.glsl"

// Elements each invocation scans per tile (kScanItems in scan_kernels.cpp).
#define KILN_ITEMS 8

layout(push_constant) uniform Push {
  uint rows;    // logical rows: rows of the block times splits
  uint n;       // columns of a row
  uint splits;  // pieces of a row (1 unless long rows are few)
  uint chunk;   // columns of a piece (n when splits is 1)
  uint tpr;     // invocations per logical row: a power of two dividing kWorkgroupSize
  uint tiles;   // trips of the tile loop, the same for every invocation of the workgroup
  int in_offset;
  int row_stride;
  int col_stride;
  uint out_offset;
} p;

// The tile, one slot skipped every 32 so that invocations scanning their consecutive elements hit
// distinct banks.
shared ACC_T items[kWorkgroupSize * KILN_ITEMS + kWorkgroupSize * KILN_ITEMS / 32u];
shared ACC_T sums[kWorkgroupSize];

uint slot(uint i) { return i + (i >> 5); }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tpr = p.tpr;
  const uint lane = tid & (tpr - 1u);
  const uint first = tid - lane;  // the segment's first invocation
  const uint group = kiln_group_id();
  const uint logical = group * (kWorkgroupSize / tpr) + tid / tpr;
  // Every invocation runs the loop and reaches every barrier; `len` is 0 past the last row.
  uint row = 0u, c0 = 0u, len = 0u;
  if (logical < p.rows) {
    row = logical / p.splits;
    c0 = (logical % p.splits) * p.chunk;
    len = min(p.chunk, p.n - c0);
  }
  const int in_base = p.in_offset + int(row) * p.row_stride;
  const uint out_base = p.out_offset + row * p.n;
  const uint span = tpr * KILN_ITEMS;
  const uint tile_base = first * KILN_ITEMS;  // the segment's slots
  const uint mine = tile_base + lane * KILN_ITEMS;
  ACC_T carry = kiln_scan_identity();
  if (kCarry && len > 0u) carry = carry_in[logical];

  for (uint t = 0u; t < p.tiles; ++t) {
    const uint j0 = t * span;
    for (uint q = 0u; q < KILN_ITEMS; ++q) {
      const uint j = j0 + q * tpr + lane;  // position in scan order
      ACC_T v = kiln_scan_identity();
      if (j < len) {
        const uint c = kReverse ? c0 + len - 1u - j : c0 + j;
        v = kiln_scan_load(in_base + int(c) * p.col_stride);
      }
      items[slot(tile_base + q * tpr + lane)] = v;
    }
    barrier();
    ACC_T local[KILN_ITEMS];
    ACC_T run = kiln_scan_identity();
    for (uint q = 0u; q < KILN_ITEMS; ++q) {
      run = kiln_scan_combine(run, items[slot(mine + q)]);
      local[q] = run;
    }
    sums[tid] = run;
    barrier();
    for (uint off = 1u; off < tpr; off <<= 1) {
      const ACC_T other = lane >= off ? sums[tid - off] : kiln_scan_identity();
      barrier();
      sums[tid] = kiln_scan_combine(other, sums[tid]);
      barrier();
    }
    // What precedes this invocation's elements: the earlier tiles and the earlier invocations.
    const ACC_T before = lane > 0u ? kiln_scan_combine(carry, sums[tid - 1u]) : carry;
    if (!kTotals) {
      ACC_T prev = before;  // the exclusive result: the inclusive one of the element before
      for (uint q = 0u; q < KILN_ITEMS; ++q) {
        const ACC_T incl = kiln_scan_combine(before, local[q]);
        items[slot(mine + q)] = kInclusive ? incl : prev;
        prev = incl;
      }
    }
    carry = kiln_scan_combine(carry, sums[first + tpr - 1u]);
    barrier();
    if (!kTotals) {
      for (uint q = 0u; q < KILN_ITEMS; ++q) {
        const uint j = j0 + q * tpr + lane;
        if (j < len)
          kiln_scan_store(out_base + (kReverse ? c0 + len - 1u - j : c0 + j), items[slot(tile_base + q * tpr + lane)]);
      }
    }
    barrier();  // the next tile's loads overwrite items and sums
  }
  if (kTotals && len > 0u && lane == 0u) totals[logical] = carry;
}
