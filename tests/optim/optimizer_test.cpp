// The optimizer interface: options and their checks, functional and lazy steps, errors that change
// nothing, state keys and dtypes, save/restore (bit-identical continuation), set_state's checks,
// update(model) with frozen parameters, init, learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "kiln/nn/layers/linear.h"
#include "kiln/nn/value_and_grad.h"
#include "kiln/optim/optim.h"
#include "support/op_test.h"

namespace kiln::optim {
namespace {

using test::random_array;
using test::values;

// The message of the exception `f` throws as E (fails the test when it throws nothing or another).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

ParamTree make_params(Dtype dtype = float32, uint64_t seed = 1) {
  return {{"fc1.weight", random_array({3, 4}, dtype, seed)},
          {"fc1.bias", random_array({3}, dtype, seed + 1)},
          {"head.weight", random_array({2, 3}, dtype, seed + 2)}};
}

ParamTree make_grads(const ParamTree& params, uint64_t seed) {
  return params.map(
      [&](const std::string&, const Array& p) { return random_array(p.shape(), p.dtype(), seed++); });
}

// A state as it comes back from a file: fresh Arrays with the same values, shapes and dtypes.
ParamTree reload(const ParamTree& tree) {
  return tree.map([](const std::string&, const Array& a) {
    if (a.dtype() == int64) return Array(a.to_vector<int64_t>(), a.shape(), int64);
    return Array(a.to_vector<double>(), a.shape(), a.dtype());
  });
}

std::vector<std::function<std::unique_ptr<Optimizer>()>> all_kinds() {
  return {
      [] { return std::make_unique<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}); },
      [] { return std::make_unique<Adam>(AdamOptions{.lr = cosine_decay(0.01, 4), .amsgrad = true}); },
      [] { return std::make_unique<AdamW>(AdamWOptions{.lr = 0.01}); },
      [] { return std::make_unique<Adamax>(); },
      [] {
        return std::make_unique<Adagrad>(AdagradOptions{.lr_decay = 0.1, .initial_accumulator_value = 0.1});
      },
      [] { return std::make_unique<RMSprop>(RMSpropOptions{.momentum = 0.5, .centered = true}); },
      [] { return std::make_unique<Lion>(LionOptions{.weight_decay = 0.1}); },
      [] { return std::make_unique<Adafactor>(AdafactorOptions{.weight_decay = 0.1}); },
  };
}

TEST(Optimizer, OptionsDefaultToPyTorchs) {
  optim::Adam adam({.lr = 1e-3, .betas = {0.9, 0.999}});
  EXPECT_EQ(adam.name(), "Adam");
  EXPECT_EQ(adam.learning_rate(), 1e-3);
  EXPECT_EQ(Adam().options().eps, 1e-8);
  EXPECT_FALSE(Adam().options().amsgrad);
  EXPECT_EQ(AdamW().options().weight_decay, 1e-2);
  EXPECT_EQ(Adamax().learning_rate(), 2e-3);
  EXPECT_EQ(SGD().learning_rate(), 1e-3);
  EXPECT_EQ(Adagrad().learning_rate(), 1e-2);
  EXPECT_EQ(Adagrad().options().eps, 1e-10);
  EXPECT_EQ(RMSprop().options().alpha, 0.99);
  EXPECT_EQ(RMSprop().learning_rate(), 1e-2);
  EXPECT_EQ(Lion().learning_rate(), 1e-4);
  EXPECT_EQ(Lion().options().betas[1], 0.99);
  EXPECT_EQ(Adafactor().learning_rate(), 1e-2);
  EXPECT_EQ(Adafactor().options().beta2_decay, -0.8);
  EXPECT_FALSE(Adafactor().options().eps1.has_value());
  EXPECT_EQ(Adafactor().options().eps2, 1e-3);
}

