#include "kiln/io/keras_weights.h"

#include <algorithm>
#include <set>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/shape.h"
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

constexpr const char* kOp = "load_keras_weights";

// One weight as the file holds it.
struct RawWeight {
  std::vector<std::string> parts;  // key components below the module prefix ("kernel"; "dense", "kernel")
  Array value;
  std::string source;  // for messages: "dense_1/dense_1/kernel:0" or "layers/dense/vars/0"
};
struct RawLayer {
  std::string name;  // as the file spells it; the key of KerasNameMap
  std::vector<RawWeight> weights;
};

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.emplace_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : std::string(sep)) + p;
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A layer's kind is its default name without the "_<n>" Keras appends to repeats: "dense_3" -> "dense".
std::string layer_kind(std::string_view name) {
  const size_t us = name.rfind('_');
  if (us != std::string_view::npos && all_digits(name.substr(us + 1))) name = name.substr(0, us);
  return std::string(name);
}

// Keras splits long list attributes into name0, name1, ... (HDF5 caps an object header at 64 KiB).
std::vector<std::string> list_attribute(const Hdf5Lock& lock, const Hdf5Source& src, hid_t obj,
                                        const std::string& name, const std::string& where) {
  if (detail::has_attribute(lock, obj, name.c_str()))
    return detail::read_string_attribute(lock, src, obj, name.c_str(), where);
  std::vector<std::string> out;
  for (int i = 0;; ++i) {
    const std::string piece = name + std::to_string(i);
    if (!detail::has_attribute(lock, obj, piece.c_str())) break;
    for (std::string& s : detail::read_string_attribute(lock, src, obj, piece.c_str(), where))
      out.push_back(std::move(s));
  }
  return out;
}

// "dense_1/kernel:0" in layer "dense_1" -> {"kernel"}; "sequential/dense/kernel" in layer "dense"
// -> {"kernel"}; "dense/kernel:0" in layer "model" -> {"dense", "kernel"}.
std::vector<std::string> legacy_key_parts(const std::string& layer, std::vector<std::string> parts) {
  std::string& last = parts.back();
  const size_t colon = last.rfind(':');
  if (colon != std::string::npos && all_digits(std::string_view(last).substr(colon + 1))) last.resize(colon);
  const auto own = std::find(parts.begin(), parts.end() - 1, layer);
  if (own != parts.end() - 1) parts.erase(parts.begin(), own + 1);
  return parts;
}

// The reading child's result (hdf5_isolated_impl.h): each layer is an entry {layer name} followed
// by one entry {source, key parts...} with the array per weight.
void add_layer(std::vector<RawEntry>& out, const std::string& layer) {
  out.push_back({{layer}, std::nullopt});
}
void add_weight(std::vector<RawEntry>& out, const std::string& source, const std::vector<std::string>& parts,
                detail::RawArray value) {
  std::vector<std::string> names{source};
  names.insert(names.end(), parts.begin(), parts.end());
  out.push_back({std::move(names), std::move(value)});
}

void read_legacy(const Hdf5Lock& lock, const Hdf5Source& src, hid_t base, const std::string& where,
                 int64_t& budget, std::vector<RawEntry>& out) {
  for (const std::string& layer : list_attribute(lock, src, base, "layer_names", where)) {
    auto group = detail::open_child(lock, src, base, layer, where);
    if (!group || group->kind != ObjectKind::group)
      throw FormatError::of(kOp, "a layer of layer_names has no group", "{}: '{}'", src.path, layer);
    const std::string layer_where = (where == "/" ? "" : where) + "/" + layer;
    bool added = false;
    for (const std::string& wname :
         list_attribute(lock, src, group->object.get(), "weight_names", layer_where)) {
      const auto parts = split(wname, '/');
      const std::string source = layer + "/" + wname;
      Hid cur;
      std::string at = layer_where;
      for (size_t i = 0; i < parts.size(); ++i) {
        auto c =
            parts[i].empty()
                ? std::nullopt
                : detail::open_child(lock, src, cur.valid() ? cur.get() : group->object.get(), parts[i], at);
        const ObjectKind want = i + 1 == parts.size() ? ObjectKind::dataset : ObjectKind::group;
        if (!c || c->kind != want)
          throw FormatError::of(kOp, "a weight of weight_names is missing", "{}: '{}' of layer '{}'",
                                src.path, wname, layer);
        at += "/" + parts[i];
        cur = std::move(c->object);
      }
      if (!added) add_layer(out, layer);
      added = true;
      add_weight(out, source, legacy_key_parts(layer, parts),
                 detail::read_dataset(lock, src, cur.get(), source, budget));
    }
  }
}

