#include "kiln/core/array.h"

#include <cstring>
#include <mutex>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/strided.h"
#include "kiln/core/primitive.h"

namespace kiln {

void Array::check_valid(const char* what) const {
  if (!node_) throw ValueError::of(what, "the array is empty (default-constructed)");
}

const Shape& Array::shape() const {
  check_valid("shape");
  return node_->shape;
}
int64_t Array::shape(int axis) const {
  const int a = normalize_axis("shape", axis, ndim());
  return node_->shape[a];
}
const Strides& Array::strides() const {
  check_valid("strides");
  return node_->strides;
}
Dtype Array::dtype() const {
  check_valid("dtype");
  return node_->dtype;
}
int64_t Array::size() const {
  check_valid("size");
  return node_->size;
}
bool Array::is_available() const {
  return node_ && node_->state.load(std::memory_order_acquire) == detail::NodeState::available;
}
void Array::eval() const {
  check_valid("eval");
  if (!is_available()) kiln::eval({*this});
}

void* Array::raw_data() const {
  return static_cast<char*>(node_->buffer->ptr()) + node_->offset * size_of(node_->dtype);
}
bool Array::row_contiguous() const { return node_->row_contiguous; }

namespace {
// shared_ptr::use_count() is a relaxed load: seeing 1 does not order this thread after the threads
// that used the object and then let go of it, so writing what they read would be a data race
// (TSan reports it: Threads.DonationAfterAnotherThreadReadTheInput and
// Threads.DroppingAnInnerNodeWhileTheOuterGraphIsFreed). Their decrements are releases; an acq_rel
// increment of the same count reads the latest of them and so acquires them all. Call this after
// use_count() == 1, before writing. (An acquire fence would do too, but TSan does not see fences.)
template <class T>
void acquire_sole_ownership(const std::shared_ptr<T>& p) {
  const std::shared_ptr<T> copy = p;
}

// Storage is set only while a node is being computed. Once available, other threads may be reading
// it and materialize() promises it never changes, so re-pointing it is a bug in a primitive.
void check_not_evaluated(const detail::ArrayNode& n, const char* what) {
  if (n.state.load(std::memory_order_acquire) == detail::NodeState::available)
    throw RuntimeError::of(what, "the array is already evaluated; evaluated arrays are immutable");
}
}  // namespace

void Array::allocate() {
  check_not_evaluated(*node_, "allocate");
  node_->buffer = detail::allocate(static_cast<size_t>(std::max<int64_t>(nbytes(), 1)));
  node_->offset = 0;
  node_->strides = row_major_strides(node_->shape);
  node_->row_contiguous = true;
}

void detail::set_buffer(Array& a, std::shared_ptr<Buffer> buffer) {
  ArrayNode& n = a.node();
  check_not_evaluated(n, "allocate");
  n.buffer = std::move(buffer);
  n.offset = 0;
  n.strides = row_major_strides(n.shape);
  n.row_contiguous = true;
}

void Array::set_view(const Array& source, Strides strides, int64_t offset) {
  check_not_evaluated(*node_, "set_view");
  node_->buffer = source.node_->buffer;
  node_->offset = source.node_->offset + offset;
  // A view is row-contiguous when its strides match row-major ones on every dim of size > 1.
  const Strides rm = row_major_strides(node_->shape);
  bool rc = true;
  for (size_t i = 0; i < strides.size(); ++i)
    if (node_->shape[i] > 1 && strides[i] != rm[i]) rc = false;
  node_->row_contiguous = rc;
  node_->strides = std::move(strides);
}

bool Array::donate_from(const Array& source) {
  check_not_evaluated(*node_, "donate_from");
  const auto& src = *source.node_;
  // One reference to the node (the consumer's input list) and one to the buffer: nobody else can
  // see the values, so overwriting them in place is safe.
  if (source.node_.use_count() != 1 || !src.buffer || src.buffer.use_count() != 1 || !src.buffer->on_host() ||
      src.buffer->external())
    return false;
  // A traced value is kept whole while a transform traces on this thread; once the trace is over
  // (the gradients value_and_grad returned, the optimizer step built from them) it is a value.
  if ((src.tracer && detail::in_trace()) || !src.row_contiguous || src.dtype != node_->dtype ||
      src.size != node_->size || src.offset != 0)
    return false;
  acquire_sole_ownership(source.node_);  // threads that read the values, then dropped the array
  src.buffer->drop_device_copy();        // its host bytes are about to change
  node_->buffer = src.buffer;            // (copying it acquires, likewise, views that shared it)
  node_->offset = 0;
  node_->strides = row_major_strides(node_->shape);
  node_->row_contiguous = true;
  return true;
}

std::vector<Array> Array::inputs() const {
  std::lock_guard lock(node_->lock);
  return node_->inputs.get();
}
std::shared_ptr<const Primitive> Array::primitive() const {
  std::lock_guard lock(node_->lock);
  return node_->primitive;
}
bool Array::has_primitive() const {
  std::lock_guard lock(node_->lock);
  return node_->primitive != nullptr;
}
int Array::output_index() const { return node_->position; }

std::vector<Array> Array::outputs() const {
  std::shared_ptr<detail::SiblingGroup> g;
  std::shared_ptr<const Primitive> primitive;
  detail::NodeInputs inputs;
  {
    std::lock_guard lock(node_->lock);
    g = node_->group;
    if (!g) return {*this};
    primitive = node_->primitive;
    inputs = node_->inputs;
  }
  std::vector<Array> out;
  std::lock_guard lock(g->lock);
  const bool computed = g->state.load(std::memory_order_acquire) == detail::NodeState::available;
  for (size_t i = 0; i < g->outputs.size(); ++i) {
    if (auto n = g->outputs[i].lock()) {
      out.emplace_back(std::move(n));
      continue;
    }
    // A dropped output: recreate it so the primitive has somewhere to write and a vjp rule can use
    // it. If the group already ran, the values are gone; the new node recomputes in a group of its own.
    auto fresh = std::make_shared<detail::ArrayNode>(g->shapes[i], g->dtypes[i]);
    fresh->position = static_cast<int>(i);
    fresh->tracer = node_->tracer;
    fresh->primitive = primitive;
    fresh->inputs = inputs;
    if (computed) {
      auto own = std::make_shared<detail::SiblingGroup>();
      own->shapes = g->shapes;
      own->dtypes = g->dtypes;
      own->outputs.resize(g->outputs.size());
      own->outputs[i] = fresh;
      fresh->group = std::move(own);
    } else {
      fresh->group = g;
      g->outputs[i] = fresh;
    }
    out.emplace_back(std::move(fresh));
  }
  return out;
}

namespace {
bool any_tracer(const std::vector<Array>& inputs) {
  for (const Array& a : inputs)
    if (a.node().tracer) return true;
  return false;
}
}  // namespace

Array Array::make(Shape shape, Dtype dtype, std::shared_ptr<const Primitive> primitive,
                  std::vector<Array> inputs) {
  auto n = std::make_shared<detail::ArrayNode>(std::move(shape), dtype);
  n->tracer = any_tracer(inputs);
  n->primitive = std::move(primitive);
  n->inputs = std::move(inputs);
  return Array(std::move(n));
}

std::vector<Array> Array::make_many(std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                                    std::shared_ptr<const Primitive> primitive, std::vector<Array> inputs) {
  if (shapes.size() == 1)
    return {make(std::move(shapes[0]), dtypes[0], std::move(primitive), std::move(inputs))};
  auto group = std::make_shared<detail::SiblingGroup>();
  const bool tracer = any_tracer(inputs);
  const detail::NodeInputs shared_inputs(std::move(inputs));  // one list for every output
  std::vector<Array> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto n = std::make_shared<detail::ArrayNode>(shapes[i], dtypes[i]);
    n->tracer = tracer;
    n->primitive = primitive;
    n->inputs = shared_inputs;
    n->group = group;
    n->position = static_cast<int>(i);
    group->outputs.push_back(n);
    out.emplace_back(std::move(n));
  }
  group->shapes = std::move(shapes);
  group->dtypes = std::move(dtypes);
  return out;
}

