#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file_impl.h"

namespace kiln::io::detail {
namespace {

namespace fs = std::filesystem;

// std::strerror may share one buffer between threads; this does not.
std::string error_text(int err) { return std::generic_category().message(err); }

fs::path folder_of(const fs::path& target) {
  return target.parent_path().empty() ? fs::path(".") : target.parent_path();
}

}  // namespace

TempFile::TempFile(const char* op, const fs::path& target) : op_(op), target_(target) {
  static std::atomic<uint64_t> counter{0};  // atomic: writers on several threads get distinct names
  const fs::path folder = folder_of(target);
  for (int attempt = 0;; ++attempt) {
    // O_EXCL: the name is this writer's alone. A leftover of a killed process whose pid was reused
    // can hold a name: take the next one.
    path_ = folder / fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(), counter++);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    const int err = errno;
    if (err != EEXIST || attempt == 100)
      throw RuntimeError::of(op_, "cannot create the temporary file", "{} for {}: {}", path_.string(),
                             target_.string(), error_text(err));
  }
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void TempFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail("cannot write", done < 0 ? errno : EIO);
    p += done;
    n -= static_cast<size_t>(done);
    size_ += done;
  }
}

void TempFile::write_at(int64_t offset, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::pwrite(fd_, p, std::min<size_t>(n, size_t{1} << 30), offset);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail("cannot write", done < 0 ? errno : EIO);
    p += done;
    n -= static_cast<size_t>(done);
    offset += done;
  }
}

void TempFile::commit() {
  // fsync before the rename: otherwise a crash can leave the new name pointing at an empty file.
  // The descriptor syncs the file whoever wrote it (through this descriptor or its path).
  if (::fsync(fd_) != 0) fail("cannot sync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(path_.c_str(), target_.c_str()) != 0) fail("cannot rename the temporary file over", errno);
  committed_ = true;
  // Without this the rename itself may be lost in a power cut, leaving the old file.
  const int dir = ::open(folder_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail("saved, but cannot open the folder to sync", errno);
  const int synced = ::fsync(dir);
  const int err = errno;
  ::close(dir);
  // EINVAL: the file system cannot sync folders (some network file systems); nothing to do.
  if (synced != 0 && err != EINVAL) fail("saved, but cannot sync the folder of", err);
}

void TempFile::fail(const char* what, int err) const {
  throw RuntimeError::of(op_, what, "{}: {}", target_.string(), error_text(err));
}

void replace_atomically(const char* op, const fs::path& target, const std::function<void(TempFile&)>& write) {
  TempFile file(op, target);
  write(file);
  file.commit();
}

}  // namespace kiln::io::detail
