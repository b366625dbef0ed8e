#include <gtest/gtest.h>

#include <cmath>
#include <string_view>

#include "support/device.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

// NumPy broadcasting of two row-major value vectors, computed independently of kiln.
std::vector<double> broadcast_ref(const Shape& sa, const std::vector<double>& a, const Shape& sb,
                                  const std::vector<double>& b, double (*f)(double, double),
                                  Shape* out_shape) {
  const size_t n = std::max(sa.size(), sb.size());
  Shape pa(n - sa.size(), 1), pb(n - sb.size(), 1), out(n);
  pa.insert(pa.end(), sa.begin(), sa.end());
  pb.insert(pb.end(), sb.begin(), sb.end());
  for (size_t i = 0; i < n; ++i) out[i] = std::max(pa[i], pb[i]);
  *out_shape = out;
  const int64_t total = shape_size(out);
  std::vector<double> r(total);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rem = flat, ia = 0, ib = 0, ma = 1, mb = 1;
    for (size_t d = n; d-- > 0;) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      ia += (pa[d] == 1 ? 0 : idx) * ma;
      ib += (pb[d] == 1 ? 0 : idx) * mb;
      ma *= pa[d];
      mb *= pb[d];
    }
    r[flat] = f(a[ia], b[ib]);
  }
  return r;
}

struct BinaryCase {
  const char* name;
  Array (*op)(const Operand&, const Operand&, StreamOrDevice);
  double (*ref)(double, double);
  double lo, hi;
  bool differentiable = true;
};

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

const BinaryCase kCases[] = {
    {"add", add, [](double a, double b) { return a + b; }, -2, 2},
    {"subtract", subtract, [](double a, double b) { return a - b; }, -2, 2},
    {"multiply", multiply, [](double a, double b) { return a * b; }, -2, 2},
    {"divide", divide, [](double a, double b) { return a / b; }, 0.5, 2},
    {"power", power, [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
    {"maximum", maximum, [](double a, double b) { return std::max(a, b); }, -2, 2},
    {"minimum", minimum, [](double a, double b) { return std::min(a, b); }, -2, 2},
    {"remainder", remainder, py_mod, 0.3, 3},
    {"floor_divide", floor_divide, [](double a, double b) { return std::floor(a / b); }, 0.3, 3, false},
    {"arctan2", arctan2, [](double a, double b) { return std::atan2(a, b); }, -2, 2},
    {"logaddexp", logaddexp,
     [](double a, double b) { return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))); }, -3, 3},
};

class BinaryTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryTest, BroadcastsAndMatchesReference) {
  const BinaryCase& c = GetParam();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{3, 1, 4}, {2, 4}}, {{5}, {}}, {{}, {2, 3}}, {{2, 1}, {1, 3}}};
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    for (const auto& [sa, sb] : shapes) {
      const Array a = random_array(sa, t, 1, c.lo, c.hi), b = random_array(sb, t, 2, c.lo, c.hi);
      const Array y = c.op(a, b, {});
      Shape expected_shape;
      const auto ref = broadcast_ref(sa, values(a), sb, values(b), c.ref, &expected_shape);
      EXPECT_EQ(y.shape(), expected_shape) << c.name;
      EXPECT_EQ(y.dtype(), t);
      // Halves round the result again, so allow the reference one rounding of slack.
      const auto tol = test::tolerance(t);
      expect_close(y, ref, tol.rtol, tol.atol);
    }
  }
}

TEST_P(BinaryTest, StridedOperands) {
  const BinaryCase& c = GetParam();
  const Array a = transpose(random_array({4, 3}, float32, 3, c.lo, c.hi));
  const Array b = random_array({3, 4}, float32, 4, c.lo, c.hi);
  Shape s;
  expect_close(c.op(a, b, {}), broadcast_ref({3, 4}, values(a), {3, 4}, values(b), c.ref, &s));
}

