// The double-precision transcendental functions of shaders/common/elementwise_ops.glsl (GLSL has
// none) against the CPU's C library: wide fixed-seed random ranges in magnitude, the special
// values (±0, ±inf, NaN, subnormals, overflow and underflow thresholds), each op within a stated
// ulp bound; arctan2 in a fused (compile) chain; and float64 gradients on the GPU against the
// CPU's and central differences. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

using Unary = Array (*)(const Array&, StreamOrDevice);
using Binary = Array (*)(const Operand&, const Operand&, StreamOrDevice);

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kMinNormal = std::numeric_limits<double>::min();
constexpr double kDenormMin = std::numeric_limits<double>::denorm_min();

class GpuFloat64Math : public detail::vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!ctx().caps().float64) GTEST_SKIP() << "the device has no float64";
  }
};

// The spacing of doubles at |c| (the smallest subnormal at 0).
double ulp_of(double c) {
  const double a = std::abs(c);
  return std::nextafter(a, kInf) - a;
}

// GPU within `ulps` ulp of the CPU (of the CPU's result), non-finite values and signed zeros equal.
void expect_ulps(const std::vector<double>& in, const Array& gpu, const Array& cpu, double ulps,
                 const std::string& what) {
  const std::vector<double> g = test::values(gpu), c = test::values(cpu);
  ASSERT_EQ(g.size(), c.size()) << what;
  int reported = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool same;
    if (std::isnan(c[i]) || std::isinf(c[i]) || c[i] == 0)
      same = (std::isnan(g[i]) && std::isnan(c[i])) ||
             (g[i] == c[i] && std::signbit(g[i]) == std::signbit(c[i]));
    else
      same = std::abs(g[i] - c[i]) <= ulps * ulp_of(c[i]);
    if (std::isfinite(c[i]) && c[i] != 0 && std::isfinite(g[i]))
      worst = std::max(worst, std::abs(g[i] - c[i]) / ulp_of(c[i]));
    if (!same && reported++ < 8)
      ADD_FAILURE() << what << ": x " << in[i] << ": gpu " << g[i] << ", cpu " << c[i] << " ("
                    << std::abs(g[i] - c[i]) / ulp_of(c[i]) << " ulp)";
  }
  std::printf("%-10s worst %.2f ulp over %zu values\n", what.c_str(), worst, g.size());
}

