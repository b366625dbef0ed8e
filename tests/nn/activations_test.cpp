#include "kiln/nn/activations.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

// Plain float64 references, written from the formulas in PyTorch's documentation.
double ref_softplus(double x, double beta = 1, double threshold = 20) {
  if (beta * x > threshold) return x;
  return std::log1p(std::exp(beta * x)) / beta;
}
double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_elu(double x, double alpha) { return x > 0 ? x : alpha * (std::exp(x) - 1); }
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

struct ActivationCase {
  const char* name;
  std::function<Array(const Array&)> fn;
  std::function<double(double)> ref;
  double lo = -4, hi = 4;
};

const ActivationCase kCases[] = {
    {"relu", [](const Array& x) { return nn::relu(x); }, [](double x) { return x > 0 ? x : 0.0; }},
    {"relu6", [](const Array& x) { return nn::relu6(x); },
     [](double x) { return std::min(std::max(x, 0.0), 6.0); }, -3, 9},
    {"leaky_relu", [](const Array& x) { return nn::leaky_relu(x); },
     [](double x) { return x > 0 ? x : 0.01 * x; }},
    {"leaky_relu_slope", [](const Array& x) { return nn::leaky_relu(x, 0.2); },
     [](double x) { return x > 0 ? x : 0.2 * x; }},
    {"elu", [](const Array& x) { return nn::elu(x); }, [](double x) { return ref_elu(x, 1.0); }},
    {"elu_alpha", [](const Array& x) { return nn::elu(x, 0.5); }, [](double x) { return ref_elu(x, 0.5); }},
    {"selu", [](const Array& x) { return nn::selu(x); },
     [](double x) { return kSeluScale * ref_elu(x, kSeluAlpha); }},
    {"gelu", [](const Array& x) { return nn::gelu(x); },
     [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
    {"gelu_tanh", [](const Array& x) { return nn::gelu_tanh(x); },
     [](double x) {
       return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
     }},
    {"silu", [](const Array& x) { return nn::silu(x); }, [](double x) { return x * ref_sigmoid(x); }},
    {"mish", [](const Array& x) { return nn::mish(x); },
     [](double x) { return x * std::tanh(ref_softplus(x)); }},
    {"softplus", [](const Array& x) { return nn::softplus(x); }, [](double x) { return ref_softplus(x); },
     -30, 30},
    {"softplus_beta", [](const Array& x) { return nn::softplus(x, 2.0, 5.0); },
     [](double x) { return ref_softplus(x, 2.0, 5.0); }},
    {"log_sigmoid", [](const Array& x) { return nn::log_sigmoid(x); },
     [](double x) { return std::log(ref_sigmoid(x)); }, -30, 30},
    {"tanh", [](const Array& x) { return nn::tanh(x); }, [](double x) { return std::tanh(x); }},
    {"sigmoid", [](const Array& x) { return nn::sigmoid(x); }, ref_sigmoid},
};

class ActivationTest : public ::testing::TestWithParam<ActivationCase> {};

std::vector<double> apply_ref(const ActivationCase& c, const std::vector<double>& x) {
  std::vector<double> y;
  for (double v : x) y.push_back(c.ref(v));
  return y;
}

TEST_P(ActivationTest, MatchesFloat64Reference) {
  const ActivationCase& c = GetParam();
  for (Dtype t : {float64, float32}) {
    const Array x = random_array({3, 5}, t, 21, c.lo, c.hi);
    const Array y = c.fn(x);
    EXPECT_EQ(y.dtype(), t) << c.name;
    EXPECT_EQ(y.shape(), x.shape()) << c.name;
    // The reference sees x as rounded into t, so only the activation's own error is measured.
    expect_close(y, apply_ref(c, values(x)));
  }
}

TEST_P(ActivationTest, HalfPrecisionStaysClose) {
  const ActivationCase& c = GetParam();
  const Array x = random_array({8}, bfloat16, 5, c.lo, c.hi);
  const Array y = c.fn(x);
  EXPECT_EQ(y.dtype(), bfloat16);
  expect_close(y, apply_ref(c, values(x)), 2e-2, 2e-2);
}

TEST_P(ActivationTest, GradientMatchesFiniteDifferences) {
  const ActivationCase& c = GetParam();
  // Random values are never exactly at a kink (0, or 6 for relu6).
  const Array x = random_array({2, 7}, float64, 3, c.lo, c.hi);
  check_vjp([&](const std::vector<Array>& a) { return c.fn(a[0]); }, {x});
}

TEST_P(ActivationTest, SecondDerivativeMatchesFiniteDifferences) {
  const ActivationCase& c = GetParam();
  const Array x = random_array({5}, float64, 8, c.lo, c.hi);
  test::check_second_order([&](const std::vector<Array>& a) { return c.fn(a[0]); }, {x});
}

INSTANTIATE_TEST_SUITE_P(Activations, ActivationTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Values printed by PyTorch 1.13 (Debian python3-torch):
//   x = torch.tensor([-3.0, -0.5, 0.7, 2.5], dtype=torch.float64)
//   F.gelu(x, approximate='tanh'), F.gelu(x), F.mish(x), F.selu(x),
//   F.softplus(x, beta=2, threshold=3), F.logsigmoid(x)
TEST(Activations, MatchPyTorchGoldenValues) {
  const Array x({-3.0, -0.5, 0.7, 2.5});
  expect_close(nn::gelu_tanh(x),
               {-0.0036373920817729943, -0.15428599017485606, 0.5305701347051167, 2.484915733910001});
  expect_close(nn::gelu(x),
               {-0.00404969409489031, -0.15426876936299344, 0.5306254434438489, 2.4844758366855597});
  expect_close(nn::mish(x), {-0.1456474612756246, -0.22074377465173, 0.5611483776438518, 2.471392304557881});
  expect_close(nn::selu(x),
               {-1.6705687287671118, -0.6917581878028713, 0.7354906911488363, 2.626752468388701});
  expect_close(nn::softplus(x, 2.0, 3.0),
               {0.0012378425688652247, 0.15663084375911143, 0.8102087049592255, 2.5});
  expect_close(nn::log_sigmoid(x),
               {-3.048587351573742, -0.9740769841801067, -0.4031860488854579, -0.07888973429254963});
}

std::vector<double> gradient_of_sum(const std::function<Array(const Array&)>& f, const Array& x) {
  return values(grad([&](const Array& a) { return sum(f(a)); })(x));
}

// softplus, log_sigmoid and mish at |x| = 1000 (and elu/selu far out on both sides): finite values
// equal to their limits, and finite gradients equal to the derivative's limits. At |x| = 200 the
// exact values differ from the limits by about exp(-200), hence the tiny absolute tolerance.
TEST(Activations, LargeMagnitudesGiveFiniteValuesAndGradients) {
  using Fn = std::function<Array(const Array&)>;
  const double scale_alpha = kSeluScale * kSeluAlpha;
  struct Limit {
    const char* name;
    Fn fn;
    std::vector<double> value, gradient;
  };
  const std::vector<Limit> limits = {
      {"softplus", [](const Array& a) { return nn::softplus(a); }, {0, 0, 200, 1000}, {0, 0, 1, 1}},
      // A threshold that is never reached: the smooth branch alone must stay finite.
      {"softplus_no_threshold",
       [](const Array& a) { return nn::softplus(a, 3.0, 1e9); },
       {0, 0, 200, 1000},
       {0, 0, 1, 1}},
      {"log_sigmoid", [](const Array& a) { return nn::log_sigmoid(a); }, {-1000, -200, 0, 0}, {1, 1, 0, 0}},
      {"mish", [](const Array& a) { return nn::mish(a); }, {0, 0, 200, 1000}, {0, 0, 1, 1}},
      {"elu", [](const Array& a) { return nn::elu(a); }, {-1, -1, 200, 1000}, {0, 0, 1, 1}},
      {"selu",
       [](const Array& a) { return nn::selu(a); },
       {-scale_alpha, -scale_alpha, kSeluScale * 200, kSeluScale * 1000},
       {0, 0, kSeluScale, kSeluScale}},
      {"silu", [](const Array& a) { return nn::silu(a); }, {0, 0, 200, 1000}, {0, 0, 1, 1}},
      {"gelu", [](const Array& a) { return nn::gelu(a); }, {0, 0, 200, 1000}, {0, 0, 1, 1}},
      {"gelu_tanh", [](const Array& a) { return nn::gelu_tanh(a); }, {0, 0, 200, 1000}, {0, 0, 1, 1}},
  };
  for (Dtype t : {float32, float64}) {
    const Array x = Array(std::vector<double>{-1000, -200, 200, 1000}, {4}, t);
    const double rtol = test::tolerance(t).rtol;
    for (const Limit& l : limits) {
      SCOPED_TRACE(std::string(l.name) + " in " + std::string(dtype_name(t)));
      expect_close(l.fn(x), l.value, rtol, 1e-30);
      const Array g = grad([&](const Array& a) { return sum(l.fn(a)); })(x);
      expect_close(g, l.gradient, rtol, 1e-30);
    }
  }
}

TEST(Activations, SoftplusDerivativeAtZeroIsExact) {
  // The stable form must not fall back on a kink: d/dx softplus(0) = sigmoid(0) = 0.5.
  for (Dtype t : {float32, float64}) {
    const Array zero = Array(0.0, t);
    EXPECT_EQ(grad([](const Array& a) { return nn::softplus(a); })(zero).item<double>(), 0.5);
    EXPECT_EQ(grad([](const Array& a) { return nn::log_sigmoid(a); })(zero).item<double>(), 0.5);
    expect_close(nn::softplus(zero), {std::log(2.0)});
  }
}

TEST(Activations, SoftplusSwitchesToIdentityAboveThreshold) {
  // PyTorch returns x itself where beta * x > threshold.
  const Array x({4.0, 5.5, 21.0});
  expect_close(nn::softplus(x, 1.0, 5.0), std::vector<double>{ref_softplus(4.0), 5.5, 21.0}, 0, 1e-15);
  expect_close(nn::softplus(x), std::vector<double>{ref_softplus(4.0), ref_softplus(5.5), 21.0}, 1e-15, 0);
}

TEST(Activations, KinksFollowPyTorch) {
  const Array x({0.0, 6.0, -2.0});
  // torch.relu and relu6: gradient 0 at the kinks; leaky_relu and elu take the negative side at 0.
  EXPECT_EQ(gradient_of_sum([](const Array& a) { return nn::relu(a); }, x), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(gradient_of_sum([](const Array& a) { return nn::relu6(a); }, x), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(gradient_of_sum([](const Array& a) { return nn::leaky_relu(a, 0.1); }, x),
            (std::vector<double>{0.1, 1, 0.1}));
  expect_close(Array(gradient_of_sum([](const Array& a) { return nn::elu(a, 0.5); }, x), {3}),
               {0.5, 1, 0.5 * std::exp(-2.0)});
}

TEST(Activations, NanPropagates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Array x({nan, 1.0});
  for (const auto& f : std::vector<std::function<Array(const Array&)>>{
           [](const Array& a) { return nn::relu(a); }, [](const Array& a) { return nn::relu6(a); },
           [](const Array& a) { return nn::leaky_relu(a); }, [](const Array& a) { return nn::elu(a); },
           [](const Array& a) { return nn::softplus(a); }, [](const Array& a) { return nn::log_sigmoid(a); },
           [](const Array& a) { return nn::mish(a); }, [](const Array& a) { return nn::gelu(a); }})
    EXPECT_TRUE(std::isnan(values(f(x))[0]));
}

TEST(Activations, ReluFamilyKeepsIntegerDtypes) {
  const Array x({-3, 0, 4, 9});
  EXPECT_EQ(nn::relu(x).dtype(), int32);
  EXPECT_EQ(nn::relu(x).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 4, 9}));
  EXPECT_EQ(nn::relu6(x).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 4, 6}));
  // Transcendental activations promote integers to float32, as core ops do.
  EXPECT_EQ(nn::silu(x).dtype(), float32);
  EXPECT_EQ(nn::softplus(x).dtype(), float32);
}

std::vector<double> ref_glu(const std::vector<double>& x, const Shape& shape, int axis) {
  // Halves along `axis` of a row-major array: a = first half, b = second half.
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t half = shape[axis] / 2;
  std::vector<double> y;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < half; ++k)
      for (int64_t i = 0; i < inner; ++i) {
        const double a = x[(o * shape[axis] + k) * inner + i];
        const double b = x[(o * shape[axis] + k + half) * inner + i];
        y.push_back(a * ref_sigmoid(b));
      }
  return y;
}

