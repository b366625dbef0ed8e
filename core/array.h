#pragma once
// Array: a cheap, copyable handle to a node of the lazy graph.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <span>
#include <vector>

#include "kiln/core/allocator.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/core/stream.h"

namespace kiln {

class Primitive;
class Array;

namespace detail {
struct ArrayNode;
struct SiblingGroup;
}  // namespace detail

/// A lazily evaluated n-dimensional array. Copies share the same node; ops build new nodes and
/// compute nothing until eval(), item(), data() or to_vector() asks for values.
class Array {
 public:
  /// An empty handle; valid() is false. Most ops reject it.
  Array() = default;

  /// A 0-d array holding a scalar; the dtype follows the C++ type (2.5 -> float64, 2.5f -> float32).
  template <Scalar T>
  Array(T value);  // NOLINT: implicit, as in MLX
  /// A scalar converted to `dtype`.
  template <Scalar T>
  Array(T value, Dtype dtype);
  /// A 1-d array.
  template <Scalar T>
  Array(std::initializer_list<T> values);
  /// An array of the given shape from row-major values (values.size() must equal the shape's size).
  template <Scalar T>
  Array(std::initializer_list<T> values, Shape shape);
  template <Scalar T>
  Array(const std::vector<T>& values, Shape shape);
  /// Converts the values to `dtype` while copying them in.
  template <Scalar T>
  Array(const std::vector<T>& values, Shape shape, Dtype dtype);

  bool valid() const { return node_ != nullptr; }
  const Shape& shape() const;
  /// Size of one dimension; negative counts from the end.
  int64_t shape(int axis) const;
  /// Strides in elements; meaningful once the array is evaluated.
  const Strides& strides() const;
  Dtype dtype() const;
  int64_t size() const;
  int ndim() const { return static_cast<int>(shape().size()); }
  int itemsize() const { return size_of(dtype()); }
  int64_t nbytes() const { return size() * itemsize(); }

  /// Evaluates this array (and what it depends on).
  void eval() const;
  /// Waits until this array is computed: for a pending async_eval to finish (a part it has not
  /// started yet is computed here), or evaluates it. An error the scheduled work raised is raised
  /// here, on this thread. The same as eval(); the name says what a caller of async_eval means.
  void wait() const { eval(); }
  /// True once the values are computed.
  bool is_available() const;

  /// The single element, converted to T. Evaluates; throws ValueError unless size() == 1.
  template <Scalar T>
  T item() const;
  /// Pointer to the row-major values. Evaluates; throws DtypeError unless T is the array's dtype
  /// and ValueError unless the array is row-contiguous (use `contiguous(x)` first).
  template <Scalar T>
  const T* data() const;
  /// All values in row-major order, converted to T. Evaluates; works for any layout.
  template <Scalar T>
  std::vector<T> to_vector() const;

  /// Identity of the node (equal for copies of one handle).
  const void* id() const { return node_.get(); }

  // ---- for primitives (eval_cpu/eval_gpu bodies) ----
  /// Element 0 of this array's buffer; walk it with strides(). No evaluation, no checks.
  template <class T>
  T* strided_data() const;
  void* raw_data() const;
  /// True when the strides are row-major dense.
  bool row_contiguous() const;
  /// Allocates a row-contiguous buffer for this (output) array. Throws RuntimeError on an array
  /// that is already evaluated (its storage never changes once others may read it).
  void allocate();
  /// Makes this array a view of `source`'s buffer with the given strides and element offset.
  /// Throws RuntimeError on an array that is already evaluated.
  void set_view(const Array& source, Strides strides, int64_t offset);
  /// Takes `source`'s buffer when it may be reused in place (sole owner, same size, row-contiguous);
  /// returns false otherwise. Used to compute elementwise ops in place.
  bool donate_from(const Array& source);
  /// Inputs and primitive of an unevaluated node. Once evaluated the node is detached: inputs()
  /// is empty and primitive() is null (check has_primitive() first).
  std::vector<Array> inputs() const;
  std::shared_ptr<const Primitive> primitive() const;
  bool has_primitive() const;
  /// All outputs of the primitive that produced this array (just itself for single-output ops).
  std::vector<Array> outputs() const;
  /// Index of this array among its primitive's outputs.
  int output_index() const;

