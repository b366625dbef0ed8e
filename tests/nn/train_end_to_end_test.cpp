// End to end: models, losses and optimizers together learn synthetic tasks, with fixed seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "kiln/kiln.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "support/op_test.h"

namespace kiln {
namespace {

// Two-dimensional points on three interleaved spiral arms: the class is the arm, so the boundary
// is curved and a linear model cannot fit it.
std::pair<Array, Array> spirals(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> radius(0.15, 1.0), angle(0, 2 * std::numbers::pi);
  std::vector<float> xy;
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    const double r = radius(rng), a = angle(rng);
    const double turned = std::fmod(a + 3.0 * r, 2 * std::numbers::pi);
    labels.push_back(static_cast<int32_t>(turned / (2 * std::numbers::pi / 3)));
    xy.push_back(static_cast<float>(r * std::cos(a)));
    xy.push_back(static_cast<float>(r * std::sin(a)));
  }
  return {Array(xy, {n, 2}), Array(labels, {n})};
}

double accuracy(const Array& logits, const Array& labels) {
  return mean(astype(equal(argmax(logits, -1), astype(labels, int32)), float32)).item<float>();
}

TEST(TrainEndToEnd, MlpLearnsSpiralsToNinetyFivePercent) {
  random::seed(1);
  models::Mlp model({.in_features = 2, .hidden = {64, 64}, .out_features = 3});
  optim::Adam opt({.lr = 1e-2});
  const auto [x, y] = spirals(1200, 2);
  const auto [test_x, test_y] = spirals(600, 3);
  auto step = nn::value_and_grad(
      model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
  float first = 0, last = 0;
  for (int i = 0; i < 800; ++i) {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    nn::eval({&params, &opt.state()});
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first / 5) << "loss " << first << " -> " << last;
  EXPECT_GE(accuracy(model(test_x), test_y), 0.95);
}

// The overlapped loop (nn::async_eval: step n + 1 is built while step n runs) gives the
// synchronous loop's losses and parameters bit for bit.
TEST(TrainEndToEnd, AsynchronousLoopEqualsSynchronousLoop) {
  const auto [x, y] = spirals(512, 5);
  auto run = [&x, &y](bool async) {
    random::seed(7);
    models::Mlp model({.in_features = 2, .hidden = {32, 32}, .out_features = 3});
    optim::Adam opt({.lr = 1e-2});
    auto step = nn::value_and_grad(
        model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
    std::vector<Array> losses;
    for (int i = 0; i < 40; ++i) {
      auto [loss, grads] = step(x, y);
      opt.update(model, grads);
      const auto params = model.parameters();
      if (async)
        nn::async_eval({&params, &opt.state()}, {loss});
      else
        nn::eval({&params, &opt.state()});
      losses.push_back(loss);
    }
    std::vector<float> out;
    for (const Array& l : losses) out.push_back(l.item<float>());
    for (const auto& [key, p] : model.parameters())
      for (float v : p.to_vector<float>()) out.push_back(v);
    return out;
  };
  const std::vector<float> sync = run(false), async = run(true);
  ASSERT_EQ(sync.size(), async.size());
  for (size_t i = 0; i < sync.size(); ++i) ASSERT_EQ(sync[i], async[i]) << "value " << i;
}

// 12x12 images, each a bar (horizontal, vertical or diagonal: the class) at a random place, plus
// noise.
std::pair<Array, Array> bars(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> cls(0, 2), pos(2, 9);
  std::normal_distribution<float> noise(0, 0.2f);
  std::vector<float> img(n * 144);
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    float* p = img.data() + i * 144;
    for (int k = 0; k < 144; ++k) p[k] = noise(rng);
    const int c = cls(rng), r = pos(rng), q = pos(rng);
    for (int d = -2; d <= 2; ++d) {
      const int row = c == 0 ? r : r + d, col = c == 1 ? q : (c == 0 ? q + d : q + d);
      p[row * 12 + col] += 1.0f;
    }
    labels[i] = c;
  }
  return {Array(img, {n, 1, 12, 12}), Array(labels, {n})};
}

struct SmallCnn : nn::Module {
  nn::ModuleInfo<nn::Conv2d> conv1{this, "conv1", 1, 8, 3, nn::Conv2dOptions{.padding = 1}};
  nn::ModuleInfo<nn::Conv2d> conv2{this, "conv2", 8, 16, 3, nn::Conv2dOptions{.padding = 1}};
  nn::ModuleInfo<nn::Linear> head{this, "head", 16 * 3 * 3, 3};
  nn::MaxPool2d pool{2};
  Array operator()(const Array& x) const {
    Array h = pool(nn::relu(conv1(x)));
    h = pool(nn::relu(conv2(h)));
    return head(reshape(h, {h.shape()[0], -1}));
  }
};

TEST(TrainEndToEnd, SmallCnnLossFallsTenfold) {
  random::seed(4);
  SmallCnn model;
  optim::Adam opt({.lr = 3e-3});
  const auto [x, y] = bars(256, 5);
  auto step = nn::value_and_grad(
      model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
  float first = 0, last = 0;
  for (int i = 0; i < 120; ++i) {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    nn::eval({&params, &opt.state()});
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first / 10) << "loss " << first << " -> " << last;
  const auto [test_x, test_y] = bars(300, 6);
  EXPECT_GE(accuracy(model(test_x), test_y), 0.9);
}

// Sequences of 12 tokens from 10 where every step adds the sequence's own stride (mod 10): the
// next token is predictable only from earlier tokens, so the model must attend to its context.
std::pair<Array, Array> strides(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> start(0, 9), stride(1, 4);
  std::vector<int32_t> in(n * 12), out(n * 12);
  for (int64_t i = 0; i < n; ++i) {
    int v = start(rng);
    const int s = stride(rng);
    for (int t = 0; t < 12; ++t) {
      in[i * 12 + t] = v;
      v = (v + s) % 10;
      out[i * 12 + t] = v;
    }
  }
  return {Array(in, {n, 12}), Array(out, {n, 12})};
}

struct TwoLayerTransformer : nn::Module {
  nn::ModuleInfo<nn::Embedding> embed{this, "embed", 10, 32};
  nn::ParameterInfo positions{this, "positions", nn::init::normal({12, 32}, 0.0, 0.1)};
  nn::ModuleList<nn::TransformerEncoderLayer> layers{this, "layers"};
  nn::ModuleInfo<nn::Linear> head{this, "head", 32, 10};
  TwoLayerTransformer() {
    for (int i = 0; i < 2; ++i)
      layers.emplace_back(32, 4, nn::TransformerLayerOptions{.dim_feedforward = 64, .dropout = 0});
  }
  Array operator()(const Array& tokens) const {
    Array h = embed(tokens) + positions.value();
    for (const auto& layer : layers) h = (*layer)(h, nn::EncoderLayerArgs{.is_causal = true});
    return head(h);
  }
};

TEST(TrainEndToEnd, TwoLayerTransformerLossFallsFourfold) {
  random::seed(9);
  TwoLayerTransformer model;
  optim::AdamW opt({.lr = 3e-3, .weight_decay = 0.0});
  const auto [x, y] = strides(128, 10);
  auto step = nn::value_and_grad(
      model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
  float first = 0, last = 0;
  for (int i = 0; i < 150; ++i) {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    const auto params = model.parameters();
    nn::eval({&params, &opt.state()});
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first / 4) << "loss " << first << " -> " << last;
}

TEST(TrainEndToEnd, LeNetTakesOneStepOnImages) {
  random::seed(7);
  models::LeNet model;
  EXPECT_EQ(
      model.parameters().keys(),
      (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  const Array x = random::normal({4, 28, 28}, random::key(8));
  const Array y = Array(std::vector<int32_t>{1, 3, 5, 7}, {4});
  EXPECT_EQ(model(x).shape(), (Shape{4, 10}));
  optim::SGD opt({.lr = 0.1});
  auto step = nn::value_and_grad(
      model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
  const float before = step(x, y).first.item<float>();
  for (int i = 0; i < 5; ++i) opt.update(model, step(x, y).second);
  EXPECT_LT(nn::cross_entropy(model(x), y).item<float>(), before);
  EXPECT_THROW(model(ones({2, 1, 32, 32})), ShapeError);
}

}  // namespace
}  // namespace kiln