TEST(Activations, GluSplitsTheAxisInHalves) {
  for (Dtype t : {float32, float64}) {
    const Array x = random_array({3, 4, 6}, t, 17, -3, 3);
    const Array last = nn::glu(x);
    EXPECT_EQ(last.shape(), (Shape{3, 4, 3}));
    expect_close(last, ref_glu(values(x), x.shape(), 2));
    const Array middle = nn::glu(x, 1);
    EXPECT_EQ(middle.shape(), (Shape{3, 2, 6}));
    expect_close(middle, ref_glu(values(x), x.shape(), 1));
    expect_close(nn::glu(x, -2), ref_glu(values(x), x.shape(), 1));
  }
  const Array x = random_array({2, 4, 2}, float64, 4, -2, 2);
  check_vjp([](const std::vector<Array>& a) { return nn::glu(a[0], 1); }, {x});
  check_vjp([](const std::vector<Array>& a) { return nn::glu(a[0]); }, {x});
}

TEST(Activations, GluRejectsAnOddAxisNamingIt) {
  const Array x = random_array({2, 5}, float32, 1);
  try {
    nn::glu(x);
    FAIL() << "glu accepted an odd axis";
  } catch (const ValueError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[glu]"), std::string::npos) << message;
    EXPECT_NE(message.find("axis -1 has size 5"), std::string::npos) << message;
  }
  EXPECT_THROW(nn::glu(x, 2), ShapeError);
  EXPECT_EQ(nn::glu(x, 0).shape(), (Shape{1, 5}));  // the program goes on; axis 0 is even
}

