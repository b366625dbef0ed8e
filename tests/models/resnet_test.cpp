// models::ResNet: keys and counts, shapes, BatchNorm's training and evaluation modes, gradients,
// a few Adam steps, and every error path. Tiny configurations keep it fast.
#include "kiln/models/resnet.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/kiln.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using models::ResNet;
using models::ResNetBlock;
using models::ResNetConfig;
using test::expect_close;

// Two stages: an identity block at width 4, then a downsampling block to width 8 and an identity one.
ResNetConfig tiny(uint64_t seed = 1) {
  return {.in_channels = 2, .num_classes = 3, .widths = {4, 8}, .blocks = {1, 2}, .key = random::key(seed)};
}

Array images(const Shape& shape, uint64_t seed) { return random::normal(shape, random::key(seed)); }

bool any_nonzero(const Array& a) { return any(not_equal(a, 0)).item<bool>(); }

// Parameter counts from the architecture: {trainable, all (with BatchNorm's running statistics)}.
std::pair<int64_t, int64_t> expected_counts(const ResNetConfig& c) {
  int64_t trainable = 0, buffers = 0;
  auto conv = [&](int64_t in, int64_t out, int64_t k) { trainable += in * out * k * k; };
  auto bn = [&](int64_t ch) {
    trainable += 2 * ch;    // weight, bias
    buffers += 2 * ch + 1;  // running_mean, running_var, num_batches_tracked
  };
  conv(c.in_channels, c.widths[0], 3);
  bn(c.widths[0]);
  int64_t in = c.widths[0];
  for (size_t s = 0; s < c.widths.size(); ++s) {
    for (int64_t b = 0; b < c.blocks[s]; ++b) {
      const int64_t out = c.widths[s];
      conv(in, out, 3);
      bn(out);
      conv(out, out, 3);
      bn(out);
      if (in != out || (s > 0 && b == 0)) {
        conv(in, out, 1);
        bn(out);
      }
      in = out;
    }
  }
  trainable += in * c.num_classes + c.num_classes;
  return {trainable, trainable + buffers};
}

