#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/io/hdf5_impl.h"
#include "kiln/io/hdf5_isolated_impl.h"

namespace kiln::io::detail {
namespace {

namespace fs = std::filesystem;

// The wire form, in the host's byte order (both ends are one program on one machine):
//   u64 length of what follows, u32 kMagic, u8 ResultKind,
//   entries: u64 count, each: u32 name count, names (u64 length, bytes), u8 has_array,
//            array: u8 dtype, u32 rank, i64 dims[rank], u64 byte count, bytes
//   error:   u8 ErrorKind, u64 length, message bytes
//   u32 kEndMark
constexpr uint32_t kMagic = 0x5235484b;    // "KH5R"
constexpr uint32_t kEndMark = 0x454e4f44;  // "DONE"
enum class ResultKind : uint8_t { entries = 1, error = 2 };
enum class ErrorKind : uint8_t { format = 1, runtime, key, dtype, shape, value, bad_alloc, other };

// The exit status of a child that could not send its result (its pipe broke, or describing an
// error failed); 0 means it sent one.
constexpr int kNoResult = 70;

// ---------------------------------------------------------------- encoding (in the child)

class Encoder {
 public:
  explicit Encoder(const ByteSink& sink) : sink_(sink) {}
  template <class T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    sink_(&value, sizeof value);
  }
  void put_bytes(const void* data, size_t size) {
    put<uint64_t>(size);
    if (size > 0) sink_(data, size);
  }

 private:
  const ByteSink& sink_;
};

// Sends the length first so the parent can size its buffer once: one pass counts, one writes.
template <class Body>
void encode_framed(const ByteSink& sink, const Body& body) {
  uint64_t size = 0;
  const ByteSink count = [&size](const void*, size_t n) { size += n; };
  body(Encoder(count));
  sink(&size, sizeof size);
  body(Encoder(sink));
}

// ---------------------------------------------------------------- decoding (in the parent)

// Reads the wire form with every length checked against what is left; any inconsistency is a
// FormatError: a child whose heap libhdf5 corrupted may send anything.
class Decoder {
 public:
  Decoder(std::span<const std::byte> data, const std::string& path, const char* op)
      : data_(data), path_(path), op_(op) {}

  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_.data() + pos_, sizeof value);
    pos_ += sizeof value;
    return value;
  }
  std::span<const std::byte> get_bytes(const char* what) {
    const uint64_t size = get<uint64_t>(what);
    need(size, what);
    const auto out = data_.subspan(pos_, static_cast<size_t>(size));
    pos_ += static_cast<size_t>(size);
    return out;
  }
  size_t remaining() const { return data_.size() - pos_; }
  void finish() {
    if (get<uint32_t>("the end mark") != kEndMark) fail("no end mark");
    if (remaining() != 0) fail(fmt::format("{} bytes after the end mark", remaining()));
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError::of(op_,
                          "the process reading the file returned a malformed result (libhdf5 may have "
                          "corrupted its memory)",
                          "{}: {} at byte {}", path_, why, pos_);
  }

 private:
  void need(uint64_t size, const char* what) const {
    if (size > remaining()) fail(fmt::format("{} needs {} bytes, {} are left", what, size, remaining()));
  }

  std::span<const std::byte> data_;
  size_t pos_ = 0;
  const std::string& path_;
  const char* op_;
};

Array decode_array(Decoder& d) {
  const auto code = d.get<uint8_t>("a dtype");
  if (code >= kNumDtypes) d.fail(fmt::format("dtype code {}", code));
  const auto dtype = static_cast<Dtype>(code);
  const auto rank = d.get<uint32_t>("a rank");
  if (rank > static_cast<uint32_t>(kMaxDims)) d.fail(fmt::format("rank {}", rank));
  Shape shape;
  int64_t count = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    const auto dim = d.get<int64_t>("a dimension");
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) d.fail(fmt::format("dimension {}", dim));
    shape.push_back(dim);
  }
  int64_t size = 0;
  if (__builtin_mul_overflow(count, int64_t{size_of(dtype)}, &size))
    d.fail(fmt::format("{} elements of {}", count, dtype_name(dtype)));
  const auto bytes = d.get_bytes("an array");
  if (static_cast<int64_t>(bytes.size()) != size)
    d.fail(fmt::format("{} bytes for shape {} of {}", bytes.size(), shape_str(shape), dtype_name(dtype)));
  Array out = Array::empty_available(std::move(shape), dtype);
  if (size > 0) std::memcpy(out.raw_data(), bytes.data(), bytes.size());
  if (dtype == bool_) {  // a kiln bool is 0 or 1, whatever arrived
    auto* b = static_cast<uint8_t*>(out.raw_data());
    for (int64_t i = 0; i < count; ++i) b[i] = b[i] != 0;
  }
  return out;
}

