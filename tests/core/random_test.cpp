// Random numbers: threefry known answers, determinism (across evaluations and threads), key
// independence, and distribution checks (moments within 5 sigma, Kolmogorov-Smirnov, histograms).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <thread>

#include "kiln/core/ops/random_primitives.h"
#include "support/op_test.h"
#include "support/stats.h"

namespace kiln {
namespace {

using detail::threefry2x32;
using detail::Threefry2x32;

std::vector<uint32_t> float_bits(const Array& a) {
  std::vector<uint32_t> out;
  for (float v : a.to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

using test::kKsCritical;
using test::ks_statistic;
using test::mean_of;
using test::normal_cdf;
using test::variance_of;

// ---------------------------------------------------------------- threefry and keys

TEST(Threefry, Random123KnownAnswers) {
  // Random123's kat_vectors for threefry2x32_20 (counter, key -> output); also JAX's test vector.
  EXPECT_EQ(threefry2x32({0u, 0u}, {0u, 0u}), (Threefry2x32{0x6b200159u, 0x99ba4efeu}));
  EXPECT_EQ(threefry2x32({0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (Threefry2x32{0x1cb996fcu, 0xbb002be7u}));
  EXPECT_EQ(threefry2x32({0x13198a2eu, 0x03707344u}, {0x243f6a88u, 0x85a308d3u}),
            (Threefry2x32{0xc4923a9cu, 0x483df7a0u}));
}

TEST(RandomKey, FromSeedSplitsHighAndLowWords) {
  EXPECT_EQ(random::key(0).to_vector<uint32_t>(), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(random::key(42).to_vector<uint32_t>(), (std::vector<uint32_t>{0, 42}));
  const Array k = random::key(0x123456789abcdef0ull);
  EXPECT_EQ(k.dtype(), uint32);
  EXPECT_EQ(k.shape(), Shape{2});
  EXPECT_EQ(k.to_vector<uint32_t>(), (std::vector<uint32_t>{0x12345678u, 0x9abcdef0u}));
}

TEST(RandomBits, ElementIIsThreefryOfCounterI) {
  const Array k = random::key(0x0000000700000003ull);
  const Array b = random::bits({3, 5}, k);
  ASSERT_EQ(b.shape(), (Shape{3, 5}));
  ASSERT_EQ(b.dtype(), uint32);
  const std::vector<uint32_t> got = b.to_vector<uint32_t>();
  for (uint32_t i = 0; i < 15; ++i) {
    const Threefry2x32 r = threefry2x32({7u, 3u}, {0u, i});
    EXPECT_EQ(got[i], r[0] ^ r[1]) << "element " << i;
  }
  EXPECT_EQ(random::bits({}, k).item<uint32_t>(), got[0]);  // a 0-d draw is element 0
  EXPECT_EQ(random::bits({0, 4}, k).size(), 0);
}

TEST(RandomSplit, RowsAreBothThreefryWords) {
  const Array k = random::key(5);
  const Array keys = random::split(k, 3);
  ASSERT_EQ(keys.shape(), (Shape{3, 2}));
  ASSERT_EQ(keys.dtype(), uint32);
  const std::vector<uint32_t> got = keys.to_vector<uint32_t>();
  for (uint32_t i = 0; i < 3; ++i) {
    const Threefry2x32 r = threefry2x32({0u, 5u}, {0u, i});
    EXPECT_EQ(got[2 * i], r[0]);
    EXPECT_EQ(got[2 * i + 1], r[1]);
  }
  const std::vector<Array> rows = random::split_keys(k, 3);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i].shape(), Shape{2});
    EXPECT_EQ(rows[i].to_vector<uint32_t>(), (std::vector<uint32_t>{got[2 * i], got[2 * i + 1]}));
  }
  EXPECT_EQ(random::split(k, 0).shape(), (Shape{0, 2}));
}

TEST(RandomSplit, SubkeysGiveIndependentStreams) {
  const auto ks = random::split_keys(random::key(1), 2);
  const std::vector<double> a = random::uniform({20000}, ks[0]).to_vector<double>();
  const std::vector<double> b = random::uniform({20000}, ks[1]).to_vector<double>();
  ASSERT_NE(a, b);
  // Correlation of independent streams is N(0, 1/n): 5 sigma is 5 / sqrt(n).
  const double ma = mean_of(a), mb = mean_of(b);
  double cov = 0;
  for (size_t i = 0; i < a.size(); ++i) cov += (a[i] - ma) * (b[i] - mb);
  const double corr = cov / a.size() / std::sqrt(variance_of(a) * variance_of(b));
  EXPECT_LT(std::abs(corr), 5.0 / std::sqrt(20000.0));
  // The subkeys differ from each other and from the parent.
  EXPECT_NE(ks[0].to_vector<uint32_t>(), ks[1].to_vector<uint32_t>());
  EXPECT_NE(ks[0].to_vector<uint32_t>(), random::key(1).to_vector<uint32_t>());
}

// ---------------------------------------------------------------- determinism

TEST(RandomDeterminism, SameKeySameNumbersAcrossEvaluations) {
  const Shape shape{300, 700};  // large enough for parallel_for to split the work
  const auto a = float_bits(random::normal(shape, random::key(7)));
  const auto b = float_bits(random::normal(shape, random::key(7)));
  EXPECT_EQ(a, b);
  const auto c = float_bits(random::normal(shape, random::key(8)));
  EXPECT_NE(a, c);
  int equal = 0;
  for (size_t i = 0; i < a.size(); ++i) equal += a[i] == c[i];
  EXPECT_LT(equal, 10);
}

TEST(RandomDeterminism, BitExactAcrossThreads) {
  // The main thread's eval may split the work over the pool; concurrent callers run their loops
  // serially, so this also compares different work splits.
  const Shape shape{1 << 18};
  const Array k = random::key(11);
  const auto ref_u = float_bits(random::uniform(shape, k));
  const auto ref_n = float_bits(random::normal(shape, k, 1.0, 3.0));
  const auto ref_i = random::randint(shape, k, -1000, 1000).to_vector<int32_t>();
  std::vector<std::vector<uint32_t>> u(4), n(4);
  std::vector<std::vector<int32_t>> ints(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const Array key = random::key(11);
      u[t] = float_bits(random::uniform(shape, key));
      n[t] = float_bits(random::normal(shape, key, 1.0, 3.0));
      ints[t] = random::randint(shape, key, -1000, 1000).to_vector<int32_t>();
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(u[t], ref_u) << "thread " << t;
    EXPECT_EQ(n[t], ref_n) << "thread " << t;
    EXPECT_EQ(ints[t], ref_i) << "thread " << t;
  }
}

TEST(RandomDeterminism, PrefixOfALargerDrawIsTheSmallerDraw) {
  // Element i depends only on (key, i).
  const Array k = random::key(3);
  const auto small = random::bits({10}, k).to_vector<uint32_t>();
  const auto big = random::bits({100000}, k).to_vector<uint32_t>();
  EXPECT_TRUE(std::equal(small.begin(), small.end(), big.begin()));
}

// ---------------------------------------------------------------- uniform

TEST(RandomUniform, MomentsAndKolmogorovSmirnov) {
  const int n = 100000;
  const Array x = random::uniform({n}, random::key(2024));
  ASSERT_EQ(x.dtype(), float32);
  const std::vector<double> v = x.to_vector<double>();
  for (double e : v) ASSERT_TRUE(e >= 0.0 && e < 1.0) << e;
  EXPECT_NEAR(mean_of(v), 0.5, 5 * std::sqrt(1.0 / 12 / n));
  // Var of the sample variance of U(0,1) is (mu4 - sigma^4) / n = (1/80 - 1/144) / n.
  EXPECT_NEAR(variance_of(v), 1.0 / 12, 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / n));
  EXPECT_LT(ks_statistic(v, [](double t) { return t; }), kKsCritical);
}

TEST(RandomUniform, FloatMantissaTrick) {
  const Array k = random::key(9);
  const auto bits = random::bits({64}, k).to_vector<uint32_t>();
  const auto u = random::uniform({64}, k).to_vector<float>();
  for (size_t i = 0; i < 64; ++i)
    EXPECT_EQ(u[i], std::bit_cast<float>((bits[i] >> 9) | 0x3f800000u) - 1.0f) << "element " << i;
}

TEST(RandomUniform, BoundsAndAffineMap) {
  const int n = 50000;
  const std::vector<double> v = random::uniform({n}, random::key(4), -2.0, 3.0).to_vector<double>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), -2.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0);
  EXPECT_NEAR(mean_of(v), 0.5, 5 * 5.0 * std::sqrt(1.0 / 12 / n));
  EXPECT_LT(ks_statistic(v, [](double t) { return (t + 2.0) / 5.0; }), kKsCritical);
}

TEST(RandomUniform, EveryDtypeStaysBelowHigh) {
  // Rounding to the dtype would carry values near the top up to `high`; the clamp prevents it.
  const int n = 100000;
  for (Dtype t : {float16, bfloat16, float32, float64}) {
    for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{-1.0, 0.1}, std::pair{10.0, 12.5}}) {
      const Array x = random::uniform({n}, random::key(77), lo, hi, t);
      ASSERT_EQ(x.dtype(), t);
      const std::vector<double> v = x.to_vector<double>();
      const double mx = *std::max_element(v.begin(), v.end()), mn = *std::min_element(v.begin(), v.end());
      EXPECT_LT(mx, hi) << dtype_name(t) << " [" << lo << ", " << hi << ")";
      EXPECT_GE(mn, static_cast<double>(static_cast<float>(lo))) << dtype_name(t);
      EXPECT_NEAR(mean_of(v), (lo + hi) / 2, 0.02 * (hi - lo)) << dtype_name(t);
      // Near 1, float16 steps by 2^-11 and bfloat16 by 2^-8: n draws reach the clamp there.
      if (lo == 0.0 && t == float16) {
        EXPECT_EQ(mx, 1.0 - std::ldexp(1.0, -11));
      }
      if (lo == 0.0 && t == bfloat16) {
        EXPECT_EQ(mx, 1.0 - std::ldexp(1.0, -8));
      }
    }
  }
}