TEST(Activations, SoftplusRejectsNonPositiveBeta) {
  try {
    nn::softplus(Array({1.0f}), 0.0);
    FAIL() << "softplus accepted beta = 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[softplus] beta must be > 0"), std::string::npos) << e.what();
  }
}

std::vector<double> ref_softmax_rows(const std::vector<double>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<double> y;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c)
      y.push_back(log ? x[r * cols + c] - m - std::log(s) : std::exp(x[r * cols + c] - m) / s);
  }
  return y;
}

TEST(Activations, SoftmaxAndLogSoftmaxAreReexported) {
  for (Dtype t : {float32, float64}) {
    const Array x = random_array({3, 6}, t, 9, -5, 5);
    expect_close(nn::softmax(x), ref_softmax_rows(values(x), 3, 6, false));
    expect_close(nn::log_softmax(x, -1), ref_softmax_rows(values(x), 3, 6, true));
    const Array xt = transpose(x);  // softmax over axis 0 of the transpose = rows of x
    expect_close(transpose(nn::softmax(xt, 0)), ref_softmax_rows(values(x), 3, 6, false));
  }
  const Array x = random_array({2, 4}, float64, 2, -2, 2);
  check_vjp([](const std::vector<Array>& a) { return nn::log_softmax(a[0]); }, {x});
  check_vjp([](const std::vector<Array>& a) { return nn::softmax(a[0], 0); }, {x});
}