[[noreturn]] void rethrow(ErrorKind kind, const std::string& message, const std::string& path,
                          const char* op) {
  switch (kind) {
    case ErrorKind::format:
      throw FormatError(message);
    case ErrorKind::runtime:
      throw RuntimeError(message);
    case ErrorKind::key:
      throw KeyError(message);
    case ErrorKind::dtype:
      throw DtypeError(message);
    case ErrorKind::shape:
      throw ShapeError(message);
    case ErrorKind::value:
      throw ValueError(message);
    case ErrorKind::bad_alloc:
      throw std::bad_alloc();
    case ErrorKind::other:
      break;
  }
  throw RuntimeError::of(op, "reading the file failed", "{}: {}", path, message);
}

// ---------------------------------------------------------------- the child

// Writes the wire form into the pipe: its many small pieces gathered into few writes, arrays of
// at least a buffer's size straight from where they are. Throws when the pipe fails.
class PipeWriter {
 public:
  explicit PipeWriter(int fd) : fd_(fd) { buffer_.reserve(kBufferSize); }
  void write(const void* data, size_t size) {
    if (buffer_.size() + size > kBufferSize) flush();
    if (size >= kBufferSize) {
      write_all(data, size);
    } else {
      const auto* p = static_cast<const char*>(data);
      buffer_.insert(buffer_.end(), p, p + size);
    }
  }
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

 private:
  static constexpr size_t kBufferSize = size_t{1} << 16;

  void write_all(const void* data, size_t size) const {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("write to the parent failed");
      p += n;
      size -= static_cast<size_t>(n);
    }
  }

  int fd_;
  std::vector<char> buffer_;
};

// A crash of the child is expected and reported by the parent, so it must not look like a crash
// of the program: the handlers it inherited (a sanitizer's, an application's crash reporter) give
// way to the default action, and no core is dumped.
void quiet_crashes() {
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP, SIGXCPU}) ::signal(sig, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);  // a broken pipe shows as a failed write, then as the exit status
  // Not PR_SET_DUMPABLE: that would hide /proc/<pid>/wchan from the parent (DeadlockWatch).
  // systemd-coredump and apport honour a zero limit too.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
}

// SIGXCPU once the child has used `seconds` of CPU time (a fresh process starts from zero),
// SIGKILL a second later should it ignore that.
void limit_cpu(int seconds) {
  rlimit limit{};
  ::getrlimit(RLIMIT_CPU, &limit);
  const auto soft = static_cast<rlim_t>(seconds);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max <= soft) return;  // a tighter limit is in force
  limit.rlim_cur = soft;
  limit.rlim_max = soft + 1;
  ::setrlimit(RLIMIT_CPU, &limit);
}

// The forked child: runs the reader, sends what it gave or threw, and leaves without running
// atexit handlers, destructors of globals or stdio flushes, which belong to the parent.
[[noreturn]] void child_main(int read_end, int write_end, int cpu_seconds, const Hdf5Lock& lock,
                             const IsolatedReader& read) {
  ::close(read_end);
  quiet_crashes();
  limit_cpu(cpu_seconds);
  int status = 0;
  try {
    PipeWriter pipe(write_end);
    const ByteSink to_parent = [&pipe](const void* data, size_t size) { pipe.write(data, size); };
    std::vector<RawEntry> entries;
    bool ok = false;
    try {
      entries = read(lock);
      ok = true;
    } catch (...) {
      encode_current_exception(to_parent);
    }
    if (ok) encode_entries(entries, to_parent);
    pipe.flush();
  } catch (...) {
    status = kNoResult;
  }
  ::_exit(status);
}

