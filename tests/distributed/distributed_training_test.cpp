// nn/distributed.h: average_gradients (values, buckets, bytes sent, mismatched trees), replicas that
// stay identical while training, broadcast_parameters, check_replicas, and checkpoints written by
// rank 0 and loaded by all. Runs as one process and, with KILN_MPI, on two ranks under mpirun.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "distributed/distributed_test_util.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/distributed.h"
#include "kiln/nn/losses.h"
#include "kiln/nn/value_and_grad.h"
#include "kiln/optim/sgd.h"
#include "support/error_of.h"

namespace kiln::nn {
namespace {

using distributed::Group;
using test::error_of;
using test::expect_near;
using test::rank_input;
using test::values;

// Keys, shapes and dtypes chosen so that a bucket cap of 100 bytes gives six buckets: float32
// {a, c} (64 B), {big} (256 B, over the cap alone), {f}; float64 {b}; float16 {d}; bfloat16 {e}.
struct Entry {
  const char* key;
  Shape shape;
  Dtype dtype;
};
const std::vector<Entry> kGradients = {{"a", {3, 4}, float32}, {"b", {5}, float64}, {"c", {2, 2}, float32},
                                       {"big", {64}, float32}, {"d", {7}, float16}, {"e", {7}, bfloat16},
                                       {"f", {3}, float32}};

ParamTree rank_gradients(int rank) {
  ParamTree t;
  for (size_t i = 0; i < kGradients.size(); ++i)
    t.set(kGradients[i].key, rank_input(rank, kGradients[i].shape, kGradients[i].dtype, 20 + i));
  return t;
}

TEST(AverageGradients, MeanOverRanksInFewMessages) {
  const Group g = distributed::init();
  const ParamTree grads = rank_gradients(g.rank());
  const int64_t bytes_before = g.bytes_sent(), calls_before = g.collectives();
  const ParamTree avg = average_gradients(grads, g, {.bucket_bytes = 100});
  nn::eval(avg);
  ASSERT_EQ(avg.keys(), grads.keys());
  for (size_t i = 0; i < kGradients.size(); ++i) {
    const Entry& e = kGradients[i];
    SCOPED_TRACE(e.key);
    EXPECT_EQ(avg.at(e.key).shape(), e.shape);
    EXPECT_EQ(avg.at(e.key).dtype(), e.dtype);
    std::vector<double> want(static_cast<size_t>(shape_size(e.shape)), 0.0);
    for (int r = 0; r < g.size(); ++r) {
      const std::vector<double> v = values(rank_input(r, e.shape, e.dtype, 20 + i));
      for (size_t k = 0; k < v.size(); ++k) want[k] += v[k] / g.size();
    }
    expect_near(values(avg.at(e.key)), want, test::tolerance(e.dtype) / 4);
  }
  int64_t grad_bytes = 0;
  for (const auto& [key, v] : grads) grad_bytes += v.nbytes();
  if (g.size() == 1) {  // nothing to average: the same arrays, nothing sent
    EXPECT_EQ(avg.at("a").id(), grads.at("a").id());
    EXPECT_EQ(g.bytes_sent(), bytes_before);
  } else {  // the gradients' bytes plus 16 for the trees' digest; six buckets plus the digest
    EXPECT_EQ(g.bytes_sent() - bytes_before, grad_bytes + 16);
    EXPECT_EQ(g.collectives() - calls_before, 7);
  }
}

TEST(AverageGradients, OneMessagePerDtypeUnderTheDefaultCap) {
  const Group g = distributed::init();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  const int64_t calls_before = g.collectives();
  nn::eval(average_gradients(rank_gradients(g.rank()), g));
  EXPECT_EQ(g.collectives() - calls_before, 4 + 1);  // float32, float64, float16, bfloat16; the digest
}

TEST(AverageGradients, BadArguments) {
  const Group g = distributed::init();
  EXPECT_THROW(average_gradients(rank_gradients(g.rank()), g, {.bucket_bytes = 0}), ValueError);
  ParamTree bad;
  bad.set("w", Array());
  EXPECT_THROW(average_gradients(bad, g), ValueError);
}

// Rank 1 has another shape for "c" and an extra key: every rank gets the error (none hangs or sums
// garbage), and the group still works afterwards.
TEST(AverageGradients, DifferentTreesAreAnErrorOnEveryRank) {
  const Group g = distributed::init();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  ParamTree grads = rank_gradients(g.rank());
  if (g.rank() == 1) {
    grads.set("c", zeros({4}));
    grads.set("extra", ones({2}));
  }
  const std::string msg = error_of<RuntimeError>([&] { nn::eval(average_gradients(grads, g)); });
  EXPECT_NE(msg.find("[average_gradients] the ranks' trees differ"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("this rank ({}) has a (3,4) float32", g.rank())), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1: 8 arrays"), std::string::npos) << msg;
  EXPECT_EQ(distributed::all_sum(Array(1), g).item<int32_t>(), g.size());
}

models::Mlp small_mlp() { return models::Mlp({.in_features = 6, .hidden = {8}, .out_features = 3}); }

// Each rank trains on its own data; with averaged gradients every replica takes the same step, so
// the parameters stay bit-identical, checked after every step by check_replicas and by comparing
// the gathered values directly. The averaged gradient is also the gradient of the whole batch.
TEST(DataParallel, ReplicasStayIdenticalAfterEveryStep) {
  const Group g = distributed::init();
  random::seed(3);
  models::Mlp model = small_mlp();
  broadcast_parameters(model, 0, g);
  optim::SGD opt({.lr = 0.1});
  const auto loss_of = [&](const Array& x, const Array& y) { return cross_entropy(model(x), y); };
  auto step = value_and_grad(model, loss_of);
  const ParamTree initial = model.parameters();
  for (int s = 0; s < 3; ++s) {
    const Array x = rank_input(g.rank(), {5, 6}, float32, 40 + s);
    const Array y = astype(rank_input(g.rank(), {5}, uint32, 50 + s) * 3 / 16, int32);
    auto [loss, grads] = step(x, y);
    const ParamTree avg = average_gradients(grads, g);
    // The global batch (every rank's 5 samples) has the mean of the ranks' mean-loss gradients.
    std::vector<Array> xs, ys;
    for (int r = 0; r < g.size(); ++r) {
      xs.push_back(rank_input(r, {5, 6}, float32, 40 + s));
      ys.push_back(astype(rank_input(r, {5}, uint32, 50 + s) * 3 / 16, int32));
    }
    auto [global_loss, global_grads] = step(concatenate(xs, 0), concatenate(ys, 0));
    for (const auto& [key, v] : avg) expect_near(values(v), values(global_grads.at(key)), 1e-6);
    opt.update(model, avg);
    const ParamTree params = model.parameters();
    nn::eval({&params, &opt.state()});
    check_replicas(params, g);
    for (const auto& [key, v] : params) {
      const std::vector<double> all = values(distributed::all_gather(reshape(v, {v.size()}), g));
      for (int r = 1; r < g.size(); ++r)
        for (int64_t k = 0; k < v.size(); ++k)
          ASSERT_EQ(all[r * v.size() + k], all[k]) << key << " rank " << r;
    }
  }
  EXPECT_NE(values(model.parameters().at("layers.0.weight")), values(initial.at("layers.0.weight")));
}

TEST(DataParallel, BroadcastParametersCopiesTheRootsModel) {
  const Group g = distributed::init();
  const int root = g.size() - 1;
  random::seed(100 + g.rank());  // every rank initializes differently
  models::Mlp model = small_mlp();
  const ParamTree mine = model.parameters();
  nn::eval(mine);
  broadcast_parameters(model, root, g);
  check_replicas(model.parameters(), g);
  if (g.rank() == root) {
    for (const auto& [key, v] : mine) EXPECT_EQ(values(model.parameters().at(key)), values(v)) << key;
  }
  EXPECT_THROW(broadcast_parameters(model, g.size(), g), ValueError);
}

TEST(DataParallel, CheckReplicasNamesWhatDiffers) {
  const Group g = distributed::init();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  ParamTree t;
  t.set("layers.0.weight", rank_input(0, {2, 2}, float32, 60));
  t.set("layers.1.bias", rank_input(0, {3}, float32, 61) + (g.rank() == 1 ? 1e-3f : 0.0f));
  const std::string msg = error_of<RuntimeError>([&] { check_replicas(t, g); });
  EXPECT_NE(msg.find("the replicas differ: layers.1.bias (rank 0 vs rank 1)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("layers.0.weight"), std::string::npos) << msg;
  if (g.rank() == 1) t.set("extra", zeros({1}));
  EXPECT_NE(error_of<RuntimeError>([&] { check_replicas(t, g); }).find("trees differ"), std::string::npos);
}

// A folder every rank sees: named after rank 0's process id, created by rank 0.
std::filesystem::path shared_folder(const Group& g) {
  const auto pid = distributed::broadcast(Array(static_cast<int64_t>(getpid())), 0, g).item<int64_t>();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("kiln_dist_ckpt_{}", pid);
  if (g.rank() == 0) std::filesystem::create_directories(dir);
  g.barrier();
  return dir;
}

TEST(DistributedCheckpoint, WrittenByRankZeroAndLoadedByEveryRank) {
  const Group g = distributed::init();
  const std::filesystem::path dir = shared_folder(g);
  random::seed(7);
  models::Mlp model = small_mlp();
  broadcast_parameters(model, 0, g);
  optim::SGD opt({.lr = 0.1, .momentum = 0.9});
  opt.init(model.parameters());
  io::Checkpoint c = io::make_checkpoint(model, opt);
  c.step = 3;
  save_checkpoint_from_rank0(dir / "one.ckpt", c, g);
  EXPECT_TRUE(std::filesystem::exists(dir / "one.ckpt"));  // on every rank, once it returns
  const io::Checkpoint back = load_checkpoint_on_every_rank(dir / "one.ckpt", g);
  EXPECT_EQ(back.step, 3);
  for (const auto& [key, v] : c.parameters) EXPECT_EQ(values(back.parameters.at(key)), values(v)) << key;

  io::CheckpointManager manager(dir / "run", {.keep_last = 2});
  EXPECT_FALSE(load_latest_on_every_rank(manager, g).has_value());
  for (int64_t step : {5, 9}) {
    c.step = step;
    EXPECT_EQ(save_checkpoint_from_rank0(manager, c, g), manager.path_for(step));
  }
  const std::optional<io::Checkpoint> latest = load_latest_on_every_rank(manager, g);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 9);

  g.barrier();
  if (g.rank() == 0) std::filesystem::remove_all(dir);
}

TEST(DistributedCheckpoint, AFailureOnOneRankIsAnErrorOnEveryRank) {
  const Group g = distributed::init();
  const std::filesystem::path dir = shared_folder(g);
  random::seed(8);
  models::Mlp model = small_mlp();
  optim::SGD opt({.lr = 0.1});
  const io::Checkpoint c = io::make_checkpoint(model, opt);
  // Rank 0 cannot write into a missing folder.
  const std::string save_error =
      error_of<RuntimeError>([&] { save_checkpoint_from_rank0(dir / "missing" / "x.ckpt", c, g); });
  if (g.rank() == 0)
    EXPECT_NE(save_error.find("x.ckpt"), std::string::npos) << save_error;
  else
    EXPECT_NE(save_error.find("failed on another rank: rank(s) 0"), std::string::npos) << save_error;
  // The last rank looks for another file, which is not there.
  save_checkpoint_from_rank0(dir / "good.ckpt", c, g);
  const std::filesystem::path path = dir / (g.rank() == g.size() - 1 ? "absent.ckpt" : "good.ckpt");
  const std::string load_error = error_of<RuntimeError>([&] { load_checkpoint_on_every_rank(path, g); });
  if (g.rank() == g.size() - 1)
    EXPECT_NE(load_error.find("absent.ckpt"), std::string::npos) << load_error;
  else
    EXPECT_NE(load_error.find(fmt::format("rank(s) {}", g.size() - 1)), std::string::npos) << load_error;
  g.barrier();
  if (g.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::nn
