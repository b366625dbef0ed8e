// core/random_more.h: laplace, truncated_normal, multivariate_normal, categorical with several
// samples, and uniform / randint / bernoulli with array-valued parameters. Distribution checks
// with fixed keys (moments within 5 sigma, Kolmogorov-Smirnov, chi-square), exact relations to the
// scalar overloads and to JAX's constructions, determinism, broadcasting, vmap over keys against
// a loop, gradients, errors, and the same numbers on the default device as on Device::cpu (the
// GPU pass runs this suite with the GPU as the default device).
#include "kiln/core/random_more.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <set>
#include <string>

#include "support/device.h"
#include "support/op_test.h"
#include "support/stats.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using test::column;
using test::expect_bitwise;
using test::kKsCritical;
using test::ks_statistic;
using test::mean_of;
using test::normal_cdf;
using test::normal_pdf;
using test::variance_of;

// Close elementwise (for compositions through transcendental functions, whose last bits the two
// devices' libraries may round differently).
void expect_near_all(const Array& a, const Array& b, double rtol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = astype(a, float64, Device::cpu).to_vector<double>();
  const auto y = astype(b, float64, Device::cpu).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], rtol * (1 + std::abs(y[i]))) << what << " " << i;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// vmap over a batch of 3 keys equals the loop over the keys, bitwise.
void expect_vmap_matches_loop(const std::function<Array(const Array&)>& fn, const std::string& what) {
  const Array keys = random::split(random::key(4242), 3);
  const auto rows = random::split_keys(random::key(4242), 3);
  const Array batched =
      vmap([&](const std::vector<Array>& in) { return std::vector<Array>{fn(in[0])}; })({keys})[0];
  std::vector<Array> loop;
  for (const Array& k : rows) loop.push_back(fn(k));
  expect_bitwise(batched, stack(loop), what);
}

// ---------------------------------------------------------------- next_float (the clamps' helper)

// The neighbor of bit pattern b of a 16-bit float toward -inf (down) or +inf, on the bits.
uint16_t step16(uint16_t b, bool down) {
  if ((b & 0x7fffu) == 0) return down ? 0x8001u : 0x0001u;
  const bool negative = b & 0x8000u;
  return negative == down ? b + 1 : b - 1;
}

TEST(RandomNextFloat, EverySixteenBitPatternSteps) {
  for (Dtype t : {float16, bfloat16}) {
    const uint16_t inf = t == float16 ? 0x7c00u : 0x7f80u;
    std::vector<uint16_t> finite;
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      if ((b & 0x7fffu) >= inf) continue;  // infinities and NaN below
      // bfloat16 subnormals are float32 subnormals, which a GPU may flush to zero.
      if (t == bfloat16 && test::gpu_default() && (b & 0x7f80u) == 0) continue;
      finite.push_back(static_cast<uint16_t>(b));
    }
    const int64_t n = static_cast<int64_t>(finite.size());
    // The patterns as float32 values, converted (exactly) to t.
    std::vector<float> values;
    for (uint16_t b : finite)
      values.push_back(t == float16 ? static_cast<float>(float16_t::from_bits(b))
                                    : static_cast<float>(bfloat16_t::from_bits(b)));
    const Array h = astype(Array(values, {n}), t);
    for (bool down : {true, false}) {
      const Array r = detail::next_float(h, down);
      ASSERT_EQ(r.dtype(), t);
      const auto got = test::array_bytes(r);
      int bad = 0;
      for (int64_t i = 0; i < n && bad < 5; ++i) {
        uint16_t g;
        std::memcpy(&g, got.data() + 2 * i, 2);
        const uint16_t want = step16(finite[i], down);
        if (g != want) {
          ++bad;
          ADD_FAILURE() << dtype_name(t) << (down ? " down" : " up") << " of 0x" << std::hex << finite[i]
                        << ": 0x" << g << ", want 0x" << want;
        }
      }
    }
    // Infinities: toward themselves they stay; away they step to the largest finite value. NaN stays.
    const float f_inf = std::numeric_limits<float>::infinity();
    const Array special = astype(Array(std::vector<float>{f_inf, -f_inf, std::nanf("")}, {3}), t);
    const auto dn = astype(detail::next_float(special, true), float32).to_vector<float>();
    const auto up = astype(detail::next_float(special, false), float32).to_vector<float>();
    const float largest = t == float16 ? 65504.0f : std::ldexp(2.0f - std::ldexp(1.0f, -7), 127);
    EXPECT_EQ(dn[0], largest) << dtype_name(t);
    EXPECT_EQ(dn[1], -f_inf) << dtype_name(t);
    EXPECT_EQ(up[0], f_inf) << dtype_name(t);
    EXPECT_EQ(up[1], -largest) << dtype_name(t);
    EXPECT_TRUE(std::isnan(dn[2]) && std::isnan(up[2])) << dtype_name(t);
  }
}

