#include "kiln/io/hdf5_impl.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kiln/core/error.h"

namespace kiln::io::detail {
namespace {

namespace fs = std::filesystem;

// Guards every libhdf5 call in the process (see the header).
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

// Bounds on what a file may ask us to allocate for names and string attributes; real files stay
// far below them (Keras' longest attribute is split into 64 KiB pieces).
constexpr size_t kMaxNameBytes = size_t{1} << 16;
constexpr int64_t kMaxStringBytes = int64_t{1} << 26;
constexpr int64_t kMaxStrings = int64_t{1} << 20;
// Deflate expands at most ~1032x; 1100 leaves room for chunk padding.
constexpr int64_t kMaxExpansion = 1100;

std::string join_where(const std::string& where, const std::string& name) {
  return where.empty() || where == "/" ? "/" + name : where + "/" + name;
}

// Natural order: runs of digits compare as numbers, so "layers/2" sorts before "layers/10".
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      size_t si = i, sj = j;  // skip leading zeros
      while (si + 1 < ei && a[si] == '0') ++si;
      while (sj + 1 < ej && b[sj] == '0') ++sj;
      const std::string_view na(a.data() + si, ei - si), nb(b.data() + sj, ej - sj);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;
}

// IEEE half in the host's byte order, built as h5py builds numpy's float16.
Hid half_type() {
  Hid t(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
  if (!t.valid() || H5Tset_fields(t.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(t.get(), 2) < 0 ||
      H5Tset_ebias(t.get(), 15) < 0)
    return Hid();
  return t;
}

// h5py's bool: an int8 enum {FALSE = 0, TRUE = 1}.
Hid bool_type() {
  Hid t(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
  const int8_t no = 0, yes = 1;
  if (!t.valid() || H5Tenum_insert(t.get(), "FALSE", &no) < 0 || H5Tenum_insert(t.get(), "TRUE", &yes) < 0)
    return Hid();
  return t;
}

Hid copy_type(hid_t t) { return Hid(H5Tcopy(t), H5Tclose); }

// What the file stores, and the kiln dtype it maps to when there is one.
struct StoredType {
  std::optional<Dtype> dtype;
  std::string name;
  bool is_enum_bool = false;
  bool is_int16 = false;  // 2-byte integer: bfloat16's carrier when the attribute says so
  bool is_signed = false;
};

bool is_h5py_bool(hid_t t) {
  if (H5Tget_size(t) != 1 || H5Tget_nmembers(t) != 2) return false;
  bool seen_false = false, seen_true = false;
  for (unsigned i = 0; i < 2; ++i) {
    char* name = H5Tget_member_name(t, i);
    unsigned char value = 0xff;
    const bool ok = name != nullptr && H5Tget_member_value(t, i, &value) >= 0;
    const std::string n = name ? name : "";
    if (name) H5free_memory(name);
    if (!ok) return false;
    seen_false |= n == "FALSE" && value == 0;
    seen_true |= n == "TRUE" && value == 1;
  }
  return seen_false && seen_true;
}

StoredType classify(hid_t t) {
  StoredType s;
  const size_t size = H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: {
      s.is_signed = H5Tget_sign(t) == H5T_SGN_2;
      s.name = fmt::format("{}int{}", s.is_signed ? "" : "u", size * 8);
      s.is_int16 = size == 2;
      if (size == 1) s.dtype = s.is_signed ? int8 : uint8;
      if (size == 2) s.dtype = s.is_signed ? int16 : uint16;
      if (size == 4) s.dtype = s.is_signed ? int32 : uint32;
      if (size == 8) s.dtype = s.is_signed ? int64 : uint64;
      return s;
    }
    case H5T_FLOAT: {
      s.name = fmt::format("float{}", size * 8);
      if (size == 2) {
        size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
        H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
        if (spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(t) == 15)
          s.dtype = float16;
        else
          s.name = "a 2-byte float that is not IEEE half";
      }
      if (size == 4) s.dtype = float32;
      if (size == 8) s.dtype = float64;
      return s;
    }
    case H5T_ENUM:
      if (is_h5py_bool(t)) {
        s.dtype = bool_;
        s.is_enum_bool = true;
        s.name = "bool";
      } else {
        s.name = "an enum";
      }
      return s;
    case H5T_STRING:
      s.name = "strings";
      return s;
    case H5T_COMPOUND:
      s.name = "a compound type";
      return s;
    default:
      s.name = fmt::format("HDF5 type class {}", static_cast<int>(H5Tget_class(t)));
      return s;
  }
}

std::optional<Dtype> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDtypes; ++i)
    if (dtype_name(static_cast<Dtype>(i)) == name) return static_cast<Dtype>(i);
  return std::nullopt;
}

// The type libhdf5 converts into: the stored type itself where it already is what kiln holds, so
// the bytes are copied as they are (NaN payloads survive), a native type otherwise (byte order).
Hid memory_type(Dtype d, hid_t file_type, const StoredType& s) {
  switch (d) {
    case Dtype::bool_:
      if (s.is_enum_bool) return copy_type(file_type);
      return copy_type(s.is_signed ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8);  // nonzero is true, below
    case Dtype::uint8:
      return copy_type(H5T_NATIVE_UINT8);
    case Dtype::int8:
      return copy_type(H5T_NATIVE_INT8);
    case Dtype::int16:
      return copy_type(H5T_NATIVE_INT16);
    case Dtype::uint16:
      return copy_type(H5T_NATIVE_UINT16);
    case Dtype::uint64:
      return copy_type(H5T_NATIVE_UINT64);
    case Dtype::int32:
      return copy_type(H5T_NATIVE_INT32);
    case Dtype::uint32:
      return copy_type(H5T_NATIVE_UINT32);
    case Dtype::int64:
      return copy_type(H5T_NATIVE_INT64);
    case Dtype::bfloat16:  // the sign of the carrier is kept so no value is clamped
      return copy_type(s.is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16);
    case Dtype::float16:
      return half_type();
    case Dtype::float32:
      return copy_type(H5T_NATIVE_FLOAT);
    case Dtype::float64:
      return copy_type(H5T_NATIVE_DOUBLE);
  }
  return Hid();
}

Hid file_type(Dtype d) {
  switch (d) {
    case Dtype::bool_:
      return bool_type();
    case Dtype::bfloat16:
      return copy_type(H5T_NATIVE_UINT16);
    case Dtype::float16:
      return half_type();
    default:
      return memory_type(d, H5I_INVALID_HID, StoredType{});
  }
}

// The kiln dtype of a dataset: its stored type refined by its `dtype` attribute.
Dtype dataset_dtype(const Hdf5Lock& lock, const Hdf5Source& src, hid_t dset, hid_t ftype,
                    const StoredType& stored, const std::string& key) {
  if (!has_attribute(lock, dset, "dtype")) {
    if (!stored.dtype)
      throw DtypeError::of(src.op, "dataset type has no kiln dtype", "{}: '{}' is stored as {}", src.path,
                           key, stored.name);
    return *stored.dtype;
  }
  const auto names = read_string_attribute(lock, src, dset, "dtype", key);
  if (names.size() != 1)
    throw FormatError::of(src.op, "bad dtype attribute", "{}: '{}' has {} dtype strings, expected one",
                          src.path, key, names.size());
  const auto named = dtype_from_name(names[0]);
  if (!named)
    throw DtypeError::of(src.op, "dtype attribute names no kiln dtype", "{}: '{}' says '{}'", src.path, key,
                         names[0]);
  bool fits = stored.dtype == named;
  if (*named == bfloat16) fits = stored.is_int16;
  if (*named == bool_)
    fits = stored.dtype == bool_ || (H5Tget_class(ftype) == H5T_INTEGER && H5Tget_size(ftype) == 1);
  if (!fits)
    throw FormatError::of(src.op, "dtype attribute contradicts the stored type",
                          "{}: '{}' says {} but is stored as {}", src.path, key, names[0], stored.name);
  return *named;
}

}  // namespace

