#pragma once
// Sequential: modules applied in order, as torch.nn.Sequential. Elements are registered as "0",
// "1", ... (PyTorch's keys, so a PyTorch Sequential's state dict loads as-is: "0.weight",
// "2.bias"); a parameterless function (an activation) takes its index too, as PyTorch's
// activation modules do.
//
//   kiln::nn::Sequential mlp;
//   mlp.emplace_back<kiln::nn::Linear>(784, 256);   // "0.weight", "0.bias"
//   mlp.append(kiln::nn::relu);                     // "1": no parameters
//   mlp.emplace_back<kiln::nn::Linear>(256, 10);    // "2.weight", "2.bias"
//   kiln::Array logits = mlp(x);
//
// Elements are constructed in place (modules can be neither copied nor moved); a nested
// Sequential is `auto& inner = seq.emplace_back<Sequential>();` and then filled.
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

/// A parameterless module wrapping a function of one array (an activation, a reshape).
class Lambda : public Module {
 public:
  using Fn = std::function<Array(const Array&)>;
  /// Throws ValueError for an empty function.
  explicit Lambda(Fn fn);
  Array operator()(const Array& x) const { return fn_(x); }

 private:
  Fn fn_;
};

class Sequential : public Module {
 public:
  Sequential() = default;

  /// Constructs a T from `args` as the next element (key: its index) and returns it. T is a Module
  /// callable as `const T&` on one Array, returning an Array (checked at compile time).
  template <class T, class... A>
  T& emplace_back(A&&... args) {
    static_assert(std::is_base_of_v<Module, T>,
                  "Sequential elements are Modules (wrap functions with append)");
    static_assert(std::is_invocable_r_v<Array, const T&, const Array&>,
                  "a Sequential element needs `Array operator()(const Array&) const`");
    entries_.reserve(entries_.size() + 1);  // no reallocation after the element registers itself
    auto holder =
        std::make_unique<Holder<T>>(this, std::to_string(entries_.size()), std::forward<A>(args)...);
    T& ref = *holder->slot;
    entries_.push_back(std::move(holder));
    return ref;
  }
  /// Appends a parameterless function as a Lambda module (it takes the next index). Throws
  /// ValueError for an empty function.
  Lambda& append(Lambda::Fn fn) { return emplace_back<Lambda>(std::move(fn)); }

  /// Applies the elements in order; an empty Sequential returns x, as PyTorch.
  Array operator()(const Array& x) const;

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  /// The element at index i. Throws KeyError when i >= size().
  Module& operator[](size_t i) { return *entry(i).module; }
  const Module& operator[](size_t i) const { return *entry(i).module; }
  /// The element at index i as a T. Throws KeyError when i >= size(), ValueError when it is no T.
  template <class T>
  T& at(size_t i) {
    if (auto* m = dynamic_cast<T*>(entry(i).module)) return *m;
    throw_wrong_type(i);
  }
  template <class T>
  const T& at(size_t i) const {
    if (auto* m = dynamic_cast<const T*>(entry(i).module)) return *m;
    throw_wrong_type(i);
  }

 private:
  // Type erasure: each element lives in a ModuleInfo (which registers it under its index) inside a
  // holder that knows how to call it.
  struct Entry {
    virtual ~Entry() = default;
    virtual Array call(const Array& x) const = 0;
    Module* module = nullptr;
  };
  template <class T>
  struct Holder final : Entry {
    template <class... A>
    Holder(Module* owner, const std::string& key, A&&... args) : slot(owner, key, std::forward<A>(args)...) {
      module = &*slot;
    }
    Array call(const Array& x) const override { return slot(x); }
    ModuleInfo<T> slot;
  };

  const Entry& entry(size_t i) const;
  [[noreturn]] void throw_wrong_type(size_t i) const;

  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace kiln::nn
