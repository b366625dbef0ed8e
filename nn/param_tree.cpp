#include "kiln/nn/param_tree.h"

#include "kiln/core/error.h"

namespace kiln::nn {

ParamTree::ParamTree(std::initializer_list<Item> items) {
  for (const Item& it : items) set(it.first, it.second);
}

bool ParamTree::contains(std::string_view key) const { return index_.find(key) != index_.end(); }

const Array& ParamTree::at(std::string_view key) const {
  auto it = index_.find(key);
  if (it != index_.end()) return items_[it->second].second;
  if (items_.empty()) throw KeyError::of("ParamTree", "no such key", "'{}' (the tree is empty)", key);
  // Name a neighbour: most misses are a typo or a missing prefix. The nearest is the first key after
  // `key` in sorted order, else the last key.
  const std::string* after = nullptr;
  const std::string* last = nullptr;
  for (const Item& item : items_) {
    const std::string& k = item.first;
    if (k > key && (!after || k < *after)) after = &k;
    if (!last || k > *last) last = &k;
  }
  throw KeyError::of("ParamTree", "no such key", "'{}' ({} keys; nearest: '{}')", key, items_.size(),
                     after ? *after : *last);
}

void ParamTree::set(std::string_view key, Array value) {
  if (key.empty()) throw ValueError::of("ParamTree", "empty key");
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::string(key), items_.size());
  items_.emplace_back(std::string(key), std::move(value));
}

bool ParamTree::erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  index_.erase(it);
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
  for (auto& [k, i] : index_)
    if (i > pos) --i;
  return true;
}

std::vector<std::string> ParamTree::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const Item& it : items_) out.push_back(it.first);
  return out;
}

std::vector<Array> ParamTree::values() const {
  std::vector<Array> out;
  out.reserve(items_.size());
  for (const Item& it : items_) out.push_back(it.second);
  return out;
}

ParamTree ParamTree::subtree(std::string_view prefix) const {
  ParamTree out;
  for (const Item& it : items_) {
    const std::string_view k = it.first;
    if (k.size() > prefix.size() && k.substr(0, prefix.size()) == prefix && k[prefix.size()] == '.')
      out.set(std::string(k.substr(prefix.size() + 1)), it.second);
  }
  return out;
}

ParamTree ParamTree::prefixed(std::string_view prefix) const {
  ParamTree out;
  for (const Item& it : items_) out.set(std::string(prefix) + "." + it.first, it.second);
  return out;
}

ParamTree ParamTree::map(const std::function<Array(const std::string&, const Array&)>& f) const {
  ParamTree out;
  for (const Item& it : items_) out.set(it.first, f(it.first, it.second));
  return out;
}

void eval(const ParamTree& tree) { eval(std::vector<const ParamTree*>{&tree}); }

namespace {
std::vector<Array> arrays_of(const std::vector<const ParamTree*>& trees, const std::vector<Array>& extra) {
  std::vector<Array> all;
  for (const ParamTree* t : trees)
    for (const auto& [key, a] : *t)
      if (a.valid()) all.push_back(a);
  for (const Array& a : extra)
    if (a.valid()) all.push_back(a);
  return all;
}
}  // namespace

void eval(const std::vector<const ParamTree*>& trees) { kiln::eval(arrays_of(trees, {})); }

void async_eval(const std::vector<const ParamTree*>& trees, const std::vector<Array>& extra) {
  kiln::async_eval(arrays_of(trees, extra));
}

int64_t num_elements(const ParamTree& tree) {
  int64_t n = 0;
  for (const auto& [key, a] : tree) n += a.size();
  return n;
}

}  // namespace kiln::nn
