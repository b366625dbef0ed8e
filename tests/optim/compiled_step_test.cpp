// optim::CompiledStep: a whole training step (loss, gradients, Adam/AdamW update) compiled once.
// It must leave the model and the optimizer as the eager loop does (state, steps, learning-rate
// schedule), trace once, trace again when the trainable set changes, and refuse optimizers and
// states it cannot compile. Also runs as gpu.* (KILN_DEVICE=gpu), where steps after the first are
// captured and replayed.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>

#include "kiln/models/gpt.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/value_and_grad.h"
#include "kiln/optim/optim.h"
#include "support/device.h"
#include "support/op_test.h"

namespace kiln {
namespace {

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> g = test::values(got), w = test::values(want);
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1.0 + std::abs(w[i]))) << what << " at " << i;
}

struct TwinMlps {
  models::Mlp model{{.in_features = 12, .hidden = {16}, .out_features = 5}};
  models::Mlp twin{{.in_features = 12, .hidden = {16}, .out_features = 5}};
  Array x = test::random_array({8, 12}, float32, 1);
  Array y = random::randint({8}, random::key(2), 0, 5);
  TwinMlps() { twin.update(model.parameters()); }
};

template <class Opt, class Options>
void check_against_eager(const Options& options, int steps) {
  random::seed(3);
  TwinMlps s;
  Opt compiled_opt(options), eager_opt(options);
  optim::CompiledStep step(s.model, compiled_opt, [&](const std::vector<Array>& b) {
    return nn::cross_entropy(s.model(b[0]), b[1]);
  });
  auto grad_fn = nn::value_and_grad(
      s.twin, [&](const Array& in, const Array& t) { return nn::cross_entropy(s.twin(in), t); });
  double first = 0, last = 0;
  for (int i = 0; i < steps; ++i) {
    const Array x = test::random_array({8, 12}, float32, 10 + static_cast<uint64_t>(i));
    const Array loss = step({x, s.y});
    auto [want_loss, grads] = grad_fn(x, s.y);
    eager_opt.update(s.twin, grads);
    expect_close(loss, want_loss, 1e-5, "loss at step " + std::to_string(i));
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first);
  EXPECT_EQ(compiled_opt.step(), eager_opt.step());
  const nn::ParamTree got = s.model.parameters(), want = s.twin.parameters();
  for (const auto& [key, value] : want) expect_close(got.at(key), value, 1e-5, key);
  const nn::ParamTree gs = compiled_opt.state(), ws = eager_opt.state();
  ASSERT_EQ(gs.size(), ws.size());
  for (const auto& [key, value] : ws) expect_close(gs.at(key), value, 1e-5, key);
  ASSERT_TRUE(step.compiled().has_value());
  EXPECT_EQ(step.compiled()->trace_count(), 1);
  // On the GPU every step after the first replays one captured program.
  if (test::gpu_default()) {
    EXPECT_EQ(step.compiled()->capture_count(), 1);
  }
}

TEST(CompiledStep, AdamMatchesTheEagerLoop) {
  check_against_eager<optim::Adam>(optim::AdamOptions{.lr = 1e-2}, 6);
}

TEST(CompiledStep, AdamWWithAScheduleAndAmsgradMatchesTheEagerLoop) {
  check_against_eager<optim::AdamW>(optim::AdamWOptions{.lr = optim::LearningRate([](int64_t t) {
                                                          return 1e-2 / (1.0 + 0.5 * static_cast<double>(t));
                                                        }),
                                                        .weight_decay = 0.1,
                                                        .amsgrad = true},
                                    5);
}

// Trains `compiled` with a CompiledStep and `eager` (equal parameters) with value_and_grad and
// Adam on one batch from one seed: the dropout masks, drawn from the default key sequence, must
// be the same, so the losses and the final parameters agree.
template <class Model>
void check_dropout_training(Model& compiled, Model& eager, const Array& x, const Array& y, int steps) {
  optim::Adam compiled_opt({.lr = 1e-2}), eager_opt({.lr = 1e-2});
  optim::CompiledStep step(compiled, compiled_opt, [&](const std::vector<Array>& b) {
    return nn::cross_entropy(compiled(b[0]), b[1]);
  });
  auto grad_fn = nn::value_and_grad(
      eager, [&](const Array& in, const Array& t) { return nn::cross_entropy(eager(in), t); });
  random::seed(40);
  std::vector<Array> want;
  for (int i = 0; i < steps; ++i) {
    auto [loss, grads] = grad_fn(x, y);
    eager_opt.update(eager, grads);
    want.push_back(loss);
  }
  const random::DefaultKeyState after = random::default_key_state();
  EXPECT_GT(after.count, 0u);
  random::seed(40);
  for (int i = 0; i < steps; ++i)
    expect_close(step({x, y}), want[static_cast<size_t>(i)], 1e-4, "loss at step " + std::to_string(i));
  EXPECT_EQ(random::default_key_state(), after);  // as many keys drawn as by the eager loop
  const nn::ParamTree g = compiled.parameters(), w = eager.parameters();
  for (const auto& [key, value] : w) expect_close(g.at(key), value, 1e-4, key);
  ASSERT_TRUE(step.compiled().has_value());
  EXPECT_EQ(step.compiled()->trace_count(), 1);
  if (test::gpu_default()) {
    EXPECT_EQ(step.compiled()->capture_count(), 1);  // steps after the first replay the capture
  }
}

