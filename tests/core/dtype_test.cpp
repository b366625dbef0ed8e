// Dtypes: the promotion table against NumPy (and where kiln departs from it), weak scalars through
// the ops, and float16/bfloat16 conversions checked against an independent rounding reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "support/dtypes.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::kAllDtypes;

// ---------------------------------------------------------------- promotion

TEST(DtypePromotion, AgreesWithNumPyWhereNumPyHasTheType) {
  // np.promote_types for types both have.
  EXPECT_EQ(promote_types(bool_, bool_), bool_);
  EXPECT_EQ(promote_types(bool_, int8), int8);
  EXPECT_EQ(promote_types(bool_, uint8), uint8);
  EXPECT_EQ(promote_types(uint8, uint8), uint8);
  EXPECT_EQ(promote_types(uint8, int32), int32);
  EXPECT_EQ(promote_types(int8, int32), int32);
  EXPECT_EQ(promote_types(int32, int64), int64);
  EXPECT_EQ(promote_types(uint32, int32), int64);
  EXPECT_EQ(promote_types(uint32, uint8), uint32);
  EXPECT_EQ(promote_types(uint32, int8), int64);
  EXPECT_EQ(promote_types(uint32, int64), int64);
  EXPECT_EQ(promote_types(float16, float32), float32);
  EXPECT_EQ(promote_types(float32, float64), float64);
  EXPECT_EQ(promote_types(bool_, float16), float16);
  EXPECT_EQ(promote_types(uint8, float16), float16);
  EXPECT_EQ(promote_types(int8, float16), float16);
}

// Every pair of integer and bool dtypes, as numpy.promote_types gives them (NumPy 1.24).
TEST(DtypePromotion, IntegersPromoteExactlyAsNumPy) {
  constexpr Dtype b = bool_, u8 = uint8, i8 = int8, i16 = int16, u16 = uint16, i32 = int32, i64 = int64,
                  u32 = uint32, u64 = uint64, f64 = float64;
  constexpr Dtype kInts[] = {b, u8, i8, i16, u16, i32, i64, u32, u64};
  constexpr Dtype kNumPy[9][9] = {
      /* b    */ {b, u8, i8, i16, u16, i32, i64, u32, u64},
      /* u8   */ {u8, u8, i16, i16, u16, i32, i64, u32, u64},
      /* i8   */ {i8, i16, i8, i16, i32, i32, i64, i64, f64},
      /* i16  */ {i16, i16, i16, i16, i32, i32, i64, i64, f64},
      /* u16  */ {u16, u16, i32, i32, u16, i32, i64, u32, u64},
      /* i32  */ {i32, i32, i32, i32, i32, i32, i64, i64, f64},
      /* i64  */ {i64, i64, i64, i64, i64, i64, i64, i64, f64},
      /* u32  */ {u32, u32, i64, i64, u32, i64, i64, u32, u64},
      /* u64  */ {u64, u64, f64, f64, u64, f64, f64, u64, u64},
  };
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 9; ++j)
      EXPECT_EQ(promote_types(kInts[i], kInts[j]), kNumPy[i][j]) << kInts[i] << " + " << kInts[j];
}

TEST(DtypePromotion, DeparturesFromNumPy) {
  // Integers meeting floats keep the float type, as in JAX and MLX (NumPy would widen
  // int32 + float32 and int64 + float16 to float64): the float width is the user's choice.
  EXPECT_EQ(promote_types(int32, float32), float32);
  EXPECT_EQ(promote_types(int32, float16), float16);
  EXPECT_EQ(promote_types(int64, float16), float16);
  EXPECT_EQ(promote_types(uint32, float32), float32);
  // bfloat16 (absent from NumPy): with float16 the smallest type holding both is float32, as JAX.
  EXPECT_EQ(promote_types(float16, bfloat16), float32);
  EXPECT_EQ(promote_types(bfloat16, int32), bfloat16);
  EXPECT_EQ(promote_types(bfloat16, float32), float32);
}