TEST(RandomNextFloat, Float32AndFloat64MatchNextafter) {
  std::vector<double> v{0.0,    -0.0, 1.0,   -1.0, 0.1,   -3.5,   1e-40,
                        -1e-45, 3e38, -3e38, kInf, -kInf, 1e-310, 1e300};
  for (double x : test::random_values(200, 5, -1e3, 1e3)) v.push_back(x);
  for (Dtype t : {float32, float64}) {
    const Array h = astype(Array(v, {static_cast<int64_t>(v.size())}, float64), t);
    const auto hv = h.to_vector<double>();
    for (bool down : {true, false}) {
      const auto got = astype(detail::next_float(h, down), float64).to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) {
        double want;
        if (t == float32) {
          const float f = static_cast<float>(hv[i]);
          want = std::isinf(f) && (f < 0) == down ? f : std::nextafter(f, down ? -INFINITY : INFINITY);
        } else {
          want =
              std::isinf(hv[i]) && (hv[i] < 0) == down ? hv[i] : std::nextafter(hv[i], down ? -kInf : kInf);
        }
        EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want))
            << dtype_name(t) << (down ? " down " : " up ") << hv[i] << ": " << got[i] << " want " << want;
      }
    }
    const auto nan = detail::next_float(astype(Array(std::nan("")), t), true).item<double>();
    EXPECT_TRUE(std::isnan(nan)) << dtype_name(t);
  }
}

// ---------------------------------------------------------------- uniform with array bounds

TEST(RandomUniformArray, ConstantBoundsGiveTheScalarOverloadsBits) {
  const Array k = random::key(101);
  for (Dtype t : {float32, float64, float16, bfloat16})
    for (auto [lo, hi] :
         {std::pair{0.0, 1.0}, std::pair{-2.0, 3.0}, std::pair{10.0, 12.5}, std::pair{-1.0, 0.125}})
      expect_bitwise(random::uniform({300, 7}, k, Array(lo, t), Array(hi, t), t),
                     random::uniform({300, 7}, k, lo, hi, t),
                     fmt::format("{} [{}, {})", dtype_name(t), lo, hi));
}

TEST(RandomUniformArray, PerElementBoundsBroadcast) {
  const int n = 20000;
  const std::vector<double> lo{-1.0, 0.0, 5.0}, hi{1.0, 0.5, 6.0};
  // low (3,) and high (1, 3) against the shape (n, 3).
  const Array x = random::uniform({n, 3}, random::key(102), Array(lo, {3}), Array(hi, {1, 3}));
  ASSERT_EQ(x.shape(), (Shape{n, 3}));
  ASSERT_EQ(x.dtype(), float32);
  const auto v = x.to_vector<double>();
  // Element i is low + (high - low) * u_i, u the [0, 1) draw of the same key (float32 arithmetic).
  const auto u = random::uniform({n, 3}, random::key(102)).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    const float l = static_cast<float>(lo[i % 3]), h = static_cast<float>(hi[i % 3]);
    ASSERT_EQ(v[i], static_cast<double>(std::max(std::min(u[i] * (h - l) + l, std::nextafter(h, -1e30f)), l)))
        << i;
  }
  for (size_t c = 0; c < 3; ++c) {
    const auto col = column(v, 3, c);
    EXPECT_GE(*std::min_element(col.begin(), col.end()), lo[c]);
    EXPECT_LT(*std::max_element(col.begin(), col.end()), hi[c]);
    const double width = hi[c] - lo[c];
    EXPECT_NEAR(mean_of(col), (lo[c] + hi[c]) / 2, 5 * width * std::sqrt(1.0 / 12 / n)) << c;
    EXPECT_LT(ks_statistic(col, [&](double t) { return (t - lo[c]) / width; }), kKsCritical) << c;
  }
}