TEST(RandomUniform, Float64UsesFiftyTwoBits) {
  const std::vector<double> v =
      random::uniform({1000}, random::key(5), 0.0, 1.0, float64).to_vector<double>();
  int beyond_float = 0;
  for (double e : v) beyond_float += static_cast<double>(static_cast<float>(e)) != e;
  EXPECT_GT(beyond_float, 990);
  EXPECT_NEAR(mean_of(v), 0.5, 5 * std::sqrt(1.0 / 12 / 1000));
}

// ---------------------------------------------------------------- normal

TEST(RandomNormal, MomentsAndKolmogorovSmirnov) {
  const int n = 100000;
  const std::vector<double> v = random::normal({n}, random::key(31)).to_vector<double>();
  EXPECT_NEAR(mean_of(v), 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(variance_of(v), 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_LT(ks_statistic(v, normal_cdf), kKsCritical);
  for (double e : v) ASSERT_TRUE(std::isfinite(e));
}

TEST(RandomNormal, IsSqrt2ErfinvOfUniform) {
  // JAX's construction: u uniform on (-1, 1), z = sqrt(2) erfinv(u), i.e. erf(z / sqrt(2)) = u.
  const Array k = random::key(8);
  const auto z = random::normal({2000}, k, 0.0, 1.0, float64).to_vector<double>();
  const auto u = random::uniform({2000}, k, std::nextafter(-1.0, 0.0), 1.0, float64).to_vector<double>();
  for (size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(std::erf(z[i] / std::sqrt(2.0)), u[i], 1e-12) << i;
}

TEST(RandomNormal, MeanAndStddev) {
  const int n = 100000;
  for (Dtype t : {float32, float64, bfloat16, float16}) {
    const Array x = random::normal({n}, random::key(12), 3.0, 2.0, t);
    ASSERT_EQ(x.dtype(), t);
    const std::vector<double> v = x.to_vector<double>();
    const double slack = t == bfloat16 ? 0.02 : 0.0;  // bfloat16 rounds each sample by up to 2^-8 relative
    EXPECT_NEAR(mean_of(v), 3.0, 5 * 2.0 / std::sqrt(n) + slack) << dtype_name(t);
    EXPECT_NEAR(std::sqrt(variance_of(v)), 2.0, 5 * 2.0 / std::sqrt(2.0 * n) + slack) << dtype_name(t);
  }
  const std::vector<double> zero = random::normal({10}, random::key(1), 5.0, 0.0).to_vector<double>();
  for (double e : zero) EXPECT_EQ(e, 5.0);
}

// ---------------------------------------------------------------- bernoulli, randint

TEST(RandomBernoulli, Rate) {
  const int n = 100000;
  const Array b = random::bernoulli({n}, random::key(6), 0.3);
  ASSERT_EQ(b.dtype(), bool_);
  const std::vector<double> v = b.to_vector<double>();
  EXPECT_NEAR(mean_of(v), 0.3, 5 * std::sqrt(0.3 * 0.7 / n));
  const std::vector<bool> none = random::bernoulli({1000}, random::key(6), 0.0).to_vector<bool>();
  EXPECT_TRUE(std::none_of(none.begin(), none.end(), [](bool x) { return x; }));
  const std::vector<bool> all = random::bernoulli({1000}, random::key(6), 1.0).to_vector<bool>();
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](bool x) { return x; }));
}

