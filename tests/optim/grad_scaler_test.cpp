// optim::GradScaler: PyTorch's dynamic loss scaling (back off and skip on inf/NaN, grow after
// growth_interval clean steps), its state in checkpoints, and CompiledStep with a scaler matching
// the eager loop, skipped steps included.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <limits>
#include <string>

#include "kiln/models/mlp.h"
#include "support/error_of.h"
#include "support/op_test.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using optim::GradScaler;

TEST(GradScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  GradScaler s({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.25, .growth_interval = 3});
  EXPECT_EQ(s.scale_value(), 1024);
  s.update(false);
  EXPECT_EQ(s.scale_value(), 256);
  EXPECT_EQ(s.skipped_steps(), 1);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.growth_tracker(), 2);
  EXPECT_EQ(s.scale_value(), 256);
  s.update(true);  // the third clean step in a row
  EXPECT_EQ(s.scale_value(), 512);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(true);
  s.update(false);  // an overflow restarts the count
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.scale_value(), 128);
  GradScaler off({.enabled = false});
  off.update(false);
  EXPECT_EQ(off.scale_value(), 1);
  EXPECT_EQ(off.skipped_steps(), 0);
}

TEST(GradScaler, BadOptionsAreValueErrors) {
  EXPECT_THROW(GradScaler({.init_scale = 0}), ValueError);
  EXPECT_THROW(GradScaler({.init_scale = std::numeric_limits<double>::infinity()}), ValueError);
  EXPECT_THROW(GradScaler({.growth_factor = 1}), ValueError);
  EXPECT_THROW(GradScaler({.backoff_factor = 1}), ValueError);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), ValueError);
  GradScaler s;
  EXPECT_THROW(s.scale(test::random_array({2}, float32, 1)), ShapeError);
  EXPECT_THROW(s.scale(Array(int32_t{3})), DtypeError);
}

TEST(GradScaler, ScalesInFloat32AndUnscalesWithAFiniteFlag) {
  GradScaler s;  // 65536: a float16 loss times it would overflow float16
  const Array loss(4.0, float16);
  const Array scaled = s.scale(loss);
  EXPECT_EQ(scaled.dtype(), float32);
  EXPECT_EQ(scaled.item<float>(), 4.0f * 65536);
  nn::ParamTree grads{{"a", Array(std::vector<float>{65536, -131072}, {2})}};
  auto [g, finite] = s.unscale(grads);
  test::expect_close(g.at("a"), std::vector<double>{1, -2}, 0, 0);
  EXPECT_TRUE(finite.item<bool>());
  grads.set("b", Array(std::vector<float>{1, std::numeric_limits<float>::quiet_NaN()}, {2}));
  EXPECT_FALSE(s.unscale(grads).second.item<bool>());
}

struct Fixture {
  models::Mlp model{{.in_features = 6, .hidden = {8}, .out_features = 3}};
  Array x = test::random_array({5, 6}, float32, 11);
  Array y = random::randint({5}, random::key(12), 0, 3);
};

TEST(GradScaler, AStepWithAnInfGradientChangesNothingButTheScale) {
  random::seed(1);
  Fixture f;
  optim::Adam opt({.lr = 1e-2});
  GradScaler scaler({.init_scale = 8});
  auto grads_of = [&](const Array& x) {
    return nn::value_and_grad(f.model, [&] { return scaler.scale(nn::cross_entropy(f.model(x), f.y)); })();
  };
  EXPECT_TRUE(scaler.step(opt, f.model, grads_of(f.x).second));
  const nn::ParamTree before = f.model.parameters();
  const nn::ParamTree state_before = opt.state();
  const Array bad = f.x * std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.step(opt, f.model, grads_of(bad).second));
  EXPECT_EQ(scaler.scale_value(), 4);
  EXPECT_EQ(opt.step(), 1);
  for (const auto& [key, v] : before) EXPECT_TRUE(f.model.parameters().at(key).id() == v.id()) << key;
  for (const auto& [key, v] : state_before) EXPECT_TRUE(opt.state().at(key).id() == v.id()) << key;
  EXPECT_TRUE(scaler.step(opt, f.model, grads_of(f.x).second));
  EXPECT_EQ(opt.step(), 2);
}

TEST(GradScaler, UnscaledStepsMatchTheUnscaledLoop) {
  // The scale is a power of two: scaling and unscaling are exact, so the updates agree closely.
  random::seed(2);
  Fixture f, g;
  g.model.update(f.model.parameters());
  optim::AdamW a({.lr = 1e-2}), b({.lr = 1e-2});
  GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
  for (int i = 0; i < 5; ++i) {
    auto [l1, g1] =
        nn::value_and_grad(f.model, [&] { return scaler.scale(nn::cross_entropy(f.model(f.x), f.y)); })();
    ASSERT_TRUE(scaler.step(a, f.model, g1));
    auto [l2, g2] = nn::value_and_grad(g.model, [&] { return nn::cross_entropy(g.model(g.x), g.y); })();
    b.update(g.model, g2);
  }
  EXPECT_EQ(scaler.scale_value(), 1024 * 4);  // grew twice
  for (const auto& [key, v] : g.model.parameters())
    test::expect_close(f.model.parameters().at(key), v, 1e-5, 1e-6);
}