// Keras 3 numbers a layer's variables; their names follow from the layer's kind.
std::vector<std::string> keras3_names(const Hdf5Source& src, const std::string& layer, size_t n) {
  const std::string kind = layer_kind(layer.substr(layer.rfind('/') + 1));
  std::vector<std::string> names;
  if (kind == "dense" || ((kind.starts_with("conv") && !kind.starts_with("conv_lstm"))))
    names = {"kernel", "bias"};
  else if (kind.starts_with("depthwise_conv"))
    names = {"depthwise_kernel", "bias"};
  else if (kind == "embedding")
    names = {"embeddings"};
  else if (kind == "layer_normalization" && n != 1)
    names = {"gamma", "beta"};
  else if (kind == "batch_normalization" && n == 4)
    names = {"gamma", "beta", "moving_mean", "moving_variance"};
  else if (kind == "batch_normalization" && n == 2)
    names = {"moving_mean", "moving_variance"};
  else if (kind == "batch_normalization" || kind == "layer_normalization")
    throw FormatError::of(kOp, "cannot name the variables of this layer",
                          "{}: layer '{}' has {} variables: with scale or center off, which is which is not "
                          "stored (pass adapt_layouts = false for numbered keys)",
                          src.path, layer, n);
  if (names.size() < n) names.clear();
  if (names.empty())
    for (size_t i = 0; i < n; ++i) names.push_back(std::to_string(i));
  return names;
}

void read_keras3(const Hdf5Lock& lock, const Hdf5Source& src, hid_t root, bool name_by_kind, int64_t& budget,
                 std::vector<RawEntry>& out) {
  struct Pending {
    Hid owned;
    hid_t group;
    std::vector<std::string> path;  // layer path: group names without the "layers" lists
    std::string where;
  };
  std::set<std::string> seen;
  std::vector<Pending> stack;
  stack.push_back({Hid(), root, {}, "/"});
  while (!stack.empty()) {
    Pending p = std::move(stack.back());
    stack.pop_back();
    const std::string id = detail::object_identity(lock, p.group);
    if (!id.empty() && !seen.insert(id).second)
      throw FormatError::of(kOp, "group linked twice", "{}: '{}' (a cycle or a repeated group)", src.path,
                            p.where);
    auto kids = detail::list_children(lock, src, p.group, p.where);
    std::vector<Pending> next;
    for (Child& c : kids) {
      if (c.kind != ObjectKind::group) continue;
      const std::string at = (p.where == "/" ? "" : p.where) + "/" + c.name;
      if (p.path.empty() && p.where == "/" && c.name == "optimizer") continue;  // not a layer
      if (c.name == "vars") {
        const std::string layer = join(p.path, "/");
        std::vector<Child> vars = detail::list_children(lock, src, c.object.get(), at);
        for (const Child& v : vars)
          if (!all_digits(v.name) || v.kind != ObjectKind::dataset || v.name.size() > 9)
            throw FormatError::of(kOp, "unexpected entry in vars", "{}: '{}/{}'", src.path, at, v.name);
        std::sort(vars.begin(), vars.end(),
                  [](const Child& a, const Child& b) { return std::stoi(a.name) < std::stoi(b.name); });
        for (size_t i = 0; i < vars.size(); ++i)
          if (vars[i].name != std::to_string(i))
            throw FormatError::of(kOp, "vars are not numbered 0, 1, ...", "{}: '{}' has '{}' at position {}",
                                  src.path, at, vars[i].name, i);
        if (vars.empty()) continue;
        const auto names = name_by_kind ? keras3_names(src, layer, vars.size()) : std::vector<std::string>{};
        add_layer(out, layer);
        for (size_t i = 0; i < vars.size(); ++i) {
          const std::string source = at + "/" + vars[i].name;
          add_weight(out, source, {name_by_kind ? names[i] : vars[i].name},
                     detail::read_dataset(lock, src, vars[i].object.get(), source, budget));
        }
        continue;
      }
      std::vector<std::string> path = p.path;
      if (c.name != "layers") path.push_back(c.name);
      const hid_t g = c.object.get();
      next.push_back({std::move(c.object), g, std::move(path), at});
    }
    for (auto it = next.rbegin(); it != next.rend(); ++it) stack.push_back(std::move(*it));
  }
}

