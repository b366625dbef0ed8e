#pragma once
// The module tree: a Module's members are slots that register themselves with it by name.
// ParameterInfo holds one Array, ModuleInfo<T> one child module, ModuleList<T> a numbered list.
// Keys are dotted paths in declaration order: "layers.0.attn.q_proj.weight".
//
//   struct Mlp : kiln::nn::Module {
//     kiln::nn::ModuleInfo<kiln::nn::Linear> fc1{this, "fc1", 784, 512};
//     kiln::nn::ModuleInfo<kiln::nn::Linear> fc2{this, "fc2", 512, 10};
//     kiln::Array operator()(const kiln::Array& x) const { return fc2(kiln::nn::relu(fc1(x))); }
//   };
//
// Slots hold a pointer to their owner, so modules can be neither copied nor moved (a moved slot
// would still point at the old owner): hold a model you need to move in a std::unique_ptr.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/nn/mixed_precision.h"
#include "kiln/nn/param_tree.h"

namespace kiln::nn {

class Module;
namespace detail {
struct ModuleAccess;
}

/// Which problems `Module::update` refuses. Flags combine with `|`.
enum class Verify : unsigned {
  none = 0,
  shapes = 1,   // a value whose shape differs from the parameter's
  dtypes = 2,   // a value whose dtype differs from the parameter's
  missing = 4,  // a parameter of the module with no value in the tree
  unknown = 8,  // a key in the tree that names no parameter
  all = 15,
};
constexpr Verify operator|(Verify a, Verify b) {
  return static_cast<Verify>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr Verify operator&(Verify a, Verify b) {
  return static_cast<Verify>(static_cast<unsigned>(a) & static_cast<unsigned>(b));
}
constexpr Verify operator~(Verify a) { return static_cast<Verify>(~static_cast<unsigned>(a) & 15u); }
constexpr bool has(Verify set, Verify flag) {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(flag)) != 0;
}

/// What `Module::update` found and did, every entry by dotted key.
struct UpdateReport {
  std::vector<std::string> applied;      // keys whose parameter was replaced
  std::vector<std::string> missing;      // parameters the tree had no value for
  std::vector<std::string> unexpected;   // tree keys that name no parameter
  std::vector<std::string> wrong_shape;  // "key: expected (2, 3), got (3, 2)"
  std::vector<std::string> wrong_dtype;  // "key: expected float32, got float16"
  bool clean() const {
    return missing.empty() && unexpected.empty() && wrong_shape.empty() && wrong_dtype.empty();
  }
  std::string summary() const;  // one line per problem
};

/// One parameter slot: the storage of one Array (no second copy can drift from it, the LibTorch
/// footgun pytorch#21682). Empty until set; an empty slot is not listed (Linear's bias when
/// bias = false). Frozen slots are kept out of trainable_parameters() and gradients.
class ParameterInfo {
 public:
  /// Registers the slot with `owner` under `key` (non-empty, no '.'; unique within the owner).
  ParameterInfo(Module* owner, std::string_view key);
  ParameterInfo(Module* owner, std::string_view key, Array value);
  ParameterInfo(const ParameterInfo&) = delete;
  ParameterInfo& operator=(const ParameterInfo&) = delete;

  const Array& value() const { return value_; }
  operator const Array&() const { return value_; }  // NOLINT: usable wherever an Array is
  bool has_value() const { return value_.valid(); }
  const std::string& key() const { return key_; }
  bool frozen() const { return frozen_; }

  /// Replaces the value. When the slot already holds one, the new value must have its shape
  /// and dtype (ShapeError/DtypeError naming the key): use reset() to change either.
  void set(Array value);
  ParameterInfo& operator=(Array value) {
    set(std::move(value));
    return *this;
  }
  /// Replaces the value with no check (an empty Array clears the slot).
  void reset(Array value) { value_ = std::move(value); }

 private:
  friend class Module;
  friend struct detail::ModuleAccess;
  std::string key_;
  Array value_;
  bool frozen_ = false;
};

/// Base of every layer and model. Not copyable or movable (see the header comment).
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  /// Every parameter with a value, by dotted key, in declaration order.
  ParamTree parameters() const;
  /// The parameters that are not frozen.
  ParamTree trainable_parameters() const;
  /// This module ("") and every descendant, depth first in declaration order.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  /// The direct children, by their key.
  std::vector<std::pair<std::string, Module*>> children();
  std::vector<std::pair<std::string, const Module*>> children() const;
  /// False for a child that stands empty (a Linear's LoRA factors without an adapter): it is left
  /// out of children(), named_modules() and apply(), as an empty parameter slot is left out of
  /// parameters().
  virtual bool present() const { return true; }
  /// Calls fn(key, module) on every descendant and then this module ("" as its key): children
  /// before parents, as PyTorch's Module.apply.
  void apply(const std::function<void(const std::string& key, Module& module)>& fn);

  /// Training mode (the default) or evaluation mode, for this module and all descendants.
  void train(bool training = true);
  void eval_mode() { train(false); }
  bool is_training() const { return training_; }