// ---------------------------------------------------------------- the parent

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A forked child has one thread, so once it waits on a futex it waits forever: another thread of
// the parent held that lock at the fork. glibc's malloc cannot do this (its fork takes malloc's
// locks), but the allocator of AddressSanitizer (gcc 12's libasan) can, when another thread was
// allocating at that moment. Such a child is found by its kernel wait channel and unchanging CPU
// time, killed, and the fork tried again. Without a readable /proc nothing is ever found stuck.
class DeadlockWatch {
 public:
  explicit DeadlockWatch(pid_t pid) : proc_(fmt::format("/proc/{}/", pid)) {}

  /// Called each time the child has been silent for a while; true once it has slept in a futex,
  /// using no CPU, for kChecks of those in a row.
  bool stuck() {
    const std::string stat = read_proc("stat");
    const size_t comm_end = stat.rfind(')');
    long long utime = -1, stime = -1;
    char state = '?';
    if (comm_end == std::string::npos ||
        std::sscanf(stat.c_str() + comm_end + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lld %lld",
                    &state, &utime, &stime) != 3 ||
        state != 'S' || read_proc("wchan").find("futex") == std::string::npos || utime + stime != ticks_) {
      ticks_ = utime + stime;
      checks_ = 0;
      return false;
    }
    return ++checks_ >= kChecks;
  }

 private:
  static constexpr int kChecks = 3;

  std::string read_proc(const char* name) const {
    const int fd = ::open((proc_ + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    char buf[512];
    ssize_t n;
    do {
      n = ::read(fd, buf, sizeof buf - 1);
    } while (n < 0 && errno == EINTR);
    ::close(fd);
    return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }

  std::string proc_;
  long long ticks_ = -2;
  int checks_ = 0;
};

struct ReadOutcome {
  int error = 0;       // errno of a failed read
  bool stuck = false;  // DeadlockWatch gave up on the child
};

// Reads the child's pipe to its end into `out`. The buffer is sized by the length the child
// announces, up to `reserve_limit` (the announcement is not trusted).
ReadOutcome read_to_end(int fd, pid_t pid, std::vector<std::byte>& out, uint64_t reserve_limit) {
  constexpr size_t kChunk = size_t{1} << 16;
  constexpr int kQuietMs = 50;
  DeadlockWatch watch(pid);
  size_t have = 0;
  bool reserved = false;
  while (true) {
    if (!reserved && have >= sizeof(uint64_t)) {
      uint64_t announced = 0;
      std::memcpy(&announced, out.data(), sizeof announced);
      try {
        out.reserve(sizeof announced + static_cast<size_t>(std::min(announced, reserve_limit)) + kChunk);
      } catch (const std::bad_alloc&) {  // the buffer grows as the bytes arrive instead
      }
      reserved = true;
    }
    pollfd ready{fd, POLLIN, 0};
    const int polled = ::poll(&ready, 1, kQuietMs);
    if (polled < 0 && errno != EINTR) return {errno, false};
    if (polled == 0 && watch.stuck()) return {0, true};
    if (polled <= 0) continue;
    out.resize(std::max(have + kChunk, out.capacity()));
    const ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      out.resize(have);
      return {error, false};
    }
    have += static_cast<size_t>(n);
  }
}

struct ChildExit {
  bool known;  // false when the child was reaped by the kernel (SIGCHLD ignored)
  int status;
};

ChildExit reap(pid_t pid) {
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return {true, status};
    if (r < 0 && errno == EINTR) continue;
    return {false, 0};
  }
}

// Kills the child and reaps it. Only while waitpid says it is still ours and running: with SIGCHLD
// ignored an exited child is reaped at once, and its pid may already name another process.
void stop(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != 0) return;
  ::kill(pid, SIGKILL);
  reap(pid);
}

// Whether `data` is a whole frame: the announced length matches and the end mark is there.
bool complete(std::span<const std::byte> data) {
  uint64_t announced = 0;
  uint32_t end = 0;
  if (data.size() < sizeof announced + sizeof end) return false;
  std::memcpy(&announced, data.data(), sizeof announced);
  std::memcpy(&end, data.data() + data.size() - sizeof end, sizeof end);
  return announced == data.size() - sizeof announced && end == kEndMark;
}