// Keras layout -> kiln layout for one weight; `owner` is the Keras layer that holds it.
std::pair<std::string, Array> adapt(const std::string& name, const std::string& owner, const Array& v) {
  const bool depthwise =
      name == "depthwise_kernel" || (name == "kernel" && layer_kind(owner).starts_with("depthwise_conv"));
  if (depthwise && (v.ndim() == 3 || v.ndim() == 4)) {
    // [..spatial, C, M] -> [C, M, ..spatial] -> [C*M, 1, ..spatial]: output channel c*M + m reads input c.
    const int s = v.ndim() - 2;
    Axes axes{s, s + 1};
    Shape shape{v.shape(s) * v.shape(s + 1), 1};
    for (int i = 0; i < s; ++i) {
      axes.push_back(i);
      shape.push_back(v.shape(i));
    }
    return {"weight", reshape(transpose(v, axes), shape)};
  }
  if (name == "kernel" && v.ndim() >= 2 && v.ndim() <= 5) {
    // [..spatial, I, O] -> [O, I, ..spatial]
    const int s = v.ndim() - 2;
    Axes axes{s + 1, s};
    for (int i = 0; i < s; ++i) axes.push_back(i);
    return {"weight", transpose(v, axes)};
  }
  static const std::map<std::string, std::string> kRenames = {
      {"gamma", "weight"},
      {"beta", "bias"},
      {"moving_mean", "running_mean"},
      {"moving_variance", "running_var"},
      {"embeddings", "weight"},
  };
  const auto it = kRenames.find(name);
  return {it == kRenames.end() ? name : it->second, v};
}

