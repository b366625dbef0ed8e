// MaterializedModule: built by move or as a snapshot sharing the trained buffers; immutable while
// the source keeps training; called from many threads with bit-identical results. Exclusive<T>.
#include "kiln/nn/materialized_module.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kiln/core/exclusive.h"
#include "kiln/nn/layers/embedding.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/transformer.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::random_array;
using test::values;

struct Mlp : Module {
  ModuleInfo<Linear> fc1;
  ModuleInfo<Linear> fc2;
  ModuleInfo<Linear> fc3;
  explicit Mlp(uint64_t seed = 0)
      : fc1(this, "fc1", 16, 32, LinearOptions{.key = random::key(seed)}),
        fc2(this, "fc2", 32, 32, LinearOptions{.key = random::key(seed + 1)}),
        fc3(this, "fc3", 32, 4, LinearOptions{.key = random::key(seed + 2)}) {}
  Array operator()(const Array& x) const {
    return softmax(fc3(maximum(fc2(maximum(fc1(x), 0.0f)), 0.0f)), -1);
  }
};

// One plain SGD step on `model`, through update (new arrays; old buffers untouched).
void sgd_step(Mlp& model, const Array& x, const Array& y) {
  auto step =
      value_and_grad(model, [&](const Array& in, const Array& t) { return mean(square(model(in) - t)); });
  auto [loss, grads] = step(x, y);
  ParamTree next;
  const ParamTree params = model.trainable_parameters();
  for (const auto& [key, g] : grads) next.set(key, params.at(key) - 0.5f * g);
  eval(next);
  model.update(next);
}

TEST(MaterializedModule, ByMoveMaterializesEveryParameterAndSetsEvalMode) {
  auto model = std::make_unique<Mlp>();
  const Array x = random_array({3, 16}, float32, 1);
  const std::vector<double> expected = values((*model)(x));
  MaterializedModule<Mlp> frozen(std::move(model));
  EXPECT_EQ(values(frozen(x)), expected);
  EXPECT_FALSE(frozen->is_training());
  for (const auto& [key, p] : frozen.parameters()) {
    EXPECT_FALSE(p.has_primitive()) << key;  // leaves: nothing can recompute or detach them
    EXPECT_TRUE(p.is_available()) << key;
  }
  EXPECT_THROW(MaterializedModule<Mlp>(std::unique_ptr<Mlp>()), ValueError);
}

TEST(MaterializedModule, SnapshotSharesBuffersAndNeverChangesWhileTheSourceTrains) {
  Mlp model(10);
  const Array x = random_array({8, 16}, float32, 2), y = random_array({8, 4}, float32, 3, 0, 1);
  sgd_step(model, x, y);
  auto snap = MaterializedModule<Mlp>::snapshot(model, 99);  // a fresh Mlp(99) takes model's values
  for (const auto& [key, p] : snap.parameters())
    EXPECT_EQ(p.raw_data(), model.parameters().at(key).raw_data()) << key;  // no copy
  const std::vector<double> before = values(snap(x));
  EXPECT_EQ(before, values(model(x)));
  for (int i = 0; i < 3; ++i) sgd_step(model, x, y);  // the source keeps training
  EXPECT_NE(values(model(x)), before);
  EXPECT_EQ(values(snap(x)), before);
}

TEST(MaterializedModule, SnapshotOfADifferentArchitectureIsRefusedByKey) {
  struct Tower : Module {
    ModuleInfo<Linear> fc1;
    ModuleInfo<Linear> fc2;
    explicit Tower(int64_t width) : fc1(this, "fc1", 16, width), fc2(this, "fc2", width, 4) {}
    Array operator()(const Array& x) const { return fc2(fc1(x)); }
  };
  Tower trained(32);
  try {
    (void)MaterializedModule<Tower>::snapshot(trained, 64);  // built with another width
    FAIL();
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fc1.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fc2.weight"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW((void)MaterializedModule<Tower>::snapshot(trained, 32));
}

// A small transformer: token embedding, two causal encoder layers, a head.
struct TinyTransformer : Module {
  ModuleInfo<Embedding> embed{this, "embed", 16, 32, EmbeddingOptions{.key = random::key(30)}};
  ModuleList<TransformerEncoderLayer> layers{this, "layers"};
  ModuleInfo<Linear> head{this, "head", 32, 16, LinearOptions{.key = random::key(31)}};
  TinyTransformer() {
    for (uint64_t i = 0; i < 2; ++i)
      layers.emplace_back(32, 4, TransformerLayerOptions{.dim_feedforward = 64, .key = random::key(40 + i)});
  }
  Array operator()(const Array& tokens) const {
    Array h = embed(tokens);
    for (const auto& layer : layers) h = (*layer)(h, EncoderLayerArgs{.is_causal = true});
    return head(h);
  }
};

// kThreads threads each call `model` kCalls times on their own input; every result must equal the
// serial one bit for bit.
template <class M>
void expect_concurrent_calls_match_serial(const M& model, const std::vector<Array>& inputs) {
  constexpr int kCalls = 200;
  std::vector<std::vector<float>> serial;
  for (const Array& in : inputs) serial.push_back(model(in).template to_vector<float>());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < inputs.size(); ++t)
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c)
        if (model(inputs[t]).template to_vector<float>() != serial[t]) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(MaterializedModule, EightThreadsTwoHundredCallsEachAreBitIdenticalToSerial) {
  const auto mlp = MaterializedModule<Mlp>(std::make_unique<Mlp>(20));
  std::vector<Array> features;
  for (int t = 0; t < 8; ++t) features.push_back(random_array({4, 16}, float32, 100 + t));
  expect_concurrent_calls_match_serial(mlp, features);

  const auto transformer = MaterializedModule<TinyTransformer>(std::make_unique<TinyTransformer>());
  std::vector<Array> tokens;
  for (int t = 0; t < 8; ++t) tokens.push_back(random::randint({2, 12}, random::key(200 + t), 0, 16));
  expect_concurrent_calls_match_serial(transformer, tokens);
}

TEST(Exclusive, OneThreadAtATimeThroughWithAndLock) {
  struct Cache {
    std::vector<int> tokens;
    int64_t sum = 0;
  };
  Exclusive<Cache> cache;
  constexpr int kThreads = 8, kAppends = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAppends; ++i) {
        if (i % 2) {
          cache.with([&](Cache& c) {
            c.tokens.push_back(t);
            c.sum += t;
          });
        } else {
          auto guard = cache.lock();
          guard->tokens.push_back(t);
          (*guard).sum += t;
        }
      }
    });
  for (auto& th : threads) th.join();
  const auto [n, sum] =
      cache.with([](const Cache& c) { return std::pair<size_t, int64_t>(c.tokens.size(), c.sum); });
  EXPECT_EQ(n, size_t{kThreads * kAppends});
  EXPECT_EQ(sum, int64_t{kAppends} * (kThreads * (kThreads - 1) / 2));
}

}  // namespace
}  // namespace kiln::nn