  /// Puts a mixed-precision policy (nn::MixedPrecision, mixed_precision.h) on this module and every
  /// descendant, or lifts it (std::nullopt); modules added later have none of their own. Parameters
  /// keep their dtype. Throws ValueError for a compute dtype other than float16 or bfloat16.
  void set_mixed_precision(std::optional<MixedPrecision> policy);
  /// This module's own policy (a MixedPrecisionScope's is not included).
  const std::optional<MixedPrecision>& mixed_precision() const { return mixed_precision_; }

  /// Freezes parameters: with no keys, all of them (recurse) or only this module's own; a key
  /// names a parameter ("fc1.bias") or a submodule ("fc1", whose parameters are frozen, its
  /// descendants' too when recurse). A key that names nothing is a KeyError and nothing changes.
  void freeze(const std::vector<std::string>& keys = {}, bool recurse = true);
  void unfreeze(const std::vector<std::string>& keys = {}, bool recurse = true);

  /// Replaces parameters from `params` (dotted keys, as parameters() gives them). Everything is
  /// checked first; if a problem that `verify` names is found, nothing changes and a KeyError
  /// (missing or unknown keys) or else ShapeError/DtypeError lists every problem by key.
  /// Otherwise every known key is applied (also values of another shape or dtype where verify
  /// allows them) and the report says what happened. on_update() runs afterwards.
  UpdateReport update(const ParamTree& params, Verify verify = Verify::all);

  /// Writes parameters() (frozen ones and buffers such as BatchNorm's running statistics too) to
  /// a weights file: safetensors for a `.safetensors` path (io::save_safetensors), else HDF5
  /// (io::save_weights). Throws what those throw, and ValueError for a `.json` path (a sharded
  /// checkpoint: io::save_safetensors_sharded).
  void save_weights(const std::filesystem::path& path) const;
  /// Reads a weights file chosen by its extension (`.safetensors`, a sharded checkpoint's
  /// `model.safetensors.index.json`, else HDF5) and assigns it with update(). When a problem
  /// that `verify` names is found (missing or unknown keys, wrong shapes or dtypes), throws
  /// KeyError, ShapeError or DtypeError naming the file and every such key, and nothing changes.
  /// Throws what io::load_safetensors or io::load_weights throws for a missing or malformed file.
  void load_weights(const std::filesystem::path& path, Verify verify = Verify::all);

 protected:
  /// Called after update() changes parameters: recompute anything derived from them.
  virtual void on_update() {}

 private:
  friend class ParameterInfo;
  template <class T>
  friend class ModuleInfo;
  template <class T>
  friend class ModuleList;
  friend struct detail::ModuleAccess;

  void register_parameter(std::string_view key, ParameterInfo* slot);
  void register_child(std::string_view key, Module* child);
  void check_new_key(std::string_view key) const;

  // Slots in declaration order: a parameter or a child.
  struct Slot {
    std::string key;
    ParameterInfo* parameter = nullptr;
    Module* child = nullptr;
  };
  std::vector<Slot> slots_;
  bool training_ = true;
  std::optional<MixedPrecision> mixed_precision_;
};

/// A child module slot: constructs its T in place from the remaining arguments.
/// `fc1(x)` calls the child; `fc1->weight` reaches its members.
template <class T>
class ModuleInfo {
 public:
  template <class... A>
  ModuleInfo(Module* owner, std::string_view key, A&&... args) : module_(std::forward<A>(args)...) {
    owner->register_child(key, &module_);
  }
  ModuleInfo(const ModuleInfo&) = delete;
  ModuleInfo& operator=(const ModuleInfo&) = delete;

  T& operator*() { return module_; }
  const T& operator*() const { return module_; }
  T* operator->() { return &module_; }
  const T* operator->() const { return &module_; }
  template <class... A>
  decltype(auto) operator()(A&&... args) const {
    return module_(std::forward<A>(args)...);
  }

 private:
  T module_;
};

/// A numbered list of child modules ("0", "1", ...), itself a module registered under `key`.
template <class T>
class ModuleList : public Module {
 public:
  ModuleList(Module* owner, std::string_view key) { owner->register_child(key, this); }

  /// Constructs a T at the end from `args`; returns it.
  template <class... A>
  T& emplace_back(A&&... args) {
    return append(std::make_unique<T>(std::forward<A>(args)...));
  }
  /// Takes ownership of `m` and appends it.
  T& append(std::unique_ptr<T> m) {
    T& ref = *m;
    register_child(std::to_string(items_.size()), &ref);
    items_.push_back(std::move(m));
    return ref;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  T& operator[](size_t i) { return *items_.at(i); }
  const T& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::unique_ptr<T>> items_;
};

namespace detail {
/// Library-internal access to slots (nn::value_and_grad and MaterializedModule swap values in).
struct ModuleAccess {
  /// The parameter slots with a value, by dotted key, in declaration order.
  static std::vector<std::pair<std::string, ParameterInfo*>> slots(Module& m, bool trainable_only);
  /// Gives slots[i] the value values[i], unchecked, then runs on_update() on every module of `m`:
  /// Module::update with Verify::none, for slots just taken from `m` (CompiledStep's commit).
  static void assign(Module& m, const std::vector<std::pair<std::string, ParameterInfo*>>& slots,
                     std::span<const Array> values);
};
}  // namespace detail

}  // namespace kiln::nn