TEST(DtypePromotion, SymmetricIdempotentAndNeverNarrower) {
  for (Dtype a : kAllDtypes) {
    EXPECT_EQ(promote_types(a, a), a) << dtype_name(a);
    for (Dtype b : kAllDtypes) {
      const Dtype c = promote_types(a, b);
      EXPECT_EQ(c, promote_types(b, a)) << dtype_name(a) << " " << dtype_name(b);
      EXPECT_EQ(promote_types(c, a), c) << dtype_name(a) << " " << dtype_name(b);  // c holds a
      EXPECT_EQ(promote_types(c, b), c) << dtype_name(a) << " " << dtype_name(b);
      if (is_floating(a) || is_floating(b)) {
        EXPECT_TRUE(is_floating(c)) << dtype_name(a) << " " << dtype_name(b);
      }
    }
  }
}

TEST(DtypePromotion, NamesAndSizes) {
  EXPECT_EQ(dtype_name(bool_), "bool");
  EXPECT_EQ(dtype_name(bfloat16), "bfloat16");
  EXPECT_EQ(dtype_name(uint32), "uint32");
  EXPECT_EQ(size_of(bool_), 1);
  EXPECT_EQ(size_of(float16), 2);
  EXPECT_EQ(size_of(bfloat16), 2);
  EXPECT_EQ(size_of(int64), 8);
  EXPECT_EQ(dtype_name(int16), "int16");
  EXPECT_EQ(dtype_name(uint16), "uint16");
  EXPECT_EQ(dtype_name(uint64), "uint64");
  EXPECT_EQ(size_of(int16), 2);
  EXPECT_EQ(size_of(uint16), 2);
  EXPECT_EQ(size_of(uint64), 8);
  for (Dtype t : {uint8, uint16, uint32, uint64}) EXPECT_TRUE(is_unsigned(t) && is_integral(t)) << t;
  for (Dtype t : {int8, int16, int32, int64}) EXPECT_TRUE(!is_unsigned(t) && is_integral(t)) << t;
  EXPECT_EQ(dtype_of<int16_t>(), int16);
  EXPECT_EQ(dtype_of<uint16_t>(), uint16);
  EXPECT_EQ(dtype_of<uint64_t>(), uint64);
  EXPECT_EQ(dtype_of<unsigned long long>(), uint64);
  EXPECT_TRUE(is_unsigned(uint32));
  EXPECT_FALSE(is_integral(bool_));
  EXPECT_TRUE(is_floating(bfloat16));
}

// ---------------------------------------------------------------- weak scalars through ops