// ---------------------------------------------------------------- lock, handles, errors

Hdf5Lock::Hdf5Lock() : lock_(hdf5_mutex()) { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Hid& Hid::operator=(Hid&& o) noexcept {
  if (this != &o) {
    close();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

herr_t Hid::close() {
  herr_t status = 0;
  if (id_ >= 0 && close_ != nullptr) status = close_(id_);
  id_ = H5I_INVALID_HID;
  return status;
}

std::string hdf5_error_text(const Hdf5Lock&) {
  struct Walk {
    std::string inner, outer;
  } w;
  auto visit = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* walk = static_cast<Walk*>(data);
    if (e->desc != nullptr && *e->desc != '\0') {
      if (walk->inner.empty()) walk->inner = e->desc;  // the walk starts at the innermost frame
      walk->outer = e->desc;
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &w);
  H5Eclear2(H5E_DEFAULT);
  if (w.inner == w.outer) return w.inner;
  return w.outer + " (" + w.inner + ")";
}

// ---------------------------------------------------------------- files and groups

Hdf5Source open_for_read(const Hdf5Lock& lock, const fs::path& path, const char* op) {
  const std::string p = path.string();
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st)) throw RuntimeError::of(op, "file not found", "{}", p);
  if (fs::is_directory(st)) throw RuntimeError::of(op, "cannot read file", "{}: is a folder", p);
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError::of(op, "cannot open file", "{}: {}", p, std::strerror(errno));
  ::close(fd);
  const auto size = fs::file_size(path, ec);
  if (ec) throw RuntimeError::of(op, "cannot read file", "{}: {}", p, ec.message());

#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = H5Fis_accessible(p.c_str(), H5P_DEFAULT);
#else
  const htri_t is_hdf5 = H5Fis_hdf5(p.c_str());
#endif
  if (is_hdf5 <= 0) {
    const std::string why = hdf5_error_text(lock);
    throw FormatError::of(op, "not an HDF5 file", "{}{}{}", p, why.empty() ? "" : ": ", why);
  }
  Hid file(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid())
    throw FormatError::of(op, "cannot open HDF5 file (truncated or corrupt)", "{}: {}", p,
                          hdf5_error_text(lock));
  return Hdf5Source{op, p, static_cast<int64_t>(size), std::move(file)};
}

std::vector<Child> list_children(const Hdf5Lock& lock, const Hdf5Source& src, hid_t group,
                                 const std::string& where) {
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0)
    throw FormatError::of(src.op, "cannot list group", "{}: {}: {}", src.path, where, hdf5_error_text(lock));
  if (info.nlinks > static_cast<hsize_t>(src.file_size))
    throw FormatError::of(src.op, "corrupt group", "{}: {} claims {} links in a file of {} bytes", src.path,
                          where, info.nlinks, src.file_size);
  H5_index_t index = H5_INDEX_NAME;
  {
    Hid gcpl(H5Gget_create_plist(group), H5Pclose);
    unsigned flags = 0;
    if (gcpl.valid() && H5Pget_link_creation_order(gcpl.get(), &flags) >= 0 &&
        (flags & H5P_CRT_ORDER_INDEXED))
      index = H5_INDEX_CRT_ORDER;
  }
  std::vector<Child> out;
  out.reserve(static_cast<size_t>(info.nlinks));
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0 || static_cast<size_t>(len) > kMaxNameBytes)
      throw FormatError::of(src.op, "corrupt link name", "{}: link {} of {}{}{}", src.path, i, where,
                            len < 0 ? ": " : "", len < 0 ? hdf5_error_text(lock) : "name too long");
    std::string name(static_cast<size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT) < 0)
      throw FormatError::of(src.op, "corrupt link name", "{}: link {} of {}: {}", src.path, i, where,
                            hdf5_error_text(lock));
    name.resize(static_cast<size_t>(len));
    auto child = open_child(lock, src, group, name, where);
    if (!child)
      throw FormatError::of(src.op, "corrupt group", "{}: listed link {} is missing", src.path,
                            join_where(where, name));
    out.push_back(std::move(*child));
  }
  if (index == H5_INDEX_NAME)
    std::stable_sort(out.begin(), out.end(),
                     [](const Child& a, const Child& b) { return natural_less(a.name, b.name); });
  return out;
}

