// Normalization layers (BatchNorm, LayerNorm, RMSNorm, GroupNorm) and Dropout: float64 loop
// references, PyTorch's running statistics, gradients by finite differences, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/nn/layers/dropout.h"
#include "kiln/nn/layers/norm.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

// Inputs reproducible in Python: sin(a i + b) + 0.1 cos(3 i), rounded to float32.
Array wave(const Shape& shape, double a, double b, double gain = 1.0) {
  std::vector<double> v(shape_size(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = static_cast<double>(i);
    v[i] = std::sin(a * d + b) + 0.1 * std::cos(3.0 * d);
  }
  return astype(Array(v, shape, float64), float32) * static_cast<float>(gain);
}

// Normalizes groups of `inner` consecutive values strided as (outer, inner) of a row-major buffer
// where element j of group g sits at index(g, j); the affine parameters index by param(g, j).
struct Layout {
  int64_t n, c, s;  // (N, C, S): batch, channels, positions
  int64_t at(int64_t i, int64_t ch, int64_t p) const { return (i * c + ch) * s + p; }
};

std::vector<double> batch_norm_ref(const std::vector<double>& x, Layout l, const std::vector<double>& mean,
                                   const std::vector<double>& var, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < l.n; ++i)
    for (int64_t ch = 0; ch < l.c; ++ch)
      for (int64_t p = 0; p < l.s; ++p)
        y[l.at(i, ch, p)] = (x[l.at(i, ch, p)] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch];
  return y;
}

// Per-channel batch mean and (biased) variance.
std::pair<std::vector<double>, std::vector<double>> channel_stats(const std::vector<double>& x, Layout l) {
  std::vector<double> m(l.c, 0.0), v(l.c, 0.0);
  const double count = static_cast<double>(l.n * l.s);
  for (int64_t ch = 0; ch < l.c; ++ch) {
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t p = 0; p < l.s; ++p) m[ch] += x[l.at(i, ch, p)] / count;
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t p = 0; p < l.s; ++p)
        v[ch] += (x[l.at(i, ch, p)] - m[ch]) * (x[l.at(i, ch, p)] - m[ch]) / count;
  }
  return {m, v};
}

// Row-wise normalization of (rows, inner): LayerNorm (center = true) or RMSNorm.
std::vector<double> row_norm_ref(const std::vector<double>& x, int64_t inner, const std::vector<double>& w,
                                 const std::vector<double>& b, double eps, bool center) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / inner; ++r) {
    double m = 0, sq = 0;
    for (int64_t j = 0; j < inner; ++j) m += x[r * inner + j] / static_cast<double>(inner);
    if (!center) m = 0;
    for (int64_t j = 0; j < inner; ++j) sq += (x[r * inner + j] - m) * (x[r * inner + j] - m);
    const double denom = std::sqrt(sq / static_cast<double>(inner) + eps);
    for (int64_t j = 0; j < inner; ++j)
      y[r * inner + j] = (x[r * inner + j] - m) / denom * (w.empty() ? 1.0 : w[j]) + (b.empty() ? 0.0 : b[j]);
  }
  return y;
}

// ---- BatchNorm

