#pragma once
// Primitive: one operation of the graph. Users add their own by deriving from it (docs/extensions.md).
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

#include "kiln/core/array.h"

namespace kiln {

/// Properties transforms ask a primitive about, instead of listing classes.
/// What transforms may assume of a primitive. shape_polymorphic: see core/shape_polymorphic.h.
enum class Trait : uint32_t {
  none = 0,
  elementwise = 1,
  stop_gradient = 2,
  random = 4,
  side_effect = 8,
  shape_polymorphic = 16
};
constexpr uint32_t operator|(Trait a, Trait b) { return static_cast<uint32_t>(a) | static_cast<uint32_t>(b); }

/// Arguments of a vector-Jacobian product rule.
struct VjpArgs {
  std::span<const Array> primals;     ///< the primitive's inputs
  std::span<const Array> cotangents;  ///< one per output (zeros where an output got none)
  std::span<const int> argnums;       ///< which inputs need a cotangent back
  std::span<const Array> outputs;     ///< the primitive's outputs (often reused by the rule)
};
/// Arguments of a Jacobian-vector product rule.
struct JvpArgs {
  std::span<const Array> primals;
  std::span<const Array> tangents;  ///< one per entry of argnums
  std::span<const int> argnums;
};
/// Arguments of a batching rule: axes[i] is the batched axis of inputs[i], or -1 if unbatched.
struct VmapArgs {
  std::span<const Array> inputs;
  std::span<const int> axes;
};
struct VmapResult {
  std::vector<Array> outputs;
  std::vector<int> axes;
};

/// Base of every primitive. Primitives are immutable: all methods are const, so one instance can
/// be shared by graphs on many threads.
class Primitive {
 public:
  explicit Primitive(Stream stream) : stream_(stream) {}
  virtual ~Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;

  virtual const char* name() const = 0;
  /// Computes the outputs from available inputs on the CPU; allocates (or views) each output.
  virtual void eval_cpu(std::span<const Array> inputs, std::span<Array> outputs) const = 0;
  /// The GPU kernel; the default throws DeviceError.
  virtual void eval_gpu(std::span<const Array> inputs, std::span<Array> outputs) const;
  /// Cotangents of the inputs listed in argnums (in that order). Default: NotImplemented.
  virtual std::vector<Array> vjp(const VjpArgs& args) const;
  /// Tangents of the outputs. Default: NotImplemented.
  virtual std::vector<Array> jvp(const JvpArgs& args) const;
  /// Batched outputs and their batch axes. Default: NotImplemented.
  virtual VmapResult vmap(const VmapArgs& args) const;
  /// Output shapes for these inputs (needed by shapeless compile). Default: NotImplemented.
  virtual std::vector<Shape> output_shapes(std::span<const Array> inputs) const;
  /// True when `other` computes the same function (same class and parameters).
  virtual bool is_equivalent(const Primitive& other) const;
  virtual void print(std::ostream& os) const { os << name(); }
  virtual uint32_t traits() const { return 0; }

  bool has(Trait t) const { return (traits() & static_cast<uint32_t>(t)) != 0; }
  Stream stream() const { return stream_; }
  Device device() const { return stream_.device; }

 private:
  Stream stream_;
};

namespace detail {
template <class T>
void print_param(std::ostream& os, const T& v) {
  if constexpr (requires { os << v; }) {
    os << v;
  } else if constexpr (requires { v.begin(); }) {
    os << "[";
    bool first = true;
    for (const auto& e : v) {
      if (!first) os << ",";
      first = false;
      print_param(os, e);
    }
    os << "]";
  } else {
    os << "?";
  }
}
}  // namespace detail

/// CRTP helper: a primitive whose parameters are returned by `params()` (a std::tie of its
/// members) gets is_equivalent and print from them.
template <class Derived, class Base = Primitive>
class PrimitiveWithParams : public Base {
 public:
  using Base::Base;
  bool is_equivalent(const Primitive& other) const override {
    if (typeid(other) != typeid(Derived)) return false;
    return static_cast<const Derived&>(*this).params() == static_cast<const Derived&>(other).params();
  }
  void print(std::ostream& os) const override {
    os << this->name() << "(";
    bool first = true;
    std::apply(
        [&](const auto&... p) {
          ((os << (first ? "" : ", "), detail::print_param(os, p), first = false), ...);
        },
        static_cast<const Derived&>(*this).params());
    os << ")";
  }
};

}  // namespace kiln
