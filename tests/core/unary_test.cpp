#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string_view>

#include "support/device.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

struct UnaryCase {
  const char* name;
  Array (*op)(const Array&, StreamOrDevice);
  double (*ref)(double);
  double lo, hi;
  bool differentiable = true;
};

double ref_erfinv(double y) {  // bisection on erf: slow, simple and independent of kiln's formula
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

const UnaryCase kCases[] = {
    {"negative", negative, [](double x) { return -x; }, -3, 3},
    {"abs", abs, [](double x) { return std::abs(x); }, -3, 3},
    {"sign", sign, [](double x) { return double((x > 0) - (x < 0)); }, -3, 3, false},
    {"exp", exp, [](double x) { return std::exp(x); }, -3, 3},
    {"expm1", expm1, [](double x) { return std::expm1(x); }, -2, 2},
    {"log", log, [](double x) { return std::log(x); }, 0.1, 4},
    {"log1p", log1p, [](double x) { return std::log1p(x); }, -0.5, 3},
    {"sqrt", sqrt, [](double x) { return std::sqrt(x); }, 0.1, 4},
    {"rsqrt", rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.2, 4},
    {"square", square, [](double x) { return x * x; }, -3, 3},
    {"sin", sin, [](double x) { return std::sin(x); }, -3, 3},
    {"cos", cos, [](double x) { return std::cos(x); }, -3, 3},
    {"tan", tan, [](double x) { return std::tan(x); }, -1.2, 1.2},
    {"tanh", tanh, [](double x) { return std::tanh(x); }, -3, 3},
    {"sigmoid", sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
    {"erf", erf, [](double x) { return std::erf(x); }, -2, 2},
    {"erfinv", erfinv, ref_erfinv, -0.95, 0.95},
    {"floor", floor, [](double x) { return std::floor(x); }, -3, 3, false},
    {"ceil", ceil, [](double x) { return std::ceil(x); }, -3, 3, false},
    {"round", round, [](double x) { return std::nearbyint(x); }, -3, 3, false},
};

class UnaryTest : public ::testing::TestWithParam<UnaryCase> {};

std::vector<double> apply_ref(const UnaryCase& c, const std::vector<double>& x) {
  std::vector<double> y;
  for (double v : x) y.push_back(c.ref(v));
  return y;
}

TEST_P(UnaryTest, MatchesFloat64ReferenceInEveryFloatDtype) {
  const UnaryCase& c = GetParam();
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    const Array x = random_array({3, 5}, t, 7, c.lo, c.hi);
    const Array y = c.op(x, {});
    EXPECT_EQ(y.dtype(), t) << c.name;
    EXPECT_EQ(y.shape(), x.shape());
    // The reference sees the values as rounded into `t`, so only the op's own error is measured.
    expect_close(y, apply_ref(c, values(x)));
  }
}

TEST_P(UnaryTest, WorksOnNonContiguousViews) {
  const UnaryCase& c = GetParam();
  const Array x = random_array({4, 6}, float32, 11, c.lo, c.hi);
  const Array xt = transpose(x);
  const Array y = c.op(xt, {});
  expect_close(y, apply_ref(c, values(xt)));
}

TEST_P(UnaryTest, GradientMatchesFiniteDifferences) {
  const UnaryCase& c = GetParam();
  const Array x = random_array({2, 3}, float64, 3, c.lo, c.hi);
  if (!c.differentiable) {
    const Array g = grad([&](const Array& a) { return sum(c.op(a, {})); })(x);
    expect_close(g, std::vector<double>(6, 0.0), 0, 0);
    return;
  }
  check_vjp([&](const std::vector<Array>& a) { return c.op(a[0], {}); }, {x});
}

INSTANTIATE_TEST_SUITE_P(Unary, UnaryTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Unary, SecondDerivatives) {
  for (auto op : {exp, tanh, sigmoid, sin, log}) {
    const Array x = random_array({4}, float64, 5, 0.2, 2.0);
    test::check_second_order([&](const std::vector<Array>& a) { return op(a[0], {}); }, {x});
  }
}

// Distance in float32 units in the last place between a float result and the exact value.
double ulps(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const double ulp =
      std::nextafter(std::abs(rounded), std::numeric_limits<float>::infinity()) - std::abs(rounded);
  return std::abs(static_cast<double>(got) - exact) /
         (ulp > 0 ? ulp : std::numeric_limits<float>::denorm_min());
}

// On the GPU, float32 exp and tanh are the driver's (shaders/common/elementwise_ops.glsl), held to
// Vulkan's precision rather than the CPU formulas' bounds: exp within 3 + 2|x| ulps; sigmoid,
// exp(-|x|) / (1 + exp(-|x|)), two roundings more; tanh, whose precision Vulkan inherits from
// (e^2x - 1) / (e^2x + 1), within 2^-21 absolute (near 0 that formula cancels: no relative bound).
// The error over the allowed error at x, for the case named.
double gpu_error_ratio(std::string_view name, float x, float got, double exact) {
  const double ax = std::abs(static_cast<double>(x));
  if (name == "tanh") return std::abs(static_cast<double>(got) - exact) / 0x1p-21;
  return ulps(got, exact) / ((name == "exp" ? 3.0 : 5.0) + 2.0 * ax);
}

// The float32 vector formulas (exp, tanh, sigmoid) over a dense sweep of their interesting range
// plus their edges, against libm in float64.
TEST(Unary, Float32FastPathsStayWithinTheirUlpBounds) {
  std::vector<float> xs;
  for (float x = -30.0f; x <= 30.0f; x += 3.3e-4f) xs.push_back(x);
  for (float x = 1e-30f; x < 1.0f; x *= 1.01f) xs.insert(xs.end(), {x, -x});  // tiny magnitudes
  struct Case {
    const char* name;
    Array (*op)(const Array&, StreamOrDevice);
    double (*ref)(double);
    double lo, hi;    // where the float32 result is a normal number
    double max_ulps;  // on the CPU (kiln's own formulas)
  };
  const Case cases[] = {
      {"exp", exp, [](double v) { return std::exp(v); }, -87.0, 88.0, 1.0},
      {"tanh", tanh, [](double v) { return std::tanh(v); }, -30.0, 30.0, 2.0},
      {"sigmoid", sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, -87.0, 30.0, 2.5},
  };
  const Array x(xs, {static_cast<int64_t>(xs.size())});
  for (const Case& c : cases) {
    const std::vector<float> got = c.op(x, {}).to_vector<float>();
    double worst = 0;  // the error over the allowed error
    float worst_at = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i] < c.lo || xs[i] > c.hi) continue;
      const double exact = c.ref(xs[i]);
      const double e = test::gpu_default() ? gpu_error_ratio(c.name, xs[i], got[i], exact)
                                           : ulps(got[i], exact) / c.max_ulps;
      if (e > worst) worst = e, worst_at = xs[i];
    }
    EXPECT_LE(worst, 1.0) << c.name << ": worst at x = " << worst_at << " (error / allowed error)";
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const Array edges({-inf, inf, nan, 100.0f, -200.0f});
  EXPECT_EQ(exp(edges).to_vector<float>()[0], 0.0f);
  EXPECT_EQ(exp(edges).to_vector<float>()[1], inf);
  EXPECT_TRUE(std::isnan(exp(edges).to_vector<float>()[2]));
  EXPECT_EQ(exp(edges).to_vector<float>()[3], inf);
  EXPECT_EQ(tanh(edges).to_vector<float>()[0], -1.0f);
  EXPECT_EQ(tanh(edges).to_vector<float>()[1], 1.0f);
  EXPECT_TRUE(std::isnan(tanh(edges).to_vector<float>()[2]));
  EXPECT_EQ(sigmoid(edges).to_vector<float>()[4], 0.0f);
}

