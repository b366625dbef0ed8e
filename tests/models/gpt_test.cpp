// models::Gpt: keys and counts, the causal property, cached decoding against the full forward,
// generation (greedy, top-k, keys), gradients, a few Adam steps, and every error path. Tiny
// configurations keep it fast.
#include "kiln/models/gpt.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/core/exclusive.h"
#include "kiln/kiln.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using models::Gpt;
using models::GptCache;
using models::GptConfig;
using models::GptPositions;
using models::SamplingOptions;
using test::expect_close;

GptConfig tiny(GptPositions positions = GptPositions::learned, uint64_t seed = 1) {
  return {.vocab_size = 11,
          .context = 12,
          .d_model = 16,
          .heads = 2,
          .layers = 2,
          .d_ff = 24,
          .positions = positions,
          .key = random::key(seed)};
}

Array tokens(const Shape& shape, uint64_t seed, int64_t vocab = 11) {
  return random::randint(shape, random::key(seed), 0, vocab);
}

bool any_nonzero(const Array& a) { return any(not_equal(a, 0)).item<bool>(); }

// Positions [start, stop) of (B, T, ...).
Array positions(const Array& a, int64_t start, int64_t stop) {
  return slice(a, {Slice{}, Slice{start, stop}});
}

// Parameter count from the architecture.
int64_t expected_count(const GptConfig& c) {
  const int64_t d = c.d_model, ff = c.d_ff.value_or(4 * d), b = c.bias ? 1 : 0;
  const int64_t norm = d + b * d;
  const int64_t block =
      norm + (3 * d * d + b * 3 * d) + (d * d + b * d) + norm + (d * ff + b * ff) + (ff * d + b * d);
  int64_t n = c.vocab_size * d + c.layers * block + norm;
  if (c.positions == GptPositions::learned) n += c.context * d;
  if (!c.tie_embeddings) n += d * c.vocab_size;
  return n;
}

