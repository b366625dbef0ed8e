#include "kiln/nn/losses.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "kiln/nn/activations.h"
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

// ---- float64 references: plain loops over row-major data, independent of kiln ----

// Reduces per-example losses as the Reduction says; `denominator` is what mean divides by.

Values ref_log_softmax_rows(const Values& x, int64_t n_classes) {
  Values out(x.size());
  for (size_t row = 0; row < x.size() / n_classes; ++row) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t c = 0; c < n_classes; ++c) m = std::max(m, x[row * n_classes + c]);
    for (int64_t c = 0; c < n_classes; ++c) s += std::exp(x[row * n_classes + c] - m);
    for (int64_t c = 0; c < n_classes; ++c)
      out[row * n_classes + c] = x[row * n_classes + c] - m - std::log(s);
  }
  return out;
}

struct RefClassOptions {
  Values weights = {};  // empty: all 1
  std::optional<int64_t> ignore_index = std::nullopt;
  double smoothing = 0;
  Reduction reduction = Reduction::mean;
};

// PyTorch's nll_loss / cross_entropy with class-index targets on rows of log-probabilities.
Values ref_index_loss(const Values& log_probs, int64_t n_classes, const std::vector<int64_t>& targets,
                      const RefClassOptions& o) {
  const size_t n = targets.size();
  auto weight = [&](int64_t c) { return o.weights.empty() ? 1.0 : o.weights[c]; };
  Values nll(n, 0.0), smooth(n, 0.0);
  double weight_total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (o.ignore_index && targets[i] == *o.ignore_index) continue;
    nll[i] = -weight(targets[i]) * log_probs[i * n_classes + targets[i]];
    for (int64_t c = 0; c < n_classes; ++c) smooth[i] -= weight(c) * log_probs[i * n_classes + c];
    weight_total += weight(targets[i]);
  }
  const Values a = ref_reduce(nll, o.reduction, weight_total, static_cast<double>(n));
  const Values b = ref_reduce(smooth, o.reduction, weight_total, static_cast<double>(n));
  Values out;
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back((1 - o.smoothing) * a[i] + o.smoothing / static_cast<double>(n_classes) * b[i]);
  return out;
}

// PyTorch's cross_entropy with probability targets on rows.
Values ref_prob_loss(const Values& logits, int64_t n_classes, const Values& targets,
                     const RefClassOptions& o) {
  const Values log_probs = ref_log_softmax_rows(logits, n_classes);
  const size_t n = logits.size() / n_classes;
  Values loss(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < n_classes; ++c) {
      const double t = targets[i * n_classes + c] * (1 - o.smoothing) + o.smoothing / n_classes;
      loss[i] -= (o.weights.empty() ? 1.0 : o.weights[c]) * log_probs[i * n_classes + c] * t;
    }
  return ref_reduce(loss, o.reduction);
}

std::vector<int64_t> random_labels(int64_t n, int64_t n_classes, uint64_t seed) {
  std::vector<int64_t> labels;
  for (double v : test::random_values(n, seed, 0, static_cast<double>(n_classes)))
    labels.push_back(std::min<int64_t>(static_cast<int64_t>(v), n_classes - 1));
  return labels;
}

// ---- cross_entropy and nll_loss ----

TEST(CrossEntropy, IndexTargetsMatchReferenceWithEveryOption) {
  const int64_t n = 6, c = 5;
  std::vector<int64_t> labels = random_labels(n, c, 31);
  labels[2] = -100;  // an ignored entry
  const Values weights = test::random_values(c, 32, 0.2, 2.0);
  const Array weights_array(weights, {c});
  struct Variant {
    bool weighted, ignore;
    double smoothing;
  };
  const Variant variants[] = {{false, false, 0},   {true, false, 0},  {false, true, 0},
                              {false, false, 0.2}, {true, true, 0.1}, {true, true, 1.0}};
  for (Dtype t : {float64, float32}) {
    const Array logits = random_array({n, c}, t, 30, -4, 4);
    const Values ref_log_probs = ref_log_softmax_rows(values(logits), c);
    for (const Variant& v : variants)
      for (Reduction r : kReductions) {
        std::vector<int64_t> used = labels;
        if (!v.ignore) used[2] = 1;
        const RefClassOptions ref{.weights = v.weighted ? weights : Values{},
                                  .ignore_index = v.ignore ? std::optional<int64_t>(-100) : std::nullopt,
                                  .smoothing = v.smoothing,
                                  .reduction = r};
        const Array loss = nn::cross_entropy(logits, Array(used, {n}),
                                             {.label_smoothing = v.smoothing,
                                              .ignore_index = ref.ignore_index,
                                              .weights = v.weighted ? weights_array : Array(),
                                              .reduction = r});
        SCOPED_TRACE(testing::Message()
                     << t << " weighted " << v.weighted << " ignore " << v.ignore << " smoothing "
                     << v.smoothing << " reduction " << static_cast<int>(r));
        EXPECT_EQ(loss.dtype(), t);
        EXPECT_EQ(loss.shape(), r == Reduction::none ? Shape{n} : Shape{});
        expect_close(loss, ref_index_loss(ref_log_probs, c, used, ref));
      }
  }
}