// Log-uniform magnitudes in [lo, hi] with random signs (or positive only), from a fixed seed.
std::vector<double> log_uniform(int64_t n, uint64_t seed, double lo, double hi, bool signs) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> e(std::log(lo), std::log(hi));
  std::vector<double> v(n);
  for (double& x : v) x = std::exp(e(gen)) * (signs && (gen() & 1) ? -1.0 : 1.0);
  return v;
}
std::vector<double> uniform(int64_t n, uint64_t seed, double lo, double hi) {
  return test::random_values(n, seed, lo, hi);
}
void append(std::vector<double>& to, const std::vector<double>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

const std::vector<double> kSpecials = {
    0.0,        -0.0,        kInf,       -kInf,       kNan,   1.0,     -1.0,  0.5,    -0.5, 2.0,
    kMinNormal, -kMinNormal, kDenormMin, -kDenormMin, 1e-300, -1e-300, 1e300, -1e300, 1e-8, -1e-8};

struct UnaryCase {
  const char* name;
  Unary op;
  double ulps;
  std::vector<double> inputs;
};

std::vector<UnaryCase> unary_cases() {
  std::vector<UnaryCase> cases;
  auto add = [&](const char* name, Unary op, double ulps, std::vector<double> in, double max_abs = kInf) {
    for (double x : kSpecials)
      if (!(std::abs(x) > max_abs) || std::isinf(x)) in.push_back(x);
    cases.push_back({name, op, ulps, std::move(in)});
  };
  {  // exp: every magnitude up to the overflow and subnormal thresholds, and past them
    std::vector<double> in = uniform(3000, 1, -745.5, 710);
    append(in, log_uniform(1000, 2, 1e-20, 700, true));
    append(in, {709.782712893383, 709.7827128933841, 709.79, -708.39, -708.4, -744.44, -745.133,
                -745.1332191019412, -745.14, 1e-17, -1e-17, 0.34657359027997264, -0.34657359027997264});
    add("exp", exp, 2, in);
  }
  {
    std::vector<double> in = uniform(2000, 3, -40, 710);
    append(in, log_uniform(2000, 4, 1e-20, 5, true));
    append(in, {1e-300, -1e-300, -745.2, 709.78, 709.79, 1e-17});
    add("expm1", expm1, 4, in);
  }
  {  // log: the whole positive range, subnormals, near 1, and negative arguments (NaN)
    std::vector<double> in = log_uniform(3000, 5, 1e-320, 1e308, false);
    append(in, uniform(1000, 6, 0.5, 2));
    append(in, uniform(200, 7, -5, 0));
    append(in, {std::nextafter(1.0, 0.0), std::nextafter(1.0, 2.0), std::sqrt(2.0), std::sqrt(0.5),
                std::numeric_limits<double>::max()});
    add("log", log, 2, in);
  }
  {
    std::vector<double> in = log_uniform(3000, 8, 1e-20, 1e300, false);
    append(in, uniform(1000, 9, -0.999999, 1));
    append(in, uniform(100, 10, -5, -1));
    append(in, {-1.0, std::nextafter(-1.0, 0.0), 1e-17, -1e-17});
    add("log1p", log1p, 4, in);
  }
  {
    std::vector<double> in = uniform(2000, 11, -25, 25);
    append(in, log_uniform(2000, 12, 1e-20, 30, true));
    append(in, {22.0, -22.0, 1.0, 1e-17, 0.549306144334054});
    add("tanh", tanh, 4, in);
  }
  {
    std::vector<double> in = uniform(2000, 13, -750, 750);
    append(in, log_uniform(2000, 14, 1e-20, 40, true));
    add("sigmoid", sigmoid, 4, in);
  }
  // sin, cos, tan: |x| up to 1e5 (the documented range), near multiples of pi/2, and tiny.
  for (auto [name, op] : {std::pair<const char*, Unary>{"sin", sin}, {"cos", cos}, {"tan", tan}}) {
    std::vector<double> in = uniform(2000, 15, -10, 10);
    append(in, log_uniform(2000, 16, 1e-20, 1e5, true));
    for (int k = -40; k <= 40; ++k)
      append(in, {k * std::numbers::pi / 2, k * std::numbers::pi / 4, k * 2471.0});
    // tan is sin / cos of the reduced argument: an ulp from each and the division's rounding.
    add(name, op, std::string_view(name) == "tan" ? 3 : 2, in, 1e5);
  }
  {
    std::vector<double> in = uniform(2000, 17, -7, 7);
    append(in, log_uniform(2000, 18, 1e-20, 30, true));
    append(in, {0.84375, 1.25, 2.857142857142857, 6.0, -0.84375, -1.25, 5.9999});
    add("erf", erf, 2, in);
  }
  return cases;
}

TEST_F(GpuFloat64Math, UnaryOpsWithinTheirUlpBoundsOfTheCpu) {
  for (const UnaryCase& c : unary_cases()) {
    const Array x(c.inputs, {static_cast<int64_t>(c.inputs.size())}, float64);
    expect_ulps(c.inputs, c.op(x, Device::gpu), c.op(x, Device::cpu), c.ulps, c.name);
  }
}

// Past 2^20 * pi/2 the three-part reduction by pi/2 is not exact: NaN there, not a wrong value.
TEST_F(GpuFloat64Math, TrigIsNanPastItsReductionLimit) {
  const double limit = 1647099.3291652855;
  const std::vector<double> in = {limit, -limit, 1.7e6, -1e10, 1e300};
  const Array x(in, {5}, float64);
  for (Unary op : {sin, cos, tan}) {
    const std::vector<double> g = test::values(op(x, Device::gpu)), c = test::values(op(x, Device::cpu));
    EXPECT_LE(std::abs(g[0] - c[0]), 4 * ulp_of(c[0]));
    EXPECT_LE(std::abs(g[1] - c[1]), 4 * ulp_of(c[1]));
    for (size_t i = 2; i < in.size(); ++i) EXPECT_TRUE(std::isnan(g[i])) << in[i];
  }
}

// erfinv is Newton's method on erf on both sides: an ulp of erf's value moves the root by
// ulp(y) / erf'(x), so the bound is a few of those plus a few ulp of x.
TEST_F(GpuFloat64Math, ErfinvWithinItsConditioning) {
  std::vector<double> in = test::random_values(3000, 19, -0.999, 0.999);
  append(in, log_uniform(1000, 20, 1e-20, 1, true));
  append(in, {0.0, -0.0, 1.0, -1.0, kInf, -kInf, kNan, 1.5, -2.0, 0.9999999, -0.9999999, 1e-300, kDenormMin});
  const Array x(in, {static_cast<int64_t>(in.size())}, float64);
  const std::vector<double> g = test::values(erfinv(x, Device::gpu)),
                            c = test::values(erfinv(x, Device::cpu));
  int reported = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(c[i]) || std::isinf(c[i]) || c[i] == 0) {
      EXPECT_TRUE((std::isnan(g[i]) && std::isnan(c[i])) ||
                  (g[i] == c[i] && std::signbit(g[i]) == std::signbit(c[i])))
          << "erfinv(" << in[i] << "): gpu " << g[i] << ", cpu " << c[i];
      continue;
    }
    const double slope = 2.0 / std::sqrt(std::numbers::pi) * std::exp(-c[i] * c[i]);
    const double bound = 4 * ulp_of(c[i]) + 4 * ulp_of(in[i]) / slope;
    if (!(std::abs(g[i] - c[i]) <= bound) && reported++ < 8)
      ADD_FAILURE() << "erfinv(" << in[i] << "): gpu " << g[i] << ", cpu " << c[i];
  }
}

