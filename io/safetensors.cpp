#include "kiln/io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "atomic_file_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/creation.h"

namespace kiln::io {
namespace {

using Json = nlohmann::ordered_json;
constexpr const char* kLoad = "load_safetensors";
constexpr const char* kSave = "save_safetensors";
// The reference implementation's limit; a header past it is refused before it is read.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxJsonDepth = 16;

// ---------------------------------------------------------------- dtypes

enum class Stored { plain, f8_e4m3, f8_e5m2 };
struct FormatDtype {
  const char* name;
  Dtype dtype;  // what kiln holds it as
  int bytes;    // bytes per element in the file
  Stored stored = Stored::plain;
};
constexpr FormatDtype kDtypes[] = {
    {"BOOL", bool_, 1},
    {"U8", uint8, 1},
    {"I8", int8, 1},
    {"I16", int16, 2},
    {"U16", uint16, 2},
    {"I32", int32, 4},
    {"U32", uint32, 4},
    {"I64", int64, 8},
    {"U64", uint64, 8},
    {"F16", float16, 2},
    {"BF16", bfloat16, 2},
    {"F32", float32, 4},
    {"F64", float64, 8},
    {"F8_E4M3", float16, 1, Stored::f8_e4m3},
    {"F8_E5M2", float16, 1, Stored::f8_e5m2},
};

const FormatDtype* format_dtype(std::string_view name) {
  for (const FormatDtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}
const char* format_name(Dtype t) {
  for (const FormatDtype& d : kDtypes)
    if (d.dtype == t && d.stored == Stored::plain) return d.name;
  return nullptr;
}

// float8 e4m3 (the "fn" variant: no infinities, S.1111.111 is NaN, bias 7) as float16 bits; exact.
uint16_t e4m3_to_half(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  float v;
  if (e == 15 && m == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(static_cast<float>(m), -9);
  else
    v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return float16_t(b & 0x80 ? -v : v).bits;
}
// float8 e5m2 is float16 without its low 8 bits (bias 15, infinities and NaNs as float16's).
uint16_t e5m2_to_half(uint8_t b) { return static_cast<uint16_t>(b << 8); }

// ---------------------------------------------------------------- the mapped file

class Mapping {
 public:
  explicit Mapping(const std::filesystem::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path, "cannot open the file");
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path, "cannot stat the file");
    if (S_ISDIR(st.st_mode)) {
      errno = EISDIR;
      fail(path, "cannot read the file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) fail(path, "cannot map the file");
      base_ = static_cast<const std::byte*>(p);
    }
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  const std::byte* data() const { return base_; }
  size_t size() const { return size_; }

 private:
  [[noreturn]] void fail(const std::filesystem::path& path, const char* what) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw RuntimeError::of(kLoad, what, "{}: {}", path.string(), std::strerror(err));
  }

  int fd_ = -1;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
};

// ---------------------------------------------------------------- the header

struct Entry {
  std::string name;
  const FormatDtype* dtype;
  Shape shape;
  uint64_t begin, end;
};

[[noreturn]] void bad(const std::filesystem::path& path, const char* what, const std::string& details) {
  throw FormatError::of(kLoad, what, "{}: {}", path.string(), details);
}

// Bracket depth outside strings: nesting is refused before nlohmann builds (and frees) it.
int json_depth(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

// The JSON text as an object, refusing duplicate names at any level (nlohmann would keep one).
Json parse_object(const std::filesystem::path& path, std::string_view text, const char* what) {
  if (json_depth(text) > kMaxJsonDepth)
    bad(path, what, fmt::format("nested deeper than {} levels", kMaxJsonDepth));
  std::vector<std::set<std::string>> names;
  std::string duplicate;
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) names.emplace_back();
    if (event == Json::parse_event_t::object_end && !names.empty()) names.pop_back();
    if (event == Json::parse_event_t::key && !names.empty() && parsed.is_string() &&
        !names.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json j = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad(path, what, "not valid JSON");
  if (!j.is_object()) bad(path, what, fmt::format("a JSON {}, not an object", j.type_name()));
  if (!duplicate.empty()) bad(path, "duplicate name", fmt::format("'{}' appears twice", duplicate));
  return j;
}

uint64_t non_negative(const std::filesystem::path& path, const std::string& name, const Json& v,
                      const char* field) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
    bad(path, "bad tensor entry",
        fmt::format("'{}': {} holds {}, not a non-negative integer", name, field, v.dump()));
  return v.get<uint64_t>();
}

Entry parse_entry(const std::filesystem::path& path, const std::string& name, const Json& v,
                  uint64_t data_size) {
  if (!v.is_object())
    bad(path, "bad tensor entry", fmt::format("'{}' is a JSON {}, not an object", name, v.type_name()));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) bad(path, "bad tensor entry", fmt::format("'{}' has no {}", name, field));
  const Json &dt = v["dtype"], &sh = v["shape"], &off = v["data_offsets"];
  if (!dt.is_string()) bad(path, "bad tensor entry", fmt::format("'{}': dtype is {}", name, dt.dump()));
  Entry e{name, format_dtype(dt.get<std::string>()), {}, 0, 0};
  if (!e.dtype)
    throw DtypeError::of(kLoad, "unknown safetensors dtype", "{}: '{}' has dtype {}", path.string(), name,
                         dt.get<std::string>());
  if (!sh.is_array() || sh.size() > static_cast<size_t>(kMaxDims))
    bad(path, "bad tensor entry",
        fmt::format("'{}': shape {} is not a list of at most {} sizes", name, sh.dump(), kMaxDims));
  uint64_t count = 1;
  bool overflow = false;
  for (const Json& d : sh) {
    const uint64_t n = non_negative(path, name, d, "shape");
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(count, n, &count))
      overflow = true;
    e.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(n, std::numeric_limits<int64_t>::max())));
  }
  if (!off.is_array() || off.size() != 2)
    bad(path, "bad tensor entry", fmt::format("'{}': data_offsets {} is not [begin, end]", name, off.dump()));
  e.begin = non_negative(path, name, off[0], "data_offsets");
  e.end = non_negative(path, name, off[1], "data_offsets");
  if (e.begin > e.end || e.end > data_size)
    bad(path, "data_offsets out of range",
        fmt::format("'{}': [{}, {}] in a data section of {} bytes", name, e.begin, e.end, data_size));
  uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(count, static_cast<uint64_t>(e.dtype->bytes), &bytes) ||
      bytes != e.end - e.begin)
    bad(path, "shape and data_offsets disagree",
        fmt::format("'{}': shape {} of {} needs {} bytes, data_offsets [{}, {}] hold {}", name, sh.dump(),
                    e.dtype->name, overflow ? std::string("too many") : std::to_string(bytes), e.begin, e.end,
                    e.end - e.begin));
  return e;
}