TEST(RandomUniformArray, NeverReachesHighAndHighBelowLowGivesLow) {
  // float16 near 1 steps by 2^-11: 100000 draws reach the clamp, which must stop below high.
  const auto v = random::uniform({100000}, random::key(103), Array(0.0, float16),
                                 Array(std::vector<double>{1.0}, {1}), float16)
                     .to_vector<double>();
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 1.0 - std::ldexp(1.0, -11));
  const auto low = random::uniform({4, 2}, random::key(104), Array(std::vector<float>{2.0f, -1.0f}, {2}),
                                   Array(std::vector<float>{1.0f, -1.0f}, {2}))
                       .to_vector<float>();
  for (size_t i = 0; i < low.size(); ++i) EXPECT_EQ(low[i], i % 2 == 0 ? 2.0f : -1.0f) << i;
}

TEST(RandomUniformArray, GradientInTheBounds) {
  // d/dlow = 1 - u, d/dhigh = u (JAX's uniform is differentiable in minval and maxval).
  const Array k = random::key(105);
  auto f = [k](const std::vector<Array>& in) { return random::uniform({4, 3}, k, in[0], in[1], float64); };
  test::check_vjp(
      f, {test::random_array({3}, float64, 1, -2.0, -1.0), test::random_array({4, 1}, float64, 2, 1.0, 2.0)});
  test::check_jvp(
      f, {test::random_array({3}, float64, 3, -2.0, -1.0), test::random_array({4, 1}, float64, 4, 1.0, 2.0)});
}

// ---------------------------------------------------------------- randint with array bounds

TEST(RandomRandintArray, ConstantBoundsGiveTheScalarOverloadsBits) {
  const Array k = random::key(201);
  struct Case {
    Dtype t;
    int64_t lo, hi;
  };
  const int64_t i64_min = std::numeric_limits<int64_t>::min(), i64_max = std::numeric_limits<int64_t>::max();
  for (Case c : {Case{int32, -3, 7}, Case{int32, -2147483648LL, 2147483648LL}, Case{uint8, 0, 256},
                 Case{int8, -128, 5}, Case{uint32, 0, int64_t{1} << 32}, Case{int64, i64_min, i64_max},
                 Case{int64, -(int64_t{1} << 40), 77}}) {
    const std::string what = fmt::format("{} [{}, {})", dtype_name(c.t), c.lo, c.hi);
    // High past the dtype's maximum (e.g. 256 for uint8) makes the maximum reachable, as the scalar
    // overload's exclusive bound does.
    expect_bitwise(random::randint({500, 3}, k, Array(c.lo, int64), Array(c.hi, int64), c.t),
                   random::randint({500, 3}, k, c.lo, c.hi, c.t), what);
  }
}

TEST(RandomRandintArray, PerElementBoundsHistogram) {
  const int n = 30000;
  const Array lo(std::vector<int32_t>{0, -5, 100}, {3}), hi(std::vector<int32_t>{2, 5, 101}, {3});
  const Array r = random::randint({n, 3}, random::key(202), lo, hi);
  ASSERT_EQ(r.dtype(), int32);
  ASSERT_EQ(r.shape(), (Shape{n, 3}));
  const auto v = r.to_vector<int32_t>();
  std::map<int, int> counts[3];
  for (size_t i = 0; i < v.size(); ++i) ++counts[i % 3][v[i]];
  const int width[3] = {2, 10, 1}, first[3] = {0, -5, 100};
  for (int c = 0; c < 3; ++c) {
    ASSERT_EQ(counts[c].size(), static_cast<size_t>(width[c])) << c;
    const double p = 1.0 / width[c];
    for (auto [value, count] : counts[c]) {
      EXPECT_GE(value, first[c]);
      EXPECT_LT(value, first[c] + width[c]);
      EXPECT_NEAR(count, n * p, 5 * std::sqrt(n * p * (1 - p)) + 1e-9) << c << " " << value;
    }
  }
}