TEST_P(BinaryTest, GradientMatchesFiniteDifferencesWithBroadcasting) {
  const BinaryCase& c = GetParam();
  const Array a = random_array({3, 1, 4}, float64, 5, c.lo, c.hi);
  const Array b = random_array({2, 4}, float64, 6, c.lo, c.hi);
  if (!c.differentiable) return;
  check_vjp([&](const std::vector<Array>& x) { return c.op(x[0], x[1], {}); }, {a, b});
}

TEST_P(BinaryTest, JvpMatchesFiniteDifferencesAndVjp) {
  const BinaryCase& c = GetParam();
  test::check_jvp(
      [&](const std::vector<Array>& x) { return c.op(x[0], x[1], {}); },
      {random_array({3, 1, 4}, float64, 15, c.lo, c.hi), random_array({2, 4}, float64, 16, c.lo, c.hi)});
}

TEST_P(BinaryTest, VmapMatchesALoopOverTheBatch) {
  const BinaryCase& c = GetParam();
  test::check_vmap(
      [&](const std::vector<Array>& x) { return c.op(x[0], x[1], {}); },
      {random_array({2, 3}, float32, 18, c.lo, c.hi), random_array({3}, float32, 19, c.lo, c.hi)}, c.lo,
      c.hi);
}

INSTANTIATE_TEST_SUITE_P(Binary, BinaryTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Binary, SecondDerivatives) {
  const Array a = random_array({3}, float64, 8, 0.5, 2), b = random_array({3}, float64, 9, 0.5, 2);
  test::check_second_order([](const std::vector<Array>& x) { return x[0] * x[1] * x[0]; }, {a, b});
  test::check_second_order([](const std::vector<Array>& x) { return divide(x[0], x[1]); }, {a, b});
  test::check_second_order([](const std::vector<Array>& x) { return power(x[0], x[1]); }, {a, b});
}

TEST(Binary, LogaddexpAtInfinitiesAndTies) {
  const double inf = std::numeric_limits<double>::infinity();
  const Array a({-inf, inf, 1.0, -inf, 800.0, std::nan("")});
  const Array b({-inf, inf, 1.0, 2.0, 800.0, 0.0});
  const std::vector<double> r = logaddexp(a, b).to_vector<double>();
  EXPECT_EQ(r[0], -inf);
  EXPECT_EQ(r[1], inf);
  EXPECT_DOUBLE_EQ(r[2], 1.0 + std::log(2.0));
  EXPECT_DOUBLE_EQ(r[3], 2.0);
  EXPECT_DOUBLE_EQ(r[4], 800.0 + std::log(2.0));  // exp(800) overflows; logaddexp does not
  EXPECT_TRUE(std::isnan(r[5]));
  // At a tie each operand gets half the gradient.
  const auto g = grad([](const std::vector<Array>& x) { return std::vector<Array>{logaddexp(x[0], x[1])}; },
                      {0, 1})({Array(0.5), Array(0.5)});
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(g[1].item<double>(), 0.5);
  EXPECT_EQ(logaddexp(Array({1, 2}), Array({3, 4})).dtype(), float32);
}

