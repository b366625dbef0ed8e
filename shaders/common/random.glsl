// Counter-based random numbers on the GPU, bit for bit those of the CPU (core/ops/random_primitives.h,
// core/random.cpp): threefry-2x32 with 20 rounds, the element's index as the counter, and the same
// conversions to floats and bounded integers. The random primitives' GLSL calls these; 64-bit
// values travel as uvec2 (high word, low word) so no 64-bit integer type is needed.
#ifndef KILN_RANDOM_GLSL
#define KILN_RANDOM_GLSL

uint kiln_rotl(uint x, int r) { return (x << r) | (x >> (32 - r)); }

uvec2 kiln_threefry2x32(uvec2 key, uvec2 counter) {
  const uint ks[3] = uint[3](key.x, key.y, key.x ^ key.y ^ 0x1BD11BDAu);
  const int rot[8] = int[8](13, 15, 26, 6, 17, 29, 16, 24);
  uint x0 = counter.x + ks[0], x1 = counter.y + ks[1];
  for (int i = 0; i < 5; ++i) {
    for (int k = 0; k < 4; ++k) {
      x0 += x1;
      x1 = kiln_rotl(x1, rot[(i & 1) * 4 + k]);
      x1 ^= x0;
    }
    x0 += ks[(i + 1) % 3];
    x1 += ks[(i + 2) % 3] + uint(i + 1);
  }
  return uvec2(x0, x1);
}

// The block of element `index` (below 2^32 on the GPU): counter (high word 0, index).
uvec2 kiln_threefry_block(uvec2 key, uint index) { return kiln_threefry2x32(key, uvec2(0u, index)); }

// The 32-bit draw of element i (random_bits) and its 64-bit draw (high word first).
uint kiln_random_bits32(uvec2 key, uint i) {
  const uvec2 r = kiln_threefry_block(key, i);
  return r.x ^ r.y;
}
uvec2 kiln_random_bits64(uvec2 key, uint i) { return kiln_threefry_block(key, i); }

// floor(a * b / 2^64) of two 64-bit values: the high half of the 128-bit product.
uvec2 kiln_multiply_high64(uvec2 a, uvec2 b) {
  uint h00, l00, h01, l01, h10, l10, h11, l11;
  umulExtended(a.y, b.y, h00, l00);
  umulExtended(a.y, b.x, h01, l01);
  umulExtended(a.x, b.y, h10, l10);
  umulExtended(a.x, b.x, h11, l11);
  uint c0, c1;
  uaddCarry(uaddCarry(h00, l01, c0), l10, c1);  // bits 32..63: only their carries matter
  uint d0, d1, d2;
  const uint lo = uaddCarry(uaddCarry(uaddCarry(l11, h01, d0), h10, d1), c0 + c1, d2);
  return uvec2(h11 + d0 + d1 + d2, lo);
}

// 64-bit sum, wrapping.
uvec2 kiln_add64(uvec2 a, uvec2 b) {
  uint carry;
  const uint lo = uaddCarry(a.y, b.y, carry);
  return uvec2(a.x + b.x + carry, lo);
}

// Uniform float32 on [lo, top] from the mantissa trick, as the CPU: max(min(u * span + lo, top), lo)
// with the multiply and add rounded separately (precise: no fused multiply-add).
float kiln_uniform_float(uvec2 key, uint i, float lo, float span, float top) {
  const float u = float(kiln_random_bits32(key, i) >> 9) * (1.0 / 8388608.0);
  precise float scaled = u * span;
  precise float v = scaled + lo;
  return max(min(v, top), lo);
}

#ifdef KILN_HAS_FLOAT64
double kiln_uniform_double(uvec2 key, uint i, double lo, double span, double top) {
  const uvec2 b = kiln_random_bits64(key, i);
  // (bits >> 12) as a 52-bit integer: 20 high bits, 32 low bits, both exact in a double.
  const double m = double(b.x >> 12) * 4294967296.0lf + double((b.x << 20) | (b.y >> 12));
  precise double scaled = m * (1.0lf / 4503599627370496.0lf) * span;
  precise double v = scaled + lo;
  return max(min(v, top), lo);
}
#endif

#endif  // KILN_RANDOM_GLSL
