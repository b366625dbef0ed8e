// The module tree: slot registration and keys, traversal, train/eval, freeze, transactional
// update, nn::value_and_grad, init, Linear.
#include "kiln/nn/module.h"

#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

#include "kiln/nn/init.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

struct Block : Module {
  ModuleInfo<Linear> proj{this, "proj", 4, 3, LinearOptions{.key = random::key(1)}};
  ParameterInfo scale{this, "scale", ones({3})};
  int updates = 0;
  Array operator()(const Array& x) const { return proj(x) * scale.value(); }

 protected:
  void on_update() override { ++updates; }
};

struct Net : Module {
  ModuleInfo<Linear> inp{this, "inp", 5, 4, LinearOptions{.key = random::key(2)}};
  ModuleList<Block> blocks{this, "blocks"};
  ModuleInfo<Linear> head{this, "head", 3, 2, LinearOptions{.bias = false, .key = random::key(3)}};
  Net() {
    blocks.emplace_back();
    blocks.emplace_back();
  }
  Array operator()(const Array& x) const {
    Array h = inp(x);
    Array acc = zeros({x.shape()[0], 3});
    for (const auto& b : blocks) acc = acc + (*b)(h);
    return head(tanh(acc));
  }
};

const std::vector<std::string> kNetKeys = {"inp.weight",         "inp.bias",       "blocks.0.proj.weight",
                                           "blocks.0.proj.bias", "blocks.0.scale", "blocks.1.proj.weight",
                                           "blocks.1.proj.bias", "blocks.1.scale", "head.weight"};

static_assert(!std::is_copy_constructible_v<Net> && !std::is_move_constructible_v<Net>);
static_assert(!std::is_copy_assignable_v<Linear> && !std::is_move_assignable_v<Linear>);

TEST(Module, KeysFollowDeclarationOrderAndNesting) {
  Net net;
  EXPECT_EQ(net.parameters().keys(), kNetKeys);
  EXPECT_EQ(net.parameters().at("head.weight").shape(), (Shape{2, 3}));
  std::vector<std::string> modules;
  for (auto& [key, m] : net.named_modules()) modules.push_back(key);
  EXPECT_EQ(modules, (std::vector<std::string>{"", "inp", "blocks", "blocks.0", "blocks.0.proj", "blocks.1",
                                               "blocks.1.proj", "head"}));
  std::vector<std::string> kids;
  for (auto& [key, m] : net.children()) kids.push_back(key);
  EXPECT_EQ(kids, (std::vector<std::string>{"inp", "blocks", "head"}));
  // apply: children before parents.
  std::vector<std::string> order;
  net.apply([&](const std::string& key, Module&) { order.push_back(key); });
  EXPECT_EQ(order.front(), "head");
  EXPECT_EQ(order.back(), "");
}

TEST(Module, SlotKeysAreCheckedAtRegistration) {
  struct Dup : Module {
    ParameterInfo a{this, "w"};
    ParameterInfo b{this, "w"};
  };
  struct Dotted : Module {
    ParameterInfo a{this, "a.b"};
  };
  EXPECT_THROW(Dup{}, ValueError);
  EXPECT_THROW(Dotted{}, ValueError);
}

TEST(Module, AssigningASlotReplacesTheRegisteredParameter) {
  Linear l(3, 2, {.key = random::key(4)});
  const Array w = random_array({2, 3}, float32, 5);
  l.weight = w;
  EXPECT_EQ(l.parameters().at("weight").id(), w.id());  // no stale copy (pytorch#21682)
  try {
    l.weight = zeros({3, 2});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'weight'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(l.weight = zeros({2, 3}, float64), DtypeError);
  EXPECT_EQ(l.weight.value().id(), w.id());
  l.weight.reset(zeros({2, 3}, float64));  // reset changes dtype on purpose
  EXPECT_EQ(l.weight.value().dtype(), float64);
}

TEST(Module, TrainAndEvalModeReachEveryDescendant) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.train(false);
  for (auto& [key, m] : net.named_modules()) EXPECT_FALSE(m->is_training()) << key;
  net.blocks[1].train(true);
  EXPECT_TRUE(net.blocks[1].is_training());
  EXPECT_FALSE(net.blocks[0].is_training());
}

