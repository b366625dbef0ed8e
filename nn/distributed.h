#pragma once
// Data-parallel training helpers over a distributed::Group: gradient averaging in few messages,
// equal starting parameters, a replica check, and checkpoints written by rank 0 and read by all.
//
//   auto group = kiln::distributed::init();
//   nn::broadcast_parameters(model, 0, group);                   // every replica starts as rank 0's
//   io::DataLoader loader(data, {.batch_size = 64, ..., .shard_rank = group.rank(),
//                                .shard_count = group.size()});  // each rank its part of a batch
//   auto [loss, grads] = step(batch[0], batch[1]);
//   opt.update(model, nn::average_gradients(grads, group));      // the same update on every rank
//
// Every function here is collective: all ranks call it, in the same order (distributed.h).
#include <cstdint>
#include <filesystem>
#include <optional>

#include "kiln/core/distributed/distributed.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/nn/module.h"
#include "kiln/nn/param_tree.h"

namespace kiln::nn {

/// Options of average_gradients, in declaration order (designated initializers must follow it).
struct AverageGradientsOptions {
  /// The most bytes packed into one message: arrays of one dtype are concatenated, in tree order,
  /// into buffers up to this size, one all_sum each (an array larger than it goes alone). >= 1.
  int64_t bucket_bytes = int64_t{32} << 20;
  /// First compare the trees' keys, shapes and dtypes across ranks (16 bytes per rank), so a
  /// mismatch is an error on every rank rather than wrong sums or a timeout.
  bool check_trees = true;
};

/// The mean of `grads` over the ranks of `group` (default: distributed::init()), same keys and
/// order, lazy like any op: evaluating the result communicates. A group of one returns `grads`.
/// Each rank sends exactly the gradients' bytes (plus 16 with check_trees); see
/// distributed::Group::bytes_sent. Throws RuntimeError on every rank when the ranks' trees differ
/// (naming this rank's arrays), ValueError for an invalid array or bucket_bytes < 1, DtypeError
/// for a bool array.
ParamTree average_gradients(const ParamTree& grads, std::optional<distributed::Group> group = std::nullopt,
                            AverageGradientsOptions options = {});

/// Makes every rank's trainable and frozen parameters equal to rank `root`'s (call once after
/// building the model, before training). Evaluates. Throws RuntimeError on every rank when the
/// models' parameter trees differ, ValueError for a root outside the group.
void broadcast_parameters(Module& model, int root = 0,
                          std::optional<distributed::Group> group = std::nullopt);

/// Checks that `tree` holds bit-identical values on every rank (replicas that stayed in step).
/// Evaluates. Throws RuntimeError on every rank naming the first keys that differ, or when the
/// trees' keys, shapes or dtypes differ.
void check_replicas(const ParamTree& tree, std::optional<distributed::Group> group = std::nullopt);

/// Writes `checkpoint` (io::save_checkpoint) on rank 0 only; returns on every rank once the file
/// is in place, so the ranks can go on (or load it) together. Every rank evaluates the
/// checkpoint's arrays first (their graphs may hold collectives). Throws on every rank when rank
/// 0's write fails: there the write's own error, elsewhere RuntimeError naming the path.
void save_checkpoint_from_rank0(const std::filesystem::path& path, const io::Checkpoint& checkpoint,
                                std::optional<distributed::Group> group = std::nullopt);
/// The same through a CheckpointManager (the path of its step, older files pruned) on rank 0;
/// returns the path on every rank. Every rank builds its manager on the same folder before
/// training starts (its constructor removes temporary files that killed saves left behind).
std::filesystem::path save_checkpoint_from_rank0(io::CheckpointManager& manager,
                                                 const io::Checkpoint& checkpoint,
                                                 std::optional<distributed::Group> group = std::nullopt);

/// Loads `path` on every rank (a folder all ranks see, e.g. a shared file system) and checks that
/// every rank read the same step and parameters. Throws on every rank when any rank fails: there
/// load_checkpoint's error, elsewhere RuntimeError naming the failed ranks; RuntimeError when the
/// ranks read different checkpoints.
io::Checkpoint load_checkpoint_on_every_rank(const std::filesystem::path& path,
                                             std::optional<distributed::Group> group = std::nullopt);
/// The checkpoint of rank 0's latest step (manager.latest() on rank 0), loaded on every rank as
/// above; nullopt on every rank when rank 0 has none.
std::optional<io::Checkpoint> load_latest_on_every_rank(
    const io::CheckpointManager& manager, std::optional<distributed::Group> group = std::nullopt);

}  // namespace kiln::nn