std::optional<Child> open_child(const Hdf5Lock& lock, const Hdf5Source& src, hid_t group,
                                const std::string& name, const std::string& where) {
  const std::string path = join_where(where, name);
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw FormatError::of(src.op, "bad link name", "{}: '{}'", src.path, path);
  const htri_t exists = H5Lexists(group, name.c_str(), H5P_DEFAULT);
  if (exists < 0)
    throw FormatError::of(src.op, "cannot read link", "{}: {}: {}", src.path, path, hdf5_error_text(lock));
  if (exists == 0) return std::nullopt;
  H5L_info_t link{};
  if (H5Lget_info(group, name.c_str(), &link, H5P_DEFAULT) < 0)
    throw FormatError::of(src.op, "cannot read link", "{}: {}: {}", src.path, path, hdf5_error_text(lock));
  // Soft links can form cycles and external links open other files: kiln never writes either.
  if (link.type != H5L_TYPE_HARD)
    throw FormatError::of(src.op, "soft and external links are not followed", "{}: {}", src.path, path);
  Child c{name, ObjectKind::other, Hid(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose)};
  if (!c.object.valid())
    throw FormatError::of(src.op, "cannot open object", "{}: {}: {}", src.path, path, hdf5_error_text(lock));
  const H5I_type_t type = H5Iget_type(c.object.get());
  if (type == H5I_GROUP) c.kind = ObjectKind::group;
  if (type == H5I_DATASET) c.kind = ObjectKind::dataset;
  return c;
}

