// Regression, divergence, similarity and ranking losses (classification losses: losses_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "kiln/nn/activations.h"
#include "kiln/nn/losses.h"
#include "loss_reference.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using nn::Reduction;
using test::check_vjp;
using test::expect_close;
using test::expect_error;
using test::kReductions;
using test::random_array;
using test::ref_reduce;
using test::values;
using test::Values;

// ---- regression losses ----

TEST(RegressionLosses, MatchReference) {
  const Shape shape = {3, 5};
  for (Dtype t : {float64, float32}) {
    const Array input = random_array(shape, t, 100, -2, 2);
    const Array target = random_array(shape, t, 101, -2, 2);
    const Values x = values(input), y = values(target);
    Values squared, absolute, smooth, smooth_zero, huber;
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = x[i] - y[i], a = std::abs(d);
      squared.push_back(d * d);
      absolute.push_back(a);
      smooth.push_back(a < 0.7 ? 0.5 * d * d / 0.7 : a - 0.35);
      smooth_zero.push_back(a);
      huber.push_back(a < 0.8 ? 0.5 * d * d : 0.8 * (a - 0.4));
    }
    for (Reduction r : kReductions) {
      expect_close(nn::mse_loss(input, target, r), ref_reduce(squared, r, 15, 3));
      expect_close(nn::l1_loss(input, target, r), ref_reduce(absolute, r, 15, 3));
      expect_close(nn::smooth_l1_loss(input, target, {.beta = 0.7, .reduction = r}),
                   ref_reduce(smooth, r, 15, 3));
      expect_close(nn::smooth_l1_loss(input, target, {.beta = 0, .reduction = r}),
                   ref_reduce(smooth_zero, r, 15, 3));
      expect_close(nn::huber_loss(input, target, {.delta = 0.8, .reduction = r}),
                   ref_reduce(huber, r, 15, 3));
    }
  }
}

TEST(RegressionLosses, MatchPyTorch) {
  // a, p, n as in the triplet test; F.smooth_l1_loss(a, p, beta=0.5), F.huber_loss(a, n, delta=0.3)
  const Array a({0.1, 0.5, -0.3, 1.0, -1.0, 0.2}, {2, 3});
  const Array p({0.2, 0.1, -0.1, 0.3, -0.2, 0.9}, {2, 3});
  const Array n({0.0, 0.4, -0.5, 1.1, -0.7, 0.1}, {2, 3});
  expect_close(nn::smooth_l1_loss(a, p, {.beta = 0.5}), {0.27666666666666667});
  expect_close(nn::huber_loss(a, n, {.delta = 0.3}), {0.01416666666666667});
}

TEST(RegressionLosses, GradientsMatchFiniteDifferences) {
  const Array x = random_array({2, 4}, float64, 110, -2, 2);
  const Array y = random_array({2, 4}, float64, 111, -2, 2);
  check_vjp([](const std::vector<Array>& a) { return nn::mse_loss(a[0], a[1]); }, {x, y});
  check_vjp([](const std::vector<Array>& a) { return nn::l1_loss(a[0], a[1], Reduction::sum); }, {x, y});
  check_vjp([](const std::vector<Array>& a) { return nn::smooth_l1_loss(a[0], a[1], {.beta = 0.9}); },
            {x, y});
  check_vjp(
      [](const std::vector<Array>& a) {
        return nn::huber_loss(a[0], a[1], {.delta = 0.6, .reduction = Reduction::none});
      },
      {x, y});
}

TEST(RegressionLosses, RejectBadInputNamingTheOp) {
  const Array x = random_array({2, 3}, float32, 9);
  expect_error<ShapeError>("[mse_loss] shapes differ: input (2,3) vs target (3,)",
                           [&] { nn::mse_loss(x, random_array({3}, float32, 9)); });
  expect_error<ShapeError>("[l1_loss] shapes differ", [&] {
    nn::l1_loss(x, random_array({2, 1}, float32, 9));
  });
  expect_error<ValueError>("[smooth_l1_loss] beta must be >= 0: got -1",
                           [&] { nn::smooth_l1_loss(x, x, {.beta = -1}); });
  expect_error<ValueError>("[huber_loss] delta must be > 0: got 0",
                           [&] { nn::huber_loss(x, x, {.delta = 0}); });
  expect_error<ValueError>("[mse_loss] unknown reduction: 42",
                           [&] { nn::mse_loss(x, x, static_cast<Reduction>(42)); });
  EXPECT_EQ(nn::mse_loss(x, x).item<float>(), 0.0f);
}