TEST(Module, FreezeByKeySubmoduleOrAll) {
  Net net;
  net.freeze({"inp", "blocks.1.scale"});
  EXPECT_EQ(net.trainable_parameters().keys(),
            (std::vector<std::string>{"blocks.0.proj.weight", "blocks.0.proj.bias", "blocks.0.scale",
                                      "blocks.1.proj.weight", "blocks.1.proj.bias", "head.weight"}));
  net.unfreeze();
  EXPECT_EQ(net.trainable_parameters().size(), kNetKeys.size());
  net.blocks[0].freeze({}, /*recurse=*/false);  // only the block's own parameter
  EXPECT_FALSE(net.trainable_parameters().contains("blocks.0.scale"));
  EXPECT_TRUE(net.trainable_parameters().contains("blocks.0.proj.weight"));
  net.unfreeze();
  net.freeze({"blocks"}, /*recurse=*/false);  // ModuleList owns no parameter itself
  EXPECT_EQ(net.trainable_parameters().size(), kNetKeys.size());
  try {
    net.freeze({"head", "nope.weight"});
    FAIL();
  } catch (const KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.weight"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(net.trainable_parameters().contains("head.weight"));  // nothing changed
}

// ParamTree's lookups: insertion order kept through replace and erase, and a miss names the
// nearest key (the first after it in sorted order, else the last).
TEST(ParamTree, LookupReplaceEraseAndMisses) {
  ParamTree t;
  const Array a = arange(0, 3, 1), b = arange(3, 5, 1), c = arange(5, 6, 1);
  t.set("fc2.weight", a);
  t.set("fc1.bias", b);
  t.set(std::string_view("fc1.weight"), c);
  t.set("fc1.bias", a);  // replaced in place
  EXPECT_EQ(t.keys(), (std::vector<std::string>{"fc2.weight", "fc1.bias", "fc1.weight"}));
  EXPECT_EQ(t.at("fc1.bias").id(), a.id());
  EXPECT_TRUE(t.erase("fc2.weight"));
  EXPECT_FALSE(t.erase("fc2.weight"));
  EXPECT_EQ(t.keys(), (std::vector<std::string>{"fc1.bias", "fc1.weight"}));
  EXPECT_EQ(t.at("fc1.weight").id(), c.id());  // its index moved down with the erase
  auto miss = [&](std::string_view key) {
    try {
      (void)t.at(key);
    } catch (const KeyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(miss("fc1.b").find("nearest: 'fc1.bias'"), std::string::npos) << miss("fc1.b");
  EXPECT_NE(miss("fc9").find("nearest: 'fc1.weight'"), std::string::npos) << miss("fc9");
  t = ParamTree();
  EXPECT_NE(miss("x").find("the tree is empty"), std::string::npos) << miss("x");
}

TEST(Module, UpdateAppliesEverythingOrNothing) {
  Net net;
  const ParamTree before = net.parameters();
  ParamTree good;
  for (const auto& [key, v] : before) good.set(key, v + 1.0f);
  const UpdateReport r = net.update(good);
  EXPECT_TRUE(r.clean());
  EXPECT_EQ(r.applied, kNetKeys);
  EXPECT_EQ(net.blocks[0].updates, 1);
  expect_close(net.parameters().at("inp.bias"), values(before.at("inp.bias") + 1.0f));

  // Every kind of problem at once: each is reported by key, and nothing changes.
  ParamTree bad = net.parameters();
  bad.erase("blocks.1.scale");
  bad.set("blocks.2.scale", ones({3}));
  bad.set("head.weight", ones({3, 2}));
  bad.set("inp.bias", ones({4}, float64));
  const ParamTree current = net.parameters();
  try {
    net.update(bad);
    FAIL();
  } catch (const KeyError& e) {
    const std::string msg = e.what();
    for (const char* key : {"blocks.1.scale", "blocks.2.scale", "head.weight", "inp.bias"})
      EXPECT_NE(msg.find(key), std::string::npos) << key << " in " << msg;
  }
  for (const auto& [key, v] : net.parameters()) EXPECT_EQ(v.id(), current.at(key).id()) << key;
  EXPECT_EQ(net.blocks[0].updates, 1);

  // Shape problems alone are ShapeErrors; with verify relaxed, the rest applies and is reported.
  ParamTree reshaped = net.parameters();
  reshaped.set("head.weight", ones({3, 2}));
  EXPECT_THROW(net.update(reshaped), ShapeError);
  ParamTree partial;
  partial.set("head.weight", full({2, 3}, 0.5f));
  partial.set("extra", ones({1}));
  EXPECT_THROW(net.update(partial), KeyError);
  const UpdateReport loose = net.update(partial, Verify::shapes | Verify::dtypes);
  EXPECT_EQ(loose.applied, (std::vector<std::string>{"head.weight"}));
  EXPECT_EQ(loose.unexpected, (std::vector<std::string>{"extra"}));
  EXPECT_EQ(loose.missing.size(), kNetKeys.size() - 1);
  expect_close(net.head->weight.value(), std::vector<double>(6, 0.5));
  const UpdateReport cast = net.update({{"inp.bias", ones({4}, float64)}}, Verify::none);
  EXPECT_EQ(cast.wrong_dtype.size(), 1u);
  EXPECT_EQ(net.inp->bias.value().dtype(), float64);
}

TEST(Module, ValueAndGradGivesTrainableGradientsByKey) {
  Net net;
  net.freeze({"blocks.0"});
  const Array x = random_array({6, 5}, float32, 6), y = random_array({6, 2}, float32, 7);
  auto loss_fn = [&](const Array& in, const Array& target) { return mean(square(net(in) - target)); };
  auto step = value_and_grad(net, loss_fn);
  const ParamTree params = net.parameters();
  auto [loss, grads] = step(x, y);
  EXPECT_EQ(grads.keys(), net.trainable_parameters().keys());
  EXPECT_FALSE(grads.contains("blocks.0.scale"));
  expect_close(loss, values(loss_fn(x, y)));
  for (const auto& [key, v] : net.parameters()) EXPECT_EQ(v.id(), params.at(key).id()) << key;  // restored

  // Central differences in float64 on two entries of each gradient.
  net.update(net.parameters().map([](const std::string&, const Array& v) { return astype(v, float64); }),
             Verify::none);
  const Array xd = astype(x, float64), yd = astype(y, float64);
  auto [loss64, grads64] = step(xd, yd);
  for (const auto& [key, g] : grads64) {
    const std::vector<double> gv = values(g);
    for (int64_t i : {int64_t{0}, g.size() - 1}) {
      auto at = [&](double delta) {
        std::vector<double> p = values(net.parameters().at(key));
        p[i] += delta;
        ParamTree moved = net.parameters();
        moved.set(key, Array(p, g.shape()));
        Net probe;
        probe.update(moved, Verify::none);
        return mean(square(probe(xd) - yd)).item<double>();
      };
      const double fd = (at(1e-6) - at(-1e-6)) / 2e-6;
      EXPECT_NEAR(gv[i], fd, 1e-6 + 1e-5 * std::abs(fd)) << key << "[" << i << "]";
    }
  }
}

TEST(Module, ValueAndGradRestoresParametersWhenTheLossThrows) {
  Linear l(3, 2, {.key = random::key(8)});
  const ParamTree before = l.parameters();
  auto step = value_and_grad(l, [&](const Array& x) { return sum(l(x)); });
  EXPECT_THROW(step(ones({2, 4})), ShapeError);
  for (const auto& [key, v] : l.parameters()) EXPECT_EQ(v.id(), before.at(key).id());
  auto [loss, grads] = step(ones({2, 3}));
  expect_close(grads.at("bias"), {2.0, 2.0});
}

TEST(Init, FansGainsAndDistributions) {
  EXPECT_EQ(init::fans({16, 8, 3, 3}), (std::pair<int64_t, int64_t>{72, 144}));
  EXPECT_THROW(init::fans({5}), ShapeError);
  EXPECT_NEAR(init::gain(init::Nonlinearity::leaky_relu, 0.2), std::sqrt(2.0 / 1.04), 1e-12);
  EXPECT_NEAR(init::gain(init::Nonlinearity::tanh), 5.0 / 3.0, 1e-12);
  const Shape s{256, 512};
  auto stats = [](const Array& a) {
    const std::vector<double> v = values(a);
    double m = 0, sq = 0, lo = 1e9, hi = -1e9;
    for (double x : v) m += x, sq += x * x, lo = std::min(lo, x), hi = std::max(hi, x);
    m /= static_cast<double>(v.size());
    return std::array<double, 4>{m, std::sqrt(sq / static_cast<double>(v.size()) - m * m), lo, hi};
  };
  const double xb = std::sqrt(6.0 / 768.0);
  auto g = stats(init::glorot_uniform(s, 1.0, float32, random::key(9)));
  EXPECT_NEAR(g[1], xb / std::sqrt(3.0), 0.02 * xb);
  EXPECT_GE(g[2], -xb);
  EXPECT_LE(g[3], xb);
  auto h = stats(
      init::he_normal(s, 0.0, init::FanMode::fan_in, init::Nonlinearity::relu, float32, random::key(10)));
  EXPECT_NEAR(h[1], std::sqrt(2.0 / 512.0), 0.02 * std::sqrt(2.0 / 512.0));
  auto u = stats(init::he_uniform(s, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu,
                                  float32, random::key(11)));
  EXPECT_LE(u[3], 1.0 / std::sqrt(512.0));  // PyTorch's Linear default bound
  EXPECT_NEAR(stats(init::glorot_normal(s, 2.0, float32, random::key(12)))[1], 2.0 * std::sqrt(2.0 / 768.0),
              0.04 * std::sqrt(2.0 / 768.0));
  auto c = values(init::constant({3}, 0.25));
  EXPECT_EQ(c, (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_NEAR(stats(init::normal(s, 1.0, 0.5, float32, random::key(13)))[0], 1.0, 0.01);
  EXPECT_NEAR(stats(init::uniform(s, 2.0, 4.0, float32, random::key(14)))[0], 3.0, 0.01);
  // Same key, same numbers; no key draws from the default sequence.
  expect_close(init::normal({4}, 0, 1, float32, random::key(5)),
               values(init::normal({4}, 0, 1, float32, random::key(5))));
  random::seed(3);
  const std::vector<double> first = values(init::normal({4}));
  random::seed(3);
  EXPECT_EQ(values(init::normal({4})), first);
}

TEST(Init, OrthogonalRowsOrColumnsAreOrthonormal) {
  for (Shape s : {Shape{6, 4}, Shape{4, 6}, Shape{3, 2, 2}}) {
    const Array q = reshape(astype(init::orthogonal(s, 1.0, float64, random::key(15)), float64), {s[0], -1});
    const bool tall = q.shape()[0] >= q.shape()[1];
    const Array gram = tall ? matmul(transpose(q), q) : matmul(q, transpose(q));
    const int64_t n = gram.shape()[0];
    expect_close(gram, values(identity(n, float64)), 0, 1e-12);
  }
  const Array g = init::orthogonal({5, 5}, 2.0, float32, random::key(16));
  expect_close(matmul(transpose(g), g), values(4.0f * identity(5)), 0, 1e-5);
  EXPECT_THROW(init::orthogonal({5}), ShapeError);
}

TEST(Linear, MatchesTheFormulaAndChecksItsInput) {
  Linear l(5, 3, {.key = random::key(17)});
  const Array x = random_array({4, 5}, float32, 18);
  const std::vector<double> xv = values(x), w = values(l.weight.value()), b = values(l.bias.value());
  std::vector<double> ref(12);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 3; ++o) {
      double acc = b[o];
      for (int k = 0; k < 5; ++k) acc += xv[i * 5 + k] * w[o * 5 + k];
      ref[i * 3 + o] = acc;
    }
  expect_close(l(x), ref);
  expect_close(l(reshape(x, {2, 2, 5})), ref);  // leading batch dimensions
  for (double v : w) EXPECT_LE(std::abs(v), 1.0 / std::sqrt(5.0));
  Linear nb(5, 3, {.bias = false, .dtype = float64, .key = random::key(19)});
  EXPECT_EQ(nb.parameters().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(nb(astype(x, float64)).dtype(), float64);
  EXPECT_THROW(l(ones({4, 6})), ShapeError);
  EXPECT_THROW(Linear(0, 3), ValueError);
  test::check_vjp([&](const std::vector<Array>& a) { return l(a[0]); }, {astype(x, float64)});
}

}  // namespace
}  // namespace kiln::nn