std::string object_identity(const Hdf5Lock& lock, hid_t obj) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info{};
  if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) {
    hdf5_error_text(lock);
    return {};
  }
  std::string id(sizeof info.fileno + sizeof info.token, '\0');
  std::memcpy(id.data(), &info.fileno, sizeof info.fileno);
  std::memcpy(id.data() + sizeof info.fileno, &info.token, sizeof info.token);
#else
  H5O_info_t info{};
  if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) {
    hdf5_error_text(lock);
    return {};
  }
  std::string id(sizeof info.fileno + sizeof info.addr, '\0');
  std::memcpy(id.data(), &info.fileno, sizeof info.fileno);
  std::memcpy(id.data() + sizeof info.fileno, &info.addr, sizeof info.addr);
#endif
  return id;
}

Hid create_file(const Hdf5Lock& lock, const fs::path& path, const char* op) {
  Hid fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (!fcpl.valid() ||
      H5Pset_link_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0)
    throw RuntimeError::of(op, "cannot create file", "{}: {}", path.string(), hdf5_error_text(lock));
  Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose);
  if (!file.valid())
    throw RuntimeError::of(op, "cannot create file", "{}: {}", path.string(), hdf5_error_text(lock));
  return file;
}

Hid create_group(const Hdf5Lock& lock, hid_t parent, const std::string& name, const std::string& file,
                 const std::string& key) {
  Hid gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  if (gcpl.valid()) H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Hid g(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
  if (!g.valid())
    throw RuntimeError::of("save_weights", "cannot create group", "{}: group '{}' for '{}': {}", file, name,
                           key, hdf5_error_text(lock));
  return g;
}

// ---------------------------------------------------------------- attributes

bool has_attribute(const Hdf5Lock& lock, hid_t obj, const char* name) {
  const htri_t r = H5Aexists(obj, name);
  if (r < 0) hdf5_error_text(lock);
  return r > 0;
}

std::vector<std::string> read_string_attribute(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj,
                                               const char* name, const std::string& where) {
  auto fail = [&](const std::string& why) {
    return FormatError::of(src.op, "bad string attribute", "{}: attribute '{}' of '{}': {}", src.path, name,
                           where, why);
  };
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) throw fail(hdf5_error_text(lock));
  Hid type(H5Aget_type(attr.get()), H5Tclose);
  Hid space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.valid() || !space.valid()) throw fail(hdf5_error_text(lock));
  int64_t n = 1;
  const H5S_class_t sclass = H5Sget_simple_extent_type(space.get());
  if (sclass == H5S_SIMPLE) {
    if (H5Sget_simple_extent_ndims(space.get()) != 1) throw fail("not a scalar or a list");
    hsize_t dim = 0;
    H5Sget_simple_extent_dims(space.get(), &dim, nullptr);
    if (dim > static_cast<hsize_t>(kMaxStrings)) throw fail(fmt::format("{} strings", dim));
    n = static_cast<int64_t>(dim);
  } else if (sclass != H5S_SCALAR) {
    throw fail("empty dataspace");
  }
  std::vector<std::string> out;
  if (n == 0) return out;  // Keras writes an empty list as an empty float64 array
  if (H5Tget_class(type.get()) != H5T_STRING) throw fail("not a string");
  out.reserve(static_cast<size_t>(n));
  const htri_t variable = H5Tis_variable_str(type.get());
  if (variable < 0) throw fail(hdf5_error_text(lock));
  if (variable > 0) {
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    if (n > 0 && H5Aread(attr.get(), mem.get(), ptrs.data()) < 0) throw fail(hdf5_error_text(lock));
    int64_t total = 0;
    for (char* p : ptrs) {
      const size_t len = p ? std::strlen(p) : 0;
      total += static_cast<int64_t>(len);
      if (total <= kMaxStringBytes) out.emplace_back(p ? p : "", len);
    }
#if H5_VERSION_GE(1, 12, 0)
    if (n > 0) H5Treclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
#else
    if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
#endif
    if (total > kMaxStringBytes) throw fail(fmt::format("{} bytes of strings", total));
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || static_cast<int64_t>(size) > kMaxStringBytes ||
      n * static_cast<int64_t>(size) > kMaxStringBytes)
    throw fail(fmt::format("{} strings of {} bytes", n, size));
  Hid mem(H5Tcopy(type.get()), H5Tclose);
  std::vector<char> buf(static_cast<size_t>(n) * size);
  if (n > 0 && H5Aread(attr.get(), mem.get(), buf.data()) < 0) throw fail(hdf5_error_text(lock));
  const bool space_padded = H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD;
  for (int64_t i = 0; i < n; ++i) {
    const char* p = buf.data() + i * static_cast<int64_t>(size);
    size_t len = strnlen(p, size);
    if (space_padded)
      while (len > 0 && p[len - 1] == ' ') --len;
    out.emplace_back(p, len);
  }
  return out;
}

