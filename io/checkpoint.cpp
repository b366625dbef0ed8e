// Checkpoint files: framed sections with XXH3 checksums around cereal portable-binary payloads
// (the layout is in checkpoint.h).
//
// Saving streams each payload into the temporary file while hashing it, then patches the
// section's frame in place, so a checkpoint is never held in memory twice. Loading makes two
// passes over the file: the first checks the header, every frame and every checksum; only then is
// a payload decoded, by a reader that bounds every length by the bytes left in its section.
// cereal's own containers read a length and allocate it before reading on, so payloads use only
// cereal's scalars and binary_data (no class versions or pointer tables: those use cereal's
// global registries, which are not thread-safe in its default build).
#include "kiln/io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cereal/archives/portable_binary.hpp>
#include <cerrno>
#include <cstring>
#include <istream>
#include <memory>
#include <ostream>
#include <span>
#include <streambuf>
#include <string_view>
#include <system_error>
#include <vector>

#include "kiln/io/atomic_file_impl.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using OutArchive = cereal::PortableBinaryOutputArchive;
using InArchive = cereal::PortableBinaryInputArchive;

constexpr const char* kSave = "save_checkpoint";
constexpr const char* kLoad = "load_checkpoint";
constexpr const char* kRestore = "restore_checkpoint";

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'K', 'P', 'T'};
// The fuzz build (fuzz/checkpoint_fuzz.cpp) accepts any checksum, so that mutated inputs reach
// the payload decoder, which must stand on its own: a checksum guards against accidents, not
// against a crafted file.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kVerifyChecksums = false;
#else
constexpr bool kVerifyChecksums = true;
#endif
constexpr int64_t kHeaderBytes = 24;  // magic, version, section count, checksum
constexpr int64_t kFrameBytes = 32;   // tag, length, payload checksum, frame checksum
constexpr size_t kBufferBytes = size_t{1} << 20;

// The sections, in file order: version 1 has the first four, version 2 all five.
struct SectionSpec {
  std::string_view tag;  // at most 8 characters, NUL-padded in the file
  const char* name;      // used in error messages
};
constexpr SectionSpec kSections[] = {{"STATE", "state"},
                                     {"PARAMS", "parameters"},
                                     {"OPTIM", "optimizer_state"},
                                     {"METADATA", "metadata"},
                                     {"SCALER", "grad_scaler_state"}};
constexpr uint32_t kSectionCount = std::size(kSections);
uint32_t section_count(uint32_t version) { return version == 1 ? 4 : kSectionCount; }

// File codes of dtypes: the index is the code. Fixed forever: append, never reorder.
constexpr Dtype kDtypeCodes[] = {bool_,    uint8,   int8,    int32, int64,  uint32, float16,
                                 bfloat16, float32, float64, int16, uint16, uint64};

uint8_t dtype_code(Dtype t) {
  for (size_t i = 0; i < std::size(kDtypeCodes); ++i)
    if (kDtypeCodes[i] == t) return static_cast<uint8_t>(i);
  throw RuntimeError::of(kSave, "internal error", "dtype {} has no file code", dtype_name(t));
}

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) p[k] = static_cast<unsigned char>(v >> (8 * k));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int k = bytes; k-- > 0;) v = (v << 8) | p[k];
  return v;
}

void encode_header(unsigned char* h) {
  std::memcpy(h, kMagic, 8);
  put_le(h + 8, kCheckpointVersion, 4);
  put_le(h + 12, kSectionCount, 4);
  put_le(h + 16, XXH3_64bits(h, 16), 8);
}

void encode_frame(unsigned char* f, std::string_view tag, uint64_t length, uint64_t checksum) {
  std::memset(f, 0, 8);
  std::memcpy(f, tag.data(), tag.size());
  put_le(f + 8, length, 8);
  put_le(f + 16, checksum, 8);
  put_le(f + 24, XXH3_64bits(f, 24), 8);
}