TEST(Activations, ReexportsAreNotAmbiguousWithCore) {
  using namespace kiln;      // NOLINT: the point of the test
  using namespace kiln::nn;  // NOLINT
  const Array x({0.5f, -1.0f});
  expect_close(tanh(x), {std::tanh(0.5), std::tanh(-1.0)});
  expect_close(sigmoid(x), {ref_sigmoid(0.5), ref_sigmoid(-1.0)});
  expect_close(softmax(x), ref_softmax_rows({0.5, -1.0}, 1, 2, false));
  expect_close(log_softmax(x), ref_softmax_rows({0.5, -1.0}, 1, 2, true));
  expect_close(relu(x), {0.5, 0.0});
}

TEST(Activations, ComposeWithTransforms) {
  // Built from core ops, so vmap and jvp work without rules of their own.
  const Array x = random_array({3, 4}, float64, 6, -3, 3);
  const Array batched = vmap([](const Array& row) { return nn::mish(row); })(x);
  expect_close(batched, values(nn::mish(x)), 1e-12, 1e-14);
  const Array tangent = random_array({3, 4}, float64, 7);
  auto [outs, tangents] =
      jvp([](const std::vector<Array>& a) { return std::vector<Array>{nn::gelu(a[0])}; }, {x}, {tangent});
  std::vector<double> expected;
  const std::vector<double> xs = values(x), ts = values(tangent);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double pdf = std::exp(-0.5 * xs[i] * xs[i]) / std::sqrt(2 * std::numbers::pi);
    const double cdf = 0.5 * (1 + std::erf(xs[i] / std::sqrt(2.0)));
    expected.push_back((cdf + xs[i] * pdf) * ts[i]);
  }
  expect_close(tangents[0], expected);
}

}  // namespace
}  // namespace kiln