// ---- kl_div ----

TEST(KlDiv, MatchesReferenceAndPyTorch) {
  const int64_t n = 3, c = 4;
  for (Dtype t : {float64, float32}) {
    const Array input = log_softmax(random_array({n, c}, t, 120, -2, 2));
    Values target_values = test::random_values(n * c, 121, 0.0, 1.0);
    target_values[5] = 0;  // xlogy(0, 0) = 0
    const Array target(target_values, {n, c}, t);
    const Array log_target = log(random_array({n, c}, t, 122, 0.1, 1.0));
    const Values x = values(input), y = values(target), ly = values(log_target);
    Values plain, logged;
    for (size_t i = 0; i < x.size(); ++i) {
      plain.push_back(y[i] == 0 ? 0.0 : y[i] * (std::log(y[i]) - x[i]));
      logged.push_back(std::exp(ly[i]) * (ly[i] - x[i]));
    }
    for (Reduction r : kReductions) {
      expect_close(nn::kl_div(input, target, {.reduction = r}), ref_reduce(plain, r, n * c, n));
      expect_close(nn::kl_div(input, log_target, {.log_target = true, .reduction = r}),
                   ref_reduce(logged, r, n * c, n));
    }
  }
  // inp = torch.log_softmax(torch.tensor([[0.3, -0.2, 1.0], [2.0, 0.0, -1.0]], dtype=torch.float64), 1)
  // tgt = torch.tensor([[0.2, 0.5, 0.3], [0.0, 0.4, 0.6]], dtype=torch.float64)
  // F.kl_div(inp, tgt, reduction='batchmean'), reduction='mean',
  // F.kl_div(inp, torch.log(tgt + 0.1), reduction='sum', log_target=True)
  const Array input = log_softmax(Array({0.3, -0.2, 1.0, 2.0, 0.0, -1.0}, {2, 3}));
  const Array target({0.2, 0.5, 0.3, 0.0, 0.4, 0.6}, {2, 3});
  expect_close(nn::kl_div(input, target, {.reduction = Reduction::batchmean}), {1.1968668197419665});
  expect_close(nn::kl_div(input, target), {0.3989556065806555});
  expect_close(nn::kl_div(input, log(target + 0.1), {.log_target = true, .reduction = Reduction::sum}),
               {3.1526097480815647});
}

TEST(KlDiv, GradientsAreFiniteAndMatchFiniteDifferences) {
  const Array input = random_array({2, 3}, float64, 130, -3, -0.1);
  check_vjp([](const std::vector<Array>& a) { return nn::kl_div(a[0], a[1]); },
            {input, random_array({2, 3}, float64, 131, 0.05, 1)});
  check_vjp([](const std::vector<Array>& a) { return nn::kl_div(a[0], a[1], {.log_target = true}); },
            {input, random_array({2, 3}, float64, 132, -3, 0)});
  // A zero target: gradient -log(0) - 1 would be inf; PyTorch's xlogy gradient there is finite (0 for
  // the log term). kiln keeps it finite too.
  const Array target({0.0, 0.5, 0.5});
  const Array g = grad([&](const Array& t) { return nn::kl_div(Array({-1.0, -0.5, -0.9}), t); })(target);
  for (double v : values(g)) EXPECT_TRUE(std::isfinite(v));
  expect_error<ShapeError>("[kl_div] shapes differ", [&] { nn::kl_div(input, Array({0.5, 0.5})); });
}

// ---- cosine similarity, ranking and triplet losses ----