TEST(CompiledStep, DropoutTrainsLikeTheEagerLoop) {
  auto make = [](nn::Sequential& net) {
    net.emplace_back<nn::Linear>(12, 16, nn::LinearOptions{.key = random::key(5)});
    net.append([](const Array& h) { return nn::relu(h); });
    net.emplace_back<nn::Dropout>(0.3);
    net.emplace_back<nn::Linear>(16, 5, nn::LinearOptions{.key = random::key(6)});
  };
  nn::Sequential compiled, eager;
  make(compiled);
  make(eager);
  check_dropout_training(compiled, eager, test::random_array({8, 12}, float32, 30),
                         random::randint({8}, random::key(31), 0, 5), 5);
}

TEST(CompiledStep, GptWithDropoutTrainsLikeTheEagerLoop) {
  const models::GptConfig config{.vocab_size = 11,
                                 .context = 6,
                                 .d_model = 8,
                                 .heads = 2,
                                 .layers = 1,
                                 .dropout = 0.2,
                                 .key = random::key(8)};
  models::Gpt compiled(config), eager(config);
  const Array tokens = random::randint({2, 6}, random::key(9), 0, 11);
  check_dropout_training(compiled, eager, tokens, random::randint({2, 6}, random::key(10), 0, 11), 4);
}

TEST(CompiledStep, FreezingAParameterTracesAgain) {
  random::seed(4);
  TwinMlps s;
  optim::Adam opt({.lr = 1e-2});
  optim::CompiledStep step(
      s.model, opt, [&](const std::vector<Array>& b) { return nn::cross_entropy(s.model(b[0]), b[1]); });
  step({s.x, s.y}).eval();
  const Array frozen = s.model.parameters().at("layers.0.weight");
  s.model.freeze({"layers.0.weight"});
  step({s.x, s.y}).eval();
  EXPECT_EQ(step.compiled()->trace_count(), 1);  // a new compiled function for the new trainable set
  EXPECT_EQ(s.model.parameters().at("layers.0.weight").id(), frozen.id());
  EXPECT_EQ(opt.step(), 2);
  // Unfrozen, the weight is one step behind the others: a compiled step cannot serve both counts.
  s.model.unfreeze({"layers.0.weight"});
  EXPECT_THROW(step({s.x, s.y}), NotImplemented);
  EXPECT_EQ(opt.step(), 2);
}

// A module with an on_update() hook and a parameter whose shape a test changes.
struct Scaled : nn::Module {
  nn::ParameterInfo weight{this, "weight", test::random_array({6, 4}, float32, 21)};
  int updates = 0;
  Array operator()(const Array& x) const { return matmul(x, weight.value()); }

 protected:
  void on_update() override { ++updates; }
};

TEST(CompiledStep, CommitsRunUpdateHooksAndAStaleStateShapeCommitsNothing) {
  Scaled m;
  optim::Adam opt({.lr = 1e-2});
  Array x = test::random_array({3, 6}, float32, 22);
  optim::CompiledStep step(m, opt, [&](const std::vector<Array>& b) { return sum(square(m(b[0]))); });
  for (int i = 0; i < 3; ++i) step({x}).eval();
  EXPECT_EQ(m.updates, 3);  // once per step, as Module::update does
  EXPECT_EQ(opt.state().at("weight.step").item<int64_t>(), 3);
  // The same key with another shape, while the optimizer holds state of the old one: an error,
  // and nothing is committed. Back at the old shape, the step goes on from that state.
  m.weight.reset(test::random_array({6, 2}, float32, 23));
  const Array narrow = m.weight.value();
  EXPECT_THROW(step({x}), Error);
  EXPECT_EQ(m.weight.value().id(), narrow.id());
  EXPECT_EQ(opt.step(), 3);
  EXPECT_EQ(m.updates, 3);
  m.weight.reset(test::random_array({6, 4}, float32, 24));
  step({x}).eval();
  EXPECT_EQ(opt.state().at("weight.step").item<int64_t>(), 4);
  EXPECT_EQ(m.updates, 4);
}

TEST(CompiledStep, OptimizersWithoutACompiledFormAreRefused) {
  random::seed(5);
  TwinMlps s;
  optim::SGD opt({.lr = 0.1});
  optim::CompiledStep step(
      s.model, opt, [&](const std::vector<Array>& b) { return nn::cross_entropy(s.model(b[0]), b[1]); });
  const Array before = s.model.parameters().at("layers.0.weight");
  EXPECT_THROW(step({s.x, s.y}), NotImplemented);
  EXPECT_EQ(s.model.parameters().at("layers.0.weight").id(), before.id());  // nothing changed
  EXPECT_EQ(opt.step(), 0);
}

TEST(CompiledStep, AnEmptyLossIsAValueError) {
  TwinMlps s;
  optim::Adam opt;
  EXPECT_THROW(optim::CompiledStep(s.model, opt, nullptr), ValueError);
}

}  // namespace
}  // namespace kiln