TEST(RandomRandintArray, JaxClippingRules) {
  const Array k = random::key(203);
  // Bounds outside uint8 are clipped into it; high past 255 makes 255 reachable.
  const auto u8 =
      random::randint({20000}, k, Array(int64_t{-1000}), Array(int64_t{1000}), uint8).to_vector<int32_t>();
  EXPECT_EQ(*std::min_element(u8.begin(), u8.end()), 0);
  EXPECT_EQ(*std::max_element(u8.begin(), u8.end()), 255);
  // high <= low gives low.
  const auto same = random::randint({2, 3}, k, Array(std::vector<int32_t>{4, 9, -2}, {3}),
                                    Array(std::vector<int32_t>{4, 1, -3}, {3}))
                        .to_vector<int32_t>();
  EXPECT_EQ(same, (std::vector<int32_t>{4, 9, -2, 4, 9, -2}));
  // A uint32 bound for an int32 result: clipped to 2^31 - 1 and made reachable.
  const auto top =
      random::randint({1000}, k, Array(uint32_t{2147483640u}), Array(uint32_t{4000000000u}), int32)
          .to_vector<int64_t>();
  EXPECT_EQ(*std::max_element(top.begin(), top.end()), 2147483647);
  EXPECT_GE(*std::min_element(top.begin(), top.end()), 2147483640);
}

TEST(RandomRandintArray, VmapOverKeysAndBounds) {
  const Array lo(std::vector<int32_t>{0, 10}, {2}), hi(std::vector<int32_t>{1000, 20}, {2});
  expect_vmap_matches_loop(
      [&](const Array& k) {
        return random::randint({3, 2}, k, lo, hi);
      },
      "randint keys");
  // A batch of bounds with one key: every example draws the same bits.
  const Array k = random::key(204);
  const Array lows(std::vector<int32_t>{0, 5, -7}, {3});
  auto f = [&](const std::vector<Array>& in) {
    return std::vector<Array>{random::randint({4}, k, in[0], Array(50))};
  };
  const Array batched = vmap(f)({lows})[0];
  std::vector<Array> loop;
  for (int32_t l : {0, 5, -7}) loop.push_back(random::randint({4}, k, Array(l), Array(50)));
  expect_bitwise(batched, stack(loop), "randint bounds");
  // Keys and bounds batched together, the bounds along their last axis.
  const Array keys = random::split(random::key(205), 3);
  const auto rows = random::split_keys(random::key(205), 3);
  const Array highs(std::vector<int64_t>{10, 100, 20, 200, 30, 300}, {2, 3});
  auto g = [](const std::vector<Array>& in) {
    return std::vector<Array>{random::randint({5, 2}, in[0], Array(0), in[1], int64)};
  };
  const Array both = vmap(g, {0, 1})({keys, highs})[0];
  loop.clear();
  for (int b = 0; b < 3; ++b)
    loop.push_back(
        random::randint({5, 2}, rows[b], Array(0), reshape(slice(highs, {0, b}, {2, b + 1}), {2}), int64));
  expect_bitwise(both, stack(loop), "randint keys and bounds");
}

// ---------------------------------------------------------------- bernoulli with array p

TEST(RandomBernoulliArray, IsUniformBelowP) {
  const int n = 20000;
  const std::vector<float> p{0.1f, 0.5f, 0.9f, -0.5f, 1.5f, std::nanf("")};
  const Array b = random::bernoulli({n, 6}, random::key(301), Array(p, {6}));
  ASSERT_EQ(b.dtype(), bool_);
  const auto v = b.to_vector<bool>();
  const auto u = random::uniform({n, 6}, random::key(301)).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], u[i] < p[i % 6]) << i;
  std::vector<double> as_double(v.begin(), v.end());
  for (size_t c = 0; c < 3; ++c)
    EXPECT_NEAR(mean_of(column(as_double, 6, c)), p[c], 5 * std::sqrt(p[c] * (1 - p[c]) / n)) << c;
  // Outside [0, 1] unchecked, as JAX: never below 0, always above 1, never for NaN.
  EXPECT_EQ(mean_of(column(as_double, 6, 3)), 0.0);
  EXPECT_EQ(mean_of(column(as_double, 6, 4)), 1.0);
  EXPECT_EQ(mean_of(column(as_double, 6, 5)), 0.0);
}