FormatError crashed(const char* op, const std::string& path, const std::string& how) {
  return FormatError::of(op, "libhdf5 crashed reading the file, which is malformed",
                         "{}: the reading process {}", path, how);
}

std::string signal_name(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* name = ::sigabbrev_np(sig)) return fmt::format("signal {} (SIG{})", sig, name);
#endif
  return fmt::format("signal {}", sig);
}

// What the result of a load of `path` can take: what its datasets may expand to, twice over for
// names and strings. Only sizes the buffer up front; a larger result still arrives.
uint64_t reserve_limit(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size > static_cast<uintmax_t>(std::numeric_limits<int64_t>::max())) return uint64_t{1} << 26;
  return 2 * static_cast<uint64_t>(read_budget(static_cast<int64_t>(size)));
}

}  // namespace

void encode_entries(const std::vector<RawEntry>& entries, const ByteSink& sink) {
  encode_framed(sink, [&](Encoder e) {
    e.put(kMagic);
    e.put(ResultKind::entries);
    e.put<uint64_t>(entries.size());
    for (const RawEntry& entry : entries) {
      e.put<uint32_t>(static_cast<uint32_t>(entry.names.size()));
      for (const std::string& name : entry.names) e.put_bytes(name.data(), name.size());
      e.put<uint8_t>(entry.array.has_value());
      if (!entry.array) continue;
      const RawArray& a = *entry.array;
      e.put(a.dtype);
      e.put<uint32_t>(static_cast<uint32_t>(a.shape.size()));
      for (int64_t d : a.shape) e.put(d);
      e.put_bytes(a.bytes.data(), a.bytes.size());
    }
    e.put(kEndMark);
  });
}

void encode_current_exception(const ByteSink& sink) {
  // Not a structured binding: clang 14 cannot capture those in the lambda below.
  const std::pair<ErrorKind, std::string> error = [&]() -> std::pair<ErrorKind, std::string> {
    // Most derived first: FormatError is a RuntimeError, Key/Dtype/ShapeError are ValueErrors.
    try {
      throw;
    } catch (const FormatError& e) {
      return {ErrorKind::format, e.what()};
    } catch (const RuntimeError& e) {
      return {ErrorKind::runtime, e.what()};
    } catch (const KeyError& e) {
      return {ErrorKind::key, e.what()};
    } catch (const DtypeError& e) {
      return {ErrorKind::dtype, e.what()};
    } catch (const ShapeError& e) {
      return {ErrorKind::shape, e.what()};
    } catch (const ValueError& e) {
      return {ErrorKind::value, e.what()};
    } catch (const std::bad_alloc& e) {
      return {ErrorKind::bad_alloc, e.what()};
    } catch (const std::exception& e) {
      return {ErrorKind::other, e.what()};
    } catch (...) {
      return {ErrorKind::other, "an exception that is not a std::exception"};
    }
  }();
  encode_framed(sink, [&](Encoder e) {
    e.put(kMagic);
    e.put(ResultKind::error);
    e.put(error.first);
    e.put_bytes(error.second.data(), error.second.size());
    e.put(kEndMark);
  });
}

std::vector<Entry> decode_result(std::span<const std::byte> data, const std::string& path, const char* op) {
  Decoder d(data, path, op);
  const auto announced = d.get<uint64_t>("the length");
  if (announced != d.remaining())
    d.fail(fmt::format("{} bytes announced, {} sent", announced, d.remaining()));
  if (d.get<uint32_t>("the magic") != kMagic) d.fail("no magic");
  const auto kind = d.get<uint8_t>("the kind");
  if (kind == static_cast<uint8_t>(ResultKind::error)) {
    const auto error = d.get<uint8_t>("the error kind");
    if (error < static_cast<uint8_t>(ErrorKind::format) || error > static_cast<uint8_t>(ErrorKind::other))
      d.fail(fmt::format("error kind {}", error));
    const auto text = d.get_bytes("the message");
    std::string message(reinterpret_cast<const char*>(text.data()), text.size());
    d.finish();
    rethrow(static_cast<ErrorKind>(error), message, path, op);
  }
  if (kind != static_cast<uint8_t>(ResultKind::entries)) d.fail(fmt::format("result kind {}", kind));
  const auto count = d.get<uint64_t>("the entry count");
  constexpr size_t kMinEntry = sizeof(uint32_t) + sizeof(uint8_t);
  if (count > d.remaining() / kMinEntry) d.fail(fmt::format("{} entries", count));
  std::vector<Entry> out;
  out.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    Entry entry;
    const auto names = d.get<uint32_t>("a name count");
    if (names > d.remaining() / sizeof(uint64_t)) d.fail(fmt::format("{} names", names));
    for (uint32_t n = 0; n < names; ++n) {
      const auto text = d.get_bytes("a name");
      entry.names.emplace_back(reinterpret_cast<const char*>(text.data()), text.size());
    }
    const auto has_array = d.get<uint8_t>("the array flag");
    if (has_array > 1) d.fail(fmt::format("array flag {}", has_array));
    if (has_array == 1) entry.array = decode_array(d);
    out.push_back(std::move(entry));
  }
  d.finish();
  return out;
}