Values ref_cosine_rows(const Values& a, const Values& b, int64_t d, double eps) {
  Values out;
  for (size_t row = 0; row < a.size() / d; ++row) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t k = 0; k < d; ++k) {
      dot += a[row * d + k] * b[row * d + k];
      na += a[row * d + k] * a[row * d + k];
      nb += b[row * d + k] * b[row * d + k];
    }
    out.push_back(dot / (std::max(std::sqrt(na), eps) * std::max(std::sqrt(nb), eps)));
  }
  return out;
}

TEST(CosineSimilarity, MatchesReferenceWithBroadcastingAndPyTorch) {
  for (Dtype t : {float64, float32}) {
    const Array x1 = random_array({3, 1, 4}, t, 140, -2, 2);
    const Array x2 = random_array({5, 4}, t, 141, -2, 2);
    const Array cos = nn::cosine_similarity(x1, x2);
    EXPECT_EQ(cos.shape(), (Shape{3, 5}));
    expect_close(cos, ref_cosine_rows(values(broadcast_to(x1, {3, 5, 4})),
                                      values(broadcast_to(x2, {3, 5, 4})), 4, 1e-8));
    // Along axis 0 of (4, 3) = rows of the transposes.
    const Array y1 = random_array({4, 3}, t, 142), y2 = random_array({4, 3}, t, 143);
    expect_close(nn::cosine_similarity(y1, y2, 0),
                 ref_cosine_rows(values(transpose(y1)), values(transpose(y2)), 4, 1e-8));
  }
  // F.cosine_similarity(a, p) with a, p as in the triplet test
  const Array a({0.1, 0.5, -0.3, 1.0, -1.0, 0.2}, {2, 3});
  const Array p({0.2, 0.1, -0.1, 0.3, -0.2, 0.9}, {2, 3});
  expect_close(nn::cosine_similarity(a, p), {0.6900655593423543, 0.49105473398904287});
  // A zero vector: the norm is clamped at eps, the result is 0 and the gradient finite.
  const Array zero = zeros({3}, float64);
  expect_close(nn::cosine_similarity(zero, Array({1.0, 2.0, 3.0})), {0.0});
  const Array g = grad([](const Array& z) { return nn::cosine_similarity(z, Array({1.0, 2.0, 3.0})); })(zero);
  for (double v : values(g)) EXPECT_TRUE(std::isfinite(v));
  check_vjp([](const std::vector<Array>& v) { return nn::cosine_similarity(v[0], v[1]); },
            {random_array({2, 1, 3}, float64, 144), random_array({4, 3}, float64, 145)});
  expect_error<ShapeError>("[cosine_similarity]", [] {
    nn::cosine_similarity(zeros({2, 3}), zeros({2, 4}));
  });
  expect_error<ShapeError>("[cosine_similarity]", [] {
    nn::cosine_similarity(zeros({2, 3}), zeros({2, 3}), 2);
  });
}

TEST(CosineEmbeddingLoss, MatchesPyTorchAndReference) {
  // F.cosine_embedding_loss(a, p, torch.tensor([1.0, -1.0]), margin=0.1, reduction='none')
  const Array a({0.1, 0.5, -0.3, 1.0, -1.0, 0.2}, {2, 3});
  const Array p({0.2, 0.1, -0.1, 0.3, -0.2, 0.9}, {2, 3});
  expect_close(
      nn::cosine_embedding_loss(a, p, Array({1.0, -1.0}), {.margin = 0.1, .reduction = Reduction::none}),
      {0.30993444066438214, 0.3910547339886613});
  for (Dtype t : {float64, float32}) {
    const Array x1 = random_array({6, 3}, t, 150, -2, 2), x2 = random_array({6, 3}, t, 151, -2, 2);
    const Array y = Array(Values{1, -1, 1, -1, -1, 1}, {6}, t);
    const Values cos = ref_cosine_rows(values(x1), values(x2), 3, 0);
    Values loss;
    for (size_t i = 0; i < cos.size(); ++i)
      loss.push_back(values(y)[i] > 0 ? 1 - cos[i] : std::max(cos[i] + 0.2, 0.0));
    for (Reduction r : kReductions)
      expect_close(nn::cosine_embedding_loss(x1, x2, y, {.margin = -0.2, .reduction = r}),
                   ref_reduce(loss, r));
  }
  check_vjp(
      [](const std::vector<Array>& v) {
        return nn::cosine_embedding_loss(v[0], v[1], Array({1.0, -1.0, -1.0}), {.margin = -0.5});
      },
      {random_array({3, 4}, float64, 152), random_array({3, 4}, float64, 153)});
  expect_error<ShapeError>(
      "[cosine_embedding_loss] y does not match the inputs: inputs (2,3) need y (2,), got (3,)", [&] {
        nn::cosine_embedding_loss(a, p, Array({1.0, -1.0, 1.0}));
      });
}

