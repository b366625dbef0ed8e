#pragma once
// Internal: replacing a file atomically, for every file kiln writes (checkpoints, HDF5 weights,
// metrics CSV and SVG). A reader of the target sees the old file or the new one, whole, never a mix,
// even across a crash or a power cut. Not installed (*_impl.h); tests may include it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>

namespace kiln::io::detail {

/// The temporary file replace_atomically hands its writer: created empty beside the target under a
/// name no other writer uses (".<name>.tmp-<pid>-<n>"), and open for writing. A writer either writes
/// through write()/write_at(), or opens path() itself (libhdf5 does), truncating it.
class TempFile {
 public:
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();

  const std::filesystem::path& path() const { return path_; }
  /// Bytes appended by write() so far.
  int64_t size() const { return size_; }
  /// Appends `n` bytes. Throws RuntimeError naming the target (e.g. a full disk).
  void write(const void* data, size_t n);
  /// Overwrites `n` bytes at `offset`, which must lie within what was written. Throws RuntimeError.
  void write_at(int64_t offset, const void* data, size_t n);

 private:
  friend void replace_atomically(const char*, const std::filesystem::path&,
                                 const std::function<void(TempFile&)>&);
  TempFile(const char* op, const std::filesystem::path& target);
  void commit();
  [[noreturn]] void fail(const char* what, int err) const;

  const char* op_;
  std::filesystem::path target_, path_;
  int fd_ = -1;
  int64_t size_ = 0;
  bool committed_ = false;
};

/// Replaces `target` with what `write` puts into a TempFile: the file is fsync'd, renamed over
/// `target`, and the folder fsync'd so that the rename survives a power cut. When `write` throws,
/// or creating, writing, syncing or renaming fails (a missing folder, `target` being a folder, a
/// full disk), the temporary file is removed, `target` is untouched, and the error propagates (a
/// RuntimeError "[op] <step>: <target>: <reason>" for the steps here). The one exception: a failure
/// to sync the folder after the rename is reported too ("saved, but ..."), with the new file in place.
void replace_atomically(const char* op, const std::filesystem::path& target,
                        const std::function<void(TempFile&)>& write);

}  // namespace kiln::io::detail
