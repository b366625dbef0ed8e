// Data-parallel training of a Fashion-MNIST MLP over MPI (docs/distributed.md). Every rank holds a
// replica of the model and loads its own part of each global batch (DataLoader sharding); the
// gradients are averaged over the ranks (nn::average_gradients), so every replica takes the same
// step, and the loss curve of N ranks of batch B is that of one process of batch N * B.
//
//   mpirun -np 2 build/release/examples/train_distributed --batch-size 64 --epochs 1
//   build/release/examples/train_distributed --batch-size 128 --epochs 1   # the same curve, one process
//
// Rank 0 prints the loss of the global batch ("step <n> loss <x>", every --log-every steps), the
// test accuracy after each epoch, and at the end steps/s and the bytes each rank sent per step.
// With --checkpoint <dir>, rank 0 writes a checkpoint after each epoch and a new run resumes from
// the latest one on every rank.
#include <fmt/format.h>
#include <kiln/kiln.h>
#include <kiln/models/mlp.h>
#include <kiln/nn/distributed.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace {

using kiln::Array;
namespace distributed = kiln::distributed;
namespace io = kiln::io;
namespace nn = kiln::nn;

constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;  // over the training set, in [0, 1] units

struct Settings {
  int epochs = 1;
  int64_t batch_size = 64;  // per rank
  std::vector<int64_t> hidden = {512, 512};
  double lr = 0.05;
  uint64_t seed = 0;
  int64_t log_every = 10;
  int64_t max_steps = 0;
  std::string checkpoint;
};

io::BatchTransform normalize_images() {
  return [](std::vector<Array> fields) {
    fields[0] = (kiln::astype(fields[0], kiln::float32) * (1.0 / 255.0) - kPixelMean) * (1.0 / kPixelStd);
    return fields;
  };
}

// Accuracy on the test split, each rank scoring its shard, summed over the ranks.
double test_accuracy(const kiln::models::Mlp& model, const io::Mnist& split,
                     const distributed::Group& group) {
  io::DataLoader loader({split.images, split.labels}, {.batch_size = 1000,
                                                       .transform = normalize_images(),
                                                       .shard_rank = group.rank(),
                                                       .shard_count = group.size()});
  Array correct = Array(int64_t{0});
  for (const auto& batch : loader.epoch(0)) {
    const Array hits = kiln::equal(kiln::argmax(model(batch[0]), -1), kiln::astype(batch[1], kiln::int32));
    correct = correct + kiln::sum(kiln::astype(hits, kiln::int64));
  }
  return static_cast<double>(distributed::all_sum(correct, group).item<int64_t>()) /
         static_cast<double>(split.size());
}