Array make_array(const std::shared_ptr<const Mapping>& file, const std::byte* p, const Entry& e) {
  const Dtype t = e.dtype->dtype;
  const int64_t n = shape_size(e.shape);
  if (n == 0) return Array::empty_available(e.shape, t);
  if (e.dtype->stored != Stored::plain) {
    Array a = Array::empty_available(e.shape, t);
    auto* out = static_cast<uint16_t*>(a.raw_data());
    const auto* in = reinterpret_cast<const uint8_t*>(p);
    for (int64_t i = 0; i < n; ++i)
      out[i] = e.dtype->stored == Stored::f8_e4m3 ? e4m3_to_half(in[i]) : e5m2_to_half(in[i]);
    return a;
  }
  if (t == bool_) {  // bytes other than 0 and 1 become true, as the format's readers take them
    Array a = Array::empty_available(e.shape, t);
    auto* out = static_cast<uint8_t*>(a.raw_data());
    const auto* in = reinterpret_cast<const uint8_t*>(p);
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] != 0;
    return a;
  }
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(size_of(t)) != 0) {
    Array a = Array::empty_available(e.shape, t);
    std::memcpy(a.raw_data(), p, static_cast<size_t>(n) * size_of(t));
    return a;
  }
  // In place: the mapping lives as long as an array needs it.
  return Array::from_buffer(const_cast<std::byte*>(p), e.shape, t, [file](void*) {});
}

