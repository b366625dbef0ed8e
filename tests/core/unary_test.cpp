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
    {"arcsin", arcsin, [](double x) { return std::asin(x); }, -0.9, 0.9},
    {"arccos", arccos, [](double x) { return std::acos(x); }, -0.9, 0.9},
    {"arctan", arctan, [](double x) { return std::atan(x); }, -3, 3},
    {"sinh", sinh, [](double x) { return std::sinh(x); }, -3, 3},
    {"cosh", cosh, [](double x) { return std::cosh(x); }, -3, 3},
    {"arcsinh", arcsinh, [](double x) { return std::asinh(x); }, -3, 3},
    {"arccosh", arccosh, [](double x) { return std::acosh(x); }, 1.1, 4},
    {"arctanh", arctanh, [](double x) { return std::atanh(x); }, -0.9, 0.9},
    {"log2", log2, [](double x) { return std::log2(x); }, 0.1, 4},
    {"log10", log10, [](double x) { return std::log10(x); }, 0.1, 4},
    {"degrees", degrees, [](double x) { return x * 180 / std::numbers::pi; }, -3, 3},
    {"radians", radians, [](double x) { return x * std::numbers::pi / 180; }, -200, 200},
    {"reciprocal", reciprocal, [](double x) { return 1 / x; }, 0.2, 3},
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

TEST_P(UnaryTest, JvpMatchesFiniteDifferencesAndVjp) {
  const UnaryCase& c = GetParam();
  test::check_jvp([&](const std::vector<Array>& a) { return c.op(a[0], {}); },
                  {random_array({2, 3}, float64, 13, c.lo, c.hi)});
}

TEST_P(UnaryTest, VmapMatchesALoopOverTheBatch) {
  const UnaryCase& c = GetParam();
  test::check_vmap([&](const std::vector<Array>& a) { return c.op(a[0], {}); },
                   {random_array({2, 3}, float32, 17, c.lo, c.hi)}, c.lo, c.hi);
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
  // Half to even in every float dtype and on both devices (the GPU's kernel does not use the
  // driver's roundEven, whose doubles depended on the host's vector extensions on lavapipe);
  // signs of zero kept, large values and infinities unchanged.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> ties{0.5,  1.5,   2.5,  3.5,          -0.5,      -1.5, -2.5, 0.49999999999999994,
                                 -0.4, 1e300, -inf, 4.5e15 + 0.5, 1234567.5, 7.5};
  const std::vector<double> rounded{0, 2, 2, 4, -0.0, -2, -2, 0, -0.0, 1e300, -inf, 4.5e15, 1234568, 8};
  const Array got = round(Array(ties, {static_cast<int64_t>(ties.size())}, float64));
  const std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < ties.size(); ++i) {
    EXPECT_EQ(g[i], rounded[i]) << "round(" << ties[i] << ")";
    EXPECT_EQ(std::signbit(g[i]), std::signbit(rounded[i])) << "sign of round(" << ties[i] << ")";
  }
  for (Dtype t : {float32, float16, bfloat16}) {
    const std::vector<double> small{0.5, 1.5, 2.5, -0.5, -2.5, 3.5, 6.5, -0.25};
    const std::vector<double> want{0, 2, 2, -0.0, -2, 4, 6, -0.0};
    const std::vector<double> r = test::values(round(Array(small, {8}, t)));
    for (size_t i = 0; i < small.size(); ++i) {
      EXPECT_EQ(r[i], want[i]) << dtype_name(t) << " round(" << small[i] << ")";
      EXPECT_EQ(std::signbit(r[i]), std::signbit(want[i]))
          << dtype_name(t) << " sign of round(" << small[i] << ")";
    }
  }
  EXPECT_EQ(round(Array(16777215.0f)).item<float>(), 16777215.0f);
  EXPECT_EQ(round(Array(8388607.5f)).item<float>(), 8388608.0f);
  EXPECT_TRUE(std::isinf(erfinv(Array(1.0f)).item<float>()));
  EXPECT_TRUE(std::isnan(erfinv(Array(2.0f)).item<float>()));
  EXPECT_FLOAT_EQ(sigmoid(Array(-1000.0f)).item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(sigmoid(Array(1000.0f)).item<float>(), 1.0f);
}

TEST(Unary, RoundToDecimals) {
  const Array x({1.2345, -2.675, 155.0, 0.125});
  const std::vector<double> two = round(x, 2).to_vector<double>();
  const std::vector<double> want2{std::nearbyint(1.2345 * 100) / 100, std::nearbyint(-2.675 * 100) / 100,
                                  155.0, std::nearbyint(0.125 * 100) / 100};
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(two[i], want2[i]) << i;
  EXPECT_EQ(round(x, -1).to_vector<double>(), (std::vector<double>{0, -0.0, 160, 0}));
  EXPECT_EQ(round(Array({1234, -1250, 17}), -2).to_vector<int32_t>(), (std::vector<int32_t>{1200, -1200, 0}));
  EXPECT_EQ(round(Array({1234, 5}), 1).to_vector<int32_t>(), (std::vector<int32_t>{1234, 5}));
  EXPECT_EQ(round(x, 0).to_vector<double>(), round(x).to_vector<double>());
}