// std::strerror may share one buffer between threads; this does not.
std::string error_text(int err) { return std::generic_category().message(err); }

// ---- saving ----

// A stream buffer that hashes and counts what passes through it on its way into the file: one
// section's payload between start() and finish().
class SectionWriter : public std::streambuf {
 public:
  explicit SectionWriter(detail::TempFile& file)
      : file_(file), buffer_(kBufferBytes), state_(XXH3_createState()) {
    if (!state_) throw std::bad_alloc();
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  void start() {
    XXH3_64bits_reset(state_.get());
    length_ = 0;
  }
  // Writes out what is buffered; returns the payload's length and checksum.
  std::pair<uint64_t, uint64_t> finish() {
    drain();
    return {length_, XXH3_64bits_digest(state_.get())};
  }

 protected:
  int_type overflow(int_type c) override {
    drain();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n > epptr() - pptr()) {
      drain();
      if (n >= static_cast<std::streamsize>(buffer_.size())) {  // large arrays go straight through
        emit(s, static_cast<size_t>(n));
        return n;
      }
    }
    std::memcpy(pptr(), s, static_cast<size_t>(n));
    pbump(static_cast<int>(n));
    return n;
  }

 private:
  struct FreeState {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  void drain() {
    emit(pbase(), static_cast<size_t>(pptr() - pbase()));
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  void emit(const char* p, size_t n) {
    if (n == 0) return;
    XXH3_64bits_update(state_.get(), p, n);
    file_.write(p, n);
    length_ += n;
  }

  detail::TempFile& file_;
  std::vector<char> buffer_;
  std::unique_ptr<XXH3_state_t, FreeState> state_;
  uint64_t length_ = 0;
};

// Elements go through cereal typed by their size, so a big-endian host would swap them.
void save_elements(OutArchive& ar, const void* p, int64_t bytes, int itemsize) {
  const auto n = static_cast<size_t>(bytes);
  switch (itemsize) {
    case 1:
      ar(cereal::binary_data(static_cast<const uint8_t*>(p), n));
      return;
    case 2:
      ar(cereal::binary_data(static_cast<const uint16_t*>(p), n));
      return;
    case 4:
      ar(cereal::binary_data(static_cast<const uint32_t*>(p), n));
      return;
    default:
      ar(cereal::binary_data(static_cast<const uint64_t*>(p), n));
      return;
  }
}

void save_string(OutArchive& ar, const std::string& s) {
  ar(static_cast<uint64_t>(s.size()));
  if (!s.empty()) ar(cereal::binary_data(s.data(), s.size()));
}

void save_array(OutArchive& ar, const Array& a) {
  ar(dtype_code(a.dtype()), static_cast<uint8_t>(a.ndim()));
  for (int64_t d : a.shape()) ar(d);
  if (a.size() == 0) return;
  if (a.row_contiguous()) return save_elements(ar, a.raw_data(), a.nbytes(), a.itemsize());
  std::vector<char> dense(static_cast<size_t>(a.nbytes()));  // a view: its values in row-major order
  kiln::detail::gather_row_major(a, dense.data(), a.dtype());
  save_elements(ar, dense.data(), a.nbytes(), a.itemsize());
}

void save_tree(OutArchive& ar, const nn::ParamTree& tree) {
  ar(static_cast<uint64_t>(tree.size()));
  for (const auto& [key, value] : tree) {
    save_string(ar, key);
    save_array(ar, value);
  }
}

void save_payload(OutArchive& ar, const Checkpoint& c, int section) {
  switch (section) {
    case 0: {
      ar(c.step);
      ar(static_cast<uint8_t>(c.default_key_state.has_value()));
      if (c.default_key_state) ar(c.default_key_state->seed, c.default_key_state->count);
      ar(static_cast<uint8_t>(c.data_position.has_value()));
      if (c.data_position) ar(c.data_position->epoch, c.data_position->batch);
      ar(static_cast<uint8_t>(c.random_key.valid()));
      if (c.random_key.valid()) save_array(ar, c.random_key);
      return;
    }
    case 1:
      return save_tree(ar, c.parameters);
    case 2:
      return save_tree(ar, c.optimizer_state);
    case 4:
      return save_tree(ar, c.grad_scaler_state);
    default:
      ar(static_cast<uint64_t>(c.metadata.size()));
      for (const auto& [key, value] : c.metadata) {
        save_string(ar, key);
        save_string(ar, value);
      }
  }
}

void check_tree(const nn::ParamTree& tree, const char* what) {
  for (const auto& [key, value] : tree)
    if (!value.valid()) throw ValueError::of(kSave, "empty array", "at '{}' in the {}", key, what);
}

// ---- loading ----

class InputFile {
 public:
  explicit InputFile(const fs::path& path) : path_(path.string()) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw RuntimeError::of(kLoad, "cannot open file", "{}: {}", path_, error_text(errno));
    struct stat st {};
    const int err = ::fstat(fd_, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
    if (err != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);  // the destructor does not run for a constructor that throws
      throw RuntimeError::of(kLoad, "cannot read file", "{}: {}", path_,
                             err != 0 ? error_text(err) : std::string("not a regular file"));
    }
    size_ = st.st_size;
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Reads exactly n bytes at offset (within size(), checked by the caller).
  void read_at(int64_t offset, void* dst, int64_t n) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got =
          ::pread(fd_, p, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)), offset);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail_io(errno);
      if (got == 0)  // the file shrank while it was read
        throw FormatError::of(kLoad, "truncated file", "{}: ends at offset {}", path_, offset);
      p += got;
      n -= got;
      offset += got;
    }
  }

 private:
  [[noreturn]] void fail_io(int err) const {
    throw RuntimeError::of(kLoad, "cannot read file", "{}: {}", path_, error_text(err));
  }

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