TEST(RandomRandint, RangeAndHistogram) {
  const int n = 100000;
  const Array r = random::randint({n}, random::key(13), -3, 7);
  ASSERT_EQ(r.dtype(), int32);
  std::map<int, int> counts;
  for (int32_t x : r.to_vector<int32_t>()) {
    ASSERT_TRUE(x >= -3 && x < 7) << x;
    ++counts[x];
  }
  ASSERT_EQ(counts.size(), 10u);
  const double expected = n / 10.0, sigma = std::sqrt(n * 0.1 * 0.9);
  for (auto [value, count] : counts) EXPECT_NEAR(count, expected, 5 * sigma) << "value " << value;
}

TEST(RandomRandint, FullRangesOfEveryIntegerDtype) {
  const Array k = random::key(14);
  const auto u8 = random::randint({20000}, k, 0, 256, uint8).to_vector<int64_t>();
  EXPECT_EQ(*std::min_element(u8.begin(), u8.end()), 0);
  EXPECT_EQ(*std::max_element(u8.begin(), u8.end()), 255);
  const auto i8 = random::randint({20000}, k, -128, 128, int8).to_vector<int64_t>();
  EXPECT_EQ(*std::min_element(i8.begin(), i8.end()), -128);
  EXPECT_EQ(*std::max_element(i8.begin(), i8.end()), 127);
  const auto u32 = random::randint({20000}, k, 0, int64_t{1} << 32, uint32).to_vector<int64_t>();
  EXPECT_GT(*std::max_element(u32.begin(), u32.end()), int64_t{3} << 30);  // top quarter of the range
  EXPECT_GE(*std::min_element(u32.begin(), u32.end()), 0);
  const Array big = random::randint({20000}, k, std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), int64);
  ASSERT_EQ(big.dtype(), int64);
  const auto i64 = big.to_vector<int64_t>();
  const auto negatives = std::count_if(i64.begin(), i64.end(), [](int64_t x) { return x < 0; });
  EXPECT_NEAR(static_cast<double>(negatives), 10000.0, 5 * std::sqrt(5000.0));
  EXPECT_EQ(random::randint({5}, k, 9, 10).to_vector<int32_t>(), (std::vector<int32_t>(5, 9)));
}