TEST(ResNet, KeysFollowPyTorchNames) {
  ResNet model(tiny());
  std::vector<std::string> expected;
  auto bn = [&](const std::string& p) {
    for (const char* s : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
      expected.push_back(p + "." + s);
  };
  auto block = [&](const std::string& p, bool downsample) {
    expected.push_back(p + ".conv1.weight");
    bn(p + ".bn1");
    expected.push_back(p + ".conv2.weight");
    bn(p + ".bn2");
    if (downsample) {
      expected.push_back(p + ".downsample.0.weight");
      bn(p + ".downsample.1");
    }
  };
  expected.push_back("stem.conv.weight");
  bn("stem.bn");
  block("stages.0.0", false);
  block("stages.1.0", true);
  block("stages.1.1", false);
  expected.push_back("fc.weight");
  expected.push_back("fc.bias");
  EXPECT_EQ(model.parameters().keys(), expected);
  EXPECT_FALSE(model.stages[0].at<ResNetBlock>(0).has_downsample());
  EXPECT_TRUE(model.stages[1].at<ResNetBlock>(0).has_downsample());
}

TEST(ResNet, ParameterCountsMatchTheFormula) {
  for (const ResNetConfig& c :
       {tiny(), ResNetConfig{},
        ResNetConfig{.in_channels = 3, .num_classes = 7, .widths = {8, 8, 16}, .blocks = {1, 1, 3}}}) {
    ResNet model(c);
    const auto [trainable, all] = expected_counts(c);
    EXPECT_EQ(nn::num_elements(model.trainable_parameters()), trainable);
    EXPECT_EQ(nn::num_elements(model.parameters()), all);
  }
  // The default (widths 16, 32, 64; two blocks each) is the small model the docs promise.
  EXPECT_EQ(expected_counts(ResNetConfig{}).first, 174970);
}

TEST(ResNet, InitializationFollowsTheKey) {
  ResNet a(tiny(5)), b(tiny(5)), c(tiny(6));
  expect_close(a.stem->conv->weight.value(), b.stem->conv->weight.value(), 0, 0);
  expect_close(a.fc->weight.value(), b.fc->weight.value(), 0, 0);
  EXPECT_TRUE(any_nonzero(a.stem->conv->weight.value() - c.stem->conv->weight.value()));
  // Kaiming normal with fan_out, as torchvision: stage 1's 8 -> 8 3x3 conv has std sqrt(2 / 72).
  const Array w = a.stages[1].at<ResNetBlock>(1).conv2->weight.value();
  EXPECT_NEAR(std::sqrt(mean(square(w)).item<float>()), std::sqrt(2.0 / 72), 0.02);
  // BatchNorm starts as the identity map: weight 1, bias 0, running statistics 0 and 1.
  expect_close(a.stem->bn->weight.value(), ones({4}), 0, 0);
  expect_close(a.stem->bn->bias.value(), zeros({4}), 0, 0);
}

TEST(ResNet, ShapesForAnyImageSize) {
  ResNet model(tiny());
  EXPECT_EQ(model(images({3, 2, 28, 28}, 1)).shape(), (Shape{3, 3}));
  EXPECT_EQ(model(images({2, 2, 9, 13}, 2)).shape(), (Shape{2, 3}));
  // Blocks: a stride-2 block halves the resolution (rounding up) and changes the width.
  const ResNetBlock& down = model.stages[1].at<ResNetBlock>(0);
  EXPECT_EQ(down(images({2, 4, 9, 9}, 3)).shape(), (Shape{2, 8, 5, 5}));
  EXPECT_EQ(model.stem(images({2, 2, 6, 7}, 4)).shape(), (Shape{2, 4, 6, 7}));
  // One channel: (N, H, W) is accepted as (N, 1, H, W), with equal results.
  ResNet gray({.widths = {4}, .blocks = {1}, .key = random::key(2)});
  const Array x = images({2, 28, 28}, 5);
  EXPECT_EQ(gray(x).shape(), (Shape{2, 10}));
  expect_close(gray(x), gray(reshape(x, {2, 1, 28, 28})), 0, 0);
}

TEST(ResNet, TrainingModeUsesBatchStatisticsAndEvalModeRunningOnes) {
  ResNet model(tiny());
  const Array x = images({4, 2, 8, 8}, 6);
  // The second image changes: in training mode the first image's logits change with it (batch
  // statistics), in evaluation mode they do not.
  const Array x2 = concatenate({slice(x, {Slice{0, 1}}), images({3, 2, 8, 8}, 7)}, 0);
  auto first = [](const Array& logits) { return slice(logits, {Slice{0, 1}}); };
  EXPECT_TRUE(model.is_training());
  EXPECT_TRUE(any_nonzero(first(model(x)) - first(model(x2))));
  model.eval_mode();
  EXPECT_FALSE(model.stem->bn->is_training());
  expect_close(first(model(x)), first(model(x2)), 1e-6, 1e-6);
  // Fresh running statistics (0 and 1) make every BatchNorm the identity up to eps.
  const Array stem_out = model.stem(x);
  expect_close(stem_out, nn::relu(model.stem->conv(x) / std::sqrt(1 + 1e-5)), 1e-6, 1e-6);
  model.train();

  // forward_train normalizes as training mode and returns the running statistics after the batch.
  const models::ResNetTrainOutput out = model.forward_train(x);
  expect_close(out.output, model(x), 1e-6, 1e-6);
  std::set<std::string> stat_keys;
  for (const auto& key : model.parameters().keys())
    if (key.find("running_") != std::string::npos || key.find("num_batches") != std::string::npos)
      stat_keys.insert(key);
  const auto keys = out.running_stats.keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), stat_keys);
  const Array conv = model.stem->conv(x);
  const Array batch_mean = mean(conv, Axes{0, 2, 3});
  const Array batch_var = var(conv, Axes{0, 2, 3}, false, /*ddof=*/1);  // unbiased, as PyTorch
  expect_close(out.running_stats.at("stem.bn.running_mean"), 0.1 * batch_mean, 1e-5, 1e-6);
  expect_close(out.running_stats.at("stem.bn.running_var"), 0.9 + 0.1 * batch_var, 1e-5, 1e-6);
  EXPECT_EQ(out.running_stats.at("stem.bn.num_batches_tracked").item<int64_t>(), 1);
  // Nothing changed yet: forward is const.
  expect_close(model.stem->bn->running_mean.value(), zeros({4}), 0, 0);

  model.eval_mode();
  const Array before = model(x);
  model.update_running_stats(out.running_stats);
  expect_close(model.stem->bn->running_mean.value(), out.running_stats.at("stem.bn.running_mean"), 0, 0);
  EXPECT_EQ(model.stages[1]
                .at<ResNetBlock>(0)
                .downsample->at<nn::BatchNorm2d>(1)
                .num_batches_tracked.value()
                .item<int64_t>(),
            1);
  EXPECT_TRUE(any_nonzero(model(x) - before));
  // forward_train uses batch statistics whatever the mode.
  model.train();
  const Array train_logits = model(x);
  model.eval_mode();
  expect_close(model.forward_train(x).output, train_logits, 1e-6, 1e-6);
}

