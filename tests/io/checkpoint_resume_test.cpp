// Resuming from a checkpoint: a run stopped, saved, rebuilt from scratch and restored continues
// with exactly the losses of the run that never stopped; restore_checkpoint is all or nothing;
// CheckpointManager keeps the last N of a run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <memory>
#include <tuple>

#include "kiln/core/ops/creation.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/layers/dropout.h"
#include "kiln/nn/losses.h"
#include "kiln/nn/value_and_grad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/schedules.h"
#include "support/temp_dir.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Bytes = std::vector<unsigned char>;

Bytes bytes_of(const Array& a) {
  a.eval();
  Bytes b(static_cast<size_t>(a.nbytes()));
  detail::gather_row_major(a, b.data(), a.dtype());
  return b;
}

// A tree's keys, dtypes, shapes and bytes, to compare before and after.
std::vector<std::tuple<std::string, Dtype, Shape, Bytes>> snapshot(const nn::ParamTree& t) {
  std::vector<std::tuple<std::string, Dtype, Shape, Bytes>> out;
  for (const auto& [key, value] : t) out.emplace_back(key, value.dtype(), value.shape(), bytes_of(value));
  return out;
}

// models::Mlp behind dropout, whose masks come from random::next_key(): a resumed run matches
// only if the default key sequence is restored too.
struct DropoutMlp : nn::Module {
  nn::ModuleInfo<nn::Dropout> drop{this, "drop", 0.25};
  nn::ModuleInfo<models::Mlp> mlp{this, "mlp",
                                  models::MlpConfig{.in_features = 6, .hidden = {16}, .out_features = 3}};
  Array operator()(const Array& x) const { return mlp(drop(x)); }
};

// One training run: everything a restart rebuilds. A cosine schedule makes the restored step
// matter, Adam's moments the restored state, the shuffled loader the restored position.
struct TrainingRun {
  std::unique_ptr<DropoutMlp> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<DataLoader> loader;

  explicit TrainingRun(uint64_t init_seed) {
    random::seed(init_seed);  // the initialization draws from the default key sequence
    model = std::make_unique<DropoutMlp>();
    opt = std::make_unique<optim::Adam>(optim::AdamOptions{.lr = optim::cosine_decay(2e-2, 40)});
    const Array x = random::normal({37, 6}, random::key(1));
    const Array y = random::randint({37}, random::key(2), 0, 3, int32);
    loader = std::make_unique<DataLoader>(std::vector<Array>{x, y},
                                          DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 3});
  }

  float step() {
    const Batch b = loader->next();
    auto loss_and_grads = nn::value_and_grad(
        *model, [this](const Array& x, const Array& y) { return nn::cross_entropy((*model)(x), y); });
    auto [loss, grads] = loss_and_grads(b[0], b[1]);
    opt->update(*model, grads);
    const nn::ParamTree params = model->parameters();
    nn::eval({&params, &opt->state()});
    return loss.item<float>();
  }
};

constexpr int kSteps = 13, kStopAt = 7;  // 5 batches per epoch: the stop lies mid-epoch 1

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

std::vector<float> uninterrupted_losses() {
  TrainingRun run(11);
  std::vector<float> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(run.step());
  return losses;
}

// Trains kStopAt steps, saves, drops the run; returns the losses so far.
std::vector<float> train_and_save(const fs::path& path) {
  TrainingRun run(11);
  std::vector<float> losses;
  for (int i = 0; i < kStopAt; ++i) losses.push_back(run.step());
  save_checkpoint(path, *run.model, *run.opt, run.loader.get(), {{"run", "resume-test"}});
  return losses;
}

TEST(CheckpointResume, ResumedTrainingMatchesTheUninterruptedRunBitForBit) {
  TempDir dir;
  const std::vector<float> full = uninterrupted_losses();
  std::vector<float> resumed = train_and_save(dir / "run.ckpt");

  // A rebuilt run starts from another seed: other weights, another place in the key sequence.
  TrainingRun run(999);
  const Checkpoint c = load_checkpoint(dir / "run.ckpt");
  EXPECT_EQ(c.step, kStopAt);
  EXPECT_EQ(c.data_position, (DataPosition{.epoch = 1, .batch = 2}));
  EXPECT_EQ(c.metadata.at("run"), "resume-test");
  ASSERT_TRUE(c.default_key_state.has_value());
  EXPECT_EQ(c.default_key_state->seed, 11u);
  EXPECT_NE(snapshot(run.model->parameters()), snapshot(c.parameters));
  restore_checkpoint(c, *run.model, *run.opt, run.loader.get());
  EXPECT_EQ(run.opt->step(), kStopAt);
  EXPECT_EQ(run.loader->position(), (DataPosition{.epoch = 1, .batch = 2}));
  for (int i = kStopAt; i < kSteps; ++i) resumed.push_back(run.step());
  EXPECT_EQ(bits(resumed), bits(full));
}

