#include "kiln/io/hdf5_weights.h"

#include <set>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/io/atomic_file_impl.h"
#include "kiln/io/hdf5_impl.h"
#include "kiln/io/hdf5_isolated_impl.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using detail::Child;
using detail::Entry;
using detail::Hdf5Lock;
using detail::Hdf5Source;
using detail::Hid;
using detail::ObjectKind;
using detail::RawEntry;

constexpr const char* kVersionAttribute = "kiln_format_version";

std::vector<std::string> split_key(std::string_view key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    parts.emplace_back(
        key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

// Every key must become a path of groups ending in a dataset; checked before anything is written.
std::vector<std::vector<std::string>> check_keys(const nn::ParamTree& tree, const std::string& file) {
  std::vector<std::vector<std::string>> paths;
  std::set<std::string, std::less<>> keys;
  for (const auto& [key, value] : tree) {
    auto parts = split_key(key);
    for (const std::string& p : parts) {
      if (p.empty()) throw KeyError::of("save_weights", "key has an empty component", "{}: '{}'", file, key);
      if (p.find('/') != std::string::npos)
        throw KeyError::of("save_weights", "key holds '/', HDF5's path separator", "{}: '{}'", file, key);
    }
    if (!value.valid()) throw ValueError::of("save_weights", "empty array", "{}: '{}'", file, key);
    paths.push_back(std::move(parts));
    keys.insert(key);
  }
  // "a" and "a.b": /a cannot be both a dataset and a group. Such keys sort right after "a.".
  for (const std::string& k : keys) {
    const std::string group = k + ".";
    const auto it = keys.lower_bound(group);
    if (it != keys.end() && it->starts_with(group))
      throw KeyError::of("save_weights", "keys collide as HDF5 groups",
                         "{}: '{}' is a dataset but '{}' needs it to be a group", file, k, *it);
  }
  return paths;
}

// The arrays to write: evaluated together, views copied to dense storage.
std::vector<Array> dense_values(const nn::ParamTree& tree) {
  nn::eval(tree);
  std::vector<Array> out;
  std::vector<Array> copies;
  for (const auto& [key, v] : tree) {
    out.push_back(v.row_contiguous() ? v : contiguous(v));
    if (!v.row_contiguous()) copies.push_back(out.back());
  }
  eval(copies);
  return out;
}

void write_file(const fs::path& tmp, const std::string& file, const nn::ParamTree& tree,
                const std::vector<std::vector<std::string>>& paths, const std::vector<Array>& values,
                const std::map<std::string, std::string>& metadata) {
  Hdf5Lock lock;
  Hid h5 = detail::create_file(lock, tmp, "save_weights");
  {
    Hid root(H5Gopen2(h5.get(), "/", H5P_DEFAULT), H5Gclose);
    if (!root.valid())
      throw RuntimeError::of("save_weights", "cannot write file", "{}: {}", file,
                             detail::hdf5_error_text(lock));
    detail::write_int_attribute(lock, root.get(), kVersionAttribute, kWeightsFormatVersion, file);
    for (const auto& [k, v] : metadata) detail::write_string_attribute(lock, root.get(), k.c_str(), v, file);
    std::map<std::string, Hid> groups;  // by dotted prefix
    size_t i = 0;
    for (const auto& item : tree) {
      const std::string& key = item.first;
      const auto& parts = paths[i];
      hid_t parent = root.get();
      std::string prefix;
      for (size_t p = 0; p + 1 < parts.size(); ++p) {
        prefix += (p == 0 ? "" : ".") + parts[p];
        auto it = groups.find(prefix);
        if (it == groups.end())
          it = groups.emplace(prefix, detail::create_group(lock, parent, parts[p], file, key)).first;
        parent = it->second.get();
      }
      detail::write_dataset(lock, parent, parts.back(), values[i], file, key);
      ++i;
    }
  }
  if (h5.close() < 0)
    throw RuntimeError::of("save_weights", "cannot write file", "{}: {}", file,
                           detail::hdf5_error_text(lock));
}

// Refuses files that are not kiln weights, naming what they look like when it can tell.
void check_version(const Hdf5Lock& lock, const Hdf5Source& src, hid_t root) {
  if (!detail::has_attribute(lock, root, kVersionAttribute)) {
    const bool keras = detail::has_attribute(lock, root, "layer_names") ||
                       detail::has_attribute(lock, root, "layer_names0") ||
                       H5Lexists(root, "model_weights", H5P_DEFAULT) > 0 ||
                       H5Lexists(root, "layers", H5P_DEFAULT) > 0;
    detail::hdf5_error_text(lock);
    throw FormatError::of(src.op, "not a kiln weights file", "{}: no '{}' attribute{}", src.path,
                          kVersionAttribute,
                          keras ? " (it looks like a Keras file: use io::load_keras_weights)" : "");
  }
  const int64_t version = detail::read_int_attribute(lock, src, root, kVersionAttribute, "/");
  if (version != kWeightsFormatVersion)
    throw FormatError::of(src.op, "unsupported format version", "{}: version {}, this kiln reads version {}",
                          src.path, version, kWeightsFormatVersion);
}

// In the reading child (hdf5_isolated_impl.h): one entry per dataset, named by its dotted key.
std::vector<RawEntry> read_tree(const Hdf5Lock& lock, const fs::path& path, std::string_view prefix) {
  Hdf5Source src = detail::open_for_read(lock, path, "load_weights");
  Hid root(H5Gopen2(src.file.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.valid())
    throw FormatError::of(src.op, "corrupt file", "{}: no root group: {}", src.path,
                          detail::hdf5_error_text(lock));
  check_version(lock, src, root.get());

  Hid start;
  std::string where = "/";
  if (!prefix.empty()) {
    for (const std::string& part : split_key(prefix)) {
      if (part.empty() || part.find('/') != std::string::npos)
        throw KeyError::of(src.op, "bad prefix", "{}: '{}'", src.path, prefix);
      auto child = detail::open_child(lock, src, start.valid() ? start.get() : root.get(), part, where);
      if (!child || child->kind != ObjectKind::group)
        throw KeyError::of(src.op, "no group with this prefix", "{}: '{}'{}", src.path, prefix,
                           child ? " is not a group" : "");
      where = where == "/" ? "/" + part : where + "/" + part;
      start = std::move(child->object);
    }
  }

  // Depth first in stored order with an explicit stack; groups seen once, so hard-link cycles end.
  struct Pending {
    Child child;
    std::string key, where;
  };
  std::vector<Pending> stack;
  std::set<std::string> seen;
  auto push_children = [&](hid_t group, const std::string& key, const std::string& at) {
    const std::string id = detail::object_identity(lock, group);
    if (!id.empty() && !seen.insert(id).second)
      throw FormatError::of(src.op, "group linked twice", "{}: '{}' (a cycle or a repeated group)", src.path,
                            at);
    auto kids = detail::list_children(lock, src, group, at);
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      std::string k = key.empty() ? it->name : key + "." + it->name;
      std::string w = at == "/" ? "/" + it->name : at + "/" + it->name;
      stack.push_back({std::move(*it), std::move(k), std::move(w)});
    }
  };
  push_children(start.valid() ? start.get() : root.get(), "", where);
  std::vector<RawEntry> out;
  std::set<std::string> keys;
  int64_t budget = detail::read_budget(src.file_size);
  while (!stack.empty()) {
    Pending p = std::move(stack.back());
    stack.pop_back();
    if (p.child.kind == ObjectKind::group) {
      push_children(p.child.object.get(), p.key, p.where);
    } else if (p.child.kind == ObjectKind::dataset) {
      if (!keys.insert(p.key).second)
        throw FormatError::of(src.op, "two datasets have one key", "{}: '{}'", src.path, p.key);
      out.push_back({{p.key}, detail::read_dataset(lock, src, p.child.object.get(), p.key, budget)});
    }  // named datatypes hold no weights
  }
  return out;
}

nn::ParamTree load(const fs::path& path, std::string_view prefix) {
  auto entries = detail::run_isolated(path, "load_weights",
                                      [&](const Hdf5Lock& lock) { return read_tree(lock, path, prefix); });
  nn::ParamTree tree;
  for (Entry& e : entries) {
    if (e.names.size() != 1 || !e.array)
      throw FormatError::of("load_weights", "the process reading the file returned a malformed result",
                            "{}: an entry of {} names{}", path.string(), e.names.size(),
                            e.array ? "" : " without an array");
    tree.set(std::move(e.names[0]), std::move(*e.array));
  }
  return tree;
}

// In the reading child: one entry {name, value} per string attribute of the root.
std::vector<RawEntry> read_metadata(const Hdf5Lock& lock, const fs::path& path) {
  Hdf5Source src = detail::open_for_read(lock, path, "load_weights_metadata");
  Hid root(H5Gopen2(src.file.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.valid())
    throw FormatError::of(src.op, "corrupt file", "{}: no root group: {}", src.path,
                          detail::hdf5_error_text(lock));
  check_version(lock, src, root.get());
  std::vector<RawEntry> out;
  for (const std::string& name : detail::attribute_names(lock, src, root.get(), "/")) {
    if (name == kVersionAttribute) continue;
    Hid attr(H5Aopen(root.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
    Hid type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID, H5Tclose);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING) {
      detail::hdf5_error_text(lock);
      continue;  // only string attributes are metadata
    }
    auto values = detail::read_string_attribute(lock, src, root.get(), name.c_str(), "/");
    if (values.size() == 1) out.push_back({{name, std::move(values[0])}, std::nullopt});
  }
  return out;
}

}  // namespace

void save_weights(const fs::path& path, const nn::ParamTree& tree,
                  const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  for (const auto& [k, v] : metadata) {
    if (k.empty() || k == kVersionAttribute)
      throw ValueError::of("save_weights", "reserved or empty metadata key", "{}: '{}'", file, k);
    if (k.find('\0') != std::string::npos || v.find('\0') != std::string::npos)
      throw ValueError::of("save_weights", "metadata holds a NUL character", "{}: key '{}'", file, k);
  }
  const auto paths = check_keys(tree, file);
  const std::vector<Array> values = dense_values(tree);

  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    throw RuntimeError::of("save_weights", "folder does not exist", "{}", file);
  if (fs::is_directory(path, ec))
    throw RuntimeError::of("save_weights", "cannot write file", "{}: is a folder", file);
  // libhdf5 writes the temporary file itself, through its path.
  detail::replace_atomically("save_weights", path, [&](detail::TempFile& tmp) {
    write_file(tmp.path(), file, tree, paths, values, metadata);
  });
}

nn::ParamTree load_weights(const fs::path& path) { return load(path, {}); }

nn::ParamTree load_weights(const fs::path& path, std::string_view prefix) {
  if (prefix.empty()) throw KeyError::of("load_weights", "empty prefix", "{}", path.string());
  return load(path, prefix);
}

std::map<std::string, std::string> load_weights_metadata(const fs::path& path) {
  const auto entries = detail::run_isolated(path, "load_weights_metadata",
                                            [&](const Hdf5Lock& lock) { return read_metadata(lock, path); });
  std::map<std::string, std::string> out;
  for (const Entry& e : entries) {
    if (e.names.size() != 2 || e.array)
      throw FormatError::of("load_weights_metadata",
                            "the process reading the file returned a malformed result",
                            "{}: an entry of {} names", path.string(), e.names.size());
    out[e.names[0]] = e.names[1];
  }
  return out;
}

}  // namespace kiln::io