std::vector<std::string> attribute_names(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj,
                                         const std::string& where) {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t index = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &index, visit, &names) < 0)
    throw FormatError::of(src.op, "cannot list attributes", "{}: '{}': {}", src.path, where,
                          hdf5_error_text(lock));
  return names;
}

int64_t read_int_attribute(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj, const char* name,
                           const std::string& where) {
  auto fail = [&](const std::string& why) {
    return FormatError::of(src.op, "bad integer attribute", "{}: attribute '{}' of '{}': {}", src.path, name,
                           where, why);
  };
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) throw fail(hdf5_error_text(lock));
  Hid type(H5Aget_type(attr.get()), H5Tclose);
  Hid space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.valid() || !space.valid()) throw fail(hdf5_error_text(lock));
  if (H5Tget_class(type.get()) != H5T_INTEGER) throw fail("not an integer");
  if (H5Sget_simple_extent_npoints(space.get()) != 1) throw fail("not a single value");
  int64_t value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0) throw fail(hdf5_error_text(lock));
  return value;
}

void write_string_attribute(const Hdf5Lock& lock, hid_t obj, const char* name, const std::string& value,
                            const std::string& file) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  bool ok = type.valid() && space.valid() && H5Tset_size(type.get(), H5T_VARIABLE) >= 0 &&
            H5Tset_cset(type.get(), H5T_CSET_UTF8) >= 0;
  Hid attr;
  if (ok) attr = Hid(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* p = value.c_str();
  ok = ok && attr.valid() && H5Awrite(attr.get(), type.get(), &p) >= 0;
  if (!ok)
    throw RuntimeError::of("save_weights", "cannot write attribute", "{}: '{}': {}", file, name,
                           hdf5_error_text(lock));
}

