#pragma once
// CheckpointManager: the checkpoints of one training run in a folder, one file per step, the last
// N kept.
//
//   io::CheckpointManager checkpoints("run/checkpoints", {.keep_last = 3});
//   if (auto c = checkpoints.load_latest()) io::restore_checkpoint(*c, model, opt, &loader);
//   ...
//   if (step % 1000 == 0) checkpoints.save(model, opt, &loader);  // run/checkpoints/ckpt-0000001000.ckpt
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/checkpoint.h"

namespace kiln::io {

/// Options of CheckpointManager, in declaration order (designated initializers must follow it).
struct CheckpointManagerOptions {
  int keep_last = 3;             ///< checkpoints kept after a save; 0 keeps all; >= 0
  std::string prefix = "ckpt-";  ///< file names are <prefix><step, at least 10 digits>.ckpt
};

/// The checkpoints of a run in one folder: "<prefix><step>.ckpt", written by save_checkpoint
/// (atomically). Ordered by step, not by time: latest() is the highest step. After each save the
/// keep_last highest steps stay and older files are deleted, the one just saved always kept (so
/// saving below an existing step, after resuming from an older checkpoint, keeps the higher ones:
/// delete them first if that run is abandoned). Files of other names are left alone. Use one
/// manager per folder at a time; not thread-safe.
class CheckpointManager {
 public:
  /// Creates `folder` (and its parents) when missing, and removes temporary files that saves of
  /// this prefix left there when killed (".<prefix>*.tmp-*"). Throws ValueError for keep_last < 0
  /// or a prefix that is empty or holds '/', RuntimeError when the folder cannot be created.
  explicit CheckpointManager(std::filesystem::path folder, CheckpointManagerOptions options = {});

  const std::filesystem::path& folder() const { return folder_; }
  const CheckpointManagerOptions& options() const { return options_; }

  /// The file of `step`: folder / "<prefix><step as 10 digits or more>.ckpt". Throws ValueError
  /// for a negative step.
  std::filesystem::path path_for(int64_t step) const;

  /// Writes `checkpoint` to path_for(checkpoint.step) (replacing one of the same step), then deletes
  /// checkpoints beyond keep_last, only once the new one is in place. Returns its path. Throws
  /// what save_checkpoint throws; then no checkpoint was deleted. A failure to delete an old file
  /// is not reported: it is retried after the next save.
  std::filesystem::path save(const Checkpoint& checkpoint);
  /// save(make_checkpoint(model, optimizer, loader, metadata)): the step is optimizer.step().
  std::filesystem::path save(const nn::Module& model, const optim::Optimizer& optimizer,
                             const DataLoader* loader = nullptr,
                             std::map<std::string, std::string> metadata = {});

  /// Every checkpoint file in the folder, lowest step first. Throws RuntimeError when the folder
  /// cannot be listed.
  std::vector<std::filesystem::path> checkpoints() const;
  /// The checkpoint with the highest step, or nullopt when there is none.
  std::optional<std::filesystem::path> latest() const;
  /// load_checkpoint(*latest()), or nullopt when there is none. Throws what load_checkpoint throws
  /// (a damaged latest file is reported, not skipped).
  std::optional<Checkpoint> load_latest() const;

 private:
  // (step, path) of every checkpoint file, lowest step first.
  std::vector<std::pair<int64_t, std::filesystem::path>> list() const;
  void prune(const std::filesystem::path& keep);

  std::filesystem::path folder_;
  CheckpointManagerOptions options_;
};

}  // namespace kiln::io