// PyTorch 1.13:
//   L = torch.tensor([[1.5, -0.3, 0.2, 2.0], [0.1, 0.4, -1.2, 0.0], [-2.0, 1.0, 0.5, 0.3]],
//   dtype=torch.float64) T = torch.tensor([3, -100, 1]); W = torch.tensor([0.5, 2.0, 1.0, 1.5],
//   dtype=torch.float64) F.cross_entropy(L, T, weight=W, ignore_index=-100, label_smoothing=0.1,
//   reduction=...)
const Values kGoldenLogits = {1.5, -0.3, 0.2, 2.0, 0.1, 0.4, -1.2, 0.0, -2.0, 1.0, 0.5, 0.3};
const Values kGoldenWeights = {0.5, 2.0, 1.0, 1.5};

TEST(CrossEntropy, MatchesPyTorchWithSmoothingWeightsAndIgnoreIndex) {
  for (Dtype t : {float64, float32}) {
    const Array logits(kGoldenLogits, {3, 4}, t);
    const Array targets({3, -100, 1});
    const Array weights(kGoldenWeights, {4}, t);
    auto loss = [&](Reduction r) {
      return nn::cross_entropy(
          logits, targets,
          {.label_smoothing = 0.1, .ignore_index = -100, .weights = weights, .reduction = r});
    };
    expect_close(loss(Reduction::mean), {0.7552938846571435});
    expect_close(loss(Reduction::sum), {2.643528596300002});
    expect_close(loss(Reduction::none), {1.091155527191617, 0.0, 1.5523730691083855});
  }
}

TEST(CrossEntropy, ProbabilityTargetsMatchReferenceAndPyTorch) {
  const int64_t n = 4, c = 3;
  for (Dtype t : {float64, float32}) {
    const Array logits = random_array({n, c}, t, 40, -3, 3);
    Values probs = test::random_values(n * c, 41, 0.1, 1.0);
    for (int64_t i = 0; i < n; ++i) {
      const double s = probs[i * c] + probs[i * c + 1] + probs[i * c + 2];
      for (int64_t k = 0; k < c; ++k) probs[i * c + k] /= s;
    }
    const Array targets(probs, {n, c}, t);
    const Values weights = {0.5, 1.0, 2.0};
    for (Reduction r : kReductions)
      for (double smoothing : {0.0, 0.3}) {
        const Array loss = nn::cross_entropy(
            logits, targets, {.label_smoothing = smoothing, .weights = Array(weights, {c}), .reduction = r});
        expect_close(loss, ref_prob_loss(values(logits), c, values(targets),
                                         {.weights = weights, .smoothing = smoothing, .reduction = r}));
      }
  }
  // F.cross_entropy(L, P, weight=W, label_smoothing=0.2) with
  // P = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25]*4, [0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
  const Array p({0.1, 0.2, 0.3, 0.4, 0.25, 0.25, 0.25, 0.25, 0.0, 1.0, 0.0, 0.0}, {3, 4});
  expect_close(nn::cross_entropy(Array(kGoldenLogits, {3, 4}), p,
                                 {.label_smoothing = 0.2, .weights = Array(kGoldenWeights, {4})}),
               {1.9045782549804227});
}