Array Array::empty_available(Shape shape, Dtype dtype) {
  Array a(std::make_shared<detail::ArrayNode>(std::move(shape), dtype));
  a.allocate();
  a.node_->state.store(detail::NodeState::available, std::memory_order_release);
  return a;
}

Array Array::from_buffer(void* data, Shape shape, Dtype dtype, std::function<void(void*)> deleter) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError::of("from_buffer", "negative dimension", "shape {}", shape_str(shape));
  const int64_t n = shape_size(shape);
  if (!data && n > 0) throw ValueError::of("from_buffer", "data is null", "shape {}", shape_str(shape));
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(size_of(dtype)) != 0)
    throw ValueError::of("from_buffer", "data is not aligned to its dtype", "{} at {}", dtype_name(dtype),
                         data);
  if (n == 0) {  // nothing to read: kiln's own (empty) block, and the memory goes back at once
    if (deleter) deleter(data);
    return empty_available(std::move(shape), dtype);
  }
  if (!deleter) deleter = [](void*) {};  // an empty function marks kiln's own memory
  Array a(std::make_shared<detail::ArrayNode>(std::move(shape), dtype));
  detail::set_buffer(
      a, std::make_shared<detail::Buffer>(data, static_cast<size_t>(n * size_of(dtype)), std::move(deleter)));
  a.node_->state.store(detail::NodeState::available, std::memory_order_release);
  return a;
}

