#pragma once
// ParamTree: arrays by dotted key ("layers.0.attn.q_proj.weight"), in a fixed order. Parameters,
// gradients and optimizer state all travel as ParamTrees, so they line up key by key.
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/array.h"

namespace kiln::nn {

/// An ordered map from dotted key to Array. Iteration follows insertion order (for a module's
/// parameters: declaration order), so two trees of one module line up. Keys are non-empty.
class ParamTree {
 public:
  using Item = std::pair<std::string, Array>;

  ParamTree() = default;
  ParamTree(std::initializer_list<Item> items);

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(std::string_view key) const;
  /// The array at `key`; throws KeyError naming the key (and a close key, if any) when absent.
  const Array& at(std::string_view key) const;
  /// Inserts or replaces (a replaced key keeps its place). Throws ValueError for an empty key.
  void set(std::string_view key, Array value);
  /// Removes `key`; returns whether it was there.
  bool erase(std::string_view key);

  std::vector<std::string> keys() const;
  std::vector<Array> values() const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

  /// The entries under `prefix` ("fc1" selects "fc1.weight" as "weight"), prefix removed.
  ParamTree subtree(std::string_view prefix) const;
  /// Every key with `prefix.` in front.
  ParamTree prefixed(std::string_view prefix) const;
  /// f applied to every entry, same keys and order.
  ParamTree map(const std::function<Array(const std::string& key, const Array& value)>& f) const;

 private:
  // Lookups by string_view without building a string (C++20 heterogeneous lookup): an optimizer
  // or a compiled step looks up and replaces a few hundred keys each step.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>{}(k); }
  };
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t, KeyHash, std::equal_to<>> index_;
};

/// Evaluates every array of the trees together (one graph walk).
void eval(const ParamTree& tree);
void eval(const std::vector<const ParamTree*>& trees);
/// Schedules the evaluation of every array of the trees, and of `extra` (e.g. the loss), with
/// kiln::async_eval and returns at once: the training loop builds step n + 1 while step n runs.
void async_eval(const std::vector<const ParamTree*>& trees, const std::vector<Array>& extra = {});

/// The sum of the element counts of a tree's arrays.
int64_t num_elements(const ParamTree& tree);

}  // namespace kiln::nn