TEST(CrossEntropy, ClassAxisOption) {
  // PyTorch's (N, C, d) layout is axis = 1. F.cross_entropy(L3, T3) with
  // L3 = [[[0.2, -1.0], [1.0, 0.5], [-0.5, 0.3]], [[0.0, 0.7], [-0.2, 0.1], [0.9, -0.4]]], T3 = [[2, 0], [1,
  // 2]]
  const Array logits({0.2, -1.0, 1.0, 0.5, -0.5, 0.3, 0.0, 0.7, -0.2, 0.1, 0.9, -0.4}, {2, 3, 2});
  const Array targets({2, 0, 1, 2}, {2, 2});
  expect_close(nn::cross_entropy(logits, targets, {.axis = 1}), {1.903471691801483});
  // The same data moved to channels-last gives the same loss with the default axis.
  expect_close(nn::cross_entropy(moveaxis(logits, 1, 2), targets), {1.903471691801483});

  // Random (2, 5, 3) logits, class axis 1, against the reference on the transposed rows.
  const Array x = random_array({2, 5, 3}, float64, 50, -2, 2);
  const std::vector<int64_t> labels = random_labels(6, 5, 51);
  const Values rows = values(moveaxis(x, 1, 2));
  expect_close(nn::cross_entropy(x, Array(labels, {2, 3}), {.axis = -2, .reduction = Reduction::none}),
               ref_index_loss(ref_log_softmax_rows(rows, 5), 5, labels, {.reduction = Reduction::none}));
}

TEST(CrossEntropy, SingleExampleWithoutBatchAxis) {
  const Array logits({0.5, -1.0, 2.0});
  const Values lp = ref_log_softmax_rows({0.5, -1.0, 2.0}, 3);
  const Array loss = nn::cross_entropy(logits, Array(int64_t{1}));
  EXPECT_EQ(loss.shape(), Shape{});
  expect_close(loss, {-lp[1]});
  expect_close(nn::cross_entropy(logits, Array(int64_t{1}), {.reduction = Reduction::batchmean}), {-lp[1]});
}

TEST(CrossEntropy, GradientsMatchFiniteDifferences) {
  const int64_t n = 5, c = 4;
  std::vector<int64_t> labels = random_labels(n, c, 60);
  labels[3] = 7;  // ignored
  const Array targets = Array(labels, {n});
  const Array weights(test::random_values(c, 61, 0.3, 2.0), {c});
  const Array logits = random_array({n, c}, float64, 62, -3, 3);
  for (Reduction r : kReductions)
    check_vjp(
        [&](const std::vector<Array>& a) {
          return nn::cross_entropy(
              a[0], targets, {.label_smoothing = 0.15, .ignore_index = 7, .weights = a[1], .reduction = r});
        },
        {logits, weights});
  // Probability targets: gradients for the logits and for the targets.
  const Array probs = random_array({n, c}, float64, 63, 0.0, 0.5);
  check_vjp(
      [&](const std::vector<Array>& a) { return nn::cross_entropy(a[0], a[1], {.label_smoothing = 0.1}); },
      {logits, probs});
}

TEST(CrossEntropy, PerExampleGradientsThroughVmap) {
  // vmap(grad(loss)) over (logits row, label) pairs: each gradient is softmax(row) - one_hot(label).
  const Array logits = random_array({4, 3}, float64, 64, -2, 2);
  const std::vector<int64_t> labels = {2, 0, 1, 1};
  auto loss = [](const std::vector<Array>& a) { return std::vector<Array>{nn::cross_entropy(a[0], a[1])}; };
  const Array per_example = vmap(grad(loss, {0}), {0, 0})({logits, Array(labels, {4})})[0];
  const Values lp = ref_log_softmax_rows(values(logits), 3);
  Values expected;
  for (int64_t i = 0; i < 12; ++i) expected.push_back(std::exp(lp[i]) - (labels[i / 3] == i % 3 ? 1 : 0));
  expect_close(per_example, expected);
}