struct SectionRange {
  const SectionSpec* spec;
  int64_t begin, end;  // payload bytes [begin, end) of the file
};

// Pass one: the header, every frame and every checksum, before any payload is decoded.
std::vector<SectionRange> verify_layout(const InputFile& file) {
  const std::string& path = file.path();
  const int64_t size = file.size();
  if (size == 0) throw FormatError::of(kLoad, "empty file", "{}", path);
  unsigned char h[kHeaderBytes] = {};
  file.read_at(0, h, std::min(size, kHeaderBytes));
  if (std::memcmp(h, kMagic, static_cast<size_t>(std::min<int64_t>(size, 8))) != 0)
    throw FormatError::of(kLoad, "not a kiln checkpoint (bad magic)", "{}", path);
  if (size < kHeaderBytes)
    throw FormatError::of(kLoad, "truncated header", "{}: {} of {} bytes", path, size, kHeaderBytes);
  const auto version = static_cast<uint32_t>(get_le(h + 8, 4));
  if (version == 0 || version > kCheckpointVersion)
    throw FormatError::of(kLoad, "unsupported version", "{}: version {}, this build reads 1 to {}", path,
                          version, kCheckpointVersion);
  if (get_le(h + 16, 8) != XXH3_64bits(h, 16) && kVerifyChecksums)
    throw FormatError::of(kLoad, "corrupted header (checksum mismatch)", "{}", path);
  const auto count = static_cast<uint32_t>(get_le(h + 12, 4));
  if (count != section_count(version))
    throw FormatError::of(kLoad, "wrong number of sections", "{}: {}, version {} has {}", path, count,
                          version, section_count(version));

  std::vector<SectionRange> sections;
  std::vector<char> chunk(static_cast<size_t>(std::min<int64_t>(size, kBufferBytes)));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  int64_t offset = kHeaderBytes;
  for (const SectionSpec& spec : std::span(kSections, count)) {
    if (size - offset < kFrameBytes)
      throw FormatError::of(kLoad, "truncated file",
                            "{}: section '{}' would start at offset {}, the file has {} bytes", path,
                            spec.name, offset, size);
    unsigned char f[kFrameBytes];
    file.read_at(offset, f, kFrameBytes);
    if (get_le(f + 24, 8) != XXH3_64bits(f, 24) && kVerifyChecksums)
      throw FormatError::of(kLoad, "corrupted section frame (checksum mismatch)",
                            "{}: section '{}' at offset {}", path, spec.name, offset);
    char expected[8] = {};
    std::memcpy(expected, spec.tag.data(), spec.tag.size());
    if (std::memcmp(f, expected, 8) != 0)
      throw FormatError::of(
          kLoad, "unexpected section", "{}: tag {:?} at offset {} where section '{}' belongs", path,
          std::string(reinterpret_cast<const char*>(f), strnlen(reinterpret_cast<const char*>(f), 8)), offset,
          spec.name);
    const uint64_t length = get_le(f + 8, 8);
    const int64_t begin = offset + kFrameBytes;
    if (length > static_cast<uint64_t>(size - begin))
      throw FormatError::of(kLoad, "truncated file", "{}: section '{}' declares {} bytes, {} remain", path,
                            spec.name, length, size - begin);
    const int64_t end = begin + static_cast<int64_t>(length);
    XXH3_64bits_reset(state.get());
    for (int64_t at = begin; at < end;) {
      const int64_t n = std::min<int64_t>(end - at, static_cast<int64_t>(chunk.size()));
      file.read_at(at, chunk.data(), n);
      XXH3_64bits_update(state.get(), chunk.data(), static_cast<size_t>(n));
      at += n;
    }
    if (XXH3_64bits_digest(state.get()) != get_le(f + 16, 8) && kVerifyChecksums)
      throw FormatError::of(kLoad, "checksum mismatch", "{}: section '{}' (offset {}, {} bytes)", path,
                            spec.name, begin, length);
    sections.push_back({&spec, begin, end});
    offset = end;
  }
  if (offset != size)
    throw FormatError::of(kLoad, "trailing bytes after the last section", "{}: {} bytes", path,
                          size - offset);
  return sections;
}