int cpu_limit(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return 1;
  return static_cast<int>(std::min<uintmax_t>(1 + size / (uintmax_t{1} << 18), 1'000'000'000));
}

std::vector<Entry> run_isolated(const fs::path& path, const char* op, const IsolatedReader& read,
                                int cpu_seconds) {
  constexpr int kAttempts = 5;
  const std::string p = path.string();
  if (cpu_seconds <= 0) cpu_seconds = cpu_limit(path);
  const uint64_t limit = reserve_limit(path);
  for (int attempt = 1;; ++attempt) {
    int fds[2] = {-1, -1};
    pid_t pid = -1;
    {
      // Held across the fork, so no other thread of this process is inside libhdf5 then; the
      // child inherits it held by its one thread. Released once the child is on its way.
      Hdf5Lock lock;
      if (::pipe2(fds, O_CLOEXEC) != 0)
        throw RuntimeError::of(op, "cannot start the process that reads the file", "{}: pipe: {}", p,
                               std::strerror(errno));
      pid = ::fork();
      if (pid == 0) child_main(fds[0], fds[1], cpu_seconds, lock, read);
      const int fork_error = errno;
      // Closed before the lock is released: the next load's child must not inherit the write
      // end, or this read would not end before that child does.
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        throw RuntimeError::of(op, "cannot start the process that reads the file", "{}: fork: {}", p,
                               std::strerror(fork_error));
      }
    }
    std::vector<std::byte> data;
    ReadOutcome outcome;
    {
      const Fd from_child(fds[0]);
      try {
        outcome = read_to_end(from_child.get(), pid, data, limit);
      } catch (...) {  // no memory for the result: stop the child rather than leave it blocked
        stop(pid);
        throw;
      }
    }
    if (outcome.stuck) {
      stop(pid);
      if (attempt < kAttempts) continue;
      throw RuntimeError::of(op, "the process reading the file deadlocked",
                             "{}: {} times, on a lock another thread held when it was forked", p, attempt);
    }
    const ChildExit exit = reap(pid);
    if (exit.known && WIFSIGNALED(exit.status) && WTERMSIG(exit.status) == SIGXCPU)
      throw FormatError::of(op, "libhdf5 did not finish reading the file, which is malformed",
                            "{}: the reading process used up its {} s of CPU time (libhdf5 loops forever on "
                            "some malformed files)",
                            p, cpu_seconds);
    if (exit.known && WIFSIGNALED(exit.status))
      throw crashed(op, p, "was killed by " + signal_name(WTERMSIG(exit.status)));
    if (exit.known && (!WIFEXITED(exit.status) || WEXITSTATUS(exit.status) != 0))
      throw crashed(op, p,
                    fmt::format("exited with status {} (a sanitizer's report, if any, is on stderr)",
                                WIFEXITED(exit.status) ? WEXITSTATUS(exit.status) : -1));
    if (outcome.error != 0)
      throw RuntimeError::of(op, "cannot read the result of the process that reads the file", "{}: {}", p,
                             std::strerror(outcome.error));
    if (!complete(data)) throw crashed(op, p, "ended without sending its result");
    return decode_result(data, p, op);
  }
}

}  // namespace kiln::io::detail
