#pragma once
// Internal: the small layer over libhdf5's C API that io/hdf5_weights.cpp and io/keras_weights.cpp
// share. Not installed (*_impl.h); only .cpp files include it, so <hdf5.h> never reaches users.
//
// libhdf5 is not reentrant (Debian's build is not thread-safe), so every call into it happens while
// an Hdf5Lock is held. Functions here take `const Hdf5Lock&` as proof that the caller holds it;
// none of them locks, so nothing can deadlock on the (non-recursive) mutex. Readers run in a forked
// child that inherits the lock held (hdf5_isolated_impl.h), so they return bytes, never Arrays.
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/io/hdf5_isolated_impl.h"

namespace kiln::io::detail {

/// Holds the process-wide libhdf5 mutex for its lifetime and turns off libhdf5's automatic error
/// printing (per thread in thread-safe builds, so it is done on every lock): failures become
/// kiln errors instead of text on stderr.
class Hdf5Lock {
 public:
  Hdf5Lock();
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
};

/// Owns one libhdf5 identifier and closes it with the matching H5?close. Declare handles after
/// the Hdf5Lock so they close before it is released.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept;
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { close(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes now; returns libhdf5's status (negative on failure, e.g. when a file's final flush fails).
  herr_t close();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

/// libhdf5's message for the failure that just happened ("unable to open file (truncated file:
/// eof = 96, ...)"), or "" when its error stack is empty; clears the stack.
std::string hdf5_error_text(const Hdf5Lock&);

/// Where a reader is: the op for messages and the file being read.
struct Hdf5Source {
  const char* op;
  std::string path;   // as given, for messages
  int64_t file_size;  // bytes on disk; bounds what the file can hold
  Hid file;
};

/// Opens an existing file for reading. Throws RuntimeError naming the path when it does not exist
/// or cannot be read, FormatError when it is not an HDF5 file or libhdf5 cannot open it
/// (truncated or corrupt), with libhdf5's reason.
Hdf5Source open_for_read(const Hdf5Lock& lock, const std::filesystem::path& path, const char* op);

enum class ObjectKind { group, dataset, other };

/// One link of a group.
struct Child {
  std::string name;
  ObjectKind kind;
  Hid object;  // the opened group or dataset (invalid for `other`)
};

/// The children of `group` (named `where` in messages): in creation order when the group tracks
/// it (kiln's and the exporter's files do), else in natural name order ("2" before "10"). Hard
/// links only: a soft or external link is a FormatError, as the count of links beyond what the
/// file could hold is.
std::vector<Child> list_children(const Hdf5Lock& lock, const Hdf5Source& src, hid_t group,
                                 const std::string& where);

/// Opens the link `name` (one path component) of `group`; nullopt when there is no such link.
/// Throws FormatError for a soft or external link or an object libhdf5 cannot open.
std::optional<Child> open_child(const Hdf5Lock& lock, const Hdf5Source& src, hid_t group,
                                const std::string& name, const std::string& where);

/// An identity of the object behind `obj` (file number and address), to detect link cycles.
std::string object_identity(const Hdf5Lock& lock, hid_t obj);

/// True when `obj` has an attribute `name`.
bool has_attribute(const Hdf5Lock& lock, hid_t obj, const char* name);
/// The strings of a string attribute (scalar: one; 1-d: each element), fixed or variable length.
/// Throws FormatError naming `where` for another type or rank, or sizes past sane bounds.
std::vector<std::string> read_string_attribute(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj,
                                               const char* name, const std::string& where);
/// The names of `obj`'s attributes, in name order.
std::vector<std::string> attribute_names(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj,
                                         const std::string& where);
/// A scalar (or one-element) integer attribute. Throws FormatError naming `where` otherwise.
int64_t read_int_attribute(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj, const char* name,
                           const std::string& where);
/// Writes a scalar variable-length UTF-8 string attribute, as h5py writes a Python str. Throws
/// RuntimeError naming `file` on failure.
void write_string_attribute(const Hdf5Lock& lock, hid_t obj, const char* name, const std::string& value,
                            const std::string& file);
/// Writes a scalar int64 attribute.
void write_int_attribute(const Hdf5Lock& lock, hid_t obj, const char* name, int64_t value,
                         const std::string& file);

/// Reads dataset `dset` (dotted `key` in messages) into plain bytes, bit-exact (readers run in a
/// forked child that must not create Arrays: hdf5_isolated_impl.h). The dtype
/// comes from the stored type, refined by a `dtype` attribute when present ("bfloat16" on uint16
/// data). Everything the file claims (rank, dimensions, byte counts, layout) is checked against the
/// file before the buffer is allocated; `budget` is the number of bytes the whole load may still
/// allocate and is decreased. Throws FormatError for a malformed dataset, a `dtype` attribute that
/// contradicts the stored type, external or virtual storage; DtypeError for a type with no kiln
/// dtype (int16, uint64, strings, compounds); each naming the file and the key.
RawArray read_dataset(const Hdf5Lock& lock, const Hdf5Source& src, hid_t dset, const std::string& key,
                      int64_t& budget);

/// The initial `budget` for read_dataset: what the datasets of a file of this size can expand to
/// (compressed chunks expand up to ~1032x with deflate; links may name one dataset many times).
int64_t read_budget(int64_t file_size);

/// Writes `value` (evaluated, row-contiguous) as dataset `name` of `parent` with a `dtype`
/// attribute naming its kiln dtype; bool as h5py's enum, float16 as IEEE half, bfloat16 as uint16.
/// Throws RuntimeError naming `file` and `key` on failure.
void write_dataset(const Hdf5Lock& lock, hid_t parent, const std::string& name, const Array& value,
                   const std::string& file, const std::string& key);

/// Creates group `name` in `parent`, tracking the creation order of its links. Throws RuntimeError.
Hid create_group(const Hdf5Lock& lock, hid_t parent, const std::string& name, const std::string& file,
                 const std::string& key);

/// Creates `path` with a root group that tracks creation order, truncating an existing file (the
/// empty temporary file of replace_atomically). Throws RuntimeError naming the path.
Hid create_file(const Hdf5Lock& lock, const std::filesystem::path& path, const char* op);

}  // namespace kiln::io::detail