// A stream buffer over the payload bytes [begin, end) of the file.
class SectionReader : public std::streambuf {
 public:
  SectionReader(const InputFile& file, int64_t begin, int64_t end)
      : file_(file),
        buffer_(static_cast<size_t>(std::min<int64_t>(end - begin, kBufferBytes))),
        next_(begin),
        end_(end) {
    setg(buffer_.data(), buffer_.data(), buffer_.data());
  }
  int64_t remaining() const { return (end_ - next_) + (egptr() - gptr()); }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    const int64_t n = std::min<int64_t>(end_ - next_, static_cast<int64_t>(buffer_.size()));
    if (n <= 0) return traits_type::eof();
    file_.read_at(next_, buffer_.data(), n);
    next_ += n;
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }
  std::streamsize xsgetn(char* s, std::streamsize n) override {
    std::streamsize done = 0;
    while (done < n) {
      if (gptr() == egptr()) {
        const int64_t left = n - done;
        if (left >= static_cast<int64_t>(buffer_.size())) {  // large arrays are read in place
          const int64_t k = std::min(left, end_ - next_);
          if (k > 0) file_.read_at(next_, s + done, k);
          next_ += k;
          return done + k;
        }
        if (traits_type::eq_int_type(underflow(), traits_type::eof())) return done;
      }
      const auto k = std::min<std::streamsize>(n - done, egptr() - gptr());
      std::memcpy(s + done, gptr(), static_cast<size_t>(k));
      gbump(static_cast<int>(k));
      done += k;
    }
    return done;
  }

 private:
  const InputFile& file_;
  std::vector<char> buffer_;
  int64_t next_, end_;
};