// ---------------------------------------------------------------- categorical, permutation

TEST(RandomCategorical, FrequenciesMatchSoftmax) {
  const int n = 60000;
  const std::vector<double> logits{0.5, -1.0, 2.0, 0.0};
  double z = 0;
  for (double l : logits) z += std::exp(l);
  const Array rows = broadcast_to(Array(logits, {4}, float32), {n, 4});
  const Array s = random::categorical(rows, random::key(15));
  ASSERT_EQ(s.dtype(), int32);
  ASSERT_EQ(s.shape(), Shape{n});
  std::vector<int> counts(4, 0);
  for (int32_t c : s.to_vector<int32_t>()) {
    ASSERT_TRUE(c >= 0 && c < 4);
    ++counts[c];
  }
  for (int c = 0; c < 4; ++c) {
    const double p = std::exp(logits[c]) / z;
    EXPECT_NEAR(counts[c], n * p, 5 * std::sqrt(n * p * (1 - p))) << "class " << c;
  }
}

TEST(RandomCategorical, AlongAxisZeroOfATransposedInputAndMaskedClasses) {
  const int n = 20000;
  const double inf = std::numeric_limits<double>::infinity();
  // (n, 3) transposed to (3, n): categories along axis 0; class 1 is masked out with -inf.
  const Array rows = broadcast_to(Array(std::vector<double>{0.0, -inf, std::log(3.0)}, {3}, float64), {n, 3});
  const Array s = random::categorical(transpose(rows), random::key(16), 0);
  ASSERT_EQ(s.shape(), Shape{n});
  std::vector<int> counts(3, 0);
  for (int32_t c : s.to_vector<int32_t>()) ++counts[c];
  EXPECT_EQ(counts[1], 0);
  EXPECT_NEAR(counts[2], 0.75 * n, 5 * std::sqrt(n * 0.75 * 0.25));
}