TEST(CrossEntropy, HalfPrecisionLogits) {
  const std::vector<int64_t> labels = random_labels(5, 4, 66);
  for (Dtype t : {bfloat16, float16}) {
    const Array logits = random_array({5, 4}, t, 65, -3, 3);
    const Array loss = nn::cross_entropy(logits, Array(labels, {5}), {.label_smoothing = 0.1});
    EXPECT_EQ(loss.dtype(), float32);  // taken up, as under autocast
    expect_close(loss,
                 ref_index_loss(ref_log_softmax_rows(values(logits), 4), 4, labels, {.smoothing = 0.1}));
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  for (Dtype t : {float32, float64}) {
    const Array logits(Values{1000, -1000, 0, -1000, 1000, 500}, {2, 3}, t);
    const Array targets({1, 1});
    const Array loss = nn::cross_entropy(logits, targets, {.reduction = Reduction::none});
    expect_close(loss, Values{2000, 0}, 1e-6, 0);
    const Array g = grad([&](const Array& x) { return nn::cross_entropy(x, targets); })(logits);
    expect_close(g, Values{0.5, -0.5, 0, 0, 0, 0}, 1e-6, 1e-30);
  }
}

TEST(CrossEntropy, AllIgnoredGivesNanAsPyTorch) {
  const Array loss =
      nn::cross_entropy(random_array({2, 3}, float32, 1), Array({-1, -1}), {.ignore_index = -1});
  EXPECT_TRUE(std::isnan(loss.item<float>()));
  // Ignored entries never reach the gather: -inf log-probabilities there do not poison the sum.
  const float inf = std::numeric_limits<float>::infinity();
  const Array logits({-inf, 1.0f, 0.0f, 2.0f}, {2, 2});
  expect_close(nn::cross_entropy(logits, Array({-1, 1}), {.ignore_index = -1}),
               {-ref_log_softmax_rows({0, 2}, 2)[1]});
}

TEST(CrossEntropy, RejectsBadInputNamingTheOp) {
  const Array logits = random_array({4, 3}, float32, 2);
  expect_error<ShapeError>(
      "[cross_entropy] targets do not match logits: logits (4,3) (class axis 1) need class "
      "indices (4,) or probabilities (4,3), got targets (3,)",
      [&] {
        nn::cross_entropy(logits, Array({0, 1, 2}));
      });
  expect_error<DtypeError>("[cross_entropy] class-index targets must have an integer dtype", [&] {
    nn::cross_entropy(logits, Array({0.0f, 1.0f, 2.0f, 1.0f}));
  });
  expect_error<DtypeError>("[cross_entropy] probability targets must have a floating dtype", [&] {
    nn::cross_entropy(logits, Array(std::vector<int32_t>(12, 0), {4, 3}));
  });
  expect_error<DtypeError>("[cross_entropy] expected a floating dtype: logits has dtype int32", [&] {
    nn::cross_entropy(Array({1, 2, 3}, {1, 3}), Array({0}));
  });
  expect_error<ShapeError>(
      "[cross_entropy] weights must have one entry per class: weights (2,) for 3 classes", [&] {
        nn::cross_entropy(logits, Array({0, 1, 2, 1}), {.weights = Array({1.0f, 2.0f})});
      });
  expect_error<ValueError>("[cross_entropy] label_smoothing must be in [0, 1]", [&] {
    nn::cross_entropy(logits, Array({0, 1, 2, 1}), {.label_smoothing = 1.5});
  });
  expect_error<ValueError>("[cross_entropy] ignore_index applies only to class-index targets", [&] {
    nn::cross_entropy(logits, random_array({4, 3}, float32, 3), {.ignore_index = 0});
  });
  expect_error<ValueError>(
      "[cross_entropy] class index out of range: target 3 at flat position 1 is not in [0, 3)", [&] {
        nn::cross_entropy(logits, Array({0, 3, 1, 1}));
      });
  expect_error<ValueError>("[cross_entropy] class index out of range: target -1", [&] {
    nn::cross_entropy(logits, Array({0, 1, -1, 1}));
  });
  expect_error<ShapeError>("[cross_entropy]", [&] {
    nn::cross_entropy(logits, Array({0, 1, 2, 1}), {.axis = 2});
  });
  // The program goes on: a valid call after the errors works.
  EXPECT_TRUE(std::isfinite(nn::cross_entropy(logits, Array({0, 1, 2, 1})).item<float>()));
}

TEST(NllLoss, MatchesReferenceAndPyTorch) {
  const int64_t n = 7, c = 4;
  const std::vector<int64_t> labels = random_labels(n, c, 70);
  const Values weights = test::random_values(c, 71, 0.5, 1.5);
  for (Dtype t : {float64, float32}) {
    const Array log_probs = log_softmax(random_array({n, c}, t, 72, -3, 3));
    for (Reduction r : kReductions) {
      expect_close(
          nn::nll_loss(log_probs, Array(labels, {n}), {.weights = Array(weights, {c}), .reduction = r}),
          ref_index_loss(values(log_probs), c, labels, {.weights = weights, .reduction = r}));
      expect_close(nn::nll_loss(log_probs, Array(labels, {n}), {.ignore_index = labels[0], .reduction = r}),
                   ref_index_loss(values(log_probs), c, labels, {.ignore_index = labels[0], .reduction = r}));
    }
  }
  // F.nll_loss(torch.log_softmax(L, 1), torch.tensor([0, 2, 1]), weight=W)
  expect_close(nn::nll_loss(log_softmax(Array(kGoldenLogits, {3, 4})), Array({0, 2, 1}),
                            {.weights = Array(kGoldenWeights, {4})}),
               {1.330763986712195});
  const Array targets = Array(labels, {n});
  check_vjp(
      [&](const std::vector<Array>& a) {
        return nn::nll_loss(a[0], targets, {.ignore_index = labels[1], .weights = a[1]});
      },
      {random_array({n, c}, float64, 73, -3, 0), Array(weights, {c})});
}

TEST(NllLoss, RejectsBadInputNamingTheOp) {
  const Array log_probs = random_array({3, 4}, float32, 5, -3, 0);
  expect_error<DtypeError>("[nll_loss] class-index targets must have an integer dtype: got float32", [&] {
    nn::nll_loss(log_probs, Array({0.0f, 1.0f, 2.0f}));
  });
  expect_error<ShapeError>(
      "[nll_loss] targets do not match the input: expected class indices of shape (3,), got (2,)", [&] {
        nn::nll_loss(log_probs, Array({0, 1}));
      });
  expect_error<ValueError>("[nll_loss] class index out of range", [&] {
    nn::nll_loss(log_probs, Array({0, 1, 9}));
  });
  expect_error<ValueError>("[nll_loss] empty array handle", [&] { nn::nll_loss(log_probs, Array()); });
  EXPECT_EQ(nn::nll_loss(log_probs, Array({0, 1, 3})).shape(), Shape{});
}

// ---- binary cross-entropy ----

double ref_clamped_log(double p) { return std::max(std::log(p), -100.0); }

TEST(BinaryCrossEntropy, MatchesReferenceAndPyTorch) {
  const Shape shape = {3, 4};
  const Values w = test::random_values(4, 80, 0.5, 2.0);
  for (Dtype t : {float64, float32}) {
    const Array probs = random_array(shape, t, 81, 0.02, 0.98);
    const Array targets = random_array(shape, t, 82, 0.0, 1.0);
    const Values p = values(probs), y = values(targets);
    Values loss;
    for (size_t i = 0; i < p.size(); ++i)
      loss.push_back(-w[i % 4] * (y[i] * ref_clamped_log(p[i]) + (1 - y[i]) * ref_clamped_log(1 - p[i])));
    for (Reduction r : kReductions)
      expect_close(nn::binary_cross_entropy(probs, targets, {.weights = Array(w, {4}, t), .reduction = r}),
                   ref_reduce(loss, r, 12, 3));
  }
  // F.binary_cross_entropy(torch.sigmoid(z), y, weight=w, reduction='sum') with
  // z = [[-1.0, 0.5, 3.0], [2.0, -0.2, -4.0]], y = [[1.0, 0.0, 1.0], [0.3, 1.0, 0.0]], w = [[1.0], [0.5]]
  const Array z({-1.0, 0.5, 3.0, 2.0, -0.2, -4.0}, {2, 3});
  const Array y({1.0, 0.0, 1.0, 0.3, 1.0, 0.0}, {2, 3});
  expect_close(nn::binary_cross_entropy(sigmoid(z), y,
                                        {.weights = Array({1.0, 0.5}, {2, 1}), .reduction = Reduction::sum}),
               {3.5075344274432583});
}

TEST(BinaryCrossEntropy, ClampsLogsAtMinus100WithFiniteGradients) {
  // F.binary_cross_entropy(torch.tensor([0.0, 1.0, 0.0, 1.0]), torch.tensor([1.0, 0.0, 0.0, 1.0]),
  // reduction='none')
  for (Dtype t : {float32, float64}) {
    const Array p(Values{0, 1, 0, 1}, {4}, t);
    const Array y(Values{1, 0, 0, 1}, {4}, t);
    expect_close(nn::binary_cross_entropy(p, y, {.reduction = Reduction::none}), {100, 100, 0, 0});
    const Array g = grad([&](const Array& a) { return nn::binary_cross_entropy(a, y); })(p);
    for (double v : values(g)) EXPECT_TRUE(std::isfinite(v)) << t;
  }
  const Array probs = random_array({2, 3}, float64, 83, 0.05, 0.95);
  const Array targets = random_array({2, 3}, float64, 84, 0.0, 1.0);
  check_vjp(
      [](const std::vector<Array>& a) { return nn::binary_cross_entropy(a[0], a[1], {.weights = a[2]}); },
      {probs, targets, random_array({3}, float64, 85, 0.5, 2.0)});
}

TEST(BinaryCrossEntropyWithLogits, MatchesReferenceAndPyTorch) {
  const Shape shape = {4, 3};
  const Values pos_weight = {2.0, 0.5, 1.5};
  const Values w = test::random_values(4, 90, 0.5, 2.0);
  for (Dtype t : {float64, float32}) {
    const Array logits = random_array(shape, t, 91, -6, 6);
    const Array targets = random_array(shape, t, 92, 0.0, 1.0);
    const Values x = values(logits), y = values(targets);
    Values plain, weighted;
    for (size_t i = 0; i < x.size(); ++i) {
      const double log_sig = -std::log1p(std::exp(-x[i])), log_sig_neg = -std::log1p(std::exp(x[i]));
      plain.push_back(-(y[i] * log_sig + (1 - y[i]) * log_sig_neg));
      weighted.push_back(-w[i / 3] * (pos_weight[i % 3] * y[i] * log_sig + (1 - y[i]) * log_sig_neg));
    }
    for (Reduction r : kReductions) {
      expect_close(nn::binary_cross_entropy_with_logits(logits, targets, {.reduction = r}),
                   ref_reduce(plain, r, 12, 4));
      expect_close(
          nn::binary_cross_entropy_with_logits(
              logits, targets,
              {.weights = Array(w, {4, 1}, t), .pos_weight = Array(pos_weight, {3}, t), .reduction = r}),
          ref_reduce(weighted, r, 12, 4));
    }
  }
  // F.binary_cross_entropy_with_logits(z, y, weight=w, pos_weight=torch.tensor([2.0, 0.5, 1.5]))
  expect_close(
      nn::binary_cross_entropy_with_logits(
          Array({-1.0, 0.5, 3.0, 2.0, -0.2, -4.0}, {2, 3}), Array({1.0, 0.0, 1.0, 0.3, 1.0, 0.0}, {2, 3}),
          {.weights = Array({1.0, 0.5}, {2, 1}), .pos_weight = Array(pos_weight, {3})}),
      {0.7774323791765667});
  check_vjp(
      [](const std::vector<Array>& a) {
        return nn::binary_cross_entropy_with_logits(a[0], a[1], {.weights = a[2], .pos_weight = a[3]});
      },
      {random_array({3, 4}, float64, 93, -4, 4), random_array({3, 4}, float64, 94, 0, 1),
       random_array({3, 1}, float64, 95, 0.5, 2), random_array({4}, float64, 96, 0.5, 2)});
}

TEST(BinaryCrossEntropyWithLogits, HugeLogitsStayFinite) {
  for (Dtype t : {float32, float64}) {
    const Array x(Values{1000, -1000, 1000, -1000}, {4}, t);
    const Array y(Values{1, 0, 0, 1}, {4}, t);
    expect_close(nn::binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::none}),
                 Values{0, 0, 1000, 1000}, 1e-7, 0);
    const Array g = grad([&](const Array& a) {
      return nn::binary_cross_entropy_with_logits(a, y, {.reduction = Reduction::sum});
    })(x);
    // d/dx = sigmoid(x) - y.
    expect_close(g, Values{0, 0, 1, -1}, 1e-7, 1e-30);
  }
}

TEST(BinaryCrossEntropy, RejectsBadInputNamingTheOp) {
  const Array p = random_array({2, 3}, float32, 6, 0.1, 0.9);
  expect_error<ShapeError>("[binary_cross_entropy] shapes differ: probs (2,3) vs targets (3,2)", [&] {
    nn::binary_cross_entropy(p, random_array({3, 2}, float32, 7));
  });
  expect_error<DtypeError>("[binary_cross_entropy] expected a floating dtype", [&] {
    nn::binary_cross_entropy(Array({0, 1}), Array({0, 1}));
  });
  expect_error<ShapeError>("[binary_cross_entropy]", [&] {
    nn::binary_cross_entropy(p, p, {.weights = random_array({4}, float32, 8)});
  });
  expect_error<ShapeError>(
      "[binary_cross_entropy_with_logits] does not broadcast to the loss's shape: pos_weight (2,1,3) vs "
      "(2,3)",
      [&] {
        nn::binary_cross_entropy_with_logits(p, p, {.pos_weight = random_array({2, 1, 3}, float32, 8)});
      });
  EXPECT_EQ(nn::binary_cross_entropy(p, p).shape(), Shape{});
}

}  // namespace
}  // namespace kiln