// The controls: without the key sequence, or without the data position, the resumed run drifts,
// so the test above would notice either one missing.
TEST(CheckpointResume, EachRestoredPartMatters) {
  TempDir dir;
  const std::vector<float> full = uninterrupted_losses();
  const std::vector<float> tail(full.begin() + kStopAt, full.end());
  train_and_save(dir / "run.ckpt");
  const Checkpoint c = load_checkpoint(dir / "run.ckpt");
  auto resume = [&](auto spoil) {
    TrainingRun run(999);
    restore_checkpoint(c, *run.model, *run.opt, run.loader.get());
    spoil(run);
    std::vector<float> losses;
    for (int i = kStopAt; i < kSteps; ++i) losses.push_back(run.step());
    return losses;
  };
  EXPECT_EQ(bits(resume([](TrainingRun&) {})), bits(tail));
  EXPECT_NE(bits(resume([](TrainingRun&) { random::seed(11); })), bits(tail));
  EXPECT_NE(bits(resume([](TrainingRun& r) { r.loader->set_position({.epoch = 1, .batch = 3}); })),
            bits(tail));
}

// ---- restore_checkpoint is all or nothing ----

struct RunState {
  std::vector<std::tuple<std::string, Dtype, Shape, Bytes>> params, opt_state;
  int64_t opt_step;
  DataPosition position;
  random::DefaultKeyState keys;
  bool operator==(const RunState&) const = default;
};
RunState state_of(const TrainingRun& r) {
  return {snapshot(r.model->parameters()), snapshot(r.opt->state()), r.opt->step(), r.loader->position(),
          random::default_key_state()};
}

TEST(CheckpointRestore, AFailingPartChangesNothing) {
  Checkpoint good;
  {
    TrainingRun trained(11);
    for (int i = 0; i < 3; ++i) trained.step();
    good = make_checkpoint(*trained.model, *trained.opt, trained.loader.get());
  }
  TrainingRun run(999);
  run.step();
  random::seed(4242);  // a key state unlike the checkpoint's
  const RunState before = state_of(run);
  auto expect_refused = [&](const Checkpoint& c, const char* what, auto error_type) {
    using E = decltype(error_type);
    EXPECT_THROW(restore_checkpoint(c, *run.model, *run.opt, run.loader.get()), E) << what;
    EXPECT_TRUE(state_of(run) == before) << what << " changed something";
  };

  Checkpoint c = good;
  c.parameters.set("mlp.layers.0.weight", zeros({2, 2}));
  expect_refused(c, "a parameter of another shape", ShapeError(""));
  c = good;
  c.parameters.set("mlp.layers.9.weight", zeros({2, 2}));
  expect_refused(c, "an unknown parameter", KeyError(""));
  c = good;
  c.optimizer_state.erase("step");  // refused by the optimizer, after the model took its part
  expect_refused(c, "optimizer state without a step", KeyError(""));
  c = good;
  c.optimizer_state.set("mlp.layers.0.weight.exp_avg", zeros({5, 5}));
  expect_refused(c, "optimizer state of another shape", ShapeError(""));
  c = good;
  c.data_position = DataPosition{.epoch = 0, .batch = run.loader->batches_per_epoch() + 1};
  expect_refused(c, "a position beyond the epoch", ValueError(""));
  c = good;
  c.data_position.reset();
  expect_refused(c, "no position for the loader", ValueError(""));

  restore_checkpoint(good, *run.model, *run.opt, run.loader.get());
  EXPECT_EQ(snapshot(run.model->parameters()), snapshot(good.parameters));
  EXPECT_EQ(snapshot(run.opt->state()), snapshot(good.optimizer_state));
  EXPECT_EQ(run.loader->position(), *good.data_position);
  EXPECT_EQ(random::default_key_state(), *good.default_key_state);

  // Without a loader the position is not needed; without a key state the sequence stays.
  c = good;
  c.data_position.reset();
  c.default_key_state.reset();
  random::seed(5);
  restore_checkpoint(c, *run.model, *run.opt);
  EXPECT_EQ(random::default_key_state(), (random::DefaultKeyState{.seed = 5, .count = 0}));
}

// ---- CheckpointManager ----

Checkpoint at_step(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.parameters.set("w", random::normal({2, 2}, random::key(static_cast<uint64_t>(step))));
  c.metadata["step"] = std::to_string(step);
  return c;
}

std::vector<std::string> names(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  for (const fs::path& p : paths) out.push_back(p.filename().string());
  return out;
}