TEST(Binary, BitwiseOps) {
  const std::vector<int32_t> xs{0, 1, -1, 12345, -98765, 0x7FFFFFFF};
  const std::vector<int32_t> ys{3, -2, 7, 0x0F0F, 255, -1};
  std::vector<int32_t> and_, or_, xor_, not_;
  for (size_t i = 0; i < xs.size(); ++i) {
    and_.push_back(xs[i] & ys[i]);
    or_.push_back(xs[i] | ys[i]);
    xor_.push_back(xs[i] ^ ys[i]);
    not_.push_back(~xs[i]);
  }
  const Array x(xs, {6}, int32), y(ys, {6}, int32);
  EXPECT_EQ(bitwise_and(x, y).to_vector<int32_t>(), and_);
  EXPECT_EQ((x | y).to_vector<int32_t>(), or_);
  EXPECT_EQ((x ^ y).to_vector<int32_t>(), xor_);
  EXPECT_EQ((~x).to_vector<int32_t>(), not_);
  EXPECT_EQ((x & 0xFF).to_vector<int32_t>()[3], 12345 & 0xFF);
  // Every integer dtype, on packed 8-bit storage too.
  for (Dtype t : {uint8, int8, int64, uint32}) {
    const Array a = astype(Array({5, 6, 7, 200, 3}), t), b = astype(Array({3, 10, 1, 100, 3}), t);
    const std::vector<double> got = test::values(bitwise_xor(a, b));
    const std::vector<double> va = test::values(a), vb = test::values(b);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], static_cast<double>(static_cast<int64_t>(va[i]) ^ static_cast<int64_t>(vb[i]))) << t;
    const std::vector<double> inv = test::values(bitwise_invert(a));
    for (size_t i = 0; i < inv.size(); ++i) {
      const int64_t v = static_cast<int64_t>(va[i]);
      const double want = t == uint8    ? double(uint8_t(~v))
                          : t == int8   ? double(int8_t(~v))
                          : t == uint32 ? double(uint32_t(~v))
                                        : double(~v);
      EXPECT_EQ(inv[i], want) << t;
    }
  }
  // bool stays bool; invert is logical not.
  const Array p({true, true, false, false}), q({true, false, true, false});
  EXPECT_EQ((p & q).dtype(), bool_);
  EXPECT_EQ((p & q).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ((p | q).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ((p ^ q).to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ((~p).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_THROW(bitwise_and(Array({1.0f}), Array({1.0f})), DtypeError);
  EXPECT_THROW(bitwise_invert(Array({1.0f})), DtypeError);
}

TEST(Binary, IntegerArithmeticWraps) {
  // Defined wrapping (the UBSan build checks that no signed overflow is left to the compiler).
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const Array a = astype(Array(std::vector<double>{0, 1}, {2}, float64), int64) + Array(lo, int64);
  EXPECT_EQ((a - Array(int64_t{1}, int64)).to_vector<int64_t>(), (std::vector<int64_t>{hi, lo}));
  EXPECT_EQ((Array(hi, int64) + Array(int64_t{1}, int64)).item<int64_t>(), lo);
  EXPECT_EQ((Array(hi, int64) * Array(int64_t{2}, int64)).item<int64_t>(), -2);
  const int32_t lo32 = std::numeric_limits<int32_t>::min();
  EXPECT_EQ((Array(lo32) - Array(1)).item<int32_t>(), std::numeric_limits<int32_t>::max());
  EXPECT_EQ((Array(65536) * Array(65536)).item<int32_t>(), 0);
}

TEST(Binary, Shifts) {
  const Array x({1, -8, 5, -1, 1, 3}), n({3, 1, 0, 31, 32, -1});
  EXPECT_EQ(left_shift(x, n).to_vector<int32_t>(), (std::vector<int32_t>{8, -16, 5, INT32_MIN, 0, 0}));
  EXPECT_EQ(right_shift(x, n).to_vector<int32_t>(), (std::vector<int32_t>{0, -4, 5, -1, 0, 0}));
  EXPECT_EQ(right_shift(Array({-5}), Array({40})).to_vector<int32_t>(), (std::vector<int32_t>{-1}));
  // 8-bit operands shift in int and wrap on store.
  const Array b = astype(Array({1, 64, -128, 3}), int8);
  EXPECT_EQ(left_shift(b, 1).to_vector<int8_t>(), (std::vector<int8_t>{2, -128, 0, 6}));
  EXPECT_EQ(right_shift(b, 2).to_vector<int8_t>(), (std::vector<int8_t>{0, 16, -32, 0}));
  // Counts past the 8 bits but inside the 32 they compute in: C++'s and NumPy's result for them.
  EXPECT_EQ(left_shift(astype(Array({1, -1}), int8), astype(Array({8, 12}), int8)).to_vector<int8_t>(),
            (std::vector<int8_t>{0, 0}));
  EXPECT_EQ(right_shift(astype(Array({-128, 127}), int8), astype(Array({10, 9}), int8)).to_vector<int8_t>(),
            (std::vector<int8_t>{-1, 0}));
  const Array u = astype(Array({1, 255, 128}), uint8);
  EXPECT_EQ(left_shift(u, 1).to_vector<uint8_t>(), (std::vector<uint8_t>{2, 254, 0}));
  EXPECT_EQ(right_shift(u, 7).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  const Array w = astype(Array({1, 3}), int64);
  EXPECT_EQ(left_shift(w, 40).to_vector<int64_t>(),
            (std::vector<int64_t>{int64_t{1} << 40, int64_t{3} << 40}));
  EXPECT_EQ(right_shift(astype(Array({-1}), uint32), 28).to_vector<uint32_t>(), (std::vector<uint32_t>{15}));
  EXPECT_THROW(left_shift(Array({true}), Array({true})), DtypeError);
  EXPECT_THROW(right_shift(Array({1.0}), 1), DtypeError);
}

TEST(Binary, WeakScalarsKeepTheArrayDtype) {
  const Array h = ones({2}, bfloat16);
  EXPECT_EQ((h * 2.0).dtype(), bfloat16);
  EXPECT_EQ((2.0 * h).dtype(), bfloat16);
  const Array i = ones({2}, int32);
  EXPECT_EQ((i + 1).dtype(), int32);
  EXPECT_EQ((i * 2.5).dtype(), float32);
  EXPECT_EQ((ones({2}, uint8) + 1).dtype(), uint8);
}

TEST(Binary, ScalarOperandIsExactInFloat64) {
  const Array x = ones({1}, float64);
  EXPECT_EQ((x * 0.1).to_vector<double>()[0], 0.1);
}

TEST(Binary, ArraysPromote) {
  EXPECT_EQ(add(ones({2}, int32), ones({2}, float16)).dtype(), float16);
  EXPECT_EQ(add(ones({2}, uint32), ones({2}, int32)).dtype(), int64);
  EXPECT_EQ(add(ones({2}, float16), ones({2}, bfloat16)).dtype(), float32);
  EXPECT_EQ(divide(ones({2}, int32), ones({2}, int32)).dtype(), float32);
}

TEST(Binary, IntegerSemanticsFollowPython) {
  const Array a({7, -7, 7, -7}), b({2, 2, -2, -2});
  EXPECT_EQ(remainder(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, -1, -1}));
  EXPECT_EQ(floor_divide(a, b).to_vector<int32_t>(), (std::vector<int32_t>{3, -4, -4, 3}));
  EXPECT_EQ(power(Array({2, 3, -2}), Array({10, 0, 3})).to_vector<int32_t>(),
            (std::vector<int32_t>{1024, 1, -8}));
  EXPECT_EQ(floor_divide(Array({5}), Array({0})).to_vector<int32_t>(), (std::vector<int32_t>{0}));
}

TEST(Binary, ComparisonsAndLogic) {
  const Array a({1.0f, 2.0f, 3.0f}), b({3.0f, 2.0f, 1.0f});
  EXPECT_EQ((a < b).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ((a <= b).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ((a > b).to_vector<bool>(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ((a >= b).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ((a == b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ((a != b).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(((a > 1.5f) && (b > 1.5f)).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(((a > 2.5f) || (b > 2.5f)).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ((a < b).dtype(), bool_);
}

TEST(Binary, NanPropagatesThroughMaximum) {
  const Array a({std::nan(""), 1.0}), b({1.0, std::nan("")});
  const auto m = maximum(a, b).to_vector<double>();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_TRUE(std::isnan(m[1]));
}

TEST(Binary, ShapeErrorNamesOpAndShapes) {
  try {
    add(ones({2, 3}), ones({4}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "[add] shapes cannot be broadcast: (2,3) and (4,)");
  }
  EXPECT_THROW(add(Array(), ones({2})), ValueError);
}

TEST(Binary, InPlaceDonationGivesCorrectValues) {
  // (x + 1) * 2 reuses the temporary's buffer; the named x must be untouched.
  const Array x = random_array({1000}, float32, 4);
  const auto before = values(x);
  const Array y = (x + 1.0f) * 2.0f;
  const auto got = values(y);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], (float(before[i]) + 1.0f) * 2.0f);
  EXPECT_EQ(values(x), before);
}

}  // namespace
}  // namespace kiln
