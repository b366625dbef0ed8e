#include "kiln/io/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

namespace kiln::io {
namespace {

constexpr const char* kOp = "read_idx";

struct ElementType {
  uint8_t code;
  int file_bytes;  // bytes per element in the file
  Dtype dtype;     // what kiln stores it as
  const char* name;
};
constexpr ElementType kElementTypes[] = {
    {0x08, 1, uint8, "ubyte"}, {0x09, 1, int8, "byte"},     {0x0B, 2, int32, "short"},
    {0x0C, 4, int32, "int"},   {0x0D, 4, float32, "float"}, {0x0E, 8, float64, "double"},
};

// One open IDX file. zlib's gz* functions read plain files transparently, so both kinds share
// this path; the gzip magic is sniffed only to know whether the file size bounds the data.
class IdxFile {
 public:
  explicit IdxFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError::of(kOp, "cannot open file", "{}: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
      const int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
      ::close(fd);
      throw RuntimeError::of(kOp, "cannot read file", "{}: {}", path, std::strerror(err));
    }
    unsigned char magic[2] = {0, 0};
    const ssize_t got = ::pread(fd, magic, 2, 0);
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      throw RuntimeError::of(kOp, "cannot read file", "{}: {}", path, std::strerror(err));
    }
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzip_ && S_ISREG(st.st_mode)) file_size_ = st.st_size;
    file_ = gzdopen(fd, "rb");  // owns fd from here on (a failed gzdopen leaves it open)
    if (file_ == nullptr) {
      ::close(fd);
      throw RuntimeError::of(kOp, "cannot open file", "{}: zlib could not allocate a stream", path);
    }
    gzbuffer(file_, 1 << 17);
  }
  ~IdxFile() { gzclose(file_); }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  bool gzip() const { return gzip_; }
  // Size of a plain regular file, or -1 when only reading tells (gzip, pipes).
  int64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }

  // Reads up to n bytes; fewer only at the end of the data. Throws on read errors and corrupt gzip
  // data; a gzip stream cut short reads as an early end (see ended_early()).
  int64_t read(void* dst, int64_t n) {
    int64_t done = 0;
    while (done < n) {
      const auto chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
      const int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got < 0) throw_stream_error();
      if (got == 0) break;
      done += got;
    }
    return done;
  }
  // True when the stream stopped because a gzip member was cut short, not at a clean end.
  bool ended_early() const {
    int err = Z_OK;
    gzerror(file_, &err);
    return err == Z_BUF_ERROR;
  }

 private:
  [[noreturn]] void throw_stream_error() const {
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    if (err == Z_ERRNO)
      throw RuntimeError::of(kOp, "cannot read file", "{}: {}", path_, std::strerror(errno));
    throw FormatError::of(kOp, "corrupt gzip stream", "{}: {}", path_, msg);
  }

  std::string path_;
  gzFile file_ = nullptr;
  bool gzip_ = false;
  int64_t file_size_ = -1;
};

template <int N>
uint64_t load_be(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 0; k < N; ++k) v = (v << 8) | p[k];
  return v;
}

// Decodes n big-endian elements of the file type into the array's dtype.
void decode(const uint8_t* src, int64_t n, uint8_t code, void* dst) {
  switch (code) {
    case 0x08:
    case 0x09:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n));
      return;
    case 0x0B: {
      auto* out = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int16_t>(load_be<2>(src + 2 * i));
      return;
    }
    case 0x0C: {
      auto* out = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(load_be<4>(src + 4 * i));
      return;
    }
    case 0x0D: {
      auto* out = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i)
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(load_be<4>(src + 4 * i)));
      return;
    }
    case 0x0E: {
      auto* out = static_cast<double*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<double>(load_be<8>(src + 8 * i));
      return;
    }
    default:
      throw RuntimeError::of(kOp, "internal error", "unhandled type 0x{:02x}", code);
  }
}

}  // namespace