TEST(MarginRankingLoss, MatchesReferenceAndPyTorch) {
  // F.margin_ranking_loss(a[0], p[0], torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64), margin=0.2)
  expect_close(nn::margin_ranking_loss(Array({0.1, 0.5, -0.3}), Array({0.2, 0.1, -0.1}),
                                       Array({1.0, -1.0, 1.0}), {.margin = 0.2}),
               {0.4333333333333334});
  for (Dtype t : {float64, float32}) {
    const Array x1 = random_array({8}, t, 160, -1, 1), x2 = random_array({8}, t, 161, -1, 1);
    const Array y(Values{1, -1, -1, 1, 1, -1, 1, -1}, {8}, t);
    Values loss;
    for (int i = 0; i < 8; ++i)
      loss.push_back(std::max(0.0, -values(y)[i] * (values(x1)[i] - values(x2)[i]) + 0.1));
    for (Reduction r : kReductions)
      expect_close(nn::margin_ranking_loss(x1, x2, y, {.margin = 0.1, .reduction = r}), ref_reduce(loss, r));
  }
  check_vjp(
      [](const std::vector<Array>& v) { return nn::margin_ranking_loss(v[0], v[1], v[2], {.margin = 0.5}); },
      {random_array({6}, float64, 162), random_array({6}, float64, 163),
       Array({1.0, -1.0, 1.0, 1.0, -1.0, -1.0})});
  expect_error<ShapeError>("[margin_ranking_loss] shapes differ: x1 (3,) vs y (2,)",
                           [] { nn::margin_ranking_loss(zeros({3}), zeros({3}), zeros({2})); });
}

Values ref_distance_rows(const Values& a, const Values& b, int64_t d, double p, double eps) {
  Values out;
  for (size_t row = 0; row < a.size() / d; ++row) {
    double acc = 0;
    for (int64_t k = 0; k < d; ++k) {
      const double diff = std::abs(a[row * d + k] - b[row * d + k] + eps);
      acc = std::isinf(p) ? std::max(acc, diff) : acc + std::pow(diff, p);
    }
    out.push_back(std::isinf(p) ? acc : std::pow(acc, 1 / p));
  }
  return out;
}

TEST(PairwiseDistance, MatchesReferenceForSeveralNorms) {
  for (Dtype t : {float64, float32}) {
    const Array x1 = random_array({4, 5}, t, 170), x2 = random_array({4, 5}, t, 171);
    for (double p : {1.0, 2.0, 3.0, 0.5, std::numeric_limits<double>::infinity()})
      expect_close(nn::pairwise_distance(x1, x2, p), ref_distance_rows(values(x1), values(x2), 5, p, 1e-6));
    expect_close(nn::pairwise_distance(x1, x2, 2, 0.1), ref_distance_rows(values(x1), values(x2), 5, 2, 0.1));
  }
  for (double p : {1.0, 2.0, 3.0})
    check_vjp([p](const std::vector<Array>& v) { return nn::pairwise_distance(v[0], v[1], p); },
              {random_array({3, 4}, float64, 172), random_array({3, 4}, float64, 173)});
  expect_error<ValueError>("[pairwise_distance] p must be > 0",
                           [] { nn::pairwise_distance(zeros({3}), zeros({3}), 0); });
  expect_error<ShapeError>("[pairwise_distance] inputs need at least one dimension",
                           [] { nn::pairwise_distance(Array(1.0f), Array(2.0f)); });
}