// pow: bases over the whole range against exponents that keep results finite, bases near 1 with
// large exponents, negative bases with integral exponents, subnormal results, and every pair of
// the special values (C's pow cases: 0^negative, (-0)^odd, (-1)^±inf, 1^NaN, NaN^0, ...).
TEST_F(GpuFloat64Math, PowerWithinEightUlpOfTheCpu) {
  std::vector<double> a = log_uniform(3000, 21, 1e-300, 1e300, false);
  std::vector<double> b = uniform(3000, 22, -1, 1);
  for (size_t i = 0; i < a.size(); ++i) b[i] *= 700 / std::abs(std::log(a[i]));  // |b log a| <= 700
  append(a, uniform(1000, 23, 0.9, 1.1));
  append(b, uniform(1000, 24, -6000, 6000));
  append(a, uniform(1000, 25, -30, 30));
  for (double e : uniform(1000, 26, -200, 200)) b.push_back(std::round(e));
  append(a, uniform(500, 27, 0.001, 0.01));
  append(b, uniform(500, 28, 100, 160));  // results down to subnormals
  const std::vector<double> s = {0.0,  -0.0,  kInf,   -kInf, kNan, 1.0,   -1.0,    0.5,
                                 -0.5, 2.0,   -2.0,   3.0,   -3.0, 1e308, -1e-308, 9007199254740993.0,
                                 0.25, 1e300, -1e300, 1e-320};
  for (double x : s)
    for (double y : s) {
      a.push_back(x);
      b.push_back(y);
    }
  const int64_t n = static_cast<int64_t>(a.size());
  const Array x(a, {n}, float64), y(b, {n}, float64);
  expect_ulps(a, power(x, y, Device::gpu), power(x, y, Device::cpu), 8, "power");
}