TEST(DtypeWeakScalars, ScalarsAdoptTheArrayDtypeWhenTheyFitItsKind) {
  const Array bf = Array(std::vector<float>{1.5f, -2.0f}, {2}, bfloat16);
  EXPECT_EQ((bf * 2.0).dtype(), bfloat16);
  EXPECT_EQ((bf * 2.0).to_vector<double>(), (std::vector<double>{3.0, -4.0}));
  EXPECT_EQ((2.0f + bf).dtype(), bfloat16);
  const Array h = Array(std::vector<float>{1.0f}, {1}, float16);
  EXPECT_EQ((h + 1).dtype(), float16);
  const Array i = Array({1, 2, 3});
  EXPECT_EQ((i + 1).dtype(), int32);
  EXPECT_EQ((i + 1).to_vector<int32_t>(), (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ((i + int64_t{1}).dtype(), int32);  // the C++ width of a scalar does not matter
  EXPECT_EQ((i * 2.5).dtype(), float32);       // a float scalar lifts ints to float32
  EXPECT_EQ((i * 2.5).to_vector<float>(), (std::vector<float>{2.5f, 5.0f, 7.5f}));
  const Array d = Array(std::vector<double>{1.0}, {1});
  EXPECT_EQ((d + 2.0f).dtype(), float64);
  const Array b = Array(std::vector<bool>{true, false}, {2});
  EXPECT_EQ((b + 1).dtype(), int32);
  EXPECT_EQ((b + 1).to_vector<int32_t>(), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ((b * 1.5f).dtype(), float32);
  const Array u = Array(std::vector<uint8_t>{250, 3}, {2});
  EXPECT_EQ((u + 1).dtype(), uint8);
  EXPECT_EQ((u + 1).to_vector<int32_t>(), (std::vector<int32_t>{251, 4}));
  const Array u32 = Array(std::vector<uint32_t>{7}, {1});
  EXPECT_EQ((u32 + 1).dtype(), uint32);
  // Two scalars: the lone-scalar dtypes.
  EXPECT_EQ(add(2, 3).dtype(), int32);
  EXPECT_EQ(add(2.0, 1).dtype(), float32);
  // Array-array keeps the table: the weak rule is for scalars only.
  EXPECT_EQ((i + Array(2.5f)).dtype(), float32);
  EXPECT_EQ((u + Array(int8_t{1})).dtype(), int16);
}

// NumPy 2 (NEP 50) and JAX reject a Python int that does not fit the array's integer dtype
// (np.uint8(1) + 300 raises OverflowError); so does kiln.
TEST(DtypeWeakScalars, OutOfRangeIntegerScalarIsRejected) {
  const Array u = Array(std::vector<uint8_t>{1}, {1});
  EXPECT_THROW(u + 300, ValueError);
  EXPECT_THROW(u + (-1), ValueError);
  EXPECT_THROW(Array(std::vector<int8_t>{1}, {1}) * 1000, ValueError);
}

// ---------------------------------------------------------------- 16-bit floats

// The nearest value with `mantissa_bits` explicit bits and minimum normal exponent `min_exp`,
// ties to even, or +-inf past `max_finite` (rounding by scaling, independent of half.h's bit tricks).
double round_reference(double x, int mantissa_bits, int min_exp, double max_finite) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::max(static_cast<int>(std::floor(std::log2(std::abs(x)))), min_exp);
  const double ulp = std::ldexp(1.0, e - mantissa_bits);
  const double r = std::nearbyint(x / ulp) * ulp;  // default rounding mode: ties to even
  if (std::abs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}
double f16_reference(float x) { return round_reference(x, 10, -14, 65504.0); }
double bf16_reference(float x) { return round_reference(x, 7, -126, std::ldexp(255.0, 120)); }

TEST(DtypeHalf, EveryFloat16RoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float16_t h = float16_t::from_bits(static_cast<uint16_t>(bits));
    const float f = h;
    if (std::isnan(f)) {
      EXPECT_TRUE((bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0) << bits;
      EXPECT_TRUE(std::isnan(static_cast<float>(float16_t(f)))) << bits;
      continue;
    }
    ASSERT_EQ(float16_t(f).bits, bits) << "float16 bits " << bits << " read as " << f;
  }
}

TEST(DtypeHalf, EveryBfloat16RoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = bfloat16_t::from_bits(static_cast<uint16_t>(bits));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), bits << 16);  // bfloat16 is the top half of a float
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(f)))) << bits;
      continue;
    }
    ASSERT_EQ(bfloat16_t(f).bits, bits) << "bfloat16 bits " << bits;
  }
}