TEST(ResNet, GradientsReachEveryTrainableParameter) {
  ResNet model(tiny(3));
  const Array x = images({4, 2, 8, 8}, 8);
  const Array y = Array(std::vector<int32_t>{0, 2, 1, 2}, {4});
  nn::ParamTree stats;
  auto step = nn::value_and_grad(model, [&](const Array& in, const Array& t) {
    auto out = model.forward_train(in);
    stats = out.running_stats;
    return nn::cross_entropy(out.output, t);
  });
  const auto [loss, grads] = step(x, y);
  EXPECT_TRUE(std::isfinite(loss.item<float>()));
  EXPECT_EQ(grads.keys(), model.trainable_parameters().keys());
  for (const auto& [key, g] : grads) EXPECT_TRUE(any_nonzero(g)) << key;
  // The statistics captured inside the traced loss evaluate afterwards and can be assigned.
  model.update_running_stats(stats);
  EXPECT_EQ(model.stem->bn->num_batches_tracked.value().item<int64_t>(), 1);
  EXPECT_TRUE(any_nonzero(model.stem->bn->running_mean.value()));
}

TEST(ResNet, AdamStepsReduceTheLoss) {
  ResNet model(tiny(4));
  optim::Adam opt({.lr = 1e-2});
  const Array x = images({8, 2, 8, 8}, 9);
  const Array y = Array(std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1}, {8});
  nn::ParamTree stats;
  auto step = nn::value_and_grad(model, [&](const Array& in, const Array& t) {
    auto out = model.forward_train(in);
    stats = out.running_stats;
    return nn::cross_entropy(out.output, t);
  });
  float first = 0, last = 0;
  for (int i = 0; i < 15; ++i) {
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    model.update_running_stats(stats);
    const auto params = model.parameters();
    nn::eval({&params, &opt.state()});
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first / 2) << "loss " << first << " -> " << last;
  EXPECT_EQ(model.stem->bn->num_batches_tracked.value().item<int64_t>(), 15);
}

TEST(ResNet, ConfigErrors) {
  auto with = [](auto edit) {
    ResNetConfig c = tiny();
    edit(c);
    return c;
  };
  EXPECT_THROW(ResNet(with([](auto& c) { c.in_channels = 0; })), ValueError);
  EXPECT_THROW(ResNet(with([](auto& c) { c.num_classes = 0; })), ValueError);
  EXPECT_THROW(ResNet(with([](auto& c) { c.widths = {}, c.blocks = {}; })), ValueError);
  EXPECT_THROW(ResNet(with([](auto& c) { c.blocks = {1}; })), ValueError);
  EXPECT_THROW(ResNet(with([](auto& c) { c.widths = {4, 0}; })), ValueError);
  EXPECT_THROW(ResNet(with([](auto& c) { c.blocks = {1, 0}; })), ValueError);
  EXPECT_THROW(ResNet(with([](auto& c) { c.key = Array(std::vector<float>{1, 2}, {2}); })), DtypeError);
}

TEST(ResNet, InputErrors) {
  ResNet model(tiny());
  EXPECT_THROW(model(Array()), ValueError);
  EXPECT_THROW(model(ones({2, 2, 8, 8}, int32)), DtypeError);
  EXPECT_THROW(model(ones({2, 8, 8})), ShapeError);  // in_channels is 2: no (N, H, W) form
  EXPECT_THROW(model(ones({2, 3, 8, 8})), ShapeError);
  EXPECT_THROW(model(ones({2, 2, 2, 8, 8})), ShapeError);
  EXPECT_THROW(model.forward_train(ones({8, 8})), ShapeError);
  // Training mode needs more than one value per channel, as PyTorch.
  EXPECT_THROW(model(images({1, 2, 1, 1}, 1)), ValueError);
  model.eval_mode();
  EXPECT_EQ(model(images({1, 2, 1, 1}, 1)).shape(), (Shape{1, 3}));
}

TEST(ResNet, UpdateRunningStatsIsAllOrNothing) {
  ResNet model(tiny());
  nn::ParamTree stats = model.forward_train(images({2, 2, 6, 6}, 1)).running_stats;
  nn::ParamTree unknown = stats;
  unknown.set("stem.bn.running_median", zeros({4}));
  EXPECT_THROW(model.update_running_stats(unknown), KeyError);
  nn::ParamTree bad_shape = stats;
  bad_shape.set("stem.bn.running_var", ones({5}));
  EXPECT_THROW(model.update_running_stats(bad_shape), ShapeError);
  EXPECT_EQ(model.stem->bn->num_batches_tracked.value().item<int64_t>(), 0);
  expect_close(model.stem->bn->running_mean.value(), zeros({4}), 0, 0);
}

}  // namespace
}  // namespace kiln
