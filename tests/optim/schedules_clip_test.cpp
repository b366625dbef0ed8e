// Learning-rate schedules (values at chosen steps, computed here by hand from MLX's formulas) and
// gradient clipping (against plain loops and against torch.nn.utils.clip_grad_norm_).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/optim/optim.h"
#include "support/op_test.h"

namespace kiln::optim {
namespace {

using test::random_array;
using test::values;

TEST(Schedules, StepDecay) {
  const Schedule s = step_decay(0.1, 0.5, 3);
  for (int64_t step : {0, 1, 2}) EXPECT_DOUBLE_EQ(s(step), 0.1);
  for (int64_t step : {3, 4, 5}) EXPECT_DOUBLE_EQ(s(step), 0.05);
  EXPECT_DOUBLE_EQ(s(6), 0.025);
  EXPECT_DOUBLE_EQ(s(31), 0.1 * std::pow(0.5, 10));
  EXPECT_THROW(step_decay(0.1, 0.5, 0), ValueError);
}

TEST(Schedules, ExponentialDecay) {
  const Schedule s = exponential_decay(0.2, 0.9);
  EXPECT_DOUBLE_EQ(s(0), 0.2);
  EXPECT_DOUBLE_EQ(s(1), 0.18);
  EXPECT_DOUBLE_EQ(s(10), 0.2 * std::pow(0.9, 10));
}

TEST(Schedules, CosineDecay) {
  const Schedule s = cosine_decay(0.1, 100);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_NEAR(s(50), 0.05, 1e-15);
  EXPECT_NEAR(s(25), 0.1 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_NEAR(s(100), 0.0, 1e-15);
  EXPECT_NEAR(s(1000), 0.0, 1e-15);  // constant after decay_steps
  const Schedule to_end = cosine_decay(1.0, 10, 0.1);
  EXPECT_DOUBLE_EQ(to_end(0), 1.0);
  EXPECT_NEAR(to_end(5), 0.55, 1e-15);
  EXPECT_NEAR(to_end(10), 0.1, 1e-15);
  EXPECT_NEAR(to_end(11), 0.1, 1e-15);
  EXPECT_THROW(cosine_decay(0.1, 0), ValueError);
}

TEST(Schedules, LinearSchedule) {
  const Schedule warmup = linear_schedule(0.0, 1e-3, 10);
  EXPECT_DOUBLE_EQ(warmup(0), 0.0);
  EXPECT_NEAR(warmup(3), 3e-4, 1e-18);
  EXPECT_NEAR(warmup(10), 1e-3, 1e-18);
  EXPECT_NEAR(warmup(50), 1e-3, 1e-18);
  const Schedule down = linear_schedule(1.0, 0.5, 4);
  EXPECT_DOUBLE_EQ(down(2), 0.75);
  EXPECT_THROW(linear_schedule(0, 1, 0), ValueError);
}

TEST(Schedules, JoinSchedulesWarmUpThenDecay) {
  const Schedule s = join_schedules({linear_schedule(0.0, 1.0, 10), cosine_decay(1.0, 20, 0.1)}, {10});
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_NEAR(s(5), 0.5, 1e-15);
  EXPECT_NEAR(s(9), 0.9, 1e-15);
  EXPECT_DOUBLE_EQ(s(10), 1.0);  // the decay starts at its own step 0
  EXPECT_NEAR(s(20), 0.55, 1e-15);
  EXPECT_NEAR(s(30), 0.1, 1e-15);
  const Schedule three = join_schedules(
      {[](int64_t) { return 1.0; }, [](int64_t t) { return 2.0 + t; }, [](int64_t t) { return 10.0 + t; }},
      {2, 5});
  EXPECT_EQ(three(1), 1.0);
  EXPECT_EQ(three(2), 2.0);
  EXPECT_EQ(three(4), 4.0);
  EXPECT_EQ(three(5), 10.0);
  EXPECT_EQ(three(7), 12.0);
  EXPECT_THROW(join_schedules({}, {}), ValueError);
  EXPECT_THROW(join_schedules({exponential_decay(1, 0.5)}, {3}), ValueError);
  EXPECT_THROW(join_schedules({exponential_decay(1, 0.5), exponential_decay(1, 0.5)}, {-1}), ValueError);
  EXPECT_THROW(join_schedules({exponential_decay(1, 0.5), Schedule{}}, {3}), ValueError);
  EXPECT_THROW(join_schedules(
                   {exponential_decay(1, 0.5), exponential_decay(1, 0.5), exponential_decay(1, 0.5)}, {5, 3}),
               ValueError);
  // A schedule is a LearningRate.
  Adam adam({.lr = s});
  EXPECT_DOUBLE_EQ(adam.learning_rate(), 0.0);
}

nn::ParamTree grads_of(Dtype dtype) {
  return {{"a", random_array({3, 4}, dtype, 1, -2, 2)},
          {"b", random_array({5}, dtype, 2, -2, 2)},
          {"c", random_array({2, 1, 3}, dtype, 3, -2, 2)}};
}

// PyTorch's clip_grad_norm_ on float64 loops: per-array norms, their norm, one coefficient.
std::pair<double, double> reference_norm(const nn::ParamTree& grads, double max_norm, double p) {
  std::vector<double> norms;
  for (const auto& [key, g] : grads) {
    double acc = 0;
    for (double v : values(g))
      acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
    norms.push_back(std::isinf(p) ? acc : std::pow(acc, 1 / p));
  }
  double total = 0;
  for (double n : norms) total = std::isinf(p) ? std::max(total, n) : total + std::pow(n, p);
  if (!std::isinf(p)) total = std::pow(total, 1 / p);
  return {total, std::min(1.0, max_norm / (total + 1e-6))};
}

TEST(ClipGradNorm, MatchesPlainLoops) {
  for (const Dtype dtype : {float64, float32}) {
    for (const double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
      for (const double max_norm : {0.5, 1e3}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " p=" + std::to_string(p) +
                     " max=" + std::to_string(max_norm));
        const nn::ParamTree grads = grads_of(dtype);
        const auto [total, coef] = reference_norm(grads, max_norm, p);
        const auto [clipped, norm] = clip_grad_norm(grads, max_norm, p);
        const double tol = dtype == float64 ? 1e-12 : 2e-6;
        EXPECT_EQ(norm.ndim(), 0);
        EXPECT_EQ(norm.dtype(), dtype);
        EXPECT_NEAR(norm.item<double>(), total, tol * total);
        EXPECT_EQ(clipped.keys(), grads.keys());
        for (const auto& [key, g] : grads) {
          std::vector<double> expected = values(g);
          for (double& v : expected) v *= coef;
          EXPECT_EQ(clipped.at(key).dtype(), dtype);
          test::expect_close(clipped.at(key), expected, tol, tol);
        }
      }
    }
  }
}

// torch.nn.utils.clip_grad_norm_ on the same float32 inputs (/usr/bin/python3, torch 1.13):
//   import torch
//   g = [torch.tensor([[0.5, -1.0], [2.0, 0.25]]), torch.tensor([-3.0, 0.125, 1.5])]
//   ps = [torch.zeros_like(x, requires_grad=True) for x in g]
//   for p, x in zip(ps, g): p.grad = x.clone()
//   print(repr(torch.nn.utils.clip_grad_norm_(ps, 1.5).item()), [p.grad.tolist() for p in ps])
// -> 4.071624279022217
//    [[[0.18420162796974182, -0.36840325593948364], [0.7368065118789673, 0.09210081398487091]],
//     [-1.1052098274230957, 0.046050406992435455, 0.5526049137115479]]
TEST(ClipGradNorm, MatchesPyTorch) {
  const nn::ParamTree grads{{"w", Array({0.5f, -1.0f, 2.0f, 0.25f}, {2, 2})},
                            {"b", Array({-3.0f, 0.125f, 1.5f})}};
  const auto [clipped, norm] = clip_grad_norm(grads, 1.5);
  EXPECT_NEAR(norm.item<double>(), 4.071624279022217, 1e-6);
  test::expect_close(
      clipped.at("w"),
      std::vector<double>{0.18420162796974182, -0.36840325593948364, 0.7368065118789673, 0.09210081398487091},
      1e-6, 1e-7);
  test::expect_close(clipped.at("b"),
                     std::vector<double>{-1.1052098274230957, 0.046050406992435455, 0.5526049137115479}, 1e-6,
                     1e-7);
}

TEST(ClipGradNorm, EdgeCasesAndErrors) {
  // Below the limit the gradients are scaled by exactly 1 (values unchanged).
  const nn::ParamTree small{{"x", Array({0.1f, -0.2f})}};
  EXPECT_EQ(values(clip_grad_norm(small, 10.0).grads.at("x")), values(small.at("x")));
  // Empty: total norm 0.
  const auto [none, zero] = clip_grad_norm(nn::ParamTree{}, 1.0);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(zero.item<double>(), 0.0);
  // Half-precision gradients keep their dtype; the norm is float32.
  const nn::ParamTree half = grads_of(bfloat16);
  const auto [clipped, norm] = clip_grad_norm(half, 1.0);
  EXPECT_EQ(norm.dtype(), float32);
  EXPECT_EQ(clipped.at("a").dtype(), bfloat16);
  EXPECT_NEAR(norm.item<double>(), reference_norm(half, 1.0, 2.0).first, 1e-5);
  // Lazy: nothing computed yet.
  EXPECT_FALSE(clip_grad_norm(grads_of(float32), 1.0).total_norm.is_available());
  EXPECT_THROW(clip_grad_norm(small, -1.0), ValueError);
  EXPECT_THROW(clip_grad_norm(small, 1.0, 0.0), ValueError);
  EXPECT_THROW(clip_grad_norm(small, std::nan("")), ValueError);
  EXPECT_THROW(clip_grad_norm(nn::ParamTree{{"i", Array({1, 2})}}, 1.0), DtypeError);
}

TEST(ClipGradValue, ClampsEveryEntry) {
  const nn::ParamTree grads = grads_of(float32);
  const nn::ParamTree clipped = clip_grad_value(grads, 0.75);
  EXPECT_EQ(clipped.keys(), grads.keys());
  for (const auto& [key, g] : grads) {
    std::vector<double> expected = values(g);
    for (double& v : expected) v = std::clamp(v, -0.75, 0.75);
    test::expect_close(clipped.at(key), expected, 0, 0);
  }
  EXPECT_THROW(clip_grad_value(grads, -0.1), ValueError);
  EXPECT_THROW(clip_grad_value(nn::ParamTree{{"i", Array({1, 2})}}, 1.0), DtypeError);
}

}  // namespace
}  // namespace kiln::optim