nn::ParamTree map_layers(const std::string& file, const std::vector<RawLayer>& layers,
                         const KerasNameMap& map, const KerasOptions& options) {
  std::set<std::string> file_layers;
  for (const RawLayer& l : layers) file_layers.insert(l.name);
  std::vector<std::string> unknown;
  for (const auto& [layer, prefix] : map)
    if (!file_layers.contains(layer)) unknown.push_back(layer);
  if (!unknown.empty()) {
    std::vector<std::string> have(file_layers.begin(), file_layers.end());
    throw KeyError::of(kOp, "the name map names layers the file lacks", "{}: '{}' (the file has: {})", file,
                       join(unknown, "', '"), join(have, ", "));
  }
  nn::ParamTree tree;
  std::map<std::string, std::string> source_of;  // key -> where it came from, for collisions
  auto add = [&](const std::string& key, Array value, const std::string& source) {
    const auto [it, fresh] = source_of.emplace(key, source);
    if (!fresh)
      throw KeyError::of(kOp, "two weights map to one key", "{}: '{}' and '{}' both give '{}'", file,
                         it->second, source, key);
    tree.set(key, std::move(value));
  };
  for (const RawLayer& l : layers) {
    const auto mapped = map.find(l.name);
    const std::string prefix = mapped != map.end() ? mapped->second : join(split(l.name, '/'), ".");
    std::vector<std::pair<std::string, std::string>> counters;  // added after the layer's weights
    for (const RawWeight& w : l.weights) {
      std::vector<std::string> parts = w.parts;
      Array value = w.value;
      if (options.adapt_layouts) {
        const std::string owner = parts.size() > 1 ? parts[parts.size() - 2] : split(l.name, '/').back();
        std::tie(parts.back(), value) = adapt(parts.back(), owner, value);
      }
      const std::string key = prefix.empty() ? join(parts, ".") : prefix + "." + join(parts, ".");
      add(key, value, w.source);
      if (options.adapt_layouts && options.num_batches_tracked && parts.back() == "running_mean")
        counters.emplace_back(key.substr(0, key.size() - 12) + "num_batches_tracked", w.source + " (added)");
    }
    for (const auto& [key, source] : counters) add(key, Array(int64_t{0}), source);
  }
  // Transposed kernels become dense arrays here, once, rather than on every forward.
  tree = tree.map([](const std::string&, const Array& a) { return contiguous(a); });
  nn::eval(tree);
  return tree;
}

// In the reading child: the layers of either layout, as add_layer and add_weight list them.
std::vector<RawEntry> read_file(const Hdf5Lock& lock, const fs::path& path, const KerasOptions& options) {
  Hdf5Source src = detail::open_for_read(lock, path, kOp);
  Hid root(H5Gopen2(src.file.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.valid())
    throw FormatError::of(kOp, "corrupt file", "{}: no root group: {}", src.path,
                          detail::hdf5_error_text(lock));
  int64_t budget = detail::read_budget(src.file_size);
  auto is_legacy = [&](hid_t g) {
    return detail::has_attribute(lock, g, "layer_names") || detail::has_attribute(lock, g, "layer_names0");
  };
  std::vector<RawEntry> out;
  if (is_legacy(root.get())) {
    read_legacy(lock, src, root.get(), "/", budget, out);
  } else if (auto mw = detail::open_child(lock, src, root.get(), "model_weights", "/");
             mw && mw->kind == ObjectKind::group && is_legacy(mw->object.get())) {
    read_legacy(lock, src, mw->object.get(), "/model_weights", budget, out);
  } else if (auto l = detail::open_child(lock, src, root.get(), "layers", "/");
             l && l->kind == ObjectKind::group) {
    read_keras3(lock, src, root.get(), options.adapt_layouts, budget, out);
  } else {
    throw FormatError::of(kOp, "not a Keras weights file",
                          "{}: no layer_names attribute (legacy .h5), model_weights group or layers group "
                          "(Keras 3 .weights.h5)",
                          src.path);
  }
  return out;
}

}  // namespace

nn::ParamTree load_keras_weights(const fs::path& path, const KerasNameMap& map, const KerasOptions& options) {
  auto entries =
      detail::run_isolated(path, kOp, [&](const Hdf5Lock& lock) { return read_file(lock, path, options); });
  const std::string file = path.string();
  std::vector<RawLayer> layers;
  for (Entry& e : entries) {
    if (!e.array && e.names.size() == 1) {
      layers.push_back({std::move(e.names[0]), {}});
    } else if (e.array && e.names.size() >= 2 && !layers.empty()) {
      std::string source = std::move(e.names[0]);
      e.names.erase(e.names.begin());
      layers.back().weights.push_back({std::move(e.names), std::move(*e.array), std::move(source)});
    } else {
      throw FormatError::of(kOp, "the process reading the file returned a malformed result",
                            "{}: an entry of {} names", file, e.names.size());
    }
  }
  return map_layers(file, layers, map, options);
}

}  // namespace kiln::io
