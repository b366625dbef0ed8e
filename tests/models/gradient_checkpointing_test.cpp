// CausalLM::set_gradient_checkpointing on GPT-2 and Llama: in training mode the loss and every
// parameter's gradient equal those without it, the graph holds one node per decoder layer, and
// eval mode and cached decoding ignore it.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <set>
#include <string>

#include "kiln/models/pretrained/gpt2.h"
#include "kiln/models/pretrained/llama.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln {
namespace {

std::unique_ptr<models::CausalLM> tiny(const std::string& family) {
  if (family == "gpt2")
    return std::make_unique<models::Gpt2LMHeadModel>(
        models::Gpt2Config::from_gpt({.vocab_size = 23,
                                      .context = 16,
                                      .d_model = 16,
                                      .heads = 2,
                                      .layers = 3,
                                      .activation = models::GptActivation::gelu_tanh,
                                      .tie_embeddings = true,
                                      .key = random::key(1)}));
  random::seed(2);
  return std::make_unique<models::LlamaForCausalLM>(models::LlamaConfig{.vocab_size = 23,
                                                                        .hidden_size = 16,
                                                                        .intermediate_size = 24,
                                                                        .num_hidden_layers = 3,
                                                                        .num_attention_heads = 4,
                                                                        .num_key_value_heads = 2,
                                                                        .max_position_embeddings = 16});
}

class GradientCheckpointing : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientCheckpointing, SameLossAndGradients) {
  auto lm = tiny(GetParam());
  lm->train(true);
  const Array x = random::randint({2, 9}, random::key(3), 0, 23);
  const Array y = random::randint({2, 9}, random::key(4), 0, 23);
  auto step = nn::value_and_grad(*lm, [&](const Array& in, const Array& t) {
    return nn::cross_entropy(reshape(lm->forward(in), {-1, 23}), reshape(t, {-1}));
  });
  const auto [plain_loss, plain] = step(x, y);
  EXPECT_FALSE(lm->gradient_checkpointing());
  lm->set_gradient_checkpointing(true);
  EXPECT_TRUE(lm->gradient_checkpointing());
  const auto [loss, grads] = step(x, y);
  test::expect_close(loss, plain_loss, 1e-6, 1e-6);
  ASSERT_EQ(grads.size(), plain.size());
  for (const auto& [key, g] : plain) {
    SCOPED_TRACE(key);
    test::expect_close(grads.at(key), g, 1e-4, 1e-6);
  }
}

// The forward graph of a checkpointed model reaches each layer through one Checkpoint node.
TEST_P(GradientCheckpointing, OneNodePerLayerInTraining) {
  auto lm = tiny(GetParam());
  lm->set_gradient_checkpointing(true);
  const Array x = random::randint({1, 5}, random::key(5), 0, 23);
  auto count = [&](bool training) {
    lm->train(training);
    const Array logits = lm->forward(x);
    int checkpoints = 0;
    std::vector<Array> stack{logits};
    std::set<const void*> seen;
    while (!stack.empty()) {
      const Array a = stack.back();
      stack.pop_back();
      if (!seen.insert(&a.node()).second || !a.has_primitive()) continue;
      if (std::string(a.primitive()->name()) == "Checkpoint") ++checkpoints;
      for (const Array& in : a.inputs()) stack.push_back(in);
    }
    return checkpoints;
  };
  EXPECT_EQ(count(true), 3);
  EXPECT_EQ(count(false), 0);  // eval mode: the plain forward
  // Cached decoding never checkpoints, and matches the plain forward.
  lm->train(true);
  models::GptCache cache;
  const Array cached = lm->forward(x, cache);
  lm->train(false);
  test::expect_close(cached, lm->forward(x), 1e-5, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, GradientCheckpointing, ::testing::Values("gpt2", "llama"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