// Gradients in float64 on the GPU (vjps with random cotangents): the vjps are these same ops, so
// they match the CPU's to a few ulp, and central differences of the GPU's own values to their
// truncation error.
TEST_F(GpuFloat64Math, GradientsMatchTheCpuAndFiniteDifferences) {
  struct Case {
    const char* name;
    Unary op;
    double lo, hi;
  };
  const Case cases[] = {{"exp", exp, -3, 3},
                        {"expm1", expm1, -2, 2},
                        {"log", log, 0.1, 4},
                        {"log1p", log1p, -0.5, 3},
                        {"sin", sin, -3, 3},
                        {"cos", cos, -3, 3},
                        {"tan", tan, -1.2, 1.2},
                        {"tanh", tanh, -3, 3},
                        {"sigmoid", sigmoid, -6, 6},
                        {"erf", erf, -2, 2},
                        {"erfinv", erfinv, -0.95, 0.95}};
  const Array ct = test::random_array({37}, float64, 29, 0.5, 2);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Array x = test::random_array({37}, float64, 30, c.lo, c.hi);
    auto cotangent_of = [&](Device d) {
      auto f = [&, d](const std::vector<Array>& v) { return std::vector<Array>{c.op(v[0], d)}; };
      return vjp(f, {x}, {ct}).second[0];
    };
    const Array g_gpu = cotangent_of(Device::gpu);
    test::expect_close(g_gpu, cotangent_of(Device::cpu), 1e-13, 1e-300);
    const double h = 1e-6;
    const Array fd = (c.op(x + h, Device::gpu) - c.op(x - h, Device::gpu)) / (2 * h) * ct;
    test::expect_close(g_gpu, fd, 1e-7, 1e-8);
  }
  const Array a = test::random_array({37}, float64, 31, 0.2, 3);
  const Array b = test::random_array({37}, float64, 32, -2, 2);
  auto cotangents_of = [&](Device d) {
    auto f = [d](const std::vector<Array>& v) { return std::vector<Array>{power(v[0], v[1], d)}; };
    return vjp(f, {a, b}, {ct}).second;
  };
  const std::vector<Array> g_gpu = cotangents_of(Device::gpu), g_cpu = cotangents_of(Device::cpu);
  test::expect_close(g_gpu[0], g_cpu[0], 1e-13, 1e-300);
  test::expect_close(g_gpu[1], g_cpu[1], 1e-13, 1e-300);
  auto arctan2_cotangents_of = [&](Device d) {
    auto f = [d](const std::vector<Array>& v) { return std::vector<Array>{arctan2(v[0], v[1], d)}; };
    return vjp(f, {b, a}, {ct}).second;
  };
  const std::vector<Array> t_gpu = arctan2_cotangents_of(Device::gpu),
                           t_cpu = arctan2_cotangents_of(Device::cpu);
  test::expect_close(t_gpu[0], t_cpu[0], 1e-13, 1e-300);
  test::expect_close(t_gpu[1], t_cpu[1], 1e-13, 1e-300);
}

// arctan2: fixed-seed pairs over every magnitude and sign, ratios near the kernel's reduction
// boundaries (7/16, 11/16, 19/16, 39/16, 2^-29) and e_atan2.c's 2^60 cut, pairs with subnormals, and
// every pair of the special values (C's signed zeros, ±pi/4 and ±3pi/4 at the infinities, NaN).
std::pair<std::vector<double>, std::vector<double>> arctan2_inputs() {
  std::vector<double> y = uniform(3000, 35, -3, 3), x = uniform(3000, 36, -3, 3);
  append(y, log_uniform(3000, 37, 1e-300, 1e300, true));
  append(x, log_uniform(3000, 38, 1e-300, 1e300, true));
  append(y, log_uniform(2000, 39, 1e-25, 1e25, true));
  append(x, log_uniform(2000, 40, 1e-25, 1e25, true));
  append(y, log_uniform(500, 41, 1e-323, 1e-300, true));  // subnormal y
  append(x, log_uniform(500, 42, 1e-320, 1e10, true));
  append(y, log_uniform(500, 43, 1e-320, 1e10, true));
  append(x, log_uniform(500, 44, 1e-323, 1e-300, true));  // subnormal x
  const std::vector<double> base = log_uniform(2000, 45, 1e-10, 1e10, true);
  const std::vector<double> jitter = uniform(2000, 46, -1e-6, 1e-6);
  const double ratios[] = {0.4375, 0.6875, 1.1875, 2.4375, 1.0, 0x1p-29, 0x1p-60, 0x1p60, 0x1p61, 1.5};
  for (size_t i = 0; i < base.size(); ++i) {
    const double ratio = ratios[i % std::size(ratios)] * (1 + jitter[i]) * ((i / 10) % 2 ? -1 : 1);
    y.push_back(ratio * base[i]);
    x.push_back(base[i]);
  }
  const std::vector<double> s = {0.0,  -0.0,       kInf,        -kInf, kNan,   1.0,    -1.0,  0.5,
                                 -2.0, kMinNormal, -kDenormMin, 1e300, -1e300, 1e-300, -1e-8, 3.0};
  for (double a : s)
    for (double b : s) {
      y.push_back(a);
      x.push_back(b);
    }
  return {y, x};
}