std::string metadata_value(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

SafetensorsFile read_one(const std::filesystem::path& path) {
  auto file = std::make_shared<const Mapping>(path);
  const size_t size = file->size();
  if (size < 8) bad(path, "truncated", fmt::format("{} bytes, but the header length alone takes 8", size));
  uint64_t header = 0;
  for (int k = 7; k >= 0; --k) header = (header << 8) | static_cast<uint8_t>(file->data()[k]);
  if (header > kMaxHeaderBytes)
    bad(path, "header too large", fmt::format("{} bytes (the format allows {})", header, kMaxHeaderBytes));
  if (header > size - 8)
    bad(path, "header length past the end of the file",
        fmt::format("a header of {} bytes in a file of {}", header, size));
  const std::string_view text(reinterpret_cast<const char*>(file->data() + 8), header);
  const Json j = parse_object(path, text, "header is not a JSON object");
  const uint64_t data_size = size - 8 - header;
  const std::byte* data = file->data() + 8 + header;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object())
        bad(path, "bad __metadata__", fmt::format("a JSON {}, not an object", v.type_name()));
      for (const auto& [k, value] : v.items()) {
        if (!value.is_string())
          bad(path, "bad __metadata__", fmt::format("'{}' holds {}, not a string", k, value.dump()));
        out.metadata[k] = value.get<std::string>();
      }
      continue;
    }
    if (name.empty()) bad(path, "bad tensor entry", "a tensor with an empty name");
    entries.push_back(parse_entry(path, name, v, data_size));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t at = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < at)
      bad(path, "tensors overlap",
          fmt::format("'{}' [{}, {}] and '{}' [{}, {}]", previous->name, previous->begin, previous->end,
                      e.name, e.begin, e.end));
    if (e.begin > at)
      bad(path, "bytes no tensor covers", fmt::format("[{}, {}) before '{}'", at, e.begin, e.name));
    at = e.end;
    previous = &e;
  }
  if (at != data_size)
    bad(path, "bytes no tensor covers",
        fmt::format("[{}, {}) at the end of the data section", at, data_size));
  for (const Entry& e : entries) out.tensors.set(e.name, make_array(file, data + e.begin, e));
  return out;
}

bool is_index(const std::filesystem::path& path) { return path.extension() == ".json"; }

SafetensorsFile read_index(const std::filesystem::path& path) {
  std::string text;
  {
    const auto file = std::make_shared<const Mapping>(path);
    if (file->size() > kMaxHeaderBytes) bad(path, "index too large", fmt::format("{} bytes", file->size()));
    text.assign(reinterpret_cast<const char*>(file->data()), file->size());
  }
  const Json j = parse_object(path, text, "index is not a JSON object");
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    bad(path, "bad index", "no weight_map object");
  SafetensorsFile out;
  if (j.contains("metadata")) {
    if (!j["metadata"].is_object()) bad(path, "bad index", "metadata is not an object");
    for (const auto& [k, v] : j["metadata"].items()) out.metadata[k] = metadata_value(v);
  }
  std::map<std::string, SafetensorsFile> shards;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string() || shard.get<std::string>().empty())
      bad(path, "bad index", fmt::format("'{}' maps to {}, not a file name", name, shard.dump()));
    const std::filesystem::path rel(shard.get<std::string>());
    if (rel.is_absolute())
      bad(path, "bad index", fmt::format("'{}' maps to the absolute path {}", name, rel.string()));
    auto it = shards.find(rel.string());
    if (it == shards.end()) it = shards.emplace(rel.string(), read_one(path.parent_path() / rel)).first;
    if (!it->second.tensors.contains(name))
      throw FormatError::of(kLoad, "index names a tensor its shard lacks", "{}: '{}' in {}", path.string(),
                            name, (path.parent_path() / rel).string());
    out.tensors.set(name, it->second.tensors.at(name));
  }
  return out;
}

// ---------------------------------------------------------------- writing

struct Planned {
  std::string name;
  Array array;
  uint64_t begin, end;
};