// Decodes one section. Every length is compared with the bytes left before it is used.
class PayloadReader {
 public:
  PayloadReader(const InputFile& file, const SectionRange& s)
      : path_(file.path()), section_(s.spec->name), buffer_(file, s.begin, s.end), stream_(&buffer_) {
    // cereal would take any byte as a flag; a valid file has 1 (little-endian) or 0.
    const auto endian = buffer_.sgetc();
    if (endian == std::streambuf::traits_type::eof()) fail("truncated section", "the payload is empty");
    if (endian != 0 && endian != 1) fail("corrupted payload", "endianness byte {}", endian);
    archive_.emplace(stream_);
  }

  template <class... A>
  [[noreturn]] void fail(const char* what, fmt::format_string<A...> details, A&&... a) const {
    throw FormatError::of(kLoad, what, "{}: section '{}': {}", path_, section_,
                          fmt::format(details, std::forward<A>(a)...));
  }

  template <class T>
  T scalar() {
    T v{};
    (*archive_)(v);
    return v;
  }
  bool flag(const char* what) {
    const auto v = scalar<uint8_t>();
    if (v > 1) fail("corrupted payload", "{} flag is {}", what, v);
    return v == 1;
  }
  // A count of items that take at least `min_bytes` each.
  uint64_t count(const char* what, int64_t min_bytes) {
    const auto n = scalar<uint64_t>();
    if (n > static_cast<uint64_t>(buffer_.remaining() / min_bytes))
      fail("length exceeds the section", "{} {} needs at least {} bytes each, {} remain", what, n, min_bytes,
           buffer_.remaining());
    return n;
  }
  std::string string(const char* what) {
    std::string s(static_cast<size_t>(count(what, 1)), '\0');
    if (!s.empty()) (*archive_)(cereal::binary_data(s.data(), s.size()));
    return s;
  }
  Array array(const std::string& key);
  nn::ParamTree tree();
  void finish() {
    if (buffer_.remaining() != 0) fail("trailing bytes in the section", "{} bytes", buffer_.remaining());
  }

 private:
  void load_elements(void* p, int64_t bytes, int itemsize) {
    const auto n = static_cast<size_t>(bytes);
    switch (itemsize) {
      case 1:
        (*archive_)(cereal::binary_data(static_cast<uint8_t*>(p), n));
        return;
      case 2:
        (*archive_)(cereal::binary_data(static_cast<uint16_t*>(p), n));
        return;
      case 4:
        (*archive_)(cereal::binary_data(static_cast<uint32_t*>(p), n));
        return;
      default:
        (*archive_)(cereal::binary_data(static_cast<uint64_t*>(p), n));
        return;
    }
  }

  std::string path_;
  const char* section_;
  SectionReader buffer_;
  std::istream stream_;
  std::optional<InArchive> archive_;
};

Array PayloadReader::array(const std::string& key) {
  const auto code = scalar<uint8_t>();
  if (code >= std::size(kDtypeCodes)) fail("unknown dtype", "code {} for '{}'", code, key);
  const Dtype dtype = kDtypeCodes[code];
  const auto rank = scalar<uint8_t>();
  if (rank > kMaxDims) fail("rank too large", "{} for '{}' (at most {})", rank, key, kMaxDims);
  Shape shape(rank);
  for (int64_t& d : shape) {
    d = scalar<int64_t>();
    if (d < 0) fail("negative dimension", "{} for '{}'", d, key);
  }
  int64_t elements = 1;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    elements = 0;
  } else {
    for (int64_t d : shape)
      if (__builtin_mul_overflow(elements, d, &elements))
        fail("shape too large", "{} for '{}'", shape_str(shape), key);
  }
  const int itemsize = size_of(dtype);
  if (elements > buffer_.remaining() / itemsize)
    fail("length exceeds the section", "'{}' of shape {} and dtype {} needs {} x {} bytes, {} remain", key,
         shape_str(shape), dtype_name(dtype), elements, itemsize, buffer_.remaining());
  Array a = Array::empty_available(std::move(shape), dtype);
  if (elements == 0) return a;
  load_elements(a.raw_data(), elements * itemsize, itemsize);
  if (dtype == bool_) {
    const auto* b = static_cast<const uint8_t*>(a.raw_data());
    if (std::any_of(b, b + elements, [](uint8_t v) { return v > 1; }))
      fail("corrupted payload", "bool array '{}' holds a byte other than 0 and 1", key);
  }
  return a;
}

