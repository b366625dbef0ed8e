// The elementwise math of the GPU for int64 and uint64 values (included by elementwise_ops.glsl
// where the other types' overloads are stamped out, when the device has 64-bit integers): the
// shifts, and the per-type macros of that file for both.
#ifndef KILN_ELEMENTWISE_INT64_GLSL
#define KILN_ELEMENTWISE_INT64_GLSL
#ifdef KILN_HAS_INT64

int64_t kiln_left_shift(int64_t a, int64_t b) { return (b < 0 || b >= 64) ? int64_t(0) : a << b; }
int64_t kiln_right_shift(int64_t a, int64_t b) {
  return (b < 0 || b >= 64) ? (a < 0 ? int64_t(-1) : int64_t(0)) : a >> b;
}
uint64_t kiln_left_shift(uint64_t a, uint64_t b) { return b >= uint64_t(64) ? uint64_t(0) : a << b; }
uint64_t kiln_right_shift(uint64_t a, uint64_t b) { return b >= uint64_t(64) ? uint64_t(0) : a >> b; }

KILN_NONZERO(int64_t, int64_t(0))
KILN_SQUARE(int64_t)
KILN_SIGNED_ABS(int64_t, int64_t(0))
KILN_INT_SIGN(int64_t, int64_t(0), int64_t(1))
KILN_INT_EXACT(int64_t)
KILN_ORDERED_MINMAX(int64_t)
KILN_INT_POWER(int64_t, int64_t(0), int64_t(1))
KILN_SIGNED_DIVISION(int64_t, uint64_t, int64_t(0), int64_t(1))
KILN_NONZERO(uint64_t, uint64_t(0))
KILN_SQUARE(uint64_t)
uint64_t kiln_abs(uint64_t x) { return x; }
uint64_t kiln_sign(uint64_t x) { return x > uint64_t(0) ? uint64_t(1) : uint64_t(0); }
KILN_INT_EXACT(uint64_t)
KILN_ORDERED_MINMAX(uint64_t)
KILN_UINT_POWER(uint64_t, uint64_t(0), uint64_t(1))
KILN_UNSIGNED_DIVISION(uint64_t, uint64_t(0))

#endif  // KILN_HAS_INT64
#endif