TEST(TripletMarginLoss, MatchesPyTorchAndReference) {
  // a = [[0.1, 0.5, -0.3], [1.0, -1.0, 0.2]], p = [[0.2, 0.1, -0.1], [0.3, -0.2, 0.9]],
  // n = [[0.0, 0.4, -0.5], [1.1, -0.7, 0.1]] (float64);
  // F.triplet_margin_loss(a, p, n, margin=0.5, p=3, swap=True, reduction='none'), F.triplet_margin_loss(a, p,
  // n)
  const Array a({0.1, 0.5, -0.3, 1.0, -1.0, 0.2}, {2, 3});
  const Array p({0.2, 0.1, -0.1, 0.3, -0.2, 0.9}, {2, 3});
  const Array n({0.0, 0.4, -0.5, 1.1, -0.7, 0.1}, {2, 3});
  expect_close(
      nn::triplet_margin_loss(a, p, n, {.margin = 0.5, .p = 3, .swap = true, .reduction = Reduction::none}),
      {0.7024897877397582, 1.2548365785523026});
  expect_close(nn::triplet_margin_loss(a, p, n), {1.577218591768594});
  for (Dtype t : {float64, float32}) {
    const Array anchor = random_array({5, 3}, t, 180), positive = random_array({5, 3}, t, 181);
    const Array negative = random_array({5, 3}, t, 182);
    const Values d_ap = ref_distance_rows(values(anchor), values(positive), 3, 2, 1e-6);
    const Values d_an = ref_distance_rows(values(anchor), values(negative), 3, 2, 1e-6);
    const Values d_pn = ref_distance_rows(values(positive), values(negative), 3, 2, 1e-6);
    Values loss, swapped;
    for (size_t i = 0; i < d_ap.size(); ++i) {
      loss.push_back(std::max(0.0, 0.3 + d_ap[i] - d_an[i]));
      swapped.push_back(std::max(0.0, 0.3 + d_ap[i] - std::min(d_an[i], d_pn[i])));
    }
    for (Reduction r : kReductions) {
      expect_close(nn::triplet_margin_loss(anchor, positive, negative, {.margin = 0.3, .reduction = r}),
                   ref_reduce(loss, r));
      expect_close(
          nn::triplet_margin_loss(anchor, positive, negative, {.margin = 0.3, .swap = true, .reduction = r}),
          ref_reduce(swapped, r));
    }
  }
  check_vjp(
      [](const std::vector<Array>& v) {
        return nn::triplet_margin_loss(v[0], v[1], v[2],
                                       {.margin = 2.0, .swap = true, .reduction = Reduction::none});
      },
      {random_array({4, 3}, float64, 183), random_array({4, 3}, float64, 184),
       random_array({4, 3}, float64, 185)});
  expect_error<ShapeError>("[triplet_margin_loss] shapes differ: anchor (2,3) vs negative (2,4)", [&] {
    nn::triplet_margin_loss(a, p, zeros({2, 4}));
  });
  expect_error<ValueError>("[triplet_margin_loss] p must be > 0",
                           [&] { nn::triplet_margin_loss(a, p, n, {.p = -1}); });
}

// ---- reductions ----

TEST(Reductions, BatchmeanDividesByTheFirstAxis) {
  const Array x = random_array({4, 3}, float64, 190), y = random_array({4, 3}, float64, 191);
  const double total = nn::mse_loss(x, y, Reduction::sum).item<double>();
  EXPECT_NEAR(nn::mse_loss(x, y, Reduction::batchmean).item<double>(), total / 4, 1e-14);
  EXPECT_NEAR(nn::mse_loss(x, y, Reduction::mean).item<double>(), total / 12, 1e-14);
  EXPECT_EQ(nn::mse_loss(x, y, Reduction::none).shape(), (Shape{4, 3}));
  // A 0-d loss is one example.
  EXPECT_DOUBLE_EQ(nn::mse_loss(Array(3.0), Array(1.0), Reduction::batchmean).item<double>(), 4.0);
}

}  // namespace
}  // namespace kiln