TEST(Optimizer, ConstructorsCheckOptions) {
  EXPECT_EQ(message_of<ValueError>([] { Adam({.lr = -1}); }), "[Adam] lr must be >= 0, got -1");
  EXPECT_EQ(message_of<ValueError>([] {
              AdamW({.betas = {0.9, 1.0}});
            }),
            "[AdamW] betas[1] must be in [0, 1), got 1");
  EXPECT_EQ(message_of<ValueError>([] { SGD({.lr = 0.1, .nesterov = true}); }),
            "[SGD] nesterov momentum requires momentum > 0 and dampening == 0, got momentum 0, dampening 0");
  EXPECT_THROW(SGD({.momentum = 0.9, .dampening = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(SGD({.momentum = -0.1}), ValueError);
  EXPECT_THROW(SGD({.weight_decay = -1}), ValueError);
  EXPECT_THROW(Adam({.eps = -1e-8}), ValueError);
  EXPECT_THROW(Adam({.lr = std::nan("")}), ValueError);
  EXPECT_THROW(Adamax({.betas = {-0.1, 0.9}}), ValueError);
  EXPECT_THROW(Adagrad({.lr_decay = -1}), ValueError);
  EXPECT_THROW(Adagrad({.initial_accumulator_value = -1}), ValueError);
  EXPECT_THROW(RMSprop({.alpha = -0.5}), ValueError);
  EXPECT_THROW(RMSprop({.momentum = -0.5}), ValueError);
  EXPECT_THROW(Lion({.betas = {0.9, 1.5}}), ValueError);
  EXPECT_EQ(message_of<ValueError>([] { Adafactor({.d = 0.5}); }), "[Adafactor] d must be >= 1, got 0.5");
  EXPECT_THROW(Adafactor({.beta2_decay = 0.5}), ValueError);
  EXPECT_THROW(Adafactor({.eps1 = -1.0}), ValueError);
  EXPECT_THROW(LearningRate(Schedule{}), ValueError);
  // Errors are std::invalid_argument and kiln::Error alike.
  EXPECT_THROW(Lion({.lr = -1}), std::invalid_argument);
  EXPECT_THROW(Lion({.lr = -1}), kiln::Error);
}

TEST(Optimizer, ApplyIsFunctionalAndLazy) {
  for (const auto& make : all_kinds()) {
    auto opt = make();
    SCOPED_TRACE(opt->name());
    const ParamTree params = make_params();
    nn::eval(params);
    std::map<std::string, std::vector<double>> before;
    for (const auto& [key, p] : params) before[key] = values(p);
    ParamTree grads = make_grads(params, 10);
    grads.erase("fc1.bias");
    nn::eval(grads);

    const ParamTree out = opt->apply(params, grads);
    EXPECT_EQ(out.keys(), params.keys());
    EXPECT_EQ(out.at("fc1.bias").id(), params.at("fc1.bias").id());  // no gradient: passed through
    EXPECT_NE(out.at("fc1.weight").id(), params.at("fc1.weight").id());
    EXPECT_FALSE(out.at("fc1.weight").is_available());  // nothing evaluated inside apply
    const ParamTree state1 = opt->state();
    const ParamTree out2 = opt->apply(out, grads);
    nn::eval({&out2, &opt->state()});
    for (const auto& [key, p] : params) EXPECT_EQ(values(p), before.at(key)) << key;
    // The state after step 1 is its own Arrays: step 2 produced new ones.
    for (const auto& [key, s] : state1) EXPECT_NE(s.id(), opt->state().at(key).id()) << key;
    EXPECT_EQ(state1.at("step").item<int64_t>(), 1);
    EXPECT_EQ(opt->step(), 2);
    EXPECT_FALSE(opt->state().contains("fc1.bias.step"));
  }
}

TEST(Optimizer, StateKeysAndDtypesFollowTheParameters) {
  Adam adam({.amsgrad = true});
  const ParamTree params = make_params(bfloat16);
  adam.apply(params, make_grads(params, 3));
  EXPECT_EQ(adam.state().keys(),
            (std::vector<std::string>{"step", "fc1.weight.step", "fc1.weight.exp_avg",
                                      "fc1.weight.exp_avg_sq", "fc1.weight.max_exp_avg_sq", "fc1.bias.step",
                                      "fc1.bias.exp_avg", "fc1.bias.exp_avg_sq", "fc1.bias.max_exp_avg_sq",
                                      "head.weight.step", "head.weight.exp_avg", "head.weight.exp_avg_sq",
                                      "head.weight.max_exp_avg_sq"}));
  for (const auto& [key, s] : adam.state())
    EXPECT_EQ(s.dtype(), key.ends_with("step") ? int64 : bfloat16) << key;

  Adafactor adafactor;
  const ParamTree p{{"w", random_array({2, 5, 3}, float16, 1)}, {"b", random_array({3}, float16, 2)}};
  const ParamTree out = adafactor.apply(p, make_grads(p, 5));
  EXPECT_EQ(adafactor.state().at("w.row_var").shape(), (Shape{2, 5, 1}));
  EXPECT_EQ(adafactor.state().at("w.col_var").shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(adafactor.state().at("b.variance").shape(), (Shape{3}));
  EXPECT_EQ(adafactor.state().at("w.row_var").dtype(), float16);
  EXPECT_EQ(out.at("w").dtype(), float16);
  EXPECT_FALSE(adafactor.state().contains("w.variance"));
}

TEST(Optimizer, ApplyErrorsNameTheKeyAndChangeNothing) {
  Adam adam;
  const ParamTree params = make_params();
  adam.apply(params, make_grads(params, 1));
  const ParamTree held = adam.state();
  auto unchanged = [&] {
    EXPECT_EQ(adam.step(), 1);
    EXPECT_EQ(adam.state().keys(), held.keys());
    for (const auto& [key, s] : held) EXPECT_EQ(adam.state().at(key).id(), s.id()) << key;
  };

  ParamTree grads = make_grads(params, 2);
  grads.set("fc2.weight", ones({2, 2}));
  std::string msg = message_of<KeyError>([&] { adam.apply(params, grads); });
  EXPECT_NE(msg.find("'fc2.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[Adam]"), std::string::npos) << msg;
  unchanged();

  grads = make_grads(params, 2);
  grads.set("head.weight", ones({3, 2}));  // fc1.* come first and are valid: still nothing changes
  msg = message_of<ShapeError>([&] { adam.apply(params, grads); });
  EXPECT_EQ(msg,
            "[Adam] gradient shape differs from its parameter: at 'head.weight': parameter (2,3), gradient "
            "(3,2)");
  unchanged();

  grads = make_grads(params, 2);
  grads.set("fc1.bias", ones({3}, float64));
  EXPECT_THROW(adam.apply(params, grads), DtypeError);
  unchanged();

  // A parameter of another shape than the state held for its key (a different model).
  ParamTree other = params;
  other.set("fc1.bias", ones({5}));
  grads = make_grads(other, 2);
  msg = message_of<ShapeError>([&] { adam.apply(other, grads); });
  EXPECT_NE(msg.find("fc1.bias"), std::string::npos) << msg;
  unchanged();

  ParamTree ints{{"n", ones({2}, int32)}};
  EXPECT_THROW(SGD().apply(ints, ints), DtypeError);
  EXPECT_THROW(adam.apply(params, ParamTree{{"fc1.bias", Array()}}), ValueError);
  unchanged();
}

TEST(Optimizer, SaveAndRestoreContinuesBitIdentically) {
  for (const auto& make : all_kinds()) {
    auto a = make();
    SCOPED_TRACE(a->name());
    ParamTree params = make_params();
    for (int s = 0; s < 3; ++s) {
      ParamTree grads = make_grads(params, 20 + s);
      if (s == 1) grads.erase("head.weight");
      params = a->apply(params, grads);
      nn::eval({&params, &a->state()});
    }
    const ParamTree saved_state = reload(a->state());
    const ParamTree saved_params = reload(params);

    auto b = make();
    b->set_state(saved_state);
    EXPECT_EQ(b->step(), 3);
    EXPECT_EQ(b->learning_rate(), a->learning_rate());
    EXPECT_EQ(b->state().keys(), a->state().keys());
    ParamTree pa = params, pb = saved_params;
    for (int s = 3; s < 6; ++s) {
      const ParamTree grads = make_grads(params, 20 + s);
      pa = a->apply(pa, grads);
      pb = b->apply(pb, grads);
      nn::eval({&pa, &pb, &a->state(), &b->state()});
    }
    for (const auto& [key, p] : pa) EXPECT_EQ(values(p), values(pb.at(key))) << key;
    for (const auto& [key, s] : a->state()) EXPECT_EQ(values(s), values(b->state().at(key))) << key;
  }
}

TEST(Optimizer, SetStateChecksEverythingFirst) {
  Adam adam;
  const ParamTree params = make_params();
  adam.apply(params, make_grads(params, 1));
  nn::eval(adam.state());
  const ParamTree good = adam.state();
  auto expect_unchanged = [&] {
    EXPECT_EQ(adam.step(), 1);
    for (const auto& [key, s] : good) EXPECT_EQ(adam.state().at(key).id(), s.id()) << key;
  };
  auto with = [&](const std::string& key, Array value) {
    ParamTree s = good;
    s.set(key, std::move(value));
    return s;
  };
  auto without = [&](const std::string& key) {
    ParamTree s = good;
    s.erase(key);
    return s;
  };

  EXPECT_THROW(adam.set_state(without("step")), KeyError);
  std::string msg = message_of<KeyError>([&] {
    adam.set_state(with("fc1.weight.momentum_buffer", zeros({3, 4})));
  });
  EXPECT_NE(msg.find("'fc1.weight.momentum_buffer'"), std::string::npos) << msg;
  msg = message_of<KeyError>([&] { adam.set_state(without("fc1.bias.exp_avg_sq")); });
  EXPECT_NE(msg.find("fc1.bias.exp_avg_sq"), std::string::npos) << msg;
  msg = message_of<KeyError>([&] { adam.set_state(without("fc1.bias.step")); });
  EXPECT_NE(msg.find("fc1.bias.step"), std::string::npos) << msg;
  EXPECT_THROW(adam.set_state(with("fc1.bias.max_exp_avg_sq", zeros({3}))), KeyError);  // amsgrad is off
  EXPECT_THROW(adam.set_state(with("fc1.bias.exp_avg_sq", zeros({4}))), ShapeError);    // slots disagree
  msg = message_of<ShapeError>([&] {  // consistent, but not the shape of the state held for the key
    adam.set_state(with("fc1.bias.exp_avg", zeros({4})).map([](const std::string& k, const Array& v) {
      return k.starts_with("fc1.bias.exp_avg") ? zeros({4}) : v;
    }));
  });
  EXPECT_NE(msg.find("fc1.bias"), std::string::npos) << msg;
  EXPECT_THROW(adam.set_state(with("fc1.bias.exp_avg", zeros({3}, float64))), DtypeError);
  EXPECT_THROW(adam.set_state(with("head.weight.step", Array(int64_t{-1}))), ValueError);
  EXPECT_THROW(adam.set_state(with("step", Array(1.5f))), ValueError);
  EXPECT_THROW(adam.set_state(with("bias", zeros({3}))), KeyError);  // no slot
  expect_unchanged();

  // A fresh optimizer takes any consistent state; the shapes meet the parameters at apply().
  Adam fresh;
  ParamTree foreign = good;
  foreign.set("fc1.bias.exp_avg", zeros({7}));
  foreign.set("fc1.bias.exp_avg_sq", zeros({7}));
  fresh.set_state(foreign);
  msg = message_of<ShapeError>([&] { fresh.apply(params, make_grads(params, 2)); });
  EXPECT_NE(msg.find("fc1.bias"), std::string::npos) << msg;
  EXPECT_EQ(fresh.step(), 1);

  // Adafactor's factored slots must fit one parameter shape.
  Adafactor af;
  const ParamTree p{{"w", random_array({4, 3}, float32, 1)}};
  af.apply(p, make_grads(p, 2));
  ParamTree s = af.state();
  s.set("w.col_var", zeros({3, 1}));
  EXPECT_THROW(Adafactor().set_state(s), ShapeError);
  s.erase("w.col_var");
  EXPECT_THROW(Adafactor().set_state(s), KeyError);
  // An SGD without momentum keeps only steps.
  SGD sgd;
  sgd.apply(p, make_grads(p, 3));
  EXPECT_EQ(sgd.state().keys(), (std::vector<std::string>{"step", "w.step"}));
  SGD().set_state(sgd.state());
  EXPECT_THROW(SGD({.momentum = 0.9}).set_state(sgd.state()), KeyError);
}

struct Net : nn::Module {
  nn::ModuleInfo<nn::Linear> fc1{this, "fc1", 4, 5, nn::LinearOptions{.key = random::key(1)}};
  nn::ModuleInfo<nn::Linear> fc2{this, "fc2", 5, 2, nn::LinearOptions{.key = random::key(2)}};
  Array operator()(const Array& x) const { return fc2(tanh(fc1(x))); }
};

TEST(Optimizer, UpdateLeavesFrozenParametersAlone) {
  Net net;
  net.freeze({"fc1"});
  const ParamTree before = net.parameters();
  const Array x = random_array({6, 4}, float32, 3), y = random_array({6, 2}, float32, 4);
  auto step =
      nn::value_and_grad(net, [&](const Array& in, const Array& t) { return mean(square(net(in) - t)); });
  auto [loss, grads] = step(x, y);
  EXPECT_FALSE(grads.contains("fc1.weight"));

  Adam adam({.lr = 0.01});
  Adam reference({.lr = 0.01});
  const ParamTree expected = reference.apply(net.trainable_parameters(), grads);
  adam.update(net, grads);
  nn::eval(net.parameters());
  for (const std::string key : {"fc1.weight", "fc1.bias"})
    EXPECT_EQ(net.parameters().at(key).id(), before.at(key).id());
  for (const std::string key : {"fc2.weight", "fc2.bias"}) {
    EXPECT_NE(net.parameters().at(key).id(), before.at(key).id());
    EXPECT_EQ(values(net.parameters().at(key)), values(expected.at(key))) << key;
  }
  EXPECT_FALSE(adam.state().contains("fc1.weight.exp_avg"));

  // A subset of the trainable parameters is fine; a frozen or unknown key is a KeyError.
  ParamTree some;
  some.set("fc2.bias", grads.at("fc2.bias"));
  adam.update(net, some);
  EXPECT_EQ(adam.state().at("fc2.weight.step").item<int64_t>(), 1);
  EXPECT_EQ(adam.state().at("fc2.bias.step").item<int64_t>(), 2);
  const ParamTree now = net.parameters();
  ParamTree frozen = grads;
  frozen.set("fc1.weight", ones({5, 4}));
  std::string msg = message_of<KeyError>([&] { adam.update(net, frozen); });
  EXPECT_NE(msg.find("frozen"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fc1.weight'"), std::string::npos) << msg;
  ParamTree unknown = grads;
  unknown.set("fc3.weight", ones({2}));
  EXPECT_THROW(adam.update(net, unknown), KeyError);
  for (const auto& [key, v] : net.parameters()) EXPECT_EQ(v.id(), now.at(key).id()) << key;
  EXPECT_EQ(adam.step(), 2);
}

TEST(Optimizer, TrainingReducesTheLoss) {
  for (const auto& make : all_kinds()) {
    auto opt = make();
    SCOPED_TRACE(opt->name());
    Net net;
    const Array x = random_array({16, 4}, float32, 5), y = random_array({16, 2}, float32, 6, -0.5, 0.5);
    auto step =
        nn::value_and_grad(net, [&](const Array& in, const Array& t) { return mean(square(net(in) - t)); });
    double first = 0, last = 0;
    for (int i = 0; i < 30; ++i) {
      auto [loss, grads] = step(x, y);
      auto [clipped, norm] = clip_grad_norm(grads, 1.0);
      opt->update(net, clipped);
      const ParamTree params = net.parameters();
      nn::eval({&params, &opt->state()});
      (i == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, first);
  }
}

// A training loop's Adam step writes the new weights and moments over the old ones where nothing
// else reads them any more (here: a Linear's weight and bias, whose old values no pending node
// reads; a weight a pending backward node still views is copied instead), so a model's parameters
// are not allocated twice a step.
TEST(Optimizer, AdamStepsReuseTheParameterBuffers) {
  nn::Linear net(4, 2, {.key = random::key(3)});
  AdamW opt({.lr = 0.01});
  const Array x = random_array({16, 4}, float32, 7), y = random_array({16, 2}, float32, 8, -0.5, 0.5);
  auto step =
      nn::value_and_grad(net, [&](const Array& in, const Array& t) { return mean(square(net(in) - t)); });
  std::map<std::string, const float*> first;
  for (int i = 0; i < 3; ++i) {
    auto [loss, grads] = step(x, y);
    opt.update(net, grads);
    const ParamTree params = net.parameters();
    nn::eval({&params, &opt.state()});
    for (const auto& [key, p] : params) {
      if (i == 0) first[key] = p.data<float>();
      EXPECT_EQ(p.data<float>(), first.at(key)) << key << " at step " << i;
    }
    EXPECT_LT(loss.item<double>(), 10.0);  // evaluated after the step: its graph kept what it reads
  }
}

TEST(Optimizer, InitCreatesTheStateUpFront) {
  const ParamTree params = make_params();
  const ParamTree grads = make_grads(params, 4);
  SGD a({.lr = 0.1, .momentum = 0.9}), b({.lr = 0.1, .momentum = 0.9});
  a.init(params);
  EXPECT_EQ(a.state().size(), 7u);
  EXPECT_EQ(values(a.state().at("fc1.bias.momentum_buffer")), std::vector<double>(3, 0.0));
  EXPECT_EQ(a.state().at("fc1.bias.step").item<int64_t>(), 0);
  EXPECT_EQ(a.step(), 0);
  // The buffer still starts at the first gradient (PyTorch), so init changes no result.
  const ParamTree pa = a.apply(params, grads), pb = b.apply(params, grads);
  for (const auto& [key, p] : pa) EXPECT_EQ(values(p), values(pb.at(key))) << key;
  Adagrad ada({.initial_accumulator_value = 0.25});
  ada.init(params);
  EXPECT_EQ(values(ada.state().at("fc1.bias.sum")), std::vector<double>(3, 0.25));
  EXPECT_THROW(ada.init(ParamTree{{"n", ones({2}, int32)}}), DtypeError);
}

TEST(Optimizer, LearningRateSchedulesFollowTheStep) {
  const ParamTree params{{"w", random_array({4}, float64, 1)}};
  const ParamTree grads{{"w", random_array({4}, float64, 2)}};
  SGD sgd({.lr = [](int64_t step) { return 0.5 / static_cast<double>(step + 1); }});
  ParamTree p = params;
  for (int s = 0; s < 3; ++s) {
    const double lr = sgd.learning_rate();
    EXPECT_DOUBLE_EQ(lr, 0.5 / (s + 1));
    const std::vector<double> before = values(p.at("w"));
    p = sgd.apply(p, grads);
    const std::vector<double> g = values(grads.at("w")), after = values(p.at("w"));
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(after[i], before[i] - lr * g[i], 1e-15);
  }
  sgd.set_learning_rate(0.25);
  EXPECT_EQ(sgd.learning_rate(), 0.25);
  EXPECT_EQ(message_of<ValueError>([&] { sgd.set_learning_rate(-2.0); }), "[SGD] lr must be >= 0, got -2");

  SGD bad({.lr = linear_schedule(1.0, -1.0, 2)});
  p = bad.apply(params, grads);
  const std::string msg = message_of<ValueError>([&] {
    bad.apply(p, grads);
    bad.apply(p, grads);
  });
  EXPECT_EQ(msg, "[SGD] lr must be >= 0, got -1 (from the schedule at step 2)");
  EXPECT_EQ(bad.step(), 2);
}

TEST(Optimizer, CopiesAreSnapshots) {
  const ParamTree params = make_params();
  Lion a({.lr = 0.01});
  a.apply(params, make_grads(params, 1));
  Lion b = a;
  a.apply(params, make_grads(params, 2));
  EXPECT_EQ(b.step(), 1);
  EXPECT_EQ(a.step(), 2);
  EXPECT_NE(a.state().at("fc1.weight.exp_avg").id(), b.state().at("fc1.weight.exp_avg").id());
}

}  // namespace
}  // namespace kiln::optim
