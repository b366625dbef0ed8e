// The stored and accumulated element types of a kernel compiled once per dtype, and their loads and
// stores. The includer defines KILN_16BIT (float16 or bfloat16 bits, told apart by its specialization
// constant kBfloat, declared before this include, with common/dtype_convert.glsl included), KILN_F64,
// or neither (float32), and gets STORE_T (a buffer element), ACC_T (arithmetic), KILN_LOAD(v) (a
// stored value as ACC_T) and KILN_STORE(v) (an ACC_T as STORE_T).
#ifndef KILN_TYPED_STORAGE_GLSL
#define KILN_TYPED_STORAGE_GLSL

#ifdef KILN_16BIT
#define STORE_T uint16_t
#define ACC_T float
// 16-bit values may not be function arguments without 16-bit arithmetic: callers widen with uint().
float kiln_load_16bit(uint bits) { return kBfloat ? kiln_bfloat_to_float(bits) : kiln_half_to_float(bits); }
#define KILN_LOAD(v) kiln_load_16bit(uint(v))
#define KILN_STORE(v) uint16_t(kBfloat ? kiln_float_to_bfloat(v) : kiln_float_to_half(v))
#elif defined(KILN_F64)
#define STORE_T double
#define ACC_T double
#define KILN_LOAD(v) (v)
#define KILN_STORE(v) (v)
#else
#define STORE_T float
#define ACC_T float
#define KILN_LOAD(v) (v)
#define KILN_STORE(v) (v)
#endif

#endif