TEST(RandomPermutation, IsAPermutation) {
  const Array k = random::key(17);
  const Array p = random::permutation(1000, k);
  ASSERT_EQ(p.dtype(), int32);
  ASSERT_EQ(p.shape(), Shape{1000});
  std::vector<int32_t> v = p.to_vector<int32_t>();
  std::vector<int32_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(v, identity);
  EXPECT_NE(v, random::permutation(1000, random::key(18)).to_vector<int32_t>());
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, identity);
  EXPECT_EQ(random::permutation(0, k).size(), 0);
  EXPECT_EQ(random::permutation(1, k).to_vector<int32_t>(), std::vector<int32_t>{0});
}

TEST(RandomPermutation, AllOrdersEquallyLikely) {
  // 6000 keys through the batched form (what vmap over keys builds): each order of 3 about 1000 times.
  const int n = 6000;
  const Array keys = random::split(random::key(19), n);
  const Array perms = detail::RandomPermutation(Stream{}, 3).apply(keys);
  ASSERT_EQ(perms.shape(), (Shape{n, 3}));
  const std::vector<int32_t> v = perms.to_vector<int32_t>();
  std::map<std::vector<int32_t>, int> counts;
  for (int i = 0; i < n; ++i) ++counts[std::vector<int32_t>(v.begin() + 3 * i, v.begin() + 3 * i + 3)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) EXPECT_NEAR(count, 1000, 5 * std::sqrt(n / 6.0 * 5 / 6));
}

TEST(RandomPermutation, ShufflesRowsOfAnArray) {
  std::vector<float> values(15);
  std::iota(values.begin(), values.end(), 0.0f);
  const Array x(values, {5, 3});
  const Array y = random::permutation(x, random::key(20));
  ASSERT_EQ(y.shape(), (Shape{5, 3}));
  const std::vector<float> got = y.to_vector<float>();
  std::vector<int> rows;
  for (int r = 0; r < 5; ++r) {
    const int source = static_cast<int>(got[3 * r]) / 3;
    for (int c = 0; c < 3; ++c) EXPECT_EQ(got[3 * r + c], static_cast<float>(3 * source + c));
    rows.push_back(source);
  }
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int>{0, 1, 2, 3, 4}));
}

// ---------------------------------------------------------------- primitive rules

TEST(RandomPrimitive, BatchedKeysGiveOneSamplePerKey) {
  const Array keys = random::split(random::key(21), 4);
  const auto rows = random::split_keys(random::key(21), 4);
  const auto prim = std::make_shared<detail::RandomUniform>(Stream{}, Shape{2, 3}, float32, -1.0, 1.0);
  EXPECT_TRUE(prim->has(Trait::random));
  // vmap over the key, with the batch axis first and last.
  for (int axis : {0, 1}) {
    const Array batched = axis == 0 ? keys : transpose(keys);
    const std::vector<Array> in{batched};
    const std::vector<int> axes{axis};
    const VmapResult r = prim->vmap({in, axes});
    ASSERT_EQ(r.axes, std::vector<int>{0});
    ASSERT_EQ(r.outputs[0].shape(), (Shape{4, 2, 3}));
    const std::vector<float> got = r.outputs[0].to_vector<float>();
    for (int b = 0; b < 4; ++b) {
      const std::vector<float> want = random::uniform({2, 3}, rows[b], -1.0, 1.0).to_vector<float>();
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + 6 * b))
          << "axis " << axis << " key " << b;
    }
  }
}