TEST(DtypeHalf, RoundToNearestEvenAtTies) {
  // float16 has 10 mantissa bits: between 1 and 1 + 2^-10 the tie is 1 + 2^-11.
  EXPECT_EQ(static_cast<float>(float16_t(1.0f + 0x1p-11f)), 1.0f);                // tie: down to even
  EXPECT_EQ(static_cast<float>(float16_t(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);  // tie: up to even
  EXPECT_EQ(static_cast<float>(float16_t(1.0f + 0x1p-11f + 0x1p-20f)), 1.0f + 0x1p-10f);
  EXPECT_EQ(static_cast<float>(float16_t(-(1.0f + 0x1p-11f))), -1.0f);
  // bfloat16 has 7: the tie after 1 is 1 + 2^-8.
  EXPECT_EQ(static_cast<float>(bfloat16_t(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bfloat16_t(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(static_cast<float>(bfloat16_t(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
}

TEST(DtypeInfo, FinfoAndIinfoAgreeWithTheCppLimits) {
  const FloatInfo f32 = finfo(float32), f64 = finfo(float64), f16 = finfo(float16), bf = finfo(bfloat16);
  EXPECT_EQ(f32.eps, std::numeric_limits<float>::epsilon());
  EXPECT_EQ(f32.max, std::numeric_limits<float>::max());
  EXPECT_EQ(f32.min, std::numeric_limits<float>::lowest());
  EXPECT_EQ(f32.smallest_normal, std::numeric_limits<float>::min());
  EXPECT_EQ(f32.smallest_subnormal, std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(f64.eps, std::numeric_limits<double>::epsilon());
  EXPECT_EQ(f64.max, std::numeric_limits<double>::max());
  EXPECT_EQ(f64.smallest_subnormal, std::numeric_limits<double>::denorm_min());
  // NumPy's float16 and ml_dtypes' bfloat16, and the values round-trip through the storage types.
  EXPECT_EQ(f16.max, 65504.0);
  EXPECT_EQ(f16.eps, 0x1p-10);
  EXPECT_EQ(f16.smallest_normal, 0x1p-14);
  EXPECT_EQ(f16.smallest_subnormal, 0x1p-24);
  EXPECT_EQ(static_cast<float>(float16_t(static_cast<float>(f16.max))), 65504.0f);
  EXPECT_EQ(static_cast<float>(float16_t(static_cast<float>(f16.smallest_subnormal))), 0x1p-24f);
  EXPECT_EQ(bf.eps, 0x1p-7);
  EXPECT_EQ(static_cast<double>(static_cast<float>(bfloat16_t(static_cast<float>(bf.max)))), bf.max);
  EXPECT_EQ(bf.bits, 16);
  EXPECT_EQ(f16.resolution, 1e-3);
  EXPECT_EQ(iinfo(int8).min, -128);
  EXPECT_EQ(iinfo(int8).max, 127u);
  EXPECT_EQ(iinfo(uint32).max, 4294967295u);
  EXPECT_EQ(iinfo(int64).min, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(iinfo(bool_).max, 1u);
  EXPECT_EQ(iinfo(uint8).bits, 8);
  EXPECT_EQ(iinfo(int16).min, -32768);
  EXPECT_EQ(iinfo(int16).max, 32767u);
  EXPECT_EQ(iinfo(uint16).max, 65535u);
  EXPECT_EQ(iinfo(uint16).bits, 16);
  EXPECT_EQ(iinfo(uint64).min, 0);
  EXPECT_EQ(iinfo(uint64).max, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(iinfo(uint64).bits, 64);
  for (Dtype t : kAllDtypes) {
    if (is_floating(t)) {
      EXPECT_EQ(finfo(t).bits, 8 * size_of(t)) << t;
      EXPECT_THROW(iinfo(t), DtypeError) << t;
    } else {
      EXPECT_EQ(iinfo(t).bits, t == bool_ ? 8 : 8 * size_of(t)) << t;
      EXPECT_THROW(finfo(t), DtypeError) << t;
    }
  }
  EXPECT_THROW(finfo(int32), DtypeError);
  EXPECT_THROW(iinfo(float16), DtypeError);
}

TEST(DtypeHalf, ComparesAsFloats) {
  // `a == b` once did not compile: float's built-in == and the array operators' (const Operand&,
  // const Operand&) were equally good.
  const float16_t a(1.0f), b(1.0f), c(2.0f), nan(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
  EXPECT_TRUE(a < c && c > a && a <= b && b >= a);
  EXPECT_FALSE(nan == nan);
  EXPECT_TRUE(float16_t(0.0f) == float16_t(-0.0f));
  const bfloat16_t x(1.0f), y(1.0f), z(-3.0f);
  EXPECT_TRUE(x == y);
  EXPECT_TRUE(z < x);
  EXPECT_FALSE(x != y);
  static_assert(std::is_same_v<decltype(a == b), bool> && std::is_same_v<decltype(x < y), bool>);
  // Against numbers, either side.
  EXPECT_TRUE(a == 1.0f && 1.0 == a && a != 2 && a < 2 && 0 < a && c >= 2.0);
  EXPECT_TRUE(z == -3 && z < 0.0f && -4 < z);
  EXPECT_FALSE(nan == 0.0f || nan < 1 || nan > 1);
}

TEST(DtypeHalf, OverflowInfinityNanAndSignedZero) {
  EXPECT_EQ(float16_t(65504.0f).bits, 0x7bffu);  // the largest float16
  EXPECT_EQ(float16_t(65519.0f).bits, 0x7bffu);  // below the tie: stays finite
  EXPECT_EQ(float16_t(65520.0f).bits, 0x7c00u);  // the tie rounds to even: infinity
  EXPECT_EQ(float16_t(1e10f).bits, 0x7c00u);
  EXPECT_EQ(float16_t(-1e10f).bits, 0xfc00u);
  EXPECT_EQ(float16_t(INFINITY).bits, 0x7c00u);
  EXPECT_EQ(float16_t(-INFINITY).bits, 0xfc00u);
  EXPECT_TRUE(std::isnan(static_cast<float>(float16_t(NAN))));
  EXPECT_EQ(float16_t(-0.0f).bits, 0x8000u);
  EXPECT_EQ(bfloat16_t(std::numeric_limits<float>::max()).bits, 0x7f80u);  // rounds past the largest
  EXPECT_EQ(bfloat16_t(std::ldexp(255.0f, 120)).bits, 0x7f7fu);            // the largest bfloat16
  EXPECT_EQ(bfloat16_t(-INFINITY).bits, 0xff80u);
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(NAN))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(std::bit_cast<float>(0x7f800001u)))));  // no inf
  EXPECT_EQ(bfloat16_t(-0.0f).bits, 0x8000u);
}

TEST(DtypeHalf, Subnormals) {
  EXPECT_EQ(float16_t(0x1p-24f).bits, 0x0001u);         // the smallest subnormal
  EXPECT_EQ(float16_t(0x1p-25f).bits, 0x0000u);         // half of it: a tie, to even (zero)
  EXPECT_EQ(float16_t(1.5f * 0x1p-25f).bits, 0x0001u);  // above the tie
  EXPECT_EQ(float16_t(3 * 0x1p-25f).bits, 0x0002u);     // 1.5 units: tie up to even 2
  EXPECT_EQ(float16_t(1023 * 0x1p-24f).bits, 0x03ffu);  // the largest subnormal
  EXPECT_EQ(float16_t(0x1p-14f).bits, 0x0400u);         // the smallest normal
  EXPECT_EQ(float16_t(-0x1p-24f).bits, 0x8001u);
  EXPECT_EQ(static_cast<float>(float16_t::from_bits(0x0001u)), 0x1p-24f);
  EXPECT_EQ(static_cast<float>(float16_t::from_bits(0x03ffu)), 1023 * 0x1p-24f);
  EXPECT_EQ(bfloat16_t(0x1p-133f).bits, 0x0001u);  // bfloat16 keeps float's subnormals
  EXPECT_EQ(static_cast<float>(bfloat16_t::from_bits(0x0001u)), 0x1p-133f);
}

TEST(DtypeHalf, ConversionsMatchAnIndependentReference) {
  // Float bit patterns spread over every exponent, plus the arrays path through astype.
  uint32_t state = 12345;
  std::vector<float> xs;
  for (int i = 0; i < 400000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float x = std::bit_cast<float>(state);
    if (std::isfinite(x)) xs.push_back(x);
  }
  // Neighbourhoods of the boundaries: 1, the float16 normal/subnormal edges, its largest value and
  // the float32 normal edge, both signs.
  for (float base : {1.0f, 0x1p-14f, 0x1p-24f, 65504.0f, 65520.0f, 0x1p-126f}) {
    float down = base, up = base;
    for (int k = 0; k < 40; ++k) {
      for (float v : {down, up, -down, -up}) xs.push_back(v);
      down = std::nextafter(down, 0.0f);
      up = std::nextafter(up, INFINITY);
    }
  }
  int bad16 = 0, bad_bf = 0;
  for (float x : xs) {
    const double h = static_cast<float>(float16_t(x)), b = static_cast<float>(bfloat16_t(x));
    if (h != f16_reference(x) && ++bad16 < 5) ADD_FAILURE() << "float16(" << x << ") = " << h;
    if (b != bf16_reference(x) && ++bad_bf < 5) ADD_FAILURE() << "bfloat16(" << x << ") = " << b;
  }
  const std::vector<float> some(xs.begin(), xs.begin() + 1000);
  const Array a(some, {1000});
  const std::vector<double> h = astype(a, float16).to_vector<double>(),
                            b = astype(a, bfloat16).to_vector<double>();
  for (size_t i = 0; i < some.size(); ++i) {
    EXPECT_EQ(h[i], f16_reference(some[i])) << some[i];
    EXPECT_EQ(b[i], bf16_reference(some[i])) << some[i];
  }
}

TEST(DtypeHalf, ArithmeticRoundsOncePerOp) {
  // float16 ops compute in float and round the result: 2048 + 1 is a tie that rounds to even.
  const Array a = Array(std::vector<float>{2048.0f, 0.1f}, {2}, float16);
  const float tenth = float16_t(0.1f);
  EXPECT_EQ((a + 1.0f).to_vector<double>(), (std::vector<double>{2048.0, f16_reference(tenth + 1.0f)}));
  const Array big = Array(std::vector<float>{60000.0f}, {1}, float16);
  EXPECT_TRUE(std::isinf((big * 2.0f).item<float>()));  // overflow gives inf, never wraps
}

}  // namespace
}  // namespace kiln