TEST(Gpt, KeysAreNanoGptNames) {
  Gpt model(tiny());
  std::vector<std::string> expected{"wte.weight", "wpe.weight"};
  for (const std::string p : {"h.0.", "h.1."})
    for (const char* k : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.push_back(p + k);
  for (const char* k : {"ln_f.weight", "ln_f.bias", "lm_head.weight"}) expected.push_back(k);
  EXPECT_EQ(model.parameters().keys(), expected);
  EXPECT_EQ(model.parameters().at("h.1.attn.c_attn.weight").shape(), (Shape{48, 16}));
  EXPECT_EQ(model.parameters().at("h.0.mlp.c_fc.weight").shape(), (Shape{24, 16}));

  // RoPE has no position table, tied embeddings no head, bias = false no biases at all.
  GptConfig c = tiny(GptPositions::rope);
  c.tie_embeddings = true;
  c.bias = false;
  Gpt bare(c);
  for (const auto& key : bare.parameters().keys()) {
    EXPECT_EQ(key.find("bias"), std::string::npos) << key;
    EXPECT_NE(key, "wpe.weight");
    EXPECT_NE(key, "lm_head.weight");
  }
  EXPECT_EQ(bare.parameters().size(), 1 + 2 * 6 + 1u);
}

TEST(Gpt, ParameterCountsMatchTheFormula) {
  std::vector<GptConfig> configs{tiny(), tiny(GptPositions::rope), GptConfig{}};
  configs.push_back(tiny());
  configs.back().tie_embeddings = true;
  configs.back().bias = false;
  configs.back().d_ff = std::nullopt;
  for (const GptConfig& c : configs) {
    Gpt model(c);
    EXPECT_EQ(nn::num_elements(model.trainable_parameters()), expected_count(c));
  }
  // The benchmark model: 4 layers, d_model 256, 4 heads, context 128, a 256-token vocabulary.
  EXPECT_EQ(expected_count(GptConfig{}), 3'323'392);
}

TEST(Gpt, InitializationIsGpt2s) {
  Gpt a(tiny()), b(tiny()), c(tiny(GptPositions::learned, 2));
  expect_close(a.wte->weight.value(), b.wte->weight.value(), 0, 0);
  EXPECT_TRUE(any_nonzero(a.wte->weight.value() - c.wte->weight.value()));
  auto rms = [](const Array& w) { return std::sqrt(mean(square(w)).item<float>()); };
  GptConfig big = GptConfig{.vocab_size = 64, .context = 16, .d_model = 64, .heads = 4, .layers = 8};
  Gpt g(big);
  EXPECT_NEAR(rms(g.h[0].attn->c_attn->weight.value()), 0.02, 0.002);
  EXPECT_NEAR(rms(g.h[0].mlp->c_proj->weight.value()), 0.02 / 4, 0.0005);  // 0.02 / sqrt(2 * 8)
  EXPECT_FALSE(any_nonzero(g.h[3].attn->c_attn->bias.value()));
  expect_close(g.ln_f->weight.value(), ones({64}), 0, 0);
}

TEST(Gpt, ForwardShapes) {
  for (GptPositions p : {GptPositions::learned, GptPositions::rope}) {
    Gpt model(tiny(p));
    EXPECT_EQ(model(tokens({3, 5}, 1)).shape(), (Shape{3, 5, 11}));
    EXPECT_EQ(model.forward(tokens({1, 12}, 2)).shape(), (Shape{1, 12, 11}));
    EXPECT_EQ(model(astype(tokens({2, 4}, 3), uint8)).shape(), (Shape{2, 4, 11}));
  }
}

TEST(Gpt, LaterTokensDoNotChangeEarlierLogits) {
  for (GptPositions p : {GptPositions::learned, GptPositions::rope}) {
    Gpt model(tiny(p));
    const Array x = tokens({2, 10}, 4);
    // Position 6 gets another token (x + 1 mod vocab differs everywhere).
    const Array changed =
        concatenate({positions(x, 0, 6), (positions(x, 6, 7) + 1) % 11, positions(x, 7, 10)}, 1);
    const Array a = model(x), b = model(changed);
    expect_close(positions(a, 0, 6), positions(b, 0, 6), 0, 0);
    EXPECT_TRUE(any_nonzero(positions(a, 6, 7) - positions(b, 6, 7)));
    EXPECT_TRUE(any_nonzero(positions(a, 9, 10) - positions(b, 9, 10)));
  }
}

TEST(Gpt, CachedDecodingEqualsTheFullForward) {
  for (GptPositions p : {GptPositions::learned, GptPositions::rope}) {
    for (bool tie : {false, true}) {
      GptConfig c = tiny(p);
      c.tie_embeddings = tie;
      Gpt model(c);
      const Array x = tokens({2, 12}, 5);
      const Array full = model(x);
      // Token by token.
      GptCache cache;
      std::vector<Array> steps;
      for (int64_t t = 0; t < 12; ++t) steps.push_back(model.forward(positions(x, t, t + 1), cache));
      EXPECT_EQ(cache.length(), 12);
      EXPECT_EQ(cache.batch(), 2);
      ASSERT_EQ(cache.layers().size(), 2u);
      EXPECT_EQ(cache.layers()[1].keys.shape(), (Shape{2, 2, 12, 8}));
      expect_close(concatenate(steps, 1), full, 1e-5, 1e-5);
      // In pieces of 5, 1 and 6: a prefill of several positions is causal too.
      GptCache pieces;
      const Array a = model.forward(positions(x, 0, 5), pieces);
      const Array b = model.forward(positions(x, 5, 6), pieces);
      const Array d = model.forward(positions(x, 6, 12), pieces);
      expect_close(concatenate({a, b, d}, 1), full, 1e-5, 1e-5);
      pieces.clear();
      EXPECT_TRUE(pieces.empty());
      EXPECT_EQ(pieces.layers().size(), 0u);
    }
  }
}

TEST(Gpt, CacheErrorsLeaveTheCacheAsItWas) {
  Gpt model(tiny());
  GptCache cache;
  model.forward(tokens({2, 10}, 6), cache);
  EXPECT_THROW(model.forward(tokens({2, 3}, 7), cache), ShapeError);  // 10 + 3 > context 12
  EXPECT_THROW(model.forward(tokens({3, 1}, 7), cache), ShapeError);  // batch 3, cache has 2
  EXPECT_THROW(model.forward(ones({2, 1}), cache), DtypeError);
  EXPECT_EQ(cache.length(), 10);
  EXPECT_EQ(cache.layers()[0].keys.shape(2), 10);
  EXPECT_EQ(model.forward(tokens({2, 2}, 8), cache).shape(), (Shape{2, 2, 11}));
  EXPECT_EQ(cache.length(), 12);
}

TEST(Gpt, CacheLivesInAnExclusive) {
  Gpt model(tiny(GptPositions::rope));
  Exclusive<GptCache> request;
  const Array x = tokens({1, 4}, 9);
  const Array logits = request.with([&](GptCache& c) { return model.forward(x, c); });
  EXPECT_EQ(request.lock()->length(), 4);
  expect_close(logits, model(x), 1e-5, 1e-5);
}

// The storage of a decode loop that evaluates it each step (as models::generate does) is written
// in place: the same buffer step after step until it is full, then one of twice the positions.
TEST(Gpt, CacheStorageIsWrittenInPlaceAndDoublesWhenFull) {
  GptConfig c = tiny(GptPositions::learned, 4);
  c.context = 100;
  Gpt model(c);
  const Array x = tokens({2, 72}, 21);
  GptCache cache;
  std::vector<Array> steps{model.forward(positions(x, 0, 4), cache)};
  auto evaluated = [&](const Array& logits) {
    std::vector<Array> ready = cache.storage();
    ready.push_back(logits);
    eval(ready);
    return logits;
  };
  evaluated(steps[0]);
  ASSERT_EQ(cache.storage().size(), 4u);  // keys and values of 2 layers
  EXPECT_EQ(cache.capacity(), GptCache::kMinCapacity);
  EXPECT_EQ(cache.storage()[0].shape(), (Shape{2, 2, 64, 8}));
  const detail::Buffer* first = cache.storage()[0].node().buffer.get();
  for (int64_t t = 4; t < 72; ++t) {
    const int64_t capacity = cache.capacity();
    const detail::Buffer* before = cache.storage()[3].node().buffer.get();
    steps.push_back(evaluated(model.forward(positions(x, t, t + 1), cache)));
    if (t + 1 <= capacity) {
      EXPECT_EQ(cache.storage()[3].node().buffer.get(), before) << "a copy at position " << t;
    }
  }
  EXPECT_EQ(cache.capacity(), 100);  // 2 * 64, capped at the context
  EXPECT_NE(cache.storage()[0].node().buffer.get(), first);
  EXPECT_EQ(cache.layers()[1].values.shape(), (Shape{2, 2, 72, 8}));
  expect_close(concatenate(steps, 1), model(x), 1e-5, 1e-5);
}

TEST(Gpt, CacheAppendChecksItsArguments) {
  GptCache cache;
  const Array k = random::normal({1, 2, 3, 4}, random::key(1));
  EXPECT_THROW(cache.append(0, k, reshape(k, {1, 2, 4, 3}), 0), ShapeError);
  EXPECT_THROW(cache.append(0, reshape(k, {2, 3, 4}), reshape(k, {2, 3, 4}), 0), ShapeError);
  EXPECT_THROW(cache.append(0, Array(), k, 0), ValueError);
  const auto seen = cache.append(0, k, k, 0);
  EXPECT_EQ(seen.keys.shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(cache.length(), 0);  // until commit
  cache.commit(3, 1);
  EXPECT_EQ(cache.length(), 3);
  expect_close(cache.layers()[0].keys, k, 0, 0);
  const Array other_heads = random::normal({1, 3, 1, 4}, random::key(2));
  EXPECT_THROW(cache.append(0, other_heads, other_heads, 0), ShapeError);
  EXPECT_EQ(cache.layers()[0].keys.shape(2), 3);
}

TEST(Gpt, GreedyGenerationIsTheArgmaxOfTheFullForward) {
  for (GptPositions p : {GptPositions::learned, GptPositions::rope}) {
    Gpt model(tiny(p, 3));
    const Array prompt = tokens({2, 3}, 10);
    const Array out = model.generate(prompt, 8, {.temperature = 0});
    EXPECT_EQ(out.shape(), (Shape{2, 11}));
    EXPECT_EQ(out.dtype(), int32);
    expect_close(positions(out, 0, 3), astype(prompt, int32), 0, 0);
    expect_close(model.generate(prompt, 8, {.temperature = 0}), out, 0, 0);
    // Re-running the whole sequence: each new token is the argmax at the position before it.
    const Array expected = argmax(positions(model(out), 2, 10), -1);
    expect_close(positions(out, 3, 11), astype(expected, int32), 0, 0);
    // top_k = 1 leaves only the most likely token, whatever the temperature and key.
    expect_close(model.generate(prompt, 8, {.temperature = 1.5, .top_k = 1, .key = random::key(4)}), out, 0,
                 0);
  }
}

TEST(Gpt, SamplingFollowsTheKey) {
  Gpt model(tiny(GptPositions::learned, 4));
  const Array prompt = tokens({4, 2}, 11);
  const SamplingOptions o{.temperature = 3.0, .key = random::key(7)};
  const Array a = model.generate(prompt, 10, o);
  expect_close(model.generate(prompt, 10, o), a, 0, 0);
  const Array b = model.generate(prompt, 10, {.temperature = 3.0, .key = random::key(8)});
  EXPECT_TRUE(any_nonzero(a - b));
  // Unbatched prompts give unbatched results: the first row alone, with its own sampled tokens.
  const Array one = model.generate(slice(prompt, {Slice{0, 1}}), 10, o);
  EXPECT_EQ(model.generate(reshape(slice(prompt, {Slice{0, 1}}), {2}), 10, o).shape(), (Shape{12}));
  EXPECT_EQ(one.shape(), (Shape{1, 12}));
  // No new tokens: the prompt, as int32.
  expect_close(model.generate(prompt, 0, o), astype(prompt, int32), 0, 0);
}

TEST(Gpt, SampledTokensStayInTheTopK) {
  // Directly: 200 rows of random logits, a high temperature, top 3.
  const Array logits = random::normal({200, 20}, random::key(12));
  const Array picks =
      models::sample_tokens(logits, {.temperature = 10.0, .top_k = 3, .key = random::key(13)});
  EXPECT_EQ(picks.shape(), (Shape{200}));
  EXPECT_EQ(picks.dtype(), int32);
  const auto top = argtopk(logits, 3, -1).to_vector<int32_t>();
  const auto got = picks.to_vector<int32_t>();
  std::set<int32_t> ranks;
  for (size_t r = 0; r < got.size(); ++r) {
    const auto row = top.begin() + 3 * static_cast<std::ptrdiff_t>(r);
    const auto it = std::find(row, row + 3, got[r]);
    ASSERT_NE(it, row + 3) << "row " << r;
    ranks.insert(static_cast<int32_t>(it - row));
  }
  EXPECT_EQ(ranks.size(), 3u);  // not greedy: all three ranks occur
  // Through generate: every new token is among the 2 largest logits of the full forward.
  Gpt model(tiny(GptPositions::rope, 5));
  const Array out =
      model.generate(tokens({3, 2}, 14), 9, {.temperature = 5.0, .top_k = 2, .key = random::key(15)});
  const auto allowed = argtopk(positions(model(out), 1, 10), 2, -1).to_vector<int32_t>();
  const auto fresh = positions(out, 2, 11).to_vector<int32_t>();
  for (size_t i = 0; i < fresh.size(); ++i)
    EXPECT_TRUE(fresh[i] == allowed[2 * i] || fresh[i] == allowed[2 * i + 1]) << i;
  // Greedy sampling is the argmax.
  expect_close(models::sample_tokens(logits, {.temperature = 0}), astype(argmax(logits, -1), int32), 0, 0);
}

TEST(Gpt, GradientsReachEveryTrainableParameter) {
  for (GptPositions p : {GptPositions::learned, GptPositions::rope}) {
    GptConfig c = tiny(p);
    c.tie_embeddings = p == GptPositions::rope;
    Gpt model(c);
    const Array x = tokens({2, 12}, 16), y = tokens({2, 12}, 17);
    auto step = nn::value_and_grad(
        model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
    const auto [loss, grads] = step(x, y);
    EXPECT_NEAR(loss.item<float>(), std::log(11.0), 0.2);  // small init: nearly uniform predictions
    EXPECT_EQ(grads.keys(), model.trainable_parameters().keys());
    for (const auto& [key, g] : grads) EXPECT_TRUE(any_nonzero(g)) << key;
  }
}

TEST(Gpt, AdamMemorizesARandomSequence) {
  for (GptPositions p : {GptPositions::learned, GptPositions::rope}) {
    Gpt model(tiny(p, 6));
    optim::AdamW opt({.lr = 1e-2, .weight_decay = 0.0});
    const Array seq = tokens({2, 12}, 18);
    const Array x = positions(seq, 0, 11), y = positions(seq, 1, 12);
    auto step = nn::value_and_grad(
        model, [&](const Array& in, const Array& t) { return nn::cross_entropy(model(in), t); });
    float first = 0, last = 0;
    for (int i = 0; i < 30; ++i) {
      auto [loss, grads] = step(x, y);
      opt.update(model, grads);
      const auto params = model.parameters();
      nn::eval({&params, &opt.state()});
      (i == 0 ? first : last) = loss.item<float>();
    }
    EXPECT_LT(last, first / 4) << "loss " << first << " -> " << last;
  }
}

TEST(Gpt, DropoutOnlyInTrainingAndNeverInGenerate) {
  GptConfig c = tiny();
  c.dropout = 0.3;
  Gpt model(c);
  const Array x = tokens({2, 6}, 19);
  EXPECT_TRUE(any_nonzero(model(x) - model(x)));  // two masks
  const Array prompt = tokens({2, 2}, 20);
  const Array greedy_train = model.generate(prompt, 5, {.temperature = 0});
  model.eval_mode();
  expect_close(model(x), model(x), 0, 0);
  expect_close(model.generate(prompt, 5, {.temperature = 0}), greedy_train, 0, 0);
}

TEST(Gpt, ConfigErrors) {
  auto with = [](auto edit) {
    GptConfig c = tiny();
    edit(c);
    return c;
  };
  EXPECT_THROW(Gpt(with([](auto& c) { c.vocab_size = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.context = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.d_model = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.heads = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.layers = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.d_ff = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.heads = 3; })), ValueError);  // 16 % 3
  EXPECT_THROW(Gpt(with([](auto& c) {
                 c.d_model = 6, c.heads = 2, c.positions = GptPositions::rope;  // head size 3
               })),
               ValueError);
  EXPECT_NO_THROW(Gpt(with([](auto& c) { c.d_model = 6, c.heads = 2; })));  // odd heads are fine when learned
  EXPECT_THROW(Gpt(with([](auto& c) { c.dropout = 1.0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.dropout = -0.1; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.rope_base = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.layer_norm_eps = 0; })), ValueError);
  EXPECT_THROW(Gpt(with([](auto& c) { c.key = Array(std::vector<float>{1, 2}, {2}); })), DtypeError);
}

TEST(Gpt, ForwardErrors) {
  Gpt model(tiny());
  EXPECT_THROW(model(Array()), ValueError);
  EXPECT_THROW(model(ones({2, 3})), DtypeError);
  EXPECT_THROW(model(ones({2, 3}, bool_)), DtypeError);
  EXPECT_THROW(model(tokens({3}, 1)), ShapeError);
  EXPECT_THROW(model(tokens({1, 2, 3}, 1)), ShapeError);
  EXPECT_THROW(model(zeros({2, 0}, int32)), ShapeError);
  EXPECT_THROW(model(tokens({1, 13}, 1)), ShapeError);  // longer than the context
  // Out-of-range tokens: from the call when evaluated, from eval when lazy.
  Array big = Array(std::vector<int32_t>{1, 11}, {1, 2});
  big.eval();
  EXPECT_THROW(model(big), ValueError);
  Array negative = Array(std::vector<int32_t>{-1, 2}, {1, 2});
  negative.eval();
  EXPECT_THROW(model(negative), ValueError);
  EXPECT_THROW(model(tokens({1, 2}, 1) + 20).eval(), ValueError);
}

TEST(Gpt, GenerateErrors) {
  Gpt model(tiny());
  const Array prompt = tokens({2, 3}, 21);
  const Array key = random::key(1);
  EXPECT_THROW(model.generate(Array(), 2, {.temperature = 0}), ValueError);
  EXPECT_THROW(model.generate(ones({2, 3}), 2, {.temperature = 0}), DtypeError);
  EXPECT_THROW(model.generate(tokens({1, 1, 3}, 1), 2, {.temperature = 0}), ShapeError);
  EXPECT_THROW(model.generate(prompt, -1, {.temperature = 0}), ValueError);
  EXPECT_THROW(model.generate(prompt, 10, {.temperature = 0}), ValueError);  // 3 + 10 > context 12
  EXPECT_NO_THROW(model.generate(prompt, 9, {.temperature = 0}));
  EXPECT_THROW(model.generate(prompt, 2, {.temperature = -1, .key = key}), ValueError);
  EXPECT_THROW(model.generate(prompt, 2, {.temperature = std::nan(""), .key = key}), ValueError);
  EXPECT_THROW(model.generate(prompt, 2, {.temperature = INFINITY, .key = key}), ValueError);
  EXPECT_THROW(model.generate(prompt, 2, {.top_k = -1, .key = key}), ValueError);
  EXPECT_THROW(model.generate(prompt, 2, {.top_k = 12, .key = key}), ValueError);  // vocab 11
  EXPECT_NO_THROW(model.generate(prompt, 2, {.top_k = 11, .key = key}));
  EXPECT_THROW(model.generate(prompt, 2, {.temperature = 1.0}), ValueError);  // no key
  EXPECT_THROW(model.generate(prompt, 0, {.temperature = 1.0}), ValueError);  // checked even for 0 tokens
  EXPECT_THROW(model.generate(prompt, 2, {.key = Array(std::vector<float>{1, 2}, {2})}), DtypeError);
  EXPECT_THROW(model.generate(prompt, 2, {.key = Array(std::vector<uint32_t>{1, 2, 3}, {3})}), ShapeError);
  Array bad = Array(std::vector<int32_t>{0, 11}, {1, 2});
  bad.eval();
  EXPECT_THROW(model.generate(bad, 2, {.temperature = 0}), ValueError);

  EXPECT_THROW(models::sample_tokens(Array(), {.temperature = 0}), ValueError);
  EXPECT_THROW(models::sample_tokens(ones({2, 3}, int32), {.temperature = 0}), DtypeError);
  EXPECT_THROW(models::sample_tokens(Array(1.0f), {.temperature = 0}), ShapeError);
  EXPECT_THROW(models::sample_tokens(zeros({2, 0}), {.temperature = 0}), ShapeError);
  EXPECT_THROW(models::sample_tokens(zeros({2, 3}), {.temperature = 1.0}), ValueError);  // no key
  EXPECT_THROW(models::sample_tokens(zeros({2, 3}), {.top_k = 4, .key = key}), ValueError);
}

}  // namespace
}  // namespace kiln