std::string header_text(const std::vector<Planned>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  Json j = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  for (const Planned& p : tensors)
    j[p.name] = {{"dtype", format_name(p.array.dtype())},
                 {"shape", std::vector<int64_t>(p.array.shape())},
                 {"data_offsets", {p.begin, p.end}}};
  std::string text;
  try {
    text = j.dump();
  } catch (const Json::exception& e) {
    throw ValueError::of(kSave, "a key or metadata entry is not valid UTF-8", "{}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::vector<Planned> plan(const nn::ParamTree& tree) {
  std::vector<Planned> out;
  std::vector<Array> arrays;
  uint64_t at = 0;
  for (const auto& [key, a] : tree) {
    if (key.empty() || key == "__metadata__")
      throw ValueError::of(kSave, "a tensor name must be nonempty and not __metadata__", "'{}'", key);
    if (!format_name(a.dtype()))
      throw DtypeError::of(kSave, "no safetensors dtype", "{}", dtype_name(a.dtype()));
    const uint64_t bytes = static_cast<uint64_t>(a.nbytes());
    out.push_back({key, a, at, at + bytes});
    at += bytes;
    arrays.push_back(a);
  }
  eval(arrays);
  return out;
}

void write_file(const std::filesystem::path& path, const std::vector<Planned>& tensors,
                const std::map<std::string, std::string>& metadata) {
  const std::string header = header_text(tensors, metadata);
  detail::replace_atomically(kSave, path, [&](detail::TempFile& f) {
    unsigned char len[8];
    for (int k = 0; k < 8; ++k)
      len[k] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * k));
    f.write(len, 8);
    f.write(header.data(), header.size());
    std::vector<std::byte> dense;
    for (const Planned& p : tensors) {
      dense.resize(p.end - p.begin);
      if (dense.empty()) continue;
      kiln::detail::gather_row_major(p.array, dense.data(), p.array.dtype());
      f.write(dense.data(), dense.size());
    }
  });
}

}  // namespace

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  return is_index(path) ? read_index(path) : read_one(path);
}

nn::ParamTree load_safetensors(const std::filesystem::path& path) { return read_safetensors(path).tensors; }

void save_safetensors(const std::filesystem::path& path, const nn::ParamTree& tree,
                      const std::map<std::string, std::string>& metadata) {
  write_file(path, plan(tree), metadata);
}

void save_safetensors_sharded(const std::filesystem::path& index_path, const nn::ParamTree& tree,
                              int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes <= 0)
    throw ValueError::of(kSave, "max_shard_bytes must be positive", "{}", max_shard_bytes);
  const std::vector<Planned> all = plan(tree);
  // Greedy, in tree order: a shard takes arrays until the next would pass the limit.
  std::vector<std::vector<Planned>> shards;
  uint64_t in_shard = 0, total = 0;
  for (const Planned& p : all) {
    const uint64_t bytes = p.end - p.begin;
    if (shards.empty() || (in_shard > 0 && in_shard + bytes > static_cast<uint64_t>(max_shard_bytes))) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back({p.name, p.array, in_shard, in_shard + bytes});
    in_shard += bytes;
    total += bytes;
  }
  std::string stem = index_path.filename().string();
  for (const char* suffix : {".json", ".index", ".safetensors"})
    if (stem.ends_with(suffix)) stem.resize(stem.size() - std::strlen(suffix));
  Json weight_map = Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, i + 1, shards.size());
    write_file(index_path.parent_path() / name, shards[i], metadata);
    for (const Planned& p : shards[i]) weight_map[p.name] = name;
  }
  Json meta = Json::object();
  meta["total_size"] = total;
  for (const auto& [k, v] : metadata) meta[k] = v;
  const Json index = {{"metadata", meta}, {"weight_map", weight_map}};
  std::string text;
  try {
    text = index.dump(2);
  } catch (const Json::exception& e) {
    throw ValueError::of(kSave, "a key or metadata entry is not valid UTF-8", "{}", e.what());
  }
  detail::replace_atomically(kSave, index_path,
                             [&](detail::TempFile& f) { f.write(text.data(), text.size()); });
}

}  // namespace kiln::io
