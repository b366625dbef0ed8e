#pragma once
// Internal: runs the libhdf5 part of a load in a forked child process, so that a file that crashes
// libhdf5 itself becomes a FormatError instead of killing the program. Not installed (*_impl.h);
// it does not include <hdf5.h>, so tests may include it.
//
// Why a process: libhdf5 crashes on some malformed files inside its own parsing (the fuzzer found a
// SEGV freeing garbage in H5G__compact_get_name_by_idx within seconds, and libhdf5 has many open
// CVEs of this kind). No check of ours can rule that out, and nothing can be recovered inside a
// process whose heap libhdf5 has corrupted. A child that crashes takes nothing with it.
//
// How: the parent takes the process-wide HDF5 mutex, so no other thread is inside libhdf5 at the
// fork, and forks. The child inherits the mutex held by its only thread, runs the reader, writes
// its result (or the kiln error it threw) into a pipe and leaves with _exit. The parent releases the
// mutex right after the fork (the child works on its own copy of libhdf5, so other threads may use
// the library meanwhile), reads the pipe to its end while the child runs (a child blocked on a full
// pipe would never exit), reaps the child and only then trusts the bytes: it checks every length
// and builds the Arrays itself.
//
// What the child may touch: a fork copies only the calling thread, so any mutex another thread held
// at that moment stays locked forever in the child. libhdf5 is safe (its mutex is ours), so are
// malloc (glibc's fork takes its locks), fmt and C++ exceptions. kiln's allocator, thread pool and
// streams are not, which is why readers return plain bytes (RawArray), never Arrays. Allocators that
// do not take their locks at fork (AddressSanitizer's in gcc 12) can still leave the child waiting
// on one: the parent sees its one thread asleep in a futex, kills it and forks again.
//
// A child that loops (libhdf5 does on some malformed files) is stopped by a CPU-time limit,
// cpu_limit(): a FormatError as well. Its stderr is the parent's, so glibc's "free(): invalid
// pointer" or a sanitizer's report explains a crash there.
//
// Cost: fork copies the page tables of everything resident, then both processes fault on the pages
// they write. Measured on the development VM: 0.7 ms at 16 MB resident, 20 ms at 256 MB, about
// 70 ms per GiB beyond; a small file's load went from well under 1 ms to 3-7 ms. Cheap next to
// reading large weights from disk, and loads are rare. The parent also holds the result twice for
// a moment (the bytes from the pipe, then the Arrays). Writing files stays in-process.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/array.h"

namespace kiln::io::detail {

class Hdf5Lock;

/// A dataset's elements as plain bytes, as a reader in the child produces them.
struct RawArray {
  Dtype dtype = float32;
  Shape shape;
  std::vector<std::byte> bytes;  // row-major, shape_size(shape) * size_of(dtype) of them
};

/// One item of a reader's result in the child: names whose meaning the reader and its caller agree
/// on (a key; a metadata key and its value; ...) and, optionally, an array.
struct RawEntry {
  std::vector<std::string> names;
  std::optional<RawArray> array;
};

/// The same item in the parent, the array now an evaluated kiln Array.
struct Entry {
  std::vector<std::string> names;
  std::optional<Array> array;
};

/// Runs in the child with the HDF5 mutex held; must not create kiln Arrays (see above).
using IsolatedReader = std::function<std::vector<RawEntry>(const Hdf5Lock&)>;

/// Runs `read` in a forked child process and returns its entries, in order. A kiln error `read`
/// throws (FormatError, RuntimeError, KeyError, DtypeError, ShapeError, ValueError) is rethrown here
/// with its type and message; std::bad_alloc as itself, anything else as RuntimeError. Throws
/// FormatError naming `path` when the child dies without a result (libhdf5 crashed: a signal, a
/// sanitizer report, an abnormal exit), uses up `cpu_seconds` of CPU time (libhdf5 loops forever on
/// some malformed files; 0: cpu_limit(path)) or sends a malformed result; RuntimeError when the
/// pipe or the fork fails. Must not be called with the HDF5 mutex held.
std::vector<Entry> run_isolated(const std::filesystem::path& path, const char* op, const IsolatedReader& read,
                                int cpu_seconds = 0);

/// The CPU seconds a load of `path` may take: 1, plus 1 per 256 KiB of the file. Its datasets
/// expand at most ~1100x (deflate; read_budget), to 280 MiB per 256 KiB, which takes well under a
/// second to inflate, copy and send; a small file that makes libhdf5 loop is stopped after 1 s.
int cpu_limit(const std::filesystem::path& path);

/// Where the wire form of a result goes, piece by piece.
using ByteSink = std::function<void(const void* data, size_t size)>;

/// Writes the wire form of a successful read to `sink`: a u64 payload length, then the payload
/// (magic, the entries with their names and arrays, an end mark).
void encode_entries(const std::vector<RawEntry>& entries, const ByteSink& sink);

/// Writes the wire form of the exception being handled (call it inside a catch block): its kind and
/// message.
void encode_current_exception(const ByteSink& sink);

/// Parses a result's wire form: returns its entries as evaluated Arrays, or throws the error it
/// carries (as run_isolated). Throws FormatError naming `path` when `data` is malformed in any way
/// (a length past the end, an unknown dtype, a byte count that does not match the shape, trailing
/// bytes).
std::vector<Entry> decode_result(std::span<const std::byte> data, const std::string& path, const char* op);

}  // namespace kiln::io::detail