void Array::from_bytes(const void* values, Dtype src, int64_t n, Shape shape, Dtype dtype) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError::of("array", "negative dimension", "shape {}", shape_str(shape));
  if (shape_size(shape) != n)
    throw ShapeError::of("array", "number of values does not match the shape", "{} values for shape {}", n,
                         shape_str(shape));
  *this = empty_available(std::move(shape), dtype);
  detail::convert_values(values, src, raw_data(), dtype, n);
}

namespace detail {

const std::vector<Array> NodeInputs::kEmpty;

std::vector<Array>* NodeInputs::sole_list() {
  if (!list_ || list_.use_count() != 1) return nullptr;
  acquire_sole_ownership(list_);  // siblings that read the list before letting go of it
  return list_.get();
}

ArrayNode::~ArrayNode() {
  // Release a long chain without recursion: steal the inputs of every node we hold the last
  // reference to, so each destructor below runs with an empty input list. A list that siblings
  // still share is only let go of.
  std::vector<std::shared_ptr<ArrayNode>> stack;
  auto steal = [&stack](NodeInputs& in) {
    if (std::vector<Array>* list = in.sole_list())
      for (Array& a : *list)
        stack.push_back(std::move(const_cast<std::shared_ptr<ArrayNode>&>(a.node_ptr())));
    in.clear();
  };
  if (inputs.empty()) return;
  steal(inputs);
  while (!stack.empty()) {
    std::shared_ptr<ArrayNode> n = std::move(stack.back());
    stack.pop_back();
    // Nodes in a sibling group may be revived through a weak link; let them go the ordinary way.
    if (n && n.use_count() == 1 && !n->group) {
      acquire_sole_ownership(n);  // other threads read n->inputs before letting go of n
      steal(n->inputs);
    }
  }
}

void convert_values(const void* src, Dtype src_t, void* dst, Dtype dst_t, int64_t n) {
  if (n == 0) return;  // src may be null (an empty vector's data())
  if (src_t == dst_t) {
    std::memcpy(dst, src, static_cast<size_t>(n) * size_of(src_t));
    return;
  }
  visit_dtype<kAllTypes>(src_t, "astype", [&](auto s) {
    using S = typename decltype(s)::type;
    visit_dtype<kAllTypes>(dst_t, "astype", [&](auto d) {
      using D = typename decltype(d)::type;
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = convert<D>(in[i]);
    });
  });
}

Strides broadcast_strides(const Shape& in_shape, const Strides& in_strides, const Shape& out_shape) {
  Strides st(out_shape.size(), 0);
  const size_t off = out_shape.size() - in_shape.size();
  for (size_t i = 0; i < in_shape.size(); ++i) st[off + i] = in_shape[i] == 1 ? 0 : in_strides[i];
  return st;
}

void gather_row_major(const Array& a, void* dst, Dtype dst_t) {
  if (a.size() == 0) return;
  if (a.row_contiguous()) {
    convert_values(a.raw_data(), a.dtype(), dst, dst_t, a.size());
    return;
  }
  const Strides dense = row_major_strides(a.shape());
  const auto layout = collapse<2>(a.shape(), {&dense, &a.strides()});
  const int isz = a.itemsize(), osz = size_of(dst_t);
  const char* src = static_cast<const char*>(a.raw_data());
  char* out = static_cast<char*>(dst);
  for_each_row(layout, 0, row_count(layout), [&](const auto& off, int64_t n, const auto& st) {
    for (int64_t i = 0; i < n; ++i)
      convert_values(src + (off[1] + i * st[1]) * isz, a.dtype(), out + (off[0] + i * st[0]) * osz, dst_t, 1);
  });
}

}  // namespace detail
}  // namespace kiln
