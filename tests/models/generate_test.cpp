// models::generate and padded batches: a left-padded row decodes exactly as it does alone (Llama
// with GQA and GPT-2), stop tokens, the streaming callback, greedy equivalences of top-k and top-p,
// sampling reproducible from its key and confined to the top tokens, the repetition penalty, and
// every bad option a named error.
#include "kiln/models/pretrained/generate.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "kiln/kiln.h"
#include "kiln/models/pretrained/gpt2.h"
#include "kiln/models/pretrained/llama.h"
#include "support/error_of.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using models::GenerateOptions;

std::unique_ptr<models::CausalLM> tiny_llama() {
  random::seed(11);
  return std::make_unique<models::LlamaForCausalLM>(models::LlamaConfig{.vocab_size = 40,
                                                                        .hidden_size = 32,
                                                                        .intermediate_size = 48,
                                                                        .num_hidden_layers = 2,
                                                                        .num_attention_heads = 4,
                                                                        .num_key_value_heads = 2,
                                                                        .max_position_embeddings = 48});
}

std::unique_ptr<models::CausalLM> tiny_gpt2() {
  return std::make_unique<models::Gpt2LMHeadModel>(models::Gpt2Config::from_gpt({.vocab_size = 40,
                                                                                 .context = 48,
                                                                                 .d_model = 32,
                                                                                 .heads = 4,
                                                                                 .layers = 2,
                                                                                 .tie_embeddings = true,
                                                                                 .key = random::key(12)}));
}

const std::vector<std::vector<int32_t>> kPrompts = {{3, 17, 5, 22, 9, 1}, {8, 30}, {14, 2, 27}};

TEST(Generate, PaddedRowsDecodeAsTheyDoAlone) {
  for (auto make : {tiny_llama, tiny_gpt2}) {
    const auto lm = make();
    const auto batched =
        models::generate(*lm, kPrompts, {.max_new_tokens = 8, .temperature = 0, .pad_id = 39});
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      const auto alone = models::generate(*lm, {kPrompts[i]}, {.max_new_tokens = 8, .temperature = 0});
      EXPECT_EQ(batched.tokens[i], alone.tokens[0]) << "prompt " << i;
      EXPECT_EQ(batched.tokens[i].size(), 8u);
      EXPECT_FALSE(batched.stopped[i]);
    }
    // The logits themselves: the padded row's last position equals the unpadded sequence's.
    models::GptCache cache;
    const Array padded = lm->forward(Array({0, 0, 0, 8, 30}, {1, 5}), cache, Array({0, 0, 0, 1, 1}, {1, 5}));
    const Array plain = lm->forward(Array({8, 30}, {1, 2}));
    test::expect_close(slice(padded, {Slice{}, Slice{3, 5}}), plain, 1e-5, 1e-5);
    const std::string what = test::error_of<ShapeError>([&] {
      models::GptCache c;
      lm->forward(Array({8, 30}, {1, 2}), c, Array({1, 1, 1}, {1, 3}));
    });
    EXPECT_NE(what.find("attention_mask must cover"), std::string::npos) << what;
  }
}

TEST(Generate, StopTokensEndRowsAndTheCallbackStreams) {
  const auto lm = tiny_llama();
  const auto free_run = models::generate(*lm, kPrompts, {.max_new_tokens = 6, .temperature = 0});
  // Row 0's third token as the stop token: row 0 ends there (the stop token kept).
  const int32_t stop = free_run.tokens[0][2];
  std::vector<std::vector<int32_t>> streamed;
  const auto out = models::generate(*lm, kPrompts,
                                    {.max_new_tokens = 6,
                                     .temperature = 0,
                                     .stop_tokens = {stop},
                                     .on_token = [&](int64_t step, const std::vector<int32_t>& tokens) {
                                       EXPECT_EQ(step, static_cast<int64_t>(streamed.size()));
                                       streamed.push_back(tokens);
                                       return true;
                                     }});
  EXPECT_TRUE(out.stopped[0]);
  EXPECT_EQ(out.tokens[0], std::vector<int32_t>(free_run.tokens[0].begin(), free_run.tokens[0].begin() + 3));
  for (size_t r = 0; r < kPrompts.size(); ++r) {
    const auto& f = free_run.tokens[r];
    const auto first_stop = std::find(f.begin(), f.end(), stop);
    const size_t n = first_stop == f.end() ? f.size() : static_cast<size_t>(first_stop - f.begin()) + 1;
    EXPECT_EQ(out.tokens[r], std::vector<int32_t>(f.begin(), f.begin() + n)) << r;
  }
  ASSERT_FALSE(streamed.empty());
  EXPECT_EQ(streamed[0][0], free_run.tokens[0][0]);
  if (streamed.size() > 3) {
    EXPECT_EQ(streamed[3][0], -1);  // row 0 had ended
  }
  // Returning false ends generation after that step.
  const auto two = models::generate(
      *lm, kPrompts, {.max_new_tokens = 6, .temperature = 0, .on_token = [](int64_t step, const auto&) {
                        return step < 1;
                      }});
  for (const auto& t : two.tokens) EXPECT_EQ(t.size(), 2u);
}

