// Views that reinterpret an array's layout: reshape, transpose, broadcast_to and their friends.
#include "kiln/core/ops/shape.h"

#include <algorithm>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/strided.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {

void check_array(const char* op, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
}

int64_t batch_size(std::span<const Array> inputs, std::span<const int> axes) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (axes[i] >= 0) return inputs[i].shape(axes[i]);
  return 1;
}

Array batch_front(const Array& x, int axis, int64_t batch, StreamOrDevice s) {
  if (axis >= 0) return axis == 0 ? x : moveaxis(x, axis, 0, s);
  Shape shape = x.shape();
  shape.insert(shape.begin(), batch);
  return broadcast_to(expand_dims(x, 0, s), shape, s);
}

namespace {

void check_rank(const char* op, const Shape& shape) {
  if (static_cast<int>(shape.size()) > kMaxDims)
    throw ShapeError::of(op, "too many dimensions", "{} has more than {}", shape_str(shape), kMaxDims);
}

// NumPy's _attempt_nocopy_reshape: strides for `shape` that address the same elements as
// (old_shape, old_strides) in row-major order, or nothing when a copy is unavoidable.
std::optional<Strides> nocopy_strides(const Shape& old_shape, const Strides& old_strides,
                                      const Shape& shape) {
  if (shape_size(shape) == 0) return row_major_strides(shape);
  Shape od;
  Strides os;
  for (size_t i = 0; i < old_shape.size(); ++i)
    if (old_shape[i] != 1) {
      od.push_back(old_shape[i]);
      os.push_back(old_strides[i]);
    }
  const size_t on = od.size(), nn = shape.size();
  Strides out(nn, 0);
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < nn && oi < on) {
    int64_t np = shape[ni], op = od[oi];
    while (np != op) {
      if (np < op)
        np *= shape[nj++];
      else
        op *= od[oj++];
    }
    for (size_t ok = oi; ok + 1 < oj; ++ok)
      if (os[ok] != od[ok + 1] * os[ok + 1]) return std::nullopt;
    out[nj - 1] = os[oj - 1];
    for (size_t nk = nj - 1; nk > ni; --nk) out[nk - 1] = out[nk] * shape[nk];
    ni = nj++;
    oi = oj++;
  }
  const int64_t last = ni >= 1 ? out[ni - 1] : 1;
  for (size_t nk = ni; nk < nn; ++nk) out[nk] = last;
  return out;
}