nn::ParamTree PayloadReader::tree() {
  // An entry takes at least a key length, one key byte, a dtype code and a rank.
  const uint64_t n = count("entry count", 8 + 1 + 2);
  nn::ParamTree t;
  for (uint64_t i = 0; i < n; ++i) {
    std::string key = string("key length");
    if (key.empty()) fail("empty key", "entry {}", i);
    if (t.contains(key)) fail("duplicate key", "'{}'", key);
    Array value = array(key);
    t.set(std::move(key), std::move(value));
  }
  return t;
}

void load_payload(PayloadReader& r, Checkpoint& c, int section) {
  switch (section) {
    case 0: {
      c.step = r.scalar<int64_t>();
      if (c.step < 0) r.fail("negative step", "{}", c.step);
      if (r.flag("key state")) {
        random::DefaultKeyState s;
        s.seed = r.scalar<uint64_t>();
        s.count = r.scalar<uint64_t>();
        c.default_key_state = s;
      }
      if (r.flag("data position")) {
        DataPosition p;
        p.epoch = r.scalar<int64_t>();
        p.batch = r.scalar<int64_t>();
        if (p.epoch < 0 || p.batch < 0)
          r.fail("negative data position", "epoch {}, batch {}", p.epoch, p.batch);
        c.data_position = p;
      }
      if (r.flag("random key")) c.random_key = r.array("random_key");
      return;
    }
    case 1:
      c.parameters = r.tree();
      return;
    case 2:
      c.optimizer_state = r.tree();
      return;
    case 4:
      c.grad_scaler_state = r.tree();
      return;
    default: {
      const uint64_t n = r.count("metadata entry count", 16);  // two string lengths
      for (uint64_t i = 0; i < n; ++i) {
        std::string key = r.string("metadata key length");
        std::string value = r.string("metadata value length");
        if (!c.metadata.emplace(std::move(key), std::move(value)).second)
          r.fail("duplicate metadata key", "entry {}", i);
      }
    }
  }
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& c) {
  if (path.filename().empty()) throw ValueError::of(kSave, "path names no file", "'{}'", path.string());
  if (c.step < 0) throw ValueError::of(kSave, "step must be >= 0", "got {} for {}", c.step, path.string());
  if (c.data_position && (c.data_position->epoch < 0 || c.data_position->batch < 0))
    throw ValueError::of(kSave, "data position must be >= 0", "epoch {}, batch {} for {}",
                         c.data_position->epoch, c.data_position->batch, path.string());
  check_tree(c.parameters, "parameters");
  check_tree(c.optimizer_state, "optimizer state");
  check_tree(c.grad_scaler_state, "grad scaler state");

  std::vector<Array> arrays = c.parameters.values();
  for (const Array& a : c.optimizer_state.values()) arrays.push_back(a);
  for (const Array& a : c.grad_scaler_state.values()) arrays.push_back(a);
  if (c.random_key.valid()) arrays.push_back(c.random_key);
  kiln::eval(arrays);  // computation errors surface here, before any file exists

  detail::replace_atomically(kSave, path, [&](detail::TempFile& file) {
    unsigned char header[kHeaderBytes];
    encode_header(header);
    file.write(header, kHeaderBytes);
    SectionWriter writer(file);
    for (uint32_t s = 0; s < kSectionCount; ++s) {
      const int64_t frame_at = file.size();
      unsigned char frame[kFrameBytes] = {};
      file.write(frame, kFrameBytes);  // patched once the payload's length and checksum are known
      writer.start();
      {
        std::ostream stream(&writer);
        OutArchive archive(stream, OutArchive::Options::LittleEndian());
        save_payload(archive, c, static_cast<int>(s));
      }
      const auto [length, checksum] = writer.finish();
      encode_frame(frame, kSections[s].tag, length, checksum);
      file.write_at(frame_at, frame, kFrameBytes);
    }
  });
}

