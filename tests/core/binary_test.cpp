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

INSTANTIATE_TEST_SUITE_P(Binary, BinaryTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Binary, SecondDerivatives) {
  const Array a = random_array({3}, float64, 8, 0.5, 2), b = random_array({3}, float64, 9, 0.5, 2);
  test::check_second_order([](const std::vector<Array>& x) { return x[0] * x[1] * x[0]; }, {a, b});
  test::check_second_order([](const std::vector<Array>& x) { return divide(x[0], x[1]); }, {a, b});
  test::check_second_order([](const std::vector<Array>& x) { return power(x[0], x[1]); }, {a, b});
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