TEST(Generate, SamplingFollowsItsOptions) {
  const auto lm = tiny_gpt2();
  const auto greedy = models::generate(*lm, kPrompts, {.max_new_tokens = 5, .temperature = 0});
  // top_k = 1 and a tiny top_p leave only the most likely token: greedy, at any temperature.
  EXPECT_EQ(models::generate(*lm, kPrompts, {.max_new_tokens = 5, .top_k = 1, .key = random::key(1)}).tokens,
            greedy.tokens);
  EXPECT_EQ(
      models::generate(*lm, kPrompts, {.max_new_tokens = 5, .top_p = 1e-6, .key = random::key(2)}).tokens,
      greedy.tokens);
  // Equal keys, equal samples; another key, other samples.
  const GenerateOptions hot{.max_new_tokens = 12, .temperature = 1.5, .key = random::key(3)};
  const auto a = models::generate(*lm, kPrompts, hot);
  EXPECT_EQ(models::generate(*lm, kPrompts, hot).tokens, a.tokens);
  GenerateOptions other = hot;
  other.key = random::key(4);
  EXPECT_NE(models::generate(*lm, kPrompts, other).tokens, a.tokens);
  // top_k = 3: every sampled first token is among the three most likely.
  const Array first = lm->forward(Array({8, 30}, {1, 2}));
  const std::vector<double> logits = test::values(slice(first, {Slice{}, Slice{1, 2}}));
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return logits[x] > logits[y]; });
  const std::set<int32_t> top3(order.begin(), order.begin() + 3);
  std::set<int32_t> drawn;
  for (int seed = 0; seed < 40; ++seed)
    drawn.insert(
        models::generate(*lm, {{8, 30}},
                         {.max_new_tokens = 1, .temperature = 5.0, .top_k = 3, .key = random::key(seed)})
            .tokens[0][0]);
  for (int32_t t : drawn) EXPECT_TRUE(top3.count(t)) << t;
  EXPECT_GT(drawn.size(), 1u);  // hot enough to draw more than the first
  // A strong repetition penalty: greedy decoding repeats nothing of the row.
  const auto fresh = models::generate(*lm, {kPrompts[1]},
                                      {.max_new_tokens = 10, .temperature = 0, .repetition_penalty = 1e6});
  std::set<int32_t> all(kPrompts[1].begin(), kPrompts[1].end());
  for (int32_t t : fresh.tokens[0]) EXPECT_TRUE(all.insert(t).second) << "repeated " << t;
}

TEST(Generate, BadOptionsAreNamedErrors) {
  const auto lm = tiny_llama();
  auto error = [&](const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o) {
    return test::error_of<ValueError>([&] { models::generate(*lm, prompts, o); });
  };
  EXPECT_NE(
      error(kPrompts, {.max_new_tokens = 43, .temperature = 0}).find("6 prompt positions (the longest) + 43"),
      std::string::npos);
  EXPECT_NE(error(kPrompts, {.temperature = 1.0}).find("sampling needs a key"), std::string::npos);
  EXPECT_NE(error({}, {}).find("no prompts"), std::string::npos);
  EXPECT_NE(error({{1}, {}}, {.temperature = 0}).find("prompt 1"), std::string::npos);
  EXPECT_NE(error({{1, 40}}, {.temperature = 0}).find("token 40, vocab 40"), std::string::npos);
  EXPECT_NE(error(kPrompts, {.temperature = 0, .top_p = 0}).find("top_p"), std::string::npos);
  EXPECT_NE(error(kPrompts, {.temperature = 0, .repetition_penalty = 0}).find("repetition_penalty"),
            std::string::npos);
  EXPECT_NE(error(kPrompts, {.max_new_tokens = -1}).find("max_new_tokens"), std::string::npos);
  EXPECT_NE(error(kPrompts, {.temperature = -1}).find("temperature"), std::string::npos);
  EXPECT_NE(error(kPrompts, {.temperature = 0, .top_k = -2}).find("top_k"), std::string::npos);
  EXPECT_TRUE(models::generate(*lm, kPrompts, {.max_new_tokens = 0, .temperature = 0}).tokens[0].empty());
}

}  // namespace
}  // namespace kiln