void write_int_attribute(const Hdf5Lock& lock, hid_t obj, const char* name, int64_t value,
                         const std::string& file) {
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid attr;
  if (space.valid())
    attr = Hid(H5Acreate2(obj, name, H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    throw RuntimeError::of("save_weights", "cannot write attribute", "{}: '{}': {}", file, name,
                           hdf5_error_text(lock));
}

// ---------------------------------------------------------------- datasets

int64_t read_budget(int64_t file_size) {
  int64_t b = 0;
  if (__builtin_mul_overflow(file_size, kMaxExpansion, &b)) return std::numeric_limits<int64_t>::max();
  return b + (int64_t{1} << 20);
}

RawArray read_dataset(const Hdf5Lock& lock, const Hdf5Source& src, hid_t dset, const std::string& key,
                      int64_t& budget) {
  auto malformed = [&](const char* what, const std::string& why) {
    return FormatError::of(src.op, what, "{}: dataset '{}': {}", src.path, key, why);
  };
  Hid ftype(H5Dget_type(dset), H5Tclose);
  Hid space(H5Dget_space(dset), H5Sclose);
  if (!ftype.valid() || !space.valid()) throw malformed("corrupt dataset", hdf5_error_text(lock));

  Shape shape;
  const H5S_class_t sclass = H5Sget_simple_extent_type(space.get());
  if (sclass == H5S_SIMPLE) {
    const int ndim = H5Sget_simple_extent_ndims(space.get());
    if (ndim < 0 || ndim > kMaxDims)
      throw malformed("too many dimensions",
                      fmt::format("rank {}, kiln arrays have at most {}", ndim, kMaxDims));
    hsize_t dims[H5S_MAX_RANK] = {};
    if (H5Sget_simple_extent_dims(space.get(), dims, nullptr) != ndim)
      throw malformed("corrupt dataspace", hdf5_error_text(lock));
    for (int d = 0; d < ndim; ++d) {
      if (dims[d] > static_cast<hsize_t>(std::numeric_limits<int64_t>::max()))
        throw malformed("dimensions overflow", fmt::format("dimension {} is {}", d, dims[d]));
      shape.push_back(static_cast<int64_t>(dims[d]));
    }
  } else if (sclass != H5S_SCALAR) {
    throw malformed("empty dataspace", "H5S_NULL holds no array");
  }

  const StoredType stored = classify(ftype.get());
  const Dtype dtype = dataset_dtype(lock, src, dset, ftype.get(), stored, key);
  const int64_t file_itemsize = static_cast<int64_t>(H5Tget_size(ftype.get()));
  if (file_itemsize != size_of(dtype))
    throw malformed("corrupt type", fmt::format("{} bytes per {} element", file_itemsize, dtype_name(dtype)));
  int64_t count = 1, bytes = 0;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(count, d, &count))
      throw malformed("dimensions overflow",
                      fmt::format("the product of {} does not fit in 64 bits", shape_str(shape)));
  if (__builtin_mul_overflow(count, file_itemsize, &bytes))
    throw malformed("dimensions overflow", fmt::format("{} elements of {} bytes", count, file_itemsize));

  // The storage must hold what the shape says before anything that size is allocated.
  Hid dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid()) throw malformed("corrupt dataset", hdf5_error_text(lock));
  if (H5Pget_external_count(dcpl.get()) > 0)
    throw malformed("external storage is not read", "its data lives in other files");
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  const auto storage = static_cast<int64_t>(H5Dget_storage_size(dset));
  const std::string need = fmt::format("shape {} of {} needs {} bytes", shape_str(shape), stored.name, bytes);
  if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    if (bytes > 0 && storage != bytes)
      throw malformed("truncated dataset", fmt::format("{}, the file stores {}", need, storage));
    if (layout == H5D_CONTIGUOUS && bytes > 0) {
      const haddr_t offset = H5Dget_offset(dset);
      if (offset == HADDR_UNDEF || offset > static_cast<haddr_t>(src.file_size) ||
          static_cast<haddr_t>(src.file_size) - offset < static_cast<haddr_t>(bytes))
        throw malformed(
            "truncated dataset",
            fmt::format("{} at offset {}, the file has {} bytes", need,
                        offset == HADDR_UNDEF ? -1 : static_cast<int64_t>(offset), src.file_size));
    }
  } else if (layout == H5D_CHUNKED) {
    if (bytes > 0 && (storage == 0 || bytes / kMaxExpansion > storage))
      throw malformed("truncated dataset", fmt::format("{}, the file stores {} compressed", need, storage));
  } else {
    throw malformed("unsupported storage layout", "virtual or unknown layouts are not read");
  }
  if (bytes > budget)
    throw malformed(
        "file expands past its size",
        fmt::format("{} more bytes than the file could hold after decompression", bytes - budget));
  budget -= bytes;

  RawArray out{dtype, std::move(shape), std::vector<std::byte>(static_cast<size_t>(bytes))};
  if (count > 0) {
    Hid mem = memory_type(dtype, ftype.get(), stored);
    if (!mem.valid() || H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.bytes.data()) < 0)
      throw malformed("cannot read dataset", hdf5_error_text(lock));
    if (dtype == bool_)  // kiln bools are 0 or 1
      for (std::byte& b : out.bytes) b = std::byte{b != std::byte{0}};
  }
  return out;
}

void write_dataset(const Hdf5Lock& lock, hid_t parent, const std::string& name, const Array& value,
                   const std::string& file, const std::string& key) {
  auto fail = [&] {
    return RuntimeError::of("save_weights", "cannot write dataset", "{}: '{}': {}", file, key,
                            hdf5_error_text(lock));
  };
  Hid type = file_type(value.dtype());
  std::vector<hsize_t> dims(value.shape().begin(), value.shape().end());
  Hid space(value.ndim() == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(value.ndim(), dims.data(), nullptr),
            H5Sclose);
  if (!type.valid() || !space.valid()) throw fail();
  Hid dset(H5Dcreate2(parent, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
  if (!dset.valid()) throw fail();
  if (value.size() > 0 &&
      H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, value.raw_data()) < 0)
    throw fail();
  write_string_attribute(lock, dset.get(), "dtype", std::string(dtype_name(value.dtype())), file);
}

}  // namespace kiln::io::detail