TEST(Unary, IntegerInputPromotesToFloatForTranscendentals) {
  const Array x({1, 2, 3});
  const Array y = exp(x);
  EXPECT_EQ(y.dtype(), float32);
  expect_close(y, {std::exp(1.0), std::exp(2.0), std::exp(3.0)});
}

TEST(Unary, IntegerOpsStayInteger) {
  const Array x({-3, 0, 5});
  EXPECT_EQ(abs(x).dtype(), int32);
  EXPECT_EQ(abs(x).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, 5}));
  EXPECT_EQ(negative(x).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, -5}));
  EXPECT_EQ(sign(x).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_EQ(square(x).to_vector<int32_t>(), (std::vector<int32_t>{9, 0, 25}));
}

TEST(Unary, PredicatesGiveBool) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const Array x({1.0, inf, -inf, nan, 0.0});
  EXPECT_EQ(isnan(x).dtype(), bool_);
  EXPECT_EQ(isnan(x).to_vector<bool>(), (std::vector<bool>{false, false, false, true, false}));
  EXPECT_EQ(isinf(x).to_vector<bool>(), (std::vector<bool>{false, true, true, false, false}));
  EXPECT_EQ(logical_not(x).to_vector<bool>(), (std::vector<bool>{false, false, false, false, true}));
  EXPECT_EQ(logical_not(Array({true, false})).to_vector<bool>(), (std::vector<bool>{false, true}));
}

TEST(Unary, EdgeValues) {
  EXPECT_EQ(round(Array({0.5, 1.5, 2.5, -0.5})).to_vector<double>(), (std::vector<double>{0, 2, 2, -0}));
  EXPECT_TRUE(std::isinf(erfinv(Array(1.0f)).item<float>()));
  EXPECT_TRUE(std::isnan(erfinv(Array(2.0f)).item<float>()));
  EXPECT_FLOAT_EQ(sigmoid(Array(-1000.0f)).item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(sigmoid(Array(1000.0f)).item<float>(), 1.0f);
}

TEST(Unary, RejectsBadInput) {
  EXPECT_THROW(exp(Array()), ValueError);
  EXPECT_THROW(negative(Array({true, false})), DtypeError);
  try {
    negative(Array({true}));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[negative]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
