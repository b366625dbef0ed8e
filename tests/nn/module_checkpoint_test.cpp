// nn::checkpoint: the gradients of a checkpointed stack equal the plain stack's (parameters and
// input), dropout draws repeat when the backward pass runs a layer again, frozen parameters stay
// constants, the module's values are back after the call, and the peak memory of a deep stack's
// gradient falls.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include "kiln/nn/checkpoint.h"
#include "kiln/nn/value_and_grad.h"
#include "support/device.h"
#include "support/op_test.h"

namespace kiln {
namespace {

// A residual MLP block, as in a transformer: its intermediates are 8 times its input, so a stack
// of checkpointed blocks keeps far less than the plain stack.
class Block : public nn::Module {
 public:
  Block(int64_t width, bool bias, uint64_t seed)
      : up(this, "up", width, 4 * width, nn::LinearOptions{.bias = bias, .key = random::key(seed)}),
        down(this, "down", 4 * width, width, nn::LinearOptions{.bias = bias, .key = random::key(seed + 1)}) {}
  Array operator()(const Array& x) const { return x + down(tanh(up(x))); }
  nn::ModuleInfo<nn::Linear> up, down;
};

class Stack : public nn::Module {
 public:
  Stack(int depth, int64_t width, bool bias = true) {
    for (int i = 0; i < depth; ++i) blocks.emplace_back(width, bias, 10 + 2 * i);
  }
  Array operator()(const Array& x) {
    Array h = x;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Block* block = &blocks[i];
      auto body = [block](const Array& in) { return (*block)(in); };
      h = recompute ? nn::checkpoint(blocks[i], body, h) : body(h);
    }
    return h;
  }
  nn::ModuleList<Block> blocks{this, "blocks"};
  bool recompute = false;
};

TEST(Checkpoint, GradientsEqualThePlainForward) {
  Stack stack(4, 8);
  const Array x = test::random_array({6, 8}, float32, 1);
  auto loss = [&](const Array& in) { return sum(square(stack(in))); };
  auto step = nn::value_and_grad(stack, loss);
  const auto [plain_loss, plain] = step(x);
  stack.recompute = true;
  const auto [loss_value, grads] = step(x);
  test::expect_close(loss_value, plain_loss, 1e-6, 1e-6);
  ASSERT_EQ(grads.size(), 16u);
  for (const auto& [key, g] : plain) test::expect_close(grads.at(key), g, 1e-5, 1e-6);
  // The input's gradient too, through kiln::grad over the checkpointed nodes.
  const auto dx = grad([&](const std::vector<Array>& in) { return std::vector<Array>{loss(in[0])}; })({x});
  stack.recompute = false;
  const auto dx_plain =
      grad([&](const std::vector<Array>& in) { return std::vector<Array>{loss(in[0])}; })({x});
  test::expect_close(dx[0], dx_plain[0], 1e-5, 1e-6);
  // The module holds its own values again (not the traced ones).
  for (const auto& [key, value] : stack.parameters()) EXPECT_FALSE(value.node().tracer) << key;
}

// One bias-free layer and dropout: the loss is linear in the weight, so loss == sum(W * dL/dW)
// holds exactly when the backward pass drew the forward's dropout mask again.
TEST(Checkpoint, DropoutDrawsRepeatInTheBackwardPass) {
  random::seed(5);
  nn::Linear l(16, 16, {.bias = false, .key = random::key(3)});
  const Array x = test::random_array({32, 16}, float32, 2);
  auto step = nn::value_and_grad(l, [&](const Array& in) {
    return sum(nn::checkpoint(
        l, [&l](const Array& h) { return nn::dropout(l(h), 0.5); }, in));
  });
  const auto [loss, grads] = step(x);
  const Array w = l.weight.value();
  EXPECT_NEAR(sum(w * grads.at("weight")).item<float>(), loss.item<float>(),
              1e-4 * (1 + std::abs(loss.item<float>())));
  // Half the units dropped: the loss is not the undropped one.
  EXPECT_GT(std::abs(loss.item<float>() - sum(l(x)).item<float>()), 1e-3);
}

TEST(Checkpoint, FrozenParametersAreConstants) {
  Stack stack(2, 8);
  stack.recompute = true;
  stack.blocks[0].freeze();
  const Array x = test::random_array({4, 8}, float32, 3);
  const auto [loss, grads] = nn::value_and_grad(stack, [&](const Array& in) { return sum(stack(in)); })(x);
  EXPECT_EQ(grads.size(), 4u);  // blocks.1's weights and biases
  EXPECT_TRUE(grads.contains("blocks.1.up.weight"));
  EXPECT_FALSE(grads.contains("blocks.0.up.weight"));
}

TEST(Checkpoint, LowersThePeakMemoryOfADeepStacksGradient) {
  auto peak = [](bool recompute) {
    Stack stack(8, 64);
    stack.recompute = recompute;
    const Array x = test::random_array({2048, 64}, float32, 4);
    auto step = nn::value_and_grad(stack, [&](const Array& in) { return sum(square(stack(in))); });
    nn::eval(stack.parameters());
    x.eval();
    reset_peak_memory();
    const size_t before = test::default_device_memory().active_bytes;
    auto [loss, grads] = step(x);
    std::vector<Array> out{loss};
    for (const auto& [key, g] : grads) out.push_back(g);
    eval(out);
    return test::default_device_memory().peak_bytes - before;
  };
  const size_t plain = peak(false), recomputed = peak(true);
  RecordProperty("plain_peak_bytes", std::to_string(plain));
  RecordProperty("checkpoint_peak_bytes", std::to_string(recomputed));
  EXPECT_LT(recomputed, plain / 2) << plain << " bytes without, " << recomputed << " with";
}

TEST(Checkpoint, Errors) {
  Stack stack(1, 4);
  EXPECT_THROW(nn::checkpoint(
                   stack.blocks[0], [](const Array& in) { return in; }, Array()),
               ValueError);
  EXPECT_THROW(nn::checkpoint(stack.blocks[0], ArrayFn(), {Array(1.0f)}), ValueError);
  EXPECT_THROW(nn::checkpoint(stack.blocks[0], std::function<Array(const Array&)>(), Array(1.0f)),
               ValueError);
}

}  // namespace
}  // namespace kiln