  /// Builds a node: `primitive` applied to `inputs` yields one array of this shape and dtype.
  static Array make(Shape shape, Dtype dtype, std::shared_ptr<const Primitive> primitive,
                    std::vector<Array> inputs);
  /// Builds a node with several outputs.
  static std::vector<Array> make_many(std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                                      std::shared_ptr<const Primitive> primitive, std::vector<Array> inputs);
  /// An evaluated array of this shape and dtype with fresh, uninitialized row-major storage.
  static Array empty_available(Shape shape, Dtype dtype);
  /// An evaluated array whose values are the caller's row-major memory at `data`, used in place
  /// (no copy, as torch.from_blob or MLX's array from a pointer with a deleter). kiln owns the
  /// memory from here on: `deleter(data)` runs, on whichever thread drops the last reference, when
  /// no array or view needs it any more (a GPU copy may outlive it). kiln never writes into it. The
  /// memory must stay valid and unchanged until then, and be aligned to the dtype's size. Throws
  /// ValueError for a null `data` with a nonempty shape or a misaligned pointer, ShapeError for a
  /// negative dimension; the deleter is not called when it throws. An empty shape calls the
  /// deleter at once (nothing is read).
  static Array from_buffer(void* data, Shape shape, Dtype dtype, std::function<void(void*)> deleter);

  /// Iteration over the first axis, as NumPy's and MLX's: `for (const Array& row : x)` visits
  /// x[0], x[1], ... (each a lazy view with one dimension less). Throws ValueError for a 0-d array.
  class Iterator {
   public:
    using value_type = Array;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(const Array* a, int64_t i) : a_(a), i_(i) {}
    Array operator*() const;
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator t = *this;
      ++i_;
      return t;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    const Array* a_ = nullptr;
    int64_t i_ = 0;
  };
  Iterator begin() const;
  Iterator end() const;

  detail::ArrayNode& node() const { return *node_; }
  const std::shared_ptr<detail::ArrayNode>& node_ptr() const { return node_; }
  explicit Array(std::shared_ptr<detail::ArrayNode> n) : node_(std::move(n)) {}

 private:
  void check_valid(const char* what) const;
  void from_bytes(const void* values, Dtype src, int64_t n, Shape shape, Dtype dtype);
  std::shared_ptr<detail::ArrayNode> node_;
};

/// Evaluates all given arrays together (shared work is done once).
void eval(std::span<const Array> arrays);
void eval(std::initializer_list<Array> arrays);
inline void eval(const std::vector<Array>& arrays) { eval(std::span<const Array>(arrays)); }
inline void eval(const Array& a) { a.eval(); }
template <class... A>
requires(sizeof...(A) > 1 &&
         (std::is_convertible_v<const A&, const Array&> && ...)) void eval(const A&... arrays) {
  eval({Array(arrays)...});
}

/// Schedules the evaluation of the arrays on kiln's scheduler thread and returns at once, so the
/// caller can build (and schedule) the next step meanwhile. eval(), wait(), item(), data() and
/// to_vector() on these arrays, or on arrays computed from them, wait for the work; any part not
/// started yet is computed by the waiting thread. An error raised by the scheduled work is raised
/// again by the wait, on the waiting thread (the failed primitive runs there again), and the next
/// evaluation works. Any number of evaluations may be outstanding, from any threads. Inside a
/// transform's trace (grad, vmap, compile) it evaluates at once.
void async_eval(std::span<const Array> arrays);
void async_eval(std::initializer_list<Array> arrays);
inline void async_eval(const std::vector<Array>& arrays) { async_eval(std::span<const Array>(arrays)); }

/// NumPy-like printing: array([[1, 2], [3, 4]], dtype=int32).
std::ostream& operator<<(std::ostream& os, const Array& a);

namespace detail {

/// A node's life: unevaluated; running (claimed by a thread computing it); submitted (its GPU work
/// is on the queue: later GPU work may read it, the host waits for available); available.
enum class NodeState : uint8_t { unevaluated, running, submitted, available };

/// Lock for the few node fields that eval on another thread may change (inputs, primitive).
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire)) flag_.wait(true, std::memory_order_relaxed);
  }
  void unlock() {
    flag_.clear(std::memory_order_release);
    flag_.notify_one();
  }

 private:
  std::atomic_flag flag_;
};

