#pragma once
// Training checkpoints: parameters, optimizer state, step, random state, data position and
// metadata in one binary file, written atomically and verified completely before use.
//
//   io::save_checkpoint("run/last.ckpt", model, opt, &loader, {{"model", "mlp-512"}});
//   // ... after a restart, with a freshly built model, optimizer and loader:
//   io::restore_checkpoint(io::load_checkpoint("run/last.ckpt"), model, opt, &loader);
//
// A save writes a temporary file ".<name>.tmp-<pid>-<n>" beside the target, fsyncs it, renames
// it over the target and fsyncs the folder: a crash leaves the old checkpoint or the new one,
// never a mix (only the temporary file may remain). CheckpointManager (checkpoint_manager.h)
// keeps the last N of a run in a folder.
//
// File format, version 2 (integers little-endian; XXH3 is XXH3_64bits of xxHash):
//   header   "KILNCKPT", u32 format version, u32 section count, u64 XXH3 of those 16 bytes
//   section  u8[8] tag (NUL-padded), u64 payload length, u64 XXH3 of the payload,
//            u64 XXH3 of these 24 bytes, then the payload
// Version 2 has five sections, in this order (version 1, also read, the first four):
//   "STATE"    i64 step, u8 has_key_state [u64 seed, u64 count], u8 has_position [i64 epoch,
//              i64 batch], u8 has_random_key [array]
//   "PARAMS"   tree (the parameters)
//   "OPTIM"    tree (the optimizer state)
//   "METADATA" u64 count, then count x (string key, string value)
//   "SCALER"   tree (optim::GradScaler's state; empty without one)
// Payloads are cereal portable-binary archives (so each starts with one endianness byte, 1):
//   tree     u64 count, then count x (string key, array)
//   string   u64 length, the bytes
//   array    u8 dtype code (bool 0, uint8 1, int8 2, int32 3, int64 4, uint32 5, float16 6,
//            bfloat16 7, float32 8, float64 9, int16 10, uint16 11, uint64 12), u8 rank, i64 dims[rank], the
//            elements row-major
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "kiln/core/array.h"
#include "kiln/core/random.h"
#include "kiln/io/data_loader.h"
#include "kiln/nn/module.h"
#include "kiln/nn/param_tree.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/optimizer.h"

namespace kiln::io {

/// The format version save_checkpoint writes; load_checkpoint reads versions 1 to this one.
inline constexpr uint32_t kCheckpointVersion = 2;

/// Everything needed to continue training exactly where it stopped.
struct Checkpoint {
  nn::ParamTree parameters;       ///< the model's parameters (Module::parameters())
  nn::ParamTree optimizer_state;  ///< Optimizer::state()
  int64_t step = 0;               ///< the training step (>= 0); make_checkpoint takes Optimizer::step()
  Array random_key;               ///< a key the training loop carries (any array), or empty
  /// Where the process-wide key sequence (random::next_key, used by Dropout) stood.
  std::optional<random::DefaultKeyState> default_key_state;
  std::optional<DataPosition> data_position;    ///< the batch the DataLoader delivers next
  std::map<std::string, std::string> metadata;  ///< free-form: configuration, git commit, ...
  nn::ParamTree grad_scaler_state;              ///< optim::GradScaler::state(), or empty
};

/// Writes `checkpoint` to `path` atomically (see the header comment): on any error the file that
/// was at `path` is untouched and no temporary file is left (the one exception: a failure to sync
/// the folder after the rename is reported too, with the new file in place). Evaluates every array
/// first; arrays of any dtype and layout (views included) are stored as their row-major values.
/// The folder must exist. Throws ValueError for a path naming no file, a negative step or data
/// position and an empty array in a tree (naming its key); RuntimeError (naming the path) when the
/// file cannot be written, synced or renamed, e.g. a missing folder, `path` being a folder, or a
/// full disk.
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);

/// Reads a checkpoint written by save_checkpoint; every checksum is verified before anything is
/// decoded. Arrays come back evaluated and row-contiguous, bit for bit as saved. Throws
/// RuntimeError (naming the path) when the file cannot be opened or read or is not a regular file
/// (e.g. a folder); FormatError naming the path and, where one is at fault, the section for an
/// empty file, a bad magic, an unsupported version, a checksum mismatch, truncation, trailing
/// bytes, or lengths, dtypes, shapes or keys a valid file cannot hold. Every length is checked
/// against the bytes left in its section before anything is allocated.
Checkpoint load_checkpoint(const std::filesystem::path& path);

/// The training state as a Checkpoint: model.parameters(), optimizer.state(), step =
/// optimizer.step(), random::default_key_state(), loader->position() when a loader is given, and
/// `metadata`. Nothing is evaluated or copied (Arrays are handles).
Checkpoint make_checkpoint(const nn::Module& model, const optim::Optimizer& optimizer,
                           const DataLoader* loader = nullptr,
                           std::map<std::string, std::string> metadata = {});

/// make_checkpoint with the loss scaler's state (float16 training) in grad_scaler_state.
Checkpoint make_checkpoint(const nn::Module& model, const optim::Optimizer& optimizer,
                           const optim::GradScaler& scaler, const DataLoader* loader = nullptr,
                           std::map<std::string, std::string> metadata = {});

/// save_checkpoint(path, make_checkpoint(model, optimizer, loader, metadata)).
void save_checkpoint(const std::filesystem::path& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const DataLoader* loader = nullptr,
                     std::map<std::string, std::string> metadata = {});

/// Applies `checkpoint` to a freshly built (or any compatible) model, optimizer and loader, all or
/// nothing: parameters through model.update(.., Verify::all), the state through
/// optimizer.set_state, the default key sequence through random::set_default_key_state (when the
/// checkpoint has one) and the position through loader->set_position (when a loader is given).
/// On any error nothing changes and the error of the failing part is rethrown: KeyError/
/// ShapeError/DtypeError from Module::update or Optimizer::set_state (naming the key), ValueError
/// when a loader is given but the checkpoint has no data position or one outside the loader's
/// epoch.
void restore_checkpoint(const Checkpoint& checkpoint, nn::Module& model, optim::Optimizer& optimizer,
                        DataLoader* loader = nullptr);
/// restore_checkpoint with the loss scaler too (GradScaler::set_state), all or nothing: a
/// checkpoint without grad_scaler_state is a KeyError naming it, and nothing changes.
void restore_checkpoint(const Checkpoint& checkpoint, nn::Module& model, optim::Optimizer& optimizer,
                        optim::GradScaler& scaler, DataLoader* loader = nullptr);

}  // namespace kiln::io