int train(const io::Mnist& train_set, const io::Mnist& test_set, const Settings& s) {
  const distributed::Group group = distributed::init();
  const bool lead = group.rank() == 0;
  kiln::random::seed(s.seed);
  kiln::models::Mlp model({.in_features = 784, .hidden = s.hidden, .out_features = 10});
  nn::broadcast_parameters(model, 0, group);  // equal replicas whatever each rank drew
  kiln::optim::SGD opt({.lr = s.lr, .momentum = 0.9});
  // drop_last: every rank gets batch_size samples each step, so the ranks' mean losses weigh alike.
  io::DataLoader loader({train_set.images, train_set.labels}, {.batch_size = s.batch_size,
                                                               .shuffle = true,
                                                               .seed = s.seed,
                                                               .drop_last = true,
                                                               .transform = normalize_images(),
                                                               .shard_rank = group.rank(),
                                                               .shard_count = group.size()});
  if (loader.batches_per_epoch() == 0)
    throw kiln::ValueError::of("train_distributed", "fewer training images than one global batch",
                               "{} images, {} ranks of --batch-size {}", train_set.size(), group.size(),
                               s.batch_size);
  std::optional<io::CheckpointManager> checkpoints;
  int first_epoch = 0;
  if (!s.checkpoint.empty()) {
    checkpoints.emplace(s.checkpoint);
    if (auto c = nn::load_latest_on_every_rank(*checkpoints, group)) {
      io::restore_checkpoint(*c, model, opt, &loader);
      first_epoch = static_cast<int>(loader.position().epoch);
      if (lead) fmt::print("resumed from step {} ({})\n", c->step, s.checkpoint);
    }
  }
  if (lead)
    fmt::print("{} rank(s) ({}), batch {} per rank ({} global), {} steps per epoch\n", group.size(),
               group.backend(), s.batch_size, s.batch_size * group.size(), loader.batches_per_epoch());

  auto step = nn::value_and_grad(model, [&](const Array& images, const Array& labels) {
    return nn::cross_entropy(model(images), kiln::astype(labels, kiln::int32));
  });
  const int64_t gradient_bytes = [&] {
    int64_t n = 0;
    for (const auto& [key, p] : model.trainable_parameters()) n += p.nbytes();
    return n;
  }();
  int64_t steps = 0, timed_steps = 0, timed_bytes = 0;
  double timed_seconds = 0;
  for (int e = first_epoch; e < s.epochs; ++e) {
    for (const auto& batch : loader.epoch(e)) {
      const auto start = std::chrono::steady_clock::now();
      const int64_t bytes_before = group.bytes_sent();
      auto [loss, grads] = step(batch[0], batch[1]);
      opt.update(model, nn::average_gradients(grads, group));
      const Array global_loss = distributed::all_mean(loss, group);
      // One eval per step: the collectives run in the same order on every rank (distributed.h).
      const nn::ParamTree params = model.parameters();
      std::vector<Array> outputs = params.values();
      for (const Array& a : opt.state().values()) outputs.push_back(a);
      outputs.push_back(global_loss);
      kiln::eval(outputs);
      ++steps;
      if (steps > 1) {  // the first step pays for warm-up (allocations, MPI connections)
        timed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        timed_bytes += group.bytes_sent() - bytes_before;
        ++timed_steps;
      }
      // The loss is in `outputs`: reading it here communicates nothing more.
      if (lead && (opt.step() % s.log_every == 0 || steps == 1))
        fmt::print("step {} loss {:.8g}\n", opt.step(), global_loss.item<float>());
      if (s.max_steps > 0 && steps >= s.max_steps) break;
    }
    const double accuracy = test_accuracy(model, test_set, group);
    if (lead) fmt::print("epoch {}: test accuracy {:.2f}%\n", e + 1, 100 * accuracy);
    if (checkpoints) {
      const auto path =
          nn::save_checkpoint_from_rank0(*checkpoints, io::make_checkpoint(model, opt, &loader), group);
      if (lead) fmt::print("checkpoint: {}\n", path.string());
    }
    if (s.max_steps > 0 && steps >= s.max_steps) break;
  }
  nn::check_replicas(model.parameters(), group);  // the replicas never drifted apart
  if (lead && timed_steps > 0)
    fmt::print(
        "{} rank(s): {:.2f} steps/s, {:.0f} samples/s; sent per step and rank: {} bytes ({} of gradients)\n",
        group.size(), static_cast<double>(timed_steps) / timed_seconds,
        static_cast<double>(timed_steps * s.batch_size * group.size()) / timed_seconds,
        timed_bytes / timed_steps, gradient_bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel training of a Fashion-MNIST MLP (run under mpirun for several ranks)"};
  Settings s;
  std::string data_dir;
  int64_t limit = 0;
  app.add_option("--epochs", s.epochs, "passes over the training set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", s.batch_size, "examples per step and rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--hidden", s.hidden, "hidden layer widths")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", s.lr, "SGD learning rate (momentum 0.9)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", s.seed, "initialization and shuffling seed")->capture_default_str();
  app.add_option("--log-every", s.log_every, "steps between printed losses")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", s.max_steps, "stop after this many steps (0: run every epoch)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint", s.checkpoint,
                 "folder of checkpoints: resume from the latest, write one per epoch");
  app.add_option("--limit", limit, "use only the first N training and test images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--data", data_dir, "folder of the IDX files (default: the Debian package's)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (data_dir.empty()) data_dir = io::fashion_mnist_dir();
    const auto train_set = io::load_mnist(data_dir, io::Split::train).head(limit);
    const auto test_set = io::load_mnist(data_dir, io::Split::test).head(limit);
    return train(train_set, test_set, s);
  } catch (const std::exception& e) {  // kiln errors, and std::filesystem's for --checkpoint
    fmt::print(stderr, "train_distributed: {}\n", e.what());
    return 1;
  }
}