TEST(RandomPrimitive, NoGradientFlowsIntoTheKeyOrFromTheSample) {
  const Array x = test::random_array({5}, float32, 1);
  const Array noise = random::normal({5}, random::key(22));
  const auto [value, g] = value_and_grad([&](const Array& v) { return sum(multiply(v, noise)); })(x);
  test::expect_close(g, noise.to_vector<double>(), 0, 0);
  const auto prim = detail::RandomBits(Stream{}, {3});
  const std::vector<Array> primals{random::key(1)}, cotangents{zeros({3}, uint32)},
      outputs{zeros({3}, uint32)};
  const std::vector<int> argnums{0};
  const std::vector<Array> vjp = prim.vjp({primals, cotangents, argnums, outputs});
  EXPECT_EQ(vjp[0].to_vector<uint32_t>(), (std::vector<uint32_t>{0, 0}));
}

// ---------------------------------------------------------------- errors

TEST(RandomErrors, BadKeys) {
  EXPECT_THROW(random::uniform({3}, Array()), ValueError);
  EXPECT_THROW(random::uniform({3}, Array({1, 2})), DtypeError);  // int32, not uint32
  EXPECT_THROW(random::uniform({3}, Array(std::vector<uint32_t>{1, 2, 3}, {3})), ShapeError);
  EXPECT_THROW(random::normal({3}, random::split(random::key(0), 2)), ShapeError);  // (2, 2): split's rows
  EXPECT_THROW(random::split(Array(1.0f), 2), ValueError);
  try {
    random::bits({2}, Array(std::vector<uint32_t>{1, 2, 3}, {3}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[bits]"), std::string::npos) << e.what();
  }
}

TEST(RandomErrors, BadArguments) {
  const Array k = random::key(0);
  EXPECT_THROW(random::uniform({-1, 3}, k), ShapeError);
  EXPECT_THROW(random::uniform({3}, k, 1.0, 1.0), ValueError);
  EXPECT_THROW(random::uniform({3}, k, 2.0, 1.0), ValueError);
  EXPECT_THROW(random::uniform({3}, k, 0.0, std::nan("")), ValueError);
  EXPECT_THROW(random::uniform({3}, k, 0.0, 1e6, float16), ValueError);  // high overflows float16
  EXPECT_THROW(random::uniform({3}, k, 0.0, 1.0, int32), DtypeError);
  EXPECT_THROW(random::normal({3}, k, 0.0, -1.0), ValueError);
  EXPECT_THROW(random::normal({3}, k, 0.0, 1.0, uint8), DtypeError);
  EXPECT_THROW(random::bernoulli({3}, k, 1.5), ValueError);
  EXPECT_THROW(random::bernoulli({3}, k, std::nan("")), ValueError);
  EXPECT_THROW(random::randint({3}, k, 5, 5), ValueError);
  EXPECT_THROW(random::randint({3}, k, 0, 257, uint8), ValueError);
  EXPECT_THROW(random::randint({3}, k, -1, 10, uint32), ValueError);
  EXPECT_THROW(random::randint({3}, k, 0, 10, float32), DtypeError);
  EXPECT_THROW(random::split(k, -1), ValueError);
  EXPECT_THROW(random::permutation(-1, k), ValueError);
  EXPECT_THROW(random::permutation(Array(1.0f), k), ShapeError);
  EXPECT_THROW(random::categorical(Array(1.0f), k), ShapeError);
  EXPECT_THROW(random::categorical(zeros({4, 0}), k), ShapeError);
  EXPECT_THROW(random::categorical(zeros({4, 3}), k, 2), ShapeError);
  EXPECT_THROW(random::categorical(Array(), k), ValueError);
}

}  // namespace
}  // namespace kiln