TEST_F(GpuFloat64Math, Arctan2WithinTwoUlpOfTheCpu) {
  const auto [a, b] = arctan2_inputs();
  const int64_t n = static_cast<int64_t>(a.size());
  const Array y(a, {n}, float64), x(b, {n}, float64);
  expect_ulps(a, arctan2(y, x, Device::gpu), arctan2(y, x, Device::cpu), 2, "arctan2");
}

// The C library's special cases, each stated: signed zeros, the infinities, NaN in either operand.
TEST_F(GpuFloat64Math, Arctan2SpecialCasesAreTheCLibrarys) {
  const double pi = std::numbers::pi;
  struct Case {
    double y, x, want;
  };
  const Case cases[] = {
      {0.0, 0.0, 0.0},           {-0.0, 0.0, -0.0},           {0.0, -0.0, pi},      {-0.0, -0.0, -pi},
      {0.0, -3.0, pi},           {-0.0, -3.0, -pi},           {0.0, 3.0, 0.0},      {-0.0, 3.0, -0.0},
      {0.0, kInf, 0.0},          {-0.0, -kInf, -pi},          {kInf, kInf, pi / 4}, {-kInf, kInf, -pi / 4},
      {kInf, -kInf, 3 * pi / 4}, {-kInf, -kInf, -3 * pi / 4}, {2.0, kInf, 0.0},     {-2.0, kInf, -0.0},
      {2.0, -kInf, pi},          {-2.0, -kInf, -pi},          {kInf, 2.0, pi / 2},  {-kInf, -2.0, -pi / 2},
      {5.0, 0.0, pi / 2},        {-5.0, -0.0, -pi / 2}};
  std::vector<double> ys, xs;
  for (const Case& c : cases) {
    ys.push_back(c.y);
    xs.push_back(c.x);
  }
  for (double v : {0.0, 1.0, -kInf}) {  // NaN on either side
    ys.insert(ys.end(), {kNan, v});
    xs.insert(xs.end(), {v, kNan});
  }
  const int64_t n = static_cast<int64_t>(ys.size());
  const std::vector<double> g =
      test::values(arctan2(Array(ys, {n}, float64), Array(xs, {n}, float64), Device::gpu));
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(g[i], cases[i].want) << "arctan2(" << ys[i] << ", " << xs[i] << ")";
    EXPECT_EQ(std::signbit(g[i]), std::signbit(cases[i].want)) << "arctan2(" << ys[i] << ", " << xs[i] << ")";
  }
  for (size_t i = std::size(cases); i < g.size(); ++i)
    EXPECT_TRUE(std::isnan(g[i])) << "arctan2(" << ys[i] << ", " << xs[i] << ")";
}

// compile fuses a float64 chain with arctan2 into one generated kernel (the same GLSL as the
// unfused one): within 2 ulp of the CPU.
TEST_F(GpuFloat64Math, Arctan2FusesInFloat64) {
  const auto [a, b] = arctan2_inputs();
  const int64_t n = static_cast<int64_t>(a.size());
  const Array y(a, {n}, float64), x(b, {n}, float64);
  auto chain = [](Device d) {
    return [d](const std::vector<Array>& v) {  // exact around arctan2: a * 2 and -x
      return std::vector<Array>{negative(arctan2(multiply(v[0], 2.0, d), negative(v[1], d), d), d)};
    };
  };
  const Array fused = compile(chain(Device::gpu))({y, x})[0];
  ASSERT_TRUE(fused.has_primitive());
  EXPECT_STREQ(fused.primitive()->name(), "FusedElementwise");
  std::vector<double> twice(a);
  for (double& v : twice) v *= 2;
  expect_ulps(twice, fused, chain(Device::cpu)({y, x})[0], 2, "fused");
}

}  // namespace
}  // namespace kiln
