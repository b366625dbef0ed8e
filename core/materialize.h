#pragma once
// materialize: evaluated, detached, immutable arrays that any number of threads may share.
#include <ostream>
#include <vector>

#include "kiln/core/array.h"

namespace kiln {

/// An evaluated array that no one can change: safe to read from any number of threads at once
/// (shared weights, a lookup table). Obtained from materialize(); never empty, always available.
/// It converts to `const Array&` wherever an op takes an input; ops read it, never write it:
/// - its node is a leaf (no primitive, no inputs), so no eval on any thread recomputes it;
/// - its buffer is never donated to an op's output (the handle keeps a reference, and donation
///   needs a sole owner);
/// - an evaluated node is never re-pointed: allocate/set_view/donate_from on it throw RuntimeError.
/// Copies share the node (cheap, thread-safe). Assigning a handle rebinds only that handle, as for
/// any C++ object: two threads must not assign to and read the same handle object at once.
class MaterializedArray {
 public:
  // No default constructor and no move: a handle always refers to an evaluated array.
  MaterializedArray(const MaterializedArray&) = default;
  MaterializedArray& operator=(const MaterializedArray&) = default;
  ~MaterializedArray() = default;

  /// The array, for any API that takes one (ops convert implicitly).
  const Array& array() const { return array_; }
  operator const Array&() const { return array_; }  // NOLINT: implicit, usable wherever an Array is

  const Shape& shape() const { return array_.shape(); }
  int64_t shape(int axis) const { return array_.shape(axis); }
  const Strides& strides() const { return array_.strides(); }
  Dtype dtype() const { return array_.dtype(); }
  int64_t size() const { return array_.size(); }
  int ndim() const { return array_.ndim(); }
  int itemsize() const { return array_.itemsize(); }
  int64_t nbytes() const { return array_.nbytes(); }
  /// Identity of the shared node (equal for copies).
  const void* id() const { return array_.id(); }

  /// As Array::item, Array::data and Array::to_vector; nothing is evaluated (it already is).
  template <Scalar T>
  T item() const {
    return array_.item<T>();
  }
  template <Scalar T>
  const T* data() const {
    return array_.data<T>();
  }
  template <Scalar T>
  std::vector<T> to_vector() const {
    return array_.to_vector<T>();
  }

 private:
  friend MaterializedArray materialize(const Array& x);
  explicit MaterializedArray(Array a) : array_(std::move(a)) {}
  Array array_;
};

/// Evaluates `x` and returns it as a new immutable leaf sharing x's buffer (no copy of the
/// values); `x` itself is left as it was. Throws ValueError for an empty array, or for a value
/// being traced by a transform on this thread (grad, jvp, vmap, compile): materialize outside the
/// transform instead. An error of the evaluation itself is thrown here, on the calling thread.
MaterializedArray materialize(const Array& x);
/// Evaluates all of `xs` together (shared work is done once), then materializes each.
std::vector<MaterializedArray> materialize(const std::vector<Array>& xs);

/// Prints as the array it holds.
std::ostream& operator<<(std::ostream& os, const MaterializedArray& a);

}  // namespace kiln