TEST(Unary, FinitePredicatesAndNanToNum) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    const Array x(std::vector<double>{1.0, inf, -inf, nan, -0.0}, {5}, t);
    EXPECT_EQ(isfinite(x).to_vector<bool>(), (std::vector<bool>{true, false, false, false, true})) << t;
    EXPECT_EQ(isposinf(x).to_vector<bool>(), (std::vector<bool>{false, true, false, false, false})) << t;
    EXPECT_EQ(isneginf(x).to_vector<bool>(), (std::vector<bool>{false, false, true, false, false})) << t;
  }
  EXPECT_EQ(isfinite(Array({1, 2})).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(isposinf(Array({true})).to_vector<bool>(), (std::vector<bool>{false}));
  const Array x({1.5, inf, -inf, nan});
  EXPECT_EQ(nan_to_num(x).to_vector<double>(),
            (std::vector<double>{1.5, std::numeric_limits<double>::max(),
                                 std::numeric_limits<double>::lowest(), 0}));
  EXPECT_EQ(nan_to_num(x, -1, 9, -9).to_vector<double>(), (std::vector<double>{1.5, 9, -9, -1}));
  EXPECT_EQ(nan_to_num(astype(x, float16)).to_vector<float>(),
            (std::vector<float>{1.5f, 65504.0f, -65504.0f, 0.0f}));
  EXPECT_EQ(nan_to_num(Array({3, -4})).to_vector<int32_t>(), (std::vector<int32_t>{3, -4}));
  // The gradient passes where x was finite, and is zero where it was replaced.
  const Array g = grad([](const Array& a) { return sum(nan_to_num(a) * 2.0); })(x);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{2, 0, 0, 0}));
}

TEST(Unary, InverseFunctionsAtTheirEdges) {
  const double inf = std::numeric_limits<double>::infinity();
  for (Dtype t : {float64, float32}) {
    const Array edges(std::vector<double>{1.0, -1.0, 2.0, 0.0, -0.0}, {5}, t);
    const std::vector<double> as = test::values(arcsin(edges)), at = test::values(arctanh(edges));
    EXPECT_NEAR(as[0], std::numbers::pi / 2, 1e-6) << t;
    EXPECT_NEAR(as[1], -std::numbers::pi / 2, 1e-6) << t;
    EXPECT_TRUE(std::isnan(as[2])) << t;
    EXPECT_EQ(at[0], inf) << t;
    EXPECT_EQ(at[1], -inf) << t;
    EXPECT_TRUE(std::isnan(at[2])) << t;
    EXPECT_TRUE(std::signbit(at[4])) << t << ": arctanh(-0) is -0";
    EXPECT_TRUE(std::isnan(test::values(arccosh(edges))[3])) << t;
    EXPECT_EQ(test::values(arccosh(edges))[0], 0.0) << t;
    // Large and tiny magnitudes: no overflow, no cancellation.
    const Array big(std::vector<double>{1e30, -1e30, 1e-30, 500.0}, {4}, t);
    const std::vector<double> ash = test::values(arcsinh(big));
    EXPECT_NEAR(ash[0], std::asinh(1e30), 1e-5 * std::asinh(1e30)) << t;
    EXPECT_NEAR(ash[1], -std::asinh(1e30), 1e-5 * std::asinh(1e30)) << t;
    EXPECT_NEAR(ash[2], 1e-30, 1e-36) << t;
    EXPECT_NEAR(test::values(arccosh(big))[0], std::acosh(1e30), 1e-5 * std::acosh(1e30)) << t;
    EXPECT_NEAR(test::values(arctan(big))[0], std::numbers::pi / 2, 1e-6) << t;
    EXPECT_NEAR(test::values(sinh(big))[2], 1e-30, 1e-36) << t;
  }
  EXPECT_NEAR(sinh(Array(500.0)).item<double>(), std::sinh(500.0), 1e-12 * std::sinh(500.0));
  EXPECT_NEAR(cosh(Array(-700.0)).item<double>(), std::cosh(700.0), 1e-12 * std::cosh(700.0));
  EXPECT_EQ(cosh(Array(1000.0f)).item<float>(), std::numeric_limits<float>::infinity());
  // Powers of the base are exact.
  EXPECT_EQ(log2(Array({1.0, 8.0, 0.25, 1024.0})).to_vector<double>(), (std::vector<double>{0, 3, -2, 10}));
  EXPECT_EQ(log2(Array({8.0f, 0.5f})).to_vector<float>(), (std::vector<float>{3, -1}));
  EXPECT_EQ(log2(Array(0.0)).item<double>(), -inf);
  EXPECT_EQ(log10(Array(0.0f)).item<float>(), -std::numeric_limits<float>::infinity());
  EXPECT_NEAR(log10(Array(1000.0)).item<double>(), 3.0, 1e-15);
  EXPECT_EQ(arctan(Array({1, 0})).dtype(), float32);  // integers promote
}

TEST(Unary, BoolRules) {
  // NumPy's: abs of bool is bool, sign of bool is not defined, power of bools computes in int8.
  EXPECT_EQ(abs(Array({true, false})).dtype(), bool_);
  EXPECT_EQ(abs(Array({true, false})).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_THROW(sign(Array({true})), DtypeError);
  const Array p = power(Array({true, false, true}), Array({true, true, false}));
  EXPECT_EQ(p.dtype(), int8);
  EXPECT_EQ(p.to_vector<int8_t>(), (std::vector<int8_t>{1, 0, 1}));
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
