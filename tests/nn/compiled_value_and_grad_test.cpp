// nn::compiled_value_and_grad: the same loss and gradients as nn::value_and_grad, one trace per
// signature, a new trace when the trainable parameters change, and a training loop that matches
// the eager one. Also runs as gpu.* (KILN_DEVICE=gpu), where calls after the first are captured.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>

#include "kiln/models/mlp.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln {
namespace {

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = test::values(got), w = test::values(want);
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1.0 + std::abs(w[i]))) << what << " at " << i;
}

class CompiledValueAndGrad : public ::testing::Test {
 protected:
  void SetUp() override { random::seed(3); }
  models::Mlp model{{.in_features = 12, .hidden = {16}, .out_features = 5}};
  Array x = test::random_array({8, 12}, float32, 1);
  Array y = random::randint({8}, random::key(2), 0, 5);
  std::function<Array(const Array&, const Array&)> loss = [this](const Array& in, const Array& t) {
    return nn::cross_entropy(model(in), t);
  };
};

TEST_F(CompiledValueAndGrad, MatchesValueAndGrad) {
  auto eager = nn::value_and_grad(model, loss);
  auto compiled = nn::compiled_value_and_grad(model, loss);
  for (int call = 0; call < 3; ++call) {
    auto [l0, g0] = eager(x, y);
    auto [l1, g1] = compiled(x, y);
    expect_close(l1, l0, 1e-6, "loss");
    ASSERT_EQ(g1.size(), g0.size());
    for (const auto& [key, g] : g0) expect_close(g1.at(key), g, 1e-5, key);
  }
}

TEST_F(CompiledValueAndGrad, TrainsLikeTheEagerLoopAndTracesOnce) {
  models::Mlp twin{{.in_features = 12, .hidden = {16}, .out_features = 5}};
  twin.update(model.parameters());
  auto eager = nn::value_and_grad(
      twin, [&](const Array& in, const Array& t) { return nn::cross_entropy(twin(in), t); });
  auto compiled = nn::compiled_value_and_grad(model, loss);
  optim::Adam a({.lr = 1e-2}), b({.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    auto [l0, g0] = eager(x, y);
    b.update(twin, g0);
    auto [l1, g1] = compiled(x, y);
    a.update(model, g1);
    expect_close(l1, l0, 1e-4, "loss at step " + std::to_string(step));
    (step == 0 ? first : last) = l1.item<float>();
  }
  EXPECT_LT(last, first);
}

TEST_F(CompiledValueAndGrad, FreezingAParameterTracesAgain) {
  auto compiled = nn::compiled_value_and_grad(model, loss);
  auto [l0, g0] = compiled(x, y);
  EXPECT_EQ(g0.size(), 4u);
  model.freeze({"layers.0.weight"});
  auto [l1, g1] = compiled(x, y);
  EXPECT_EQ(g1.size(), 3u);
  EXPECT_FALSE(g1.contains("layers.0.weight"));
  expect_close(l1, l0, 1e-6, "loss");
  expect_close(g1.at("layers.1.weight"), g0.at("layers.1.weight"), 1e-5, "layers.1.weight");
}

// linear, relu, dropout (in training mode: a mask from random::next_key() at every call), linear;
// the weights from fixed keys, so two nets are equal.
struct DropoutNet {
  nn::Sequential net;
  DropoutNet() {
    net.emplace_back<nn::Linear>(12, 16, nn::LinearOptions{.key = random::key(5)});
    net.append([](const Array& h) { return nn::relu(h); });
    net.emplace_back<nn::Dropout>(0.3);
    net.emplace_back<nn::Linear>(16, 5, nn::LinearOptions{.key = random::key(6)});
  }
};

TEST_F(CompiledValueAndGrad, DropoutDrawsTheMasksOfTheEagerLoop) {
  DropoutNet a, b;
  auto eager = nn::value_and_grad(
      a.net, [&](const Array& in, const Array& t) { return nn::cross_entropy(a.net(in), t); });
  auto compiled = nn::compiled_value_and_grad(
      b.net, [&](const Array& in, const Array& t) { return nn::cross_entropy(b.net(in), t); });
  // Three calls at the same parameters: three masks, the eager loop's.
  random::seed(21);
  std::vector<std::pair<Array, nn::ParamTree>> want;
  for (int i = 0; i < 3; ++i) want.push_back(eager(x, y));
  random::seed(21);
  std::vector<float> got;
  for (int i = 0; i < 3; ++i) {
    auto [l, g] = compiled(x, y);
    expect_close(l, want[static_cast<size_t>(i)].first, 1e-5, "loss of call " + std::to_string(i));
    for (const auto& [key, value] : want[static_cast<size_t>(i)].second)
      expect_close(g.at(key), value, 1e-4, key + " of call " + std::to_string(i));
    got.push_back(l.item<float>());
  }
  EXPECT_NE(got[0], got[1]);
  EXPECT_NE(got[1], got[2]);
  EXPECT_NE(got[0], got[2]);

  // Training from one seed: the same losses step by step.
  optim::Adam oa({.lr = 1e-2}), ob({.lr = 1e-2});
  random::seed(22);
  std::vector<Array> eager_losses;
  for (int step = 0; step < 5; ++step) {
    auto [l, g] = eager(x, y);
    oa.update(a.net, g);
    eager_losses.push_back(l);
  }
  random::seed(22);
  for (int step = 0; step < 5; ++step) {
    auto [l, g] = compiled(x, y);
    ob.update(b.net, g);
    expect_close(l, eager_losses[static_cast<size_t>(step)], 1e-4, "loss at step " + std::to_string(step));
  }
}

}  // namespace
}  // namespace kiln