// A view when the input's strides allow one (always for row-contiguous input, squeeze and
// expand_dims); a row-major copy otherwise.
class Reshape final : public PrimitiveWithParams<Reshape> {
 public:
  Reshape(Stream s, Shape shape) : PrimitiveWithParams(s), shape_(std::move(shape)) {}
  const char* name() const override { return "Reshape"; }
  auto params() const { return std::tie(shape_); }
  std::vector<Shape> output_shapes(std::span<const Array>) const override { return {shape_}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (view(in[0], out[0])) return;
    const Array& x = in[0];
    out[0].allocate();
    copy_strided(x.raw_data(), x.dtype(), x.strides(), out[0].raw_data(), x.dtype(),
                 row_major_strides(x.shape()), x.shape());
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    if (!view(in[0], out[0])) gpu::copy(in[0], out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    return {reshape(a.cotangents[0], a.primals[0].shape(), stream())};
  }

 private:
  // Makes `out` a view of x when the new shape can address x's elements in place.
  bool view(const Array& x, Array& out) const {
    if (x.row_contiguous()) {
      out.set_view(x, row_major_strides(shape_), 0);
      return true;
    }
    if (auto st = nocopy_strides(x.shape(), x.strides(), shape_)) {
      out.set_view(x, std::move(*st), 0);
      return true;
    }
    return false;
  }

 public:
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {reshape(a.tangents[0], shape_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    if (a.axes[0] < 0) return {{reshape(a.inputs[0], shape_, stream())}, {-1}};
    const Array x = batch_front(a.inputs[0], a.axes[0], 1, stream());
    Shape shape = shape_;
    shape.insert(shape.begin(), x.shape(0));
    return {{reshape(x, shape, stream())}, {0}};
  }

 private:
  Shape shape_;
};

class Transpose final : public PrimitiveWithParams<Transpose> {
 public:
  Transpose(Stream s, Axes perm) : PrimitiveWithParams(s), perm_(std::move(perm)) {}
  const char* name() const override { return "Transpose"; }
  auto params() const { return std::tie(perm_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    Shape shape;
    for (int p : perm_) shape.push_back(in[0].shape()[p]);
    return {shape};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Strides st;
    for (int p : perm_) st.push_back(in[0].strides()[p]);
    out[0].set_view(in[0], std::move(st), 0);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    Axes inv(perm_.size());
    for (size_t i = 0; i < perm_.size(); ++i) inv[perm_[i]] = static_cast<int>(i);
    return {transpose(a.cotangents[0], inv, stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {transpose(a.tangents[0], perm_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    if (b < 0) return {{transpose(a.inputs[0], perm_, stream())}, {-1}};
    Axes perm{b};  // the batch axis leads; the others follow the permutation, skipping it
    for (int p : perm_) perm.push_back(p < b ? p : p + 1);
    return {{transpose(a.inputs[0], perm, stream())}, {0}};
  }

 private:
  Axes perm_;
};

class Broadcast final : public PrimitiveWithParams<Broadcast> {
 public:
  Broadcast(Stream s, Shape shape) : PrimitiveWithParams(s), shape_(std::move(shape)) {}
  const char* name() const override { return "Broadcast"; }
  auto params() const { return std::tie(shape_); }
  std::vector<Shape> output_shapes(std::span<const Array>) const override { return {shape_}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].set_view(in[0], broadcast_strides(in[0].shape(), in[0].strides(), shape_), 0);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    return {sum_to_shape(a.cotangents[0], a.primals[0].shape(), stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {broadcast_to(a.tangents[0], shape_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    if (b < 0) return {{broadcast_to(a.inputs[0], shape_, stream())}, {-1}};
    Array x = batch_front(a.inputs[0], b, 1, stream());
    // Right-align the example's dims with the target by inserting size-1 dims after the batch.
    Shape xs = x.shape();
    xs.insert(xs.begin() + 1, shape_.size() - (xs.size() - 1), 1);
    x = reshape(x, xs, stream());
    Shape target = shape_;
    target.insert(target.begin(), xs[0]);
    return {{broadcast_to(x, target, stream())}, {0}};
  }

 private:
  Shape shape_;
};

}  // namespace
}  // namespace detail

Array reshape(const Array& a, Shape shape, StreamOrDevice s) {
  detail::check_array("reshape", a);
  detail::check_rank("reshape", shape);
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0)
        throw ShapeError::of("reshape", "only one dimension can be -1", "{} to {}", shape_str(a.shape()),
                             shape_str(shape));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ShapeError::of("reshape", "negative dimension", "{} to {}", shape_str(a.shape()),
                           shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.size() % known != 0)
      throw ShapeError::of("reshape", "cannot infer the -1 dimension", "{} ({} elements) to {}",
                           shape_str(a.shape()), a.size(), shape_str(shape));
    shape[infer] = a.size() / known;
  } else if (known != a.size()) {
    throw ShapeError::of("reshape", "sizes differ", "{} ({} elements) to {} ({} elements)",
                         shape_str(a.shape()), a.size(), shape_str(shape), known);
  }
  if (shape == a.shape()) return a;
  return Array::make(shape, a.dtype(), std::make_shared<detail::Reshape>(to_stream(s), shape), {a});
}

Array transpose(const Array& a, const Axes& axes, StreamOrDevice s) {
  detail::check_array("transpose", a);
  const int nd = a.ndim();
  if (static_cast<int>(axes.size()) != nd)
    throw ShapeError::of("transpose", "axes must list every dimension once", "axes ({}) for shape {}",
                         fmt::join(axes, ","), shape_str(a.shape()));
  Axes perm;
  for (int ax : axes) perm.push_back(normalize_axis("transpose", ax, nd));
  Axes sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw ShapeError::of("transpose", "repeated axis", "axes ({}) for shape {}", fmt::join(axes, ","),
                         shape_str(a.shape()));
  if (perm == all_axes(nd)) return a;
  Shape shape;
  for (int p : perm) shape.push_back(a.shape()[p]);
  return Array::make(std::move(shape), a.dtype(), std::make_shared<detail::Transpose>(to_stream(s), perm),
                     {a});
}

Array transpose(const Array& a, StreamOrDevice s) {
  detail::check_array("transpose", a);
  Axes axes = all_axes(a.ndim());
  std::reverse(axes.begin(), axes.end());
  return transpose(a, axes, s);
}

Array swapaxes(const Array& a, int axis1, int axis2, StreamOrDevice s) {
  detail::check_array("swapaxes", a);
  const int i = normalize_axis("swapaxes", axis1, a.ndim()), j = normalize_axis("swapaxes", axis2, a.ndim());
  Axes perm = all_axes(a.ndim());
  std::swap(perm[i], perm[j]);
  return transpose(a, perm, s);
}

Array moveaxis(const Array& a, int source, int destination, StreamOrDevice s) {
  detail::check_array("moveaxis", a);
  const int src = normalize_axis("moveaxis", source, a.ndim());
  const int dst = normalize_axis("moveaxis", destination, a.ndim());
  Axes perm;
  for (int i = 0; i < a.ndim(); ++i)
    if (i != src) perm.push_back(i);
  perm.insert(perm.begin() + dst, src);
  return transpose(a, perm, s);
}

Array squeeze(const Array& a, const Axes& axes, StreamOrDevice s) {
  detail::check_array("squeeze", a);
  const Axes ax = normalize_axes("squeeze", axes, a.ndim());
  for (int i : ax)
    if (a.shape()[i] != 1)
      throw ShapeError::of("squeeze", "cannot squeeze an axis whose size is not 1", "axis {} of shape {}", i,
                           shape_str(a.shape()));
  Shape shape;
  for (int i = 0; i < a.ndim(); ++i)
    if (!std::binary_search(ax.begin(), ax.end(), i)) shape.push_back(a.shape()[i]);
  return reshape(a, shape, s);
}

Array squeeze(const Array& a, StreamOrDevice s) {
  detail::check_array("squeeze", a);
  Shape shape;
  for (int64_t d : a.shape())
    if (d != 1) shape.push_back(d);
  return reshape(a, shape, s);
}

Array expand_dims(const Array& a, const Axes& axes, StreamOrDevice s) {
  detail::check_array("expand_dims", a);
  const int nd = a.ndim() + static_cast<int>(axes.size());
  if (nd > kMaxDims)
    throw ShapeError::of("expand_dims", "too many dimensions", "{} new axes for shape {}", axes.size(),
                         shape_str(a.shape()));
  const Axes ax = normalize_axes("expand_dims", axes, nd);
  Shape shape;
  size_t src = 0;
  for (int i = 0; i < nd; ++i)
    shape.push_back(std::binary_search(ax.begin(), ax.end(), i) ? 1 : a.shape()[src++]);
  return reshape(a, shape, s);
}

Array squeeze(const Array& a, int axis, StreamOrDevice s) { return squeeze(a, Axes{axis}, s); }

Array expand_dims(const Array& a, int axis, StreamOrDevice s) { return expand_dims(a, Axes{axis}, s); }

Array broadcast_to(const Array& a, const Shape& shape, StreamOrDevice s) {
  detail::check_array("broadcast_to", a);
  detail::check_rank("broadcast_to", shape);
  const Shape& in = a.shape();
  bool ok = shape.size() >= in.size();
  for (size_t i = 0; ok && i < in.size(); ++i) {
    const int64_t want = shape[shape.size() - in.size() + i];
    ok = in[i] == want || in[i] == 1;
  }
  for (int64_t d : shape) ok = ok && d >= 0;
  if (!ok)
    throw ShapeError::of("broadcast_to", "shapes cannot be broadcast", "{} to {}", shape_str(in),
                         shape_str(shape));
  if (shape == in) return a;
  return Array::make(shape, a.dtype(), std::make_shared<detail::Broadcast>(to_stream(s), shape), {a});
}

Array flatten(const Array& a, int start_axis, int end_axis, StreamOrDevice s) {
  detail::check_array("flatten", a);
  // Axes are checked, never clamped (NumPy clamps no axis); a 0-d array counts as 1-d.
  const int nd = std::max(a.ndim(), 1);
  auto axis = [&](const char* name, int v) {
    if (v < -nd || v >= nd)
      throw ShapeError::of("flatten", "axis out of range",
                           "{} {} for shape {} ({} dimensions; axes are not clamped)", name, v,
                           shape_str(a.shape()), a.ndim());
    return v < 0 ? v + nd : v;
  };
  const int b = axis("start_axis", start_axis), e = axis("end_axis", end_axis);
  if (a.ndim() == 0) return reshape(a, {1}, s);
  if (b > e)
    throw ShapeError::of("flatten", "start_axis must not come after end_axis", "{} > {} for shape {}",
                         start_axis, end_axis, shape_str(a.shape()));
  Shape shape(a.shape().begin(), a.shape().begin() + b);
  int64_t merged = 1;
  for (int i = b; i <= e; ++i) merged *= a.shape()[i];
  shape.push_back(merged);
  shape.insert(shape.end(), a.shape().begin() + e + 1, a.shape().end());
  return reshape(a, shape, s);
}

}  // namespace kiln