Array read_idx(const std::string& path) {
  IdxFile file(path);

  uint8_t magic[4];
  const int64_t got_magic = file.read(magic, 4);
  if (got_magic < 4)
    throw FormatError::of(kOp, "truncated header", "{}: {} of the 4 magic bytes", path, got_magic);
  if (magic[0] != 0 || magic[1] != 0)
    throw FormatError::of(kOp, "bad magic",
                          "{}: starts 0x{:02x}{:02x}{:02x}{:02x}, an IDX file starts 0x0000", path, magic[0],
                          magic[1], magic[2], magic[3]);
  const ElementType* type = nullptr;
  for (const ElementType& t : kElementTypes)
    if (t.code == magic[2]) type = &t;
  if (type == nullptr)
    throw FormatError::of(kOp, "unknown element type", "{}: type byte 0x{:02x} (IDX knows 08 09 0b 0c 0d 0e)",
                          path, magic[2]);
  const int ndim = magic[3];
  if (ndim > kMaxDims)
    throw FormatError::of(kOp, "too many dimensions", "{}: rank {}, kiln arrays have at most {}", path, ndim,
                          kMaxDims);

  std::vector<uint8_t> dim_bytes(4 * static_cast<size_t>(ndim));
  const int64_t got_dims = file.read(dim_bytes.data(), 4 * ndim);
  if (got_dims < 4 * ndim)
    throw FormatError::of(kOp, "truncated header", "{}: rank {} needs {} dimension bytes, found {}", path,
                          ndim, 4 * ndim, got_dims);
  Shape shape(ndim);
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    shape[d] = static_cast<int64_t>(load_be<4>(dim_bytes.data() + 4 * d));
    if (__builtin_mul_overflow(count, shape[d], &count))
      throw FormatError::of(kOp, "dimensions overflow", "{}: the product of {} does not fit in 64 bits", path,
                            shape_str(shape));
  }
  // The array may be wider than the file (short -> int32), so bound both byte counts.
  const int64_t widest = std::max(type->file_bytes, size_of(type->dtype));
  int64_t max_bytes = 0;
  if (__builtin_mul_overflow(count, widest, &max_bytes))
    throw FormatError::of(kOp, "dimensions overflow", "{}: {} elements of {} bytes do not fit in 64 bits",
                          path, count, widest);
  const int64_t data_bytes = count * type->file_bytes;
  const int64_t header_bytes = 4 + 4 * static_cast<int64_t>(ndim);

  if (file.file_size() >= 0) {
    const int64_t available = file.file_size() - header_bytes;
    if (available < data_bytes)
      throw FormatError::of(kOp, "truncated data", "{}: shape {} of {} needs {} data bytes, the file has {}",
                            path, shape_str(shape), type->name, data_bytes, available);
    if (available > data_bytes)
      throw FormatError::of(kOp, "trailing bytes", "{}: {} bytes after the {} data bytes of shape {} of {}",
                            path, available - data_bytes, data_bytes, shape_str(shape), type->name);
  }

  // Grow the buffer as data arrives, so a header claiming more than a gzip stream holds cannot
  // make us allocate it; the size of a plain file was checked above.
  std::vector<uint8_t> data;
  constexpr int64_t kChunk = int64_t{1} << 24;
  int64_t have = 0;
  while (have < data_bytes) {
    const int64_t want = std::min(data_bytes - have, file.file_size() >= 0 ? data_bytes : kChunk);
    data.resize(static_cast<size_t>(have + want));
    const int64_t got = file.read(data.data() + have, want);
    have += got;
    if (got < want) break;
  }
  if (have < data_bytes)
    throw FormatError::of(kOp, "truncated data", "{}: shape {} of {} needs {} data bytes, {}{} found", path,
                          shape_str(shape), type->name, data_bytes, have,
                          file.ended_early() ? " (the gzip stream ends early)," : "");
  uint8_t extra[4096];
  int64_t trailing = 0;
  for (int64_t got; (got = file.read(extra, sizeof extra)) > 0;) trailing += got;
  if (trailing > 0)
    throw FormatError::of(kOp, "trailing bytes", "{}: {} bytes after the {} data bytes of shape {} of {}",
                          path, trailing, data_bytes, shape_str(shape), type->name);
  if (file.ended_early())
    throw FormatError::of(kOp, "truncated data", "{}: the gzip stream ends early", path);

  Array out = Array::empty_available(std::move(shape), type->dtype);
  decode(data.data(), count, type->code, out.raw_data());
  return out;
}

}  // namespace kiln::io