TEST(GradScaler, CompiledStepMatchesTheEagerLoopThroughAnOverflow) {
  random::seed(3);
  Fixture f, g;
  g.model.update(f.model.parameters());
  optim::Adam a({.lr = 1e-2}), b({.lr = 1e-2});
  GradScaler compiled_scaler({.init_scale = 256, .growth_interval = 2}), eager_scaler = compiled_scaler;
  optim::CompiledStep step(
      f.model, a,
      [&](const std::vector<Array>& batch) { return nn::cross_entropy(f.model(batch[0]), batch[1]); },
      &compiled_scaler);
  const float inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 6; ++i) {
    const Array x = i == 2 ? f.x * inf : test::random_array({5, 6}, float32, 20 + static_cast<uint64_t>(i));
    const Array loss = step({x, f.y});
    auto [want, grads] =
        nn::value_and_grad(g.model, [&] { return eager_scaler.scale(nn::cross_entropy(g.model(x), g.y)); })();
    const double want_loss = want.item<float>() / eager_scaler.scale_value();
    const bool stepped = eager_scaler.step(b, g.model, grads);
    EXPECT_EQ(stepped, i != 2) << i;
    if (stepped) test::expect_close(loss, std::vector<double>{want_loss}, 1e-5, 0);
    EXPECT_EQ(compiled_scaler.scale_value(), eager_scaler.scale_value()) << i;
  }
  EXPECT_EQ(a.step(), 5);
  EXPECT_EQ(b.step(), 5);
  EXPECT_EQ(compiled_scaler.skipped_steps(), 1);
  for (const auto& [key, v] : g.model.parameters())
    test::expect_close(f.model.parameters().at(key), v, 1e-5, 1e-6);
}

TEST(GradScaler, StateRoundTripsThroughACheckpoint) {
  random::seed(4);
  test::TempDir dir;
  Fixture f;
  optim::Adam opt({.lr = 1e-2});
  GradScaler scaler({.init_scale = 512, .growth_interval = 10});
  for (int i = 0; i < 3; ++i) {
    auto [l, grads] =
        nn::value_and_grad(f.model, [&] { return scaler.scale(nn::cross_entropy(f.model(f.x), f.y)); })();
    scaler.step(opt, f.model, grads);
  }
  scaler.update(false);
  io::save_checkpoint(dir / "c.ckpt", io::make_checkpoint(f.model, opt, scaler));
  Fixture fresh;
  optim::Adam fresh_opt({.lr = 1e-2});
  GradScaler fresh_scaler({.init_scale = 512, .growth_interval = 10});
  io::restore_checkpoint(io::load_checkpoint(dir / "c.ckpt"), fresh.model, fresh_opt, fresh_scaler);
  EXPECT_EQ(fresh_scaler.scale_value(), 256);
  EXPECT_EQ(fresh_scaler.growth_tracker(), 0);
  EXPECT_EQ(fresh_opt.step(), 3);

  // A checkpoint without the scaler's state: a KeyError, and nothing changes.
  io::save_checkpoint(dir / "plain.ckpt", f.model, opt);
  Fixture other;
  optim::Adam other_opt({.lr = 1e-2});
  const nn::ParamTree before = other.model.parameters();
  EXPECT_THROW(
      io::restore_checkpoint(io::load_checkpoint(dir / "plain.ckpt"), other.model, other_opt, fresh_scaler),
      KeyError);
  EXPECT_EQ(other_opt.step(), 0);
  for (const auto& [key, v] : before) EXPECT_TRUE(other.model.parameters().at(key).id() == v.id()) << key;
  EXPECT_EQ(fresh_scaler.scale_value(), 256);
}

TEST(GradScaler, SetStateChecksEverythingFirst) {
  GradScaler s({.init_scale = 64});
  EXPECT_THROW(s.set_state({{"scale", Array(2.0)}}), KeyError);
  EXPECT_THROW(s.set_state({{"scale", Array(2.0)}, {"growth_tracker", Array(int64_t{0})}, {"x", Array(1.0)}}),
               KeyError);
  EXPECT_THROW(
      s.set_state({{"scale", Array(std::vector<double>{2, 3}, {2})}, {"growth_tracker", Array(int64_t{0})}}),
      ShapeError);
  EXPECT_THROW(s.set_state({{"scale", Array(-2.0)}, {"growth_tracker", Array(int64_t{0})}}), ValueError);
  EXPECT_THROW(s.set_state({{"scale", Array(2.0)}, {"growth_tracker", Array(int64_t{-1})}}), ValueError);
  EXPECT_THROW(s.set_state({{"scale", Array(int64_t{2})}, {"growth_tracker", Array(int64_t{0})}}),
               DtypeError);
  EXPECT_EQ(s.scale_value(), 64);
  s.set_state({{"scale", Array(2.0)}, {"growth_tracker", Array(int64_t{5})}});
  EXPECT_EQ(s.scale_value(), 2);
  EXPECT_EQ(s.growth_tracker(), 5);
}

}  // namespace
}  // namespace kiln