TEST(BatchNorm, KeysLayoutAndFrozenRunningStatistics) {
  BatchNorm2d bn(3);
  EXPECT_EQ(bn.parameters().keys(), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                                              "num_batches_tracked"}));
  EXPECT_EQ(bn.trainable_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(bn.num_batches_tracked.value().dtype(), int64);
  EXPECT_EQ(bn.num_batches_tracked.value().shape(), Shape{});
  expect_close(bn.running_var.value(), {1, 1, 1});
  expect_close(bn.running_mean.value(), {0, 0, 0});
  expect_close(bn.weight.value(), {1, 1, 1});
  BatchNorm1d plain(4, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(plain.parameters().empty());
  // A PyTorch state dict (these keys, num_batches_tracked int64) loads strictly.
  ParamTree sd{{"weight", full({3}, 2.0f)},
               {"bias", full({3}, 0.5f)},
               {"running_mean", full({3}, 0.25f)},
               {"running_var", full({3}, 4.0f)},
               {"num_batches_tracked", Array(int64_t{7})}};
  EXPECT_TRUE(bn.update(sd).clean());
  EXPECT_EQ(bn.num_batches_tracked.value().item<int64_t>(), 7);
  EXPECT_TRUE(bn.running_mean.frozen());  // update keeps the slot frozen
}

TEST(BatchNorm, TrainingModeUsesBatchStatisticsForEveryRank) {
  struct Case {
    Shape shape;
    Layout layout;
  };
  for (const Case& c : {Case{{5, 3}, {5, 3, 1}}, Case{{4, 3, 6}, {4, 3, 6}}, Case{{2, 3, 2, 3}, {2, 3, 6}},
                        Case{{2, 3, 2, 1, 2}, {2, 3, 4}}}) {
    BatchNorm bn(3, {.eps = 1e-3});
    bn.weight = random_array({3}, float32, 1, 0.5, 2.0);
    bn.bias = random_array({3}, float32, 2);
    const Array x = random_array(c.shape, float32, 3, -2.0, 3.0);
    const std::vector<double> xv = values(x);
    const auto [m, v] = channel_stats(xv, c.layout);
    const std::vector<double> ref =
        batch_norm_ref(xv, c.layout, m, v, values(bn.weight.value()), values(bn.bias.value()), 1e-3);
    expect_close(bn(x), ref, 1e-5, 1e-5);
    expect_close(bn.forward_train(x).y, ref, 1e-5, 1e-5);
    // Neither call changed the running statistics.
    expect_close(bn.running_mean.value(), {0, 0, 0});
    EXPECT_EQ(bn.num_batches_tracked.value().item<int64_t>(), 0);
  }
}

TEST(BatchNorm, RunningStatisticsEvolveAsPyTorchAndEvalUsesThem) {
  // /usr/bin/python3 (torch 1.13): bn = torch.nn.BatchNorm2d(3); weight [0.5, 1.5, -1], bias
  // [0.1, -0.2, 0.3]; three training calls on wave(24, 0.37, 1.1 s).reshape(2, 3, 2, 2) * (1 + 0.5 s).
  const std::vector<std::vector<double>> kMean = {{-0.0194543749, 0.0501690507, 0.0292476062},
                                                  {0.0387266427, 0.112371713, -0.0166797936},
                                                  {0.142667308, 0.0831135213, -0.12470232}};
  const std::vector<std::vector<double>> kVar = {{0.959394932, 0.92509836, 0.952837765},
                                                 {0.961522043, 0.909053326, 0.971870422},
                                                 {0.937379241, 1.08303046, 0.91781038}};
  const std::vector<double> kLastY = {0.565403461,  -0.0223175827, -0.205901548, -0.905049741, -0.866598666,
                                      -1.7259798,   -1.7792486,    -2.09500384,  1.31126642,   0.836304247,
                                      -0.318587869, -1.43835282,   -0.155197635, 0.291601628,  0.491407335,
                                      0.740053773,  1.75265932,    1.70905423,   0.868836462,  0.53628099,
                                      -0.607966423, -0.118144378,  1.42064822,   1.31483221};
  // bn.eval(); bn(wave(24, 0.53, 0.2).reshape(2, 3, 2, 2))
  const std::vector<double> kEval = {0.180563867,   0.319586903,  0.567594886,  0.483339876,  0.857233703,
                                     -0.0149370758, -0.565002918, -1.40046632,  1.13088334,   1.20969331,
                                     0.89018321,    0.43268314,   0.160850391,  0.412999034,  0.508022308,
                                     0.547418177,   0.56489557,   0.0943700001, -0.886185646, -1.26839256,
                                     1.29315865,    1.05290699,   0.951691449,  0.249287888};
  BatchNorm2d bn(3);
  bn.weight = Array({0.5f, 1.5f, -1.0f});
  bn.bias = Array({0.1f, -0.2f, 0.3f});
  Array y;
  for (int s = 0; s < 3; ++s) {
    const Array x = wave({2, 3, 2, 2}, 0.37, 1.1 * s, 1.0 + 0.5 * s);
    const BatchNormOutput out = bn.forward_train(x);
    expect_close(bn.running_mean.value(), s == 0 ? std::vector<double>{0, 0, 0} : kMean[s - 1], 1e-6, 1e-7);
    y = bn.train_step(x);
    expect_close(out.running_mean, kMean[s], 1e-6, 1e-7);
    expect_close(bn.running_mean.value(), kMean[s], 1e-6, 1e-7);
    expect_close(bn.running_var.value(), kVar[s], 1e-6, 1e-7);
    EXPECT_EQ(bn.num_batches_tracked.value().item<int64_t>(), s + 1);
  }
  expect_close(y, kLastY, 1e-5, 1e-6);
  bn.eval_mode();
  expect_close(bn(wave({2, 3, 2, 2}, 0.53, 0.2)), kEval, 1e-5, 1e-6);
  // Eval mode against the formula with the running statistics, in float64.
  const Array x = random_array({3, 3, 2, 2}, float32, 4);
  expect_close(
      bn(x), batch_norm_ref(values(x), {3, 3, 4}, kMean[2], kVar[2], {0.5, 1.5, -1}, {0.1, -0.2, 0.3}, 1e-5),
      1e-5, 1e-6);
  // Without tracked statistics eval mode still normalizes with the batch's.
  BatchNorm2d untracked(3, {.track_running_stats = false});
  untracked.eval_mode();
  const auto [m, v] = channel_stats(values(x), {3, 3, 4});
  expect_close(untracked(x), batch_norm_ref(values(x), {3, 3, 4}, m, v, {1, 1, 1}, {0, 0, 0}, 1e-5), 1e-5,
               1e-6);
  EXPECT_FALSE(untracked.train_step(x).shape().empty());
  EXPECT_TRUE(untracked.parameters().contains("weight"));
}

TEST(BatchNorm, CumulativeAverageWithoutMomentum) {
  // /usr/bin/python3: torch.nn.BatchNorm1d(2, momentum=None), three training calls on
  // wave(12, 0.41, 0.9 s).reshape(3, 2, 2) * (1 + s).
  BatchNorm1d bn(2, {.momentum = std::nullopt});
  for (int s = 0; s < 3; ++s) bn.train_step(wave({3, 2, 2}, 0.41, 0.9 * s, 1.0 + s));
  expect_close(bn.running_mean.value(), std::vector<double>{0.0345335901, -0.29659766}, 1e-6, 1e-7);
  expect_close(bn.running_var.value(), std::vector<double>{3.15691686, 2.30180883}, 1e-6, 1e-7);
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  BatchNorm2d bn(2, {.dtype = float64});
  const Array x = random_array({3, 2, 2, 2}, float64, 5);
  check_vjp(
      [&](const std::vector<Array>& a) {
        bn.weight.reset(a[1]);
        bn.bias.reset(a[2]);
        return bn(a[0]);
      },
      {x, random_array({2}, float64, 6, 0.5, 1.5), random_array({2}, float64, 7)});
  // forward_train's statistics carry no gradient; y's does.
  check_vjp([&](const std::vector<Array>& a) { return bn.forward_train(a[0]).y; }, {x});
  const Array g = grad([&](const Array& in) { return sum(bn.forward_train(in).running_mean); })(x);
  expect_close(g, std::vector<double>(24, 0.0));
}

TEST(BatchNorm, ErrorsNameTheLayer) {
  BatchNorm2d bn(3);
  EXPECT_THROW(bn(ones({2, 3, 4})), ShapeError);
  EXPECT_THROW(BatchNorm1d(3)(ones({2, 3, 4, 4})), ShapeError);
  try {
    bn(ones({2, 4, 2, 2}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("BatchNorm2d"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bn(ones({1, 3, 1, 1})), ValueError);  // one value per channel in training
  bn.eval_mode();
  EXPECT_NO_THROW(bn(ones({1, 3, 1, 1})));
  EXPECT_THROW(bn(ones({2, 3, 2, 2}, int32)), DtypeError);
  EXPECT_THROW(BatchNorm(0), ValueError);
  EXPECT_THROW(BatchNorm(3, {.eps = 0}), ValueError);
  EXPECT_THROW(BatchNorm(3, {.momentum = 1.5}), ValueError);
  EXPECT_THROW(BatchNorm(3)(ones({4})), ShapeError);
}

TEST(BatchNorm, HalfPrecisionComputesInFloat32) {
  BatchNorm1d bn(4);
  const Array x = random_array({8, 4}, float32, 8, 10.0, 12.0);
  const Array y = bn(astype(x, bfloat16));
  EXPECT_EQ(y.dtype(), bfloat16);
  expect_close(astype(y, float32), values(bn(astype(astype(x, bfloat16), float32))), 1e-2, 1e-2);
}

// ---- LayerNorm

TEST(LayerNorm, MatchesTheFormulaOverTrailingDimensions) {
  LayerNorm ln(Shape{3, 4}, {.eps = 1e-4});
  ln.weight = random_array({3, 4}, float32, 9, 0.5, 1.5);
  ln.bias = random_array({3, 4}, float32, 10);
  const Array x = random_array({2, 5, 3, 4}, float32, 11, -3.0, 4.0);
  expect_close(ln(x),
               row_norm_ref(values(x), 12, values(ln.weight.value()), values(ln.bias.value()), 1e-4, true),
               1e-5, 1e-5);
  EXPECT_EQ(ln.parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  LayerNorm nb(6, {.bias = false});
  EXPECT_EQ(nb.parameters().keys(), (std::vector<std::string>{"weight"}));
  LayerNorm none(6, {.elementwise_affine = false});
  EXPECT_TRUE(none.parameters().empty());
  const Array x6 = random_array({4, 6}, float32, 12);
  expect_close(none(x6), row_norm_ref(values(x6), 6, {}, {}, 1e-5, true), 1e-5, 1e-5);
  expect_close(nb(x6), values(none(x6)), 1e-6, 1e-6);
  const Array h = ln(astype(x, float16));
  EXPECT_EQ(h.dtype(), float16);
  expect_close(astype(h, float32), values(ln(x)), 1e-2, 1e-2);
}

TEST(LayerNorm, GradientsAndErrors) {
  LayerNorm ln(5, {.dtype = float64});
  check_vjp(
      [&](const std::vector<Array>& a) {
        ln.weight.reset(a[1]);
        ln.bias.reset(a[2]);
        return ln(a[0]);
      },
      {random_array({3, 5}, float64, 13), random_array({5}, float64, 14), random_array({5}, float64, 15)});
  EXPECT_THROW(ln(ones({3, 4})), ShapeError);
  EXPECT_THROW(ln(ones({3, 5}, int32)), DtypeError);
  EXPECT_THROW(LayerNorm(Shape{}), ValueError);
  EXPECT_THROW(LayerNorm(Shape{3, 0}), ValueError);
  EXPECT_THROW(LayerNorm(3, {.eps = -1}), ValueError);
  EXPECT_THROW(LayerNorm(Shape{2, 3})(ones({3, 2})), ShapeError);
}

// ---- RMSNorm

TEST(RMSNorm, MatchesTheFormulaWithPyTorchsDefaultEps) {
  RMSNorm rms(8);
  rms.weight = random_array({8}, float32, 16, 0.5, 1.5);
  const Array x = random_array({3, 2, 8}, float32, 17, -2.0, 2.0);
  expect_close(rms(x),
               row_norm_ref(values(x), 8, values(rms.weight.value()), {}, 1.1920928955078125e-07, false),
               1e-5, 1e-6);
  // The default eps is the input dtype's epsilon: it matters for a tiny row.
  const Array tiny = full({1, 8}, 1e-4, float64);
  expect_close(RMSNorm(8, {.dtype = float64})(tiny),
               row_norm_ref(values(tiny), 8, {}, {}, 2.220446049250313e-16, false), 1e-12, 0);
  RMSNorm loose(Shape{2, 4}, {.eps = 0.5, .elementwise_affine = false});
  EXPECT_TRUE(loose.parameters().empty());
  expect_close(loose(reshape(x, {3, 2, 2, 4})), row_norm_ref(values(x), 8, {}, {}, 0.5, false), 1e-5, 1e-6);
  check_vjp(
      [&](const std::vector<Array>& a) {
        rms.weight.reset(a[1]);
        return rms(a[0]);
      },
      {random_array({2, 8}, float64, 18), random_array({8}, float64, 19)});
  EXPECT_THROW(rms(ones({2, 7})), ShapeError);
  EXPECT_THROW(RMSNorm(4, {.eps = 0.0}), ValueError);
}

// ---- GroupNorm

TEST(GroupNorm, NormalizesGroupsOfChannels) {
  GroupNorm gn(2, 6, {.eps = 1e-3});
  gn.weight = random_array({6}, float32, 20, 0.5, 1.5);
  gn.bias = random_array({6}, float32, 21);
  const Array x = random_array({2, 6, 3, 2}, float32, 22, -1.0, 3.0);
  const std::vector<double> xv = values(x), w = values(gn.weight.value()), b = values(gn.bias.value());
  std::vector<double> ref(xv.size());
  const int64_t per = 3 * 6;  // channels per group * positions
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t g = 0; g < 2; ++g) {
      const int64_t base = (n * 6 + g * 3) * 6;
      double m = 0, v = 0;
      for (int64_t j = 0; j < per; ++j) m += xv[base + j] / per;
      for (int64_t j = 0; j < per; ++j) v += (xv[base + j] - m) * (xv[base + j] - m) / per;
      for (int64_t j = 0; j < per; ++j) {
        const int64_t c = g * 3 + j / 6;
        ref[base + j] = (xv[base + j] - m) / std::sqrt(v + 1e-3) * w[c] + b[c];
      }
    }
  expect_close(gn(x), ref, 1e-5, 1e-5);
  EXPECT_EQ(gn.parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(GroupNorm(3, 6, {.affine = false}).parameters().empty());
  GroupNorm gd(3, 6, {.dtype = float64});
  check_vjp(
      [&](const std::vector<Array>& a) {
        gd.weight.reset(a[1]);
        gd.bias.reset(a[2]);
        return gd(a[0]);
      },
      {random_array({2, 6, 2}, float64, 23), random_array({6}, float64, 24), random_array({6}, float64, 25)});
  EXPECT_THROW(GroupNorm(4, 6), ValueError);
  EXPECT_THROW(GroupNorm(0, 6), ValueError);
  EXPECT_THROW(gn(ones({2, 4, 3})), ShapeError);
  EXPECT_THROW(gn(ones({6})), ShapeError);
}

// ---- Dropout

TEST(Dropout, ZeroesWithProbabilityPAndScalesTheRest) {
  Dropout d(0.3);
  const Array x = random_array({200, 100}, float32, 26, 0.5, 1.5);
  const Array y = d(x, random::key(27));
  const std::vector<double> xv = values(x), yv = values(y);
  int64_t dropped = 0;
  double total = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) {
      ++dropped;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / 0.7, 1e-6 * xv[i]) << i;
    }
    total += yv[i] - xv[i];
  }
  EXPECT_NEAR(static_cast<double>(dropped) / 20000.0, 0.3, 0.015);
  EXPECT_NEAR(total / 20000.0, 0.0, 0.02);  // the expectation is kept
  // Same key, same mask; another key, another mask.
  EXPECT_EQ(values(d(x, random::key(27))), yv);
  EXPECT_NE(values(d(x, random::key(28))), yv);
  EXPECT_EQ(values(dropout(x, 0.3, random::key(27))), yv);
  // The default key sequence: reproducible after seeding.
  random::seed(5);
  const std::vector<double> first = values(d(x));
  random::seed(5);
  EXPECT_EQ(values(d(x)), first);
}

TEST(Dropout, IdentityInEvalModeOrForZeroPAndGradientIsTheMask) {
  const Array x = random_array({4, 5}, float32, 29);
  Dropout d(0.5);
  d.eval_mode();
  EXPECT_EQ(d(x).id(), x.id());
  EXPECT_EQ(d(x, random::key(1)).id(), x.id());
  Dropout none(0.0);
  EXPECT_EQ(none(x).id(), x.id());
  Dropout t(0.5);
  const Array key = random::key(30);
  const Array g = grad([&](const Array& in) { return sum(t(in, key)); })(x);
  const std::vector<double> gv = values(g), yv = values(t(x, key));
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_EQ(gv[i], yv[i] == 0 ? 0.0 : 2.0) << i;
  check_vjp([&](const std::vector<Array>& a) { return t(a[0], key); }, {astype(x, float64)});
  EXPECT_THROW(Dropout(1.0), ValueError);
  EXPECT_THROW(Dropout(-0.1), ValueError);
  EXPECT_THROW(Dropout(std::nan("")), ValueError);
  EXPECT_THROW(dropout(x, 1.5), ValueError);
  EXPECT_THROW(t(ones({3}, int32)), DtypeError);
}

}  // namespace
}  // namespace kiln::nn