TEST(CheckpointManager, KeepsTheLastNAndLoadsTheLatest) {
  TempDir dir;
  CheckpointManager manager(dir / "run" / "checkpoints", {.keep_last = 2});  // created with its parents
  EXPECT_TRUE(manager.checkpoints().empty());
  EXPECT_FALSE(manager.latest().has_value());
  EXPECT_FALSE(manager.load_latest().has_value());
  for (int64_t step = 1; step <= 5; ++step) {
    EXPECT_EQ(manager.save(at_step(step)), manager.path_for(step));
    EXPECT_EQ(manager.checkpoints().size(), static_cast<size_t>(std::min<int64_t>(step, 2)));
  }
  EXPECT_EQ(names(manager.checkpoints()),
            (std::vector<std::string>{"ckpt-0000000004.ckpt", "ckpt-0000000005.ckpt"}));
  EXPECT_EQ(manager.latest(), manager.path_for(5));
  const std::optional<Checkpoint> latest = manager.load_latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 5);
  EXPECT_EQ(latest->metadata.at("step"), "5");
  EXPECT_EQ(bytes_of(latest->parameters.at("w")), bytes_of(at_step(5).parameters.at("w")));

  // A failed save deletes nothing.
  Checkpoint bad = at_step(6);
  bad.parameters.set("empty", Array());
  EXPECT_THROW(manager.save(bad), ValueError);
  EXPECT_EQ(manager.checkpoints().size(), 2u);
}

TEST(CheckpointManager, OrdersByStepAndKeepsWhatItJustSaved) {
  TempDir dir;
  CheckpointManager all(dir / "all", {.keep_last = 0, .prefix = "step_"});
  for (int64_t step : {int64_t{99}, int64_t{12345678901}, int64_t{7}}) all.save(at_step(step));
  EXPECT_EQ(
      names(all.checkpoints()),
      (std::vector<std::string>{"step_0000000007.ckpt", "step_0000000099.ckpt", "step_12345678901.ckpt"}));
  EXPECT_EQ(all.latest(), all.path_for(12345678901));

  CheckpointManager two(dir / "two", {.keep_last = 2});
  for (int64_t step : {10, 20, 15}) two.save(at_step(step));  // resumed from step 10 and saved 15
  EXPECT_EQ(names(two.checkpoints()),
            (std::vector<std::string>{"ckpt-0000000015.ckpt", "ckpt-0000000020.ckpt"}));
  CheckpointManager one(dir / "one", {.keep_last = 1});
  for (int64_t step : {10, 5}) one.save(at_step(step));
  EXPECT_EQ(names(one.checkpoints()), (std::vector<std::string>{"ckpt-0000000005.ckpt"}));
}

TEST(CheckpointManager, SavesATrainingRunAtTheOptimizerStep) {
  TempDir dir;
  CheckpointManager manager(dir / "ckpts");
  TrainingRun run(11);
  for (int i = 0; i < 3; ++i) run.step();
  const fs::path saved = manager.save(*run.model, *run.opt, run.loader.get(), {{"note", "three steps"}});
  EXPECT_EQ(saved, manager.path_for(3));
  const Checkpoint c = load_checkpoint(saved);
  EXPECT_EQ(c.metadata.at("note"), "three steps");
  EXPECT_EQ(snapshot(c.parameters), snapshot(run.model->parameters()));
  EXPECT_EQ(c.data_position, run.loader->position());
}

TEST(CheckpointManager, CleansLeftoversAndIgnoresOtherFiles) {
  TempDir dir;
  const fs::path folder = dir / "ckpts";
  fs::create_directories(folder);
  for (const char* name : {".ckpt-0000000003.ckpt.tmp-123-0", "notes.txt", "ckpt-abc.ckpt", ".other.tmp-1-0",
                           "ckpt-0000000002.ckpt.bak"})
    std::ofstream(folder / name) << "x";
  CheckpointManager manager(folder);
  EXPECT_FALSE(fs::exists(folder / ".ckpt-0000000003.ckpt.tmp-123-0"));
  for (const char* name : {"notes.txt", "ckpt-abc.ckpt", ".other.tmp-1-0", "ckpt-0000000002.ckpt.bak"})
    EXPECT_TRUE(fs::exists(folder / name)) << name;
  EXPECT_TRUE(manager.checkpoints().empty());
  for (int64_t step = 1; step <= 5; ++step) manager.save(at_step(step));
  EXPECT_EQ(manager.checkpoints().size(), 3u);
  EXPECT_TRUE(fs::exists(folder / "notes.txt"));

  // A damaged latest checkpoint is reported, not skipped.
  std::ofstream(manager.path_for(5), std::ios::trunc) << "garbage";
  EXPECT_THROW(manager.load_latest(), FormatError);
}

TEST(CheckpointManager, RejectsBadOptions) {
  TempDir dir;
  EXPECT_THROW(CheckpointManager(dir / "a", {.keep_last = -1}), ValueError);
  EXPECT_THROW(CheckpointManager(dir / "a", {.prefix = ""}), ValueError);
  EXPECT_THROW(CheckpointManager(dir / "a", {.prefix = "x/y"}), ValueError);
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(CheckpointManager(dir / "file"), RuntimeError);
  EXPECT_THROW(CheckpointManager(dir / "b").path_for(-1), ValueError);
}

}  // namespace
}  // namespace kiln::io