/// The outputs of one multi-output primitive application share this: one claim word, weak links.
struct SiblingGroup {
  std::atomic<NodeState> state{NodeState::unevaluated};
  SpinLock lock;  // guards `outputs` (a dropped output may be recreated)
  std::vector<std::weak_ptr<ArrayNode>> outputs;
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  std::exception_ptr async_error;  // as ArrayNode::async_error, for the group (guarded by `lock`)
};

/// A node's input list, shared by the outputs of one multi-output primitive and never changed once
/// built (a node lets go of it instead). Copying the list per output made Array::make_many quadratic:
/// a captured GPT training step has about 160 outputs of about 170 inputs each.
class NodeInputs {
 public:
  NodeInputs() = default;
  NodeInputs(std::vector<Array> list)  // NOLINT: built from a list wherever one is assigned
      : list_(list.empty() ? nullptr : std::make_shared<std::vector<Array>>(std::move(list))) {}

  const std::vector<Array>& get() const { return list_ ? *list_ : kEmpty; }
  operator const std::vector<Array>&() const { return get(); }  // NOLINT: primitives take the vector
  size_t size() const { return list_ ? list_->size() : 0; }
  bool empty() const { return size() == 0; }
  const Array& operator[](size_t i) const { return (*list_)[i]; }
  auto begin() const { return get().begin(); }
  auto end() const { return get().end(); }
  void clear() { list_.reset(); }
  void swap(NodeInputs& other) noexcept { list_.swap(other.list_); }

  /// The list itself, to take its arrays, when this is its only holder (see ArrayNode's
  /// destructor), else null.
  std::vector<Array>* sole_list();

 private:
  static const std::vector<Array> kEmpty;
  std::shared_ptr<std::vector<Array>> list_;
};

struct ArrayNode {
  ArrayNode(Shape s, Dtype t) : shape(std::move(s)), dtype(t) { size = shape_size(shape); }
  ~ArrayNode();  // iterative: a 10^6-deep chain is released without recursion

  // Fixed at construction.
  Shape shape;
  int64_t size = 0;
  Dtype dtype;
  bool tracer = false;  // built from a value being traced by a transform; not detached inside it
  int position = 0;     // output index within the sibling group

  // Guarded by `lock` until state is available; then read-only.
  SpinLock lock;
  std::shared_ptr<const Primitive> primitive;
  NodeInputs inputs;
  std::shared_ptr<SiblingGroup> group;  // null for single-output primitives and leaves

  // Written once by the evaluating thread before `state` becomes available (release/acquire).
  std::atomic<NodeState> state{NodeState::unevaluated};
  std::shared_ptr<Buffer> buffer;
  int64_t offset = 0;  // elements from the buffer's start
  Strides strides;
  bool row_contiguous = true;
  // Guarded by `lock`: why GPU work submitted without a wait failed (a device error the next
  // evaluation may not meet again). Reported, and cleared, by the first eval that asks for this
  // array; cleared when it is computed.
  std::exception_ptr async_error;

  std::atomic<NodeState>& claim_word() { return group ? group->state : state; }
};