TEST(RandomBernoulliArray, Float64PDrawsInFloat64AndScalarPMatches) {
  const Array k = random::key(302);
  const auto v = random::bernoulli({1000}, k, Array(std::vector<double>{0.25}, {1})).to_vector<bool>();
  const auto u = random::uniform({1000}, k, 0.0, 1.0, float64).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], u[i] < 0.25) << i;
  expect_bitwise(random::bernoulli({300}, k, Array(0.5f)), random::bernoulli({300}, k, 0.5), "p = 0.5");
}

// ---------------------------------------------------------------- laplace

double laplace_cdf(double x) { return x < 0 ? 0.5 * std::exp(x) : 1 - 0.5 * std::exp(-x); }

TEST(RandomLaplace, MomentsAndKolmogorovSmirnov) {
  const int n = 50000;
  const Array x = random::laplace({n}, random::key(401));
  ASSERT_EQ(x.dtype(), float32);
  const auto v = x.to_vector<double>();
  for (double e : v) ASSERT_TRUE(std::isfinite(e));
  // Var 2, fourth moment 24: the sample variance's sd is sqrt((24 - 4) / n).
  EXPECT_NEAR(mean_of(v), 0.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(variance_of(v), 2.0, 5 * std::sqrt(20.0 / n));
  EXPECT_LT(ks_statistic(v, laplace_cdf), kKsCritical);
}

TEST(RandomLaplace, IsJaxsInverseCdfOfUniform) {
  const Array k = random::key(402);
  const auto x = random::laplace({2000}, k, 0.0, 1.0, float64).to_vector<double>();
  const auto u = random::uniform({2000}, k, -1.0 + std::ldexp(1.0, -53), 1.0, float64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = u[i] > 0 ? 1.0 : u[i] < 0 ? -1.0 : 0.0;
    EXPECT_NEAR(x[i], s * std::log1p(-std::abs(u[i])), 1e-13 * (1 + std::abs(x[i]))) << i;
  }
}

TEST(RandomLaplace, LocScaleAndDtypes) {
  const int n = 40000;
  for (Dtype t : {float32, float64, float16, bfloat16}) {
    const Array x = random::laplace({n}, random::key(403), 2.0, 0.5, t);
    ASSERT_EQ(x.dtype(), t);
    const auto v = x.to_vector<double>();
    const double slack = t == bfloat16 ? 0.01 : 0.0;
    EXPECT_NEAR(mean_of(v), 2.0, 5 * 0.5 * std::sqrt(2.0 / n) + slack) << dtype_name(t);
    EXPECT_NEAR(variance_of(v), 0.5, 5 * 0.25 * std::sqrt(20.0 / n) + slack) << dtype_name(t);
    if (t == float32 || t == float64) {
      EXPECT_LT(ks_statistic(v, [](double y) { return laplace_cdf((y - 2.0) / 0.5); }), kKsCritical);
    }
  }
  const auto zero = random::laplace({5}, random::key(404), -1.0, 0.0).to_vector<float>();
  for (float e : zero) EXPECT_EQ(e, -1.0f);
}

// ---------------------------------------------------------------- truncated_normal

TEST(RandomTruncatedNormal, KolmogorovSmirnovAndMeanForSeveralIntervals) {
  const int n = 30000;
  for (auto [a, b] :
       {std::pair{-1.0, 2.0}, std::pair{0.0, kInf}, std::pair{-kInf, -1.5}, std::pair{0.5, 0.75}}) {
    const Array x = random::truncated_normal({n}, random::key(501), a, b);
    ASSERT_EQ(x.dtype(), float32);
    const auto v = x.to_vector<double>();
    for (double e : v) ASSERT_TRUE(e > a && e < b) << e << " in (" << a << ", " << b << ")";
    const double z = normal_cdf(b) - normal_cdf(a);
    const double pa = std::isinf(a) ? 0 : normal_pdf(a), pb = std::isinf(b) ? 0 : normal_pdf(b);
    const double mean = (pa - pb) / z;
    const double ea = std::isinf(a) ? 0 : a * pa, eb = std::isinf(b) ? 0 : b * pb;
    const double var = 1 + (ea - eb) / z - mean * mean;
    EXPECT_NEAR(mean_of(v), mean, 5 * std::sqrt(var / n)) << a << " " << b;
    EXPECT_LT(ks_statistic(v, [&](double t) { return (normal_cdf(t) - normal_cdf(a)) / z; }), kKsCritical)
        << a << " " << b;
  }
}

TEST(RandomTruncatedNormal, IsJaxsErfSpaceConstruction) {
  const Array k = random::key(502);
  const double a = -0.5, b = 1.25;
  const auto x = random::truncated_normal({1000}, k, a, b, float64).to_vector<double>();
  const double ea = std::erf(a / std::sqrt(2.0)), eb = std::erf(b / std::sqrt(2.0));
  const auto u = random::uniform({1000}, k, 0.0, 1.0, float64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(std::erf(x[i] / std::sqrt(2.0)), ea + (eb - ea) * u[i], 1e-12) << i;
}

TEST(RandomTruncatedNormal, ArrayBoundsPerColumnAndEveryDtype) {
  const int n = 20000;
  const std::vector<double> lo{-2.0, 0.0, 1.0}, hi{-1.0, 3.0, 1.5};
  const Array x = random::truncated_normal({n, 3}, random::key(503), Array(lo, {3}), Array(hi, {1, 3}));
  const auto v = x.to_vector<double>();
  for (size_t c = 0; c < 3; ++c) {
    const auto col = column(v, 3, c);
    for (double e : col) ASSERT_TRUE(e > lo[c] && e < hi[c]) << c << ": " << e;
    const double z = normal_cdf(hi[c]) - normal_cdf(lo[c]);
    EXPECT_LT(ks_statistic(col, [&](double t) { return (normal_cdf(t) - normal_cdf(lo[c])) / z; }),
              kKsCritical)
        << c;
  }
  // Strictly inside in every dtype, also where the interval is a few units of the dtype wide and
  // where both bounds are deep in a tail (erf rounds to 1 in float32: the draws pile at the clamp).
  for (Dtype t : {float32, float64, float16, bfloat16}) {
    for (auto [a, b] : {std::pair{1.0, 1.03125}, std::pair{-0.5, 0.5}, std::pair{6.0, 7.0}}) {
      const auto w = random::truncated_normal({2000}, random::key(504), a, b, t).to_vector<double>();
      for (double e : w)
        ASSERT_TRUE(e > a && e < b) << dtype_name(t) << " " << e << " in (" << a << ", " << b << ")";
    }
  }
}

TEST(RandomTruncatedNormal, WideBoundsAreTheNormal) {
  const auto v = random::truncated_normal({20000}, random::key(505), -kInf, kInf).to_vector<double>();
  EXPECT_LT(ks_statistic(v, normal_cdf), kKsCritical);
  for (double e : v) ASSERT_TRUE(std::isfinite(e));
}

// ---------------------------------------------------------------- every op: determinism, vmap, devices

// The multivariate_normal draw's parameters (random_multivariate_test.cpp checks its values).
const std::vector<double> kMean{1.0, -2.0, 0.5};
const std::vector<double> kCov{2.0, 0.6, -0.4, 0.6, 1.0, 0.3, -0.4, 0.3, 0.5};

struct Draw {
  std::string name;
  std::function<Array(const Array& key, StreamOrDevice s)> fn;
  bool exact;  // bitwise across devices (no transcendental function in the composition)
};

std::vector<Draw> draws() {
  const Array lo(std::vector<float>{-1.0f, 2.0f, 0.0f}, {3}), hi(std::vector<float>{1.0f, 2.5f, 10.0f}, {3});
  const Array ilo(std::vector<int32_t>{-5, 0, 100}, {3}), ihi(std::vector<int32_t>{5, 1, 200}, {3});
  const Array p(std::vector<float>{0.2f, 0.5f, 0.7f}, {3});
  const Array logits = test::random_array({3, 4}, float32, 31);
  return {
      {"uniform",
       [=](const Array& k, StreamOrDevice s) {
         return random::uniform({4, 3}, k, lo, hi, float32, s);
       },
       true},
      {"uniform f16",
       [=](const Array& k, StreamOrDevice s) {
         return random::uniform({4, 3}, k, lo, hi, float16, s);
       },
       true},
      {"randint",
       [=](const Array& k, StreamOrDevice s) {
         return random::randint({4, 3}, k, ilo, ihi, int32, s);
       },
       true},
      {"randint u8",
       [=](const Array& k, StreamOrDevice s) {
         return random::randint({4, 3}, k, ilo, ihi, uint8, s);
       },
       true},
      {"randint i64",
       [=](const Array& k, StreamOrDevice s) {
         return random::randint({4, 3}, k, ilo, ihi, int64, s);
       },
       true},
      {"bernoulli",
       [=](const Array& k, StreamOrDevice s) {
         return random::bernoulli({4, 3}, k, p, s);
       },
       true},
      {"categorical",
       [=](const Array& k, StreamOrDevice s) {
         return random::categorical(logits, k, -1, Shape{5, 3}, s);
       },
       true},
      {"laplace",
       [](const Array& k, StreamOrDevice s) {
         return random::laplace({4, 3}, k, 1.0, 2.0, float32, s);
       },
       false},
      {"truncated_normal",
       [=](const Array& k, StreamOrDevice s) {
         return random::truncated_normal({4, 3}, k, lo, hi, float32, s);
       },
       false},
      {"multivariate_normal",
       [](const Array& k, StreamOrDevice s) {
         return random::multivariate_normal(Array(kMean, {3}), Array(kCov, {3, 3}), k, Shape{4}, "cholesky",
                                            s);
       },
       false},
  };
}

TEST(RandomMoreEveryOp, SameKeySameBitsOtherKeyOtherBits) {
  for (const Draw& d : draws()) {
    const Array a = d.fn(random::key(801), {}), b = d.fn(random::key(801), {}),
                c = d.fn(random::key(802), {});
    expect_bitwise(a, b, d.name);
    EXPECT_NE(test::array_bytes(a), test::array_bytes(c)) << d.name;
  }
}

TEST(RandomMoreEveryOp, VmapOverKeysIsTheLoop) {
  for (const Draw& d : draws()) expect_vmap_matches_loop([&](const Array& k) { return d.fn(k, {}); }, d.name);
}

TEST(RandomMoreEveryOp, DefaultDeviceMatchesTheCpu) {
  // In the GPU pass the default device is the GPU: the same draws, bit for bit where the
  // composition is exact arithmetic, else to float32 rounding.
  for (const Draw& d : draws()) {
    const Array here = d.fn(random::key(803), {}), cpu = d.fn(random::key(803), Device::cpu);
    if (d.exact)
      expect_bitwise(here, cpu, d.name);
    else
      expect_near_all(here, cpu, 1e-5, d.name);
  }
}

TEST(RandomMoreEveryOp, CompiledIsEager) {
  // The keys as the compiled function's input: each op traced once, replayed with another key.
  for (const Draw& d : draws()) {
    auto f = compile([&](const std::vector<Array>& in) { return std::vector<Array>{d.fn(in[0], {})}; });
    for (uint64_t seed : {805, 806}) {
      const Array compiled = f({random::key(seed)})[0], eager = d.fn(random::key(seed), {});
      if (d.exact)
        expect_bitwise(compiled, eager, d.name + " compiled");
      else
        expect_near_all(compiled, eager, 1e-5, d.name + " compiled");
    }
  }
}

// ---------------------------------------------------------------- errors

TEST(RandomMoreErrors, MessagesNameTheOp) {
  const Array k = random::key(0);
  auto expect_message = [](const std::function<void()>& f, const std::string& op, const std::string& what) {
    const std::string m = message_of(f);
    EXPECT_NE(m.find("[" + op + "]"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  expect_message([&] { random::uniform({3}, k, Array(std::vector<float>(5, 0.0f), {5}), Array(1.0f)); },
                 "uniform", "broadcast to the shape");
  expect_message([&] { random::truncated_normal({3}, k, 1.0, 1.0); }, "truncated_normal",
                 "lower must be below upper");
  expect_message(
      [&] {
        random::multivariate_normal(zeros({3}), zeros({3, 2}), k);
      },
      "multivariate_normal", "cov must be (..., n, n)");
  expect_message([&] { random::multivariate_normal(zeros({3}), eye(3), k, std::nullopt, "qr"); },
                 "multivariate_normal", "method must be");
  expect_message(
      [&] {
        random::categorical(zeros({2, 4}), k, -1, Shape{3});
      },
      "categorical", "broadcast to the shape");
  expect_message([&] { random::laplace({3}, k, 0.0, -1.0); }, "laplace", "scale");
}

TEST(RandomMoreErrors, BadArguments) {
  const Array k = random::key(0);
  const Array f3 = zeros({3});
  EXPECT_THROW(random::uniform({3}, k, f3, f3, int32), DtypeError);
  EXPECT_THROW(random::uniform({3}, k, zeros({2, 3}), f3), ShapeError);  // would grow the shape
  EXPECT_THROW(random::uniform({3}, k, zeros({4}), f3), ShapeError);
  EXPECT_THROW(random::uniform({3}, k, Array(), f3), ValueError);
  EXPECT_THROW(random::uniform({-1}, k, f3, f3), ShapeError);
  EXPECT_THROW(random::uniform({3}, Array({1, 2}), f3, f3), DtypeError);
  EXPECT_THROW(random::randint({3}, k, Array(0), Array(5), float32), DtypeError);
  EXPECT_THROW(random::randint({3}, k, Array(0.0f), Array(5)), DtypeError);
  EXPECT_THROW(random::randint({3}, k, Array(0), Array(std::vector<int32_t>{1, 2}, {2})), ShapeError);
  EXPECT_THROW(random::bernoulli({3}, k, Array(1)), DtypeError);
  EXPECT_THROW(random::bernoulli({3}, k, zeros({2})), ShapeError);
  EXPECT_THROW(random::bernoulli({3}, Array(), f3), ValueError);
  EXPECT_THROW(random::laplace({3}, k, std::nan(""), 1.0), ValueError);
  EXPECT_THROW(random::laplace({3}, k, 0.0, kInf), ValueError);
  EXPECT_THROW(random::laplace({3}, k, 0.0, 1.0, int32), DtypeError);
  EXPECT_THROW(random::laplace({-2}, k), ShapeError);
  EXPECT_THROW(random::truncated_normal({3}, k, 2.0, 1.0), ValueError);
  EXPECT_THROW(random::truncated_normal({3}, k, std::nan(""), 1.0), ValueError);
  EXPECT_THROW(random::truncated_normal({3}, k, 1.0, 1.0 + 1e-12), ValueError);  // equal in float32
  EXPECT_THROW(random::truncated_normal({3}, k, 0.0, 1.0, uint8), DtypeError);
  EXPECT_THROW(random::truncated_normal({3}, k, f3, zeros({2})), ShapeError);
  EXPECT_THROW(random::multivariate_normal(Array(1.0f), eye(1), k), ShapeError);
  EXPECT_THROW(random::multivariate_normal(f3, f3, k), ShapeError);
  EXPECT_THROW(random::multivariate_normal(f3, eye(4), k), ShapeError);
  EXPECT_THROW(random::multivariate_normal(zeros({2, 3}), eye(3), k, Shape{3}), ShapeError);
  EXPECT_THROW(random::multivariate_normal(zeros({2, 3}), zeros({3, 3, 3}), k), ShapeError);
  EXPECT_THROW(random::multivariate_normal(f3, eye(3), k, std::nullopt, "lu"), ValueError);
  // Not positive-definite: cholesky's error when evaluated.
  EXPECT_THROW(random::multivariate_normal(f3, negative(eye(3)), k).eval(), ValueError);
  EXPECT_THROW(random::categorical(zeros({2, 4}), k, -1, Shape{2, 3}), ShapeError);
  EXPECT_THROW(random::categorical(zeros({2, 4}), k, 2, Shape{2}), ShapeError);
  EXPECT_THROW(random::categorical(Array(1.0f), k, 0, Shape{}), ShapeError);
  EXPECT_THROW(random::categorical(zeros({2, 0}), k, -1, Shape{2}), ShapeError);
  EXPECT_THROW(random::categorical_samples(zeros({2, 4}), k, -1), ValueError);
  EXPECT_THROW(random::categorical_samples(Array(), k, 2), ValueError);
}

}  // namespace
}  // namespace kiln