Checkpoint load_checkpoint(const std::filesystem::path& path) {
  const InputFile file(path);
  const std::vector<SectionRange> sections = verify_layout(file);
  Checkpoint c;
  for (size_t s = 0; s < sections.size(); ++s) {
    try {
      PayloadReader reader(file, sections[s]);
      load_payload(reader, c, static_cast<int>(s));
      reader.finish();
    } catch (const cereal::Exception& e) {  // a read past the end of the section
      throw FormatError::of(kLoad, "truncated section", "{}: section '{}': {}", file.path(),
                            sections[s].spec->name, e.what());
    }
  }
  return c;
}

Checkpoint make_checkpoint(const nn::Module& model, const optim::Optimizer& optimizer,
                           const DataLoader* loader, std::map<std::string, std::string> metadata) {
  Checkpoint c;
  c.parameters = model.parameters();
  c.optimizer_state = optimizer.state();
  c.step = optimizer.step();
  c.default_key_state = random::default_key_state();
  if (loader) c.data_position = loader->position();
  c.metadata = std::move(metadata);
  return c;
}

Checkpoint make_checkpoint(const nn::Module& model, const optim::Optimizer& optimizer,
                           const optim::GradScaler& scaler, const DataLoader* loader,
                           std::map<std::string, std::string> metadata) {
  Checkpoint c = make_checkpoint(model, optimizer, loader, std::move(metadata));
  c.grad_scaler_state = scaler.state();
  return c;
}

void save_checkpoint(const std::filesystem::path& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const DataLoader* loader,
                     std::map<std::string, std::string> metadata) {
  save_checkpoint(path, make_checkpoint(model, optimizer, loader, std::move(metadata)));
}

void restore_checkpoint(const Checkpoint& c, nn::Module& model, optim::Optimizer& optimizer,
                        DataLoader* loader) {
  // The loader's checks first, as DataLoader::set_position makes them: after them nothing below
  // can fail except the two transactional calls, and the first of those is undone if the second
  // throws.
  if (loader) {
    if (!c.data_position)
      throw ValueError::of(kRestore, "the checkpoint has no data position", "but a DataLoader was given");
    const DataPosition p = *c.data_position;
    if (p.epoch < 0 || p.batch < 0 || p.batch > loader->batches_per_epoch())
      throw ValueError::of(kRestore, "data position outside the loader's epochs",
                           "epoch {}, batch {}; the loader has {} batches per epoch", p.epoch, p.batch,
                           loader->batches_per_epoch());
  }
  const nn::ParamTree previous = model.parameters();
  model.update(c.parameters, nn::Verify::all);
  try {
    optimizer.set_state(c.optimizer_state);
  } catch (...) {
    // Verify::all just accepted the same keys, shapes and dtypes, so this cannot be refused.
    model.update(previous, nn::Verify::all);
    throw;
  }
  if (c.default_key_state) random::set_default_key_state(*c.default_key_state);
  if (loader) loader->set_position(*c.data_position);
}

void restore_checkpoint(const Checkpoint& c, nn::Module& model, optim::Optimizer& optimizer,
                        optim::GradScaler& scaler, DataLoader* loader) {
  if (c.grad_scaler_state.empty())
    throw KeyError::of(kRestore, "the checkpoint has no grad_scaler_state", "but a GradScaler was given");
  // The scaler's checks on a copy first: after restore_checkpoint succeeds nothing can fail.
  optim::GradScaler checked = scaler;
  checked.set_state(c.grad_scaler_state);
  restore_checkpoint(c, model, optimizer, loader);
  scaler = checked;
}

}  // namespace kiln::io