/// True when a transform is tracing on this thread (tracer nodes are kept whole while it is).
bool in_trace();
/// eval without waiting for the GPU: this thread's recorded work is submitted and completes later
/// (whoever waits for its arrays completes it). async_eval's scheduler runs this.
void eval_nowait(std::span<const Array> arrays);
/// How many submits of eval_nowait are in flight: on the queue and not yet completed by a waiter
/// (for tests and benchmarks).
size_t gpu_work_in_flight();
/// Marks tracing on this thread for the lifetime of the guard.
class TraceScope {
 public:
  TraceScope();
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
};

/// Gives an output being computed this row-major storage (the gpu facade's allocate). Throws
/// RuntimeError on an evaluated array.
void set_buffer(Array& a, std::shared_ptr<Buffer> buffer);

/// Copies `n` values of dtype `src` into `dst` of dtype `dst_t` (both dense).
void convert_values(const void* src, Dtype src_t, void* dst, Dtype dst_t, int64_t n);

}  // namespace detail

// ---- template definitions ----

template <Scalar T>
Array::Array(T value) {
  from_bytes(&value, dtype_of<T>(), 1, {}, dtype_of<T>());
}
template <Scalar T>
Array::Array(T value, Dtype dtype) {
  from_bytes(&value, dtype_of<T>(), 1, {}, dtype);
}
template <Scalar T>
Array::Array(std::initializer_list<T> values)
    : Array(std::vector<T>(values), Shape{static_cast<int64_t>(values.size())}) {}
template <Scalar T>
Array::Array(std::initializer_list<T> values, Shape shape)
    : Array(std::vector<T>(values), std::move(shape)) {}
template <Scalar T>
Array::Array(const std::vector<T>& values, Shape shape) {
  if constexpr (std::is_same_v<T, bool>) {
    const std::vector<uint8_t> v(values.begin(), values.end());
    from_bytes(v.data(), bool_, static_cast<int64_t>(v.size()), std::move(shape), bool_);
  } else {
    from_bytes(values.data(), dtype_of<T>(), static_cast<int64_t>(values.size()), std::move(shape),
               dtype_of<T>());
  }
}
template <Scalar T>
Array::Array(const std::vector<T>& values, Shape shape, Dtype dtype) {
  if constexpr (std::is_same_v<T, bool>) {
    const std::vector<uint8_t> v(values.begin(), values.end());
    from_bytes(v.data(), bool_, static_cast<int64_t>(v.size()), std::move(shape), dtype);
  } else {
    from_bytes(values.data(), dtype_of<T>(), static_cast<int64_t>(values.size()), std::move(shape), dtype);
  }
}

template <class T>
T* Array::strided_data() const {
  return static_cast<T*>(raw_data());
}

template <Scalar T>
T Array::item() const {
  check_valid("item");
  if (size() != 1)
    throw ValueError::of("item", "array must have exactly one element", "shape {}", shape_str(shape()));
  eval();
  T out;
  detail::convert_values(raw_data(), dtype(), &out, dtype_of<T>(), 1);
  return out;
}

template <Scalar T>
const T* Array::data() const {
  check_valid("data");
  if (dtype_of<T>() != dtype())
    throw DtypeError::of("data", "requested type does not match the array's dtype", "asked {}, array is {}",
                         dtype_name(dtype_of<T>()), dtype_name(dtype()));
  eval();
  if (!row_contiguous())
    throw ValueError::of("data", "array is not row-contiguous; call contiguous(x) first", "shape {}",
                         shape_str(shape()));
  return strided_data<T>();
}

namespace detail {
/// Copies an evaluated array's elements in row-major order into dense `dst` of dtype `dst_t`.
void gather_row_major(const Array& a, void* dst, Dtype dst_t);
}  // namespace detail

template <Scalar T>
std::vector<T> Array::to_vector() const {
  check_valid("to_vector");
  eval();
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> tmp(size());
    detail::gather_row_major(*this, tmp.data(), bool_);
    return std::vector<bool>(tmp.begin(), tmp.end());
  } else {
    std::vector<T> out(size());
    detail::gather_row_major(*this, out.data(), dtype_of<T>());
    return out;
  }
}

}  // namespace kiln
