// Views of a buffer that the core view primitives cannot express: a diagonal (the two axes'
// strides added), explicit strides over the row-major elements (as_strided), and the bytes read
// as another dtype (view). Each output shares its input's buffer, on either device (a GPU array's
// storage is viewed the same way: a buffer, strides and an element offset).
#include <algorithm>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/shape_more.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {
namespace {

// The size of diagonal `offset` of an n1 x n2 matrix.
int64_t diagonal_size(int64_t n1, int64_t n2, int64_t offset) {
  return std::max<int64_t>(0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
}

Shape diagonal_shape(const Shape& in, int offset, int axis1, int axis2) {
  Shape out;
  for (int d = 0; d < static_cast<int>(in.size()); ++d)
    if (d != axis1 && d != axis2) out.push_back(in[d]);
  out.push_back(diagonal_size(in[axis1], in[axis2], offset));
  return out;
}

Array diagonal_view(const Array& a, int offset, int axis1, int axis2, StreamOrDevice s);

// g (rest..., d) written on diagonal `offset` of zeros of `shape` (axes axis1, axis2): the
// transpose of Diagonal. A strided update of the two axes flattened (step n2 + 1), then moved back.
Array diagonal_embed(const Array& g, const Shape& shape, int offset, int axis1, int axis2, StreamOrDevice s) {
  const int nd = static_cast<int>(shape.size());
  const int64_t n1 = shape[axis1], n2 = shape[axis2], d = g.shape(-1);
  Shape rest(g.shape().begin(), g.shape().end() - 1);
  Shape flat = rest;
  flat.push_back(n1 * n2);
  Array z = zeros(flat, g.dtype(), s);
  if (d > 0) {
    Shape starts(flat.size(), 0), steps(flat.size(), 1);
    starts.back() = offset >= 0 ? offset : -static_cast<int64_t>(offset) * n2;
    steps.back() = n2 + 1;
    z = slice_update_view(z, g, starts, steps, s);
  }
  Shape square = rest;
  square.insert(square.end(), {n1, n2});
  Axes perm;
  int next = 0;
  for (int t = 0; t < nd; ++t) perm.push_back(t == axis1 ? nd - 2 : t == axis2 ? nd - 1 : next++);
  return transpose(reshape(z, square, s), perm, s);
}

class Diagonal final : public PrimitiveWithParams<Diagonal> {
 public:
  Diagonal(Stream s, int offset, int axis1, int axis2)
      : PrimitiveWithParams(s), offset_(offset), axis1_(axis1), axis2_(axis2) {}
  const char* name() const override { return "Diagonal"; }
  auto params() const { return std::tie(offset_, axis1_, axis2_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {diagonal_shape(in[0].shape(), offset_, axis1_, axis2_)};
  }
  // Element i is at i * (stride1 + stride2) from (0, offset) or (-offset, 0).
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Strides& st = in[0].strides();
    Strides strides;
    for (int d = 0; d < in[0].ndim(); ++d)
      if (d != axis1_ && d != axis2_) strides.push_back(st[d]);
    strides.push_back(st[axis1_] + st[axis2_]);
    const int64_t first = offset_ >= 0 ? offset_ * st[axis2_] : -static_cast<int64_t>(offset_) * st[axis1_];
    out[0].set_view(in[0], std::move(strides), out[0].size() == 0 ? 0 : first);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    return {diagonal_embed(a.cotangents[0], a.primals[0].shape(), offset_, axis1_, axis2_, stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {diagonal_view(a.tangents[0], offset_, axis1_, axis2_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Array x = batch_front(a.inputs[0], a.axes[0], 1, stream());
    return {{diagonal_view(x, offset_, axis1_ + 1, axis2_ + 1, stream())}, {0}};
  }

 private:
  int offset_, axis1_, axis2_;
};

Array diagonal_view(const Array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  return Array::make(diagonal_shape(a.shape(), offset, axis1, axis2), a.dtype(),
                     std::make_shared<Diagonal>(to_stream(s), offset, axis1, axis2), {a});
}

Array as_strided_view(const Array& x, const Shape& shape, const Strides& strides, int64_t offset,
                      StreamOrDevice s);

// Its input is row-contiguous (the op makes it so): element k of the view is at offset +
// sum(index * strides) in the input's row-major order.
class AsStrided final : public PrimitiveWithParams<AsStrided> {
 public:
  AsStrided(Stream s, Shape shape, Strides strides, int64_t offset)
      : PrimitiveWithParams(s), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset) {}
  const char* name() const override { return "AsStrided"; }
  auto params() const { return std::tie(shape_, strides_, offset_); }
  std::vector<Shape> output_shapes(std::span<const Array>) const override { return {shape_}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (!in[0].row_contiguous())
      throw RuntimeError::of("as_strided", "internal: the input is not row-contiguous", "shape {}",
                             shape_str(in[0].shape()));
    out[0].set_view(in[0], strides_, out[0].size() == 0 ? 0 : offset_);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  // Each view element's cotangent is added back at the input element it reads: a scatter-add at
  // the view of the input's positions.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& x = a.primals[0];
    const Array& g = a.cotangents[0];
    const int64_t n = x.size(), m = g.size();
    const Array positions = contiguous(
        reshape(arange(0, static_cast<double>(n), 1, int32, stream()), x.shape(), stream()), stream());
    const Array idx = reshape(as_strided_view(positions, shape_, strides_, offset_, stream()), {m}, stream());
    const Array flat =
        scatter_add(zeros({n}, g.dtype(), stream()), idx, reshape(g, {m}, stream()), 0, stream());
    return {reshape(flat, x.shape(), stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {as_strided_view(contiguous(a.tangents[0], stream()), shape_, strides_, offset_, stream())};
  }
  // Example b's elements start at b * (its size) of the row-major batch.
  VmapResult vmap(const VmapArgs& a) const override {
    const Array x = contiguous(batch_front(a.inputs[0], a.axes[0], 1, stream()), stream());
    const int64_t b = x.shape(0), per = b == 0 ? 0 : x.size() / b;
    Shape shape = shape_;
    Strides strides = strides_;
    shape.insert(shape.begin(), b);
    strides.insert(strides.begin(), per);
    return {{as_strided_view(x, shape, strides, offset_, stream())}, {0}};
  }

 private:
  Shape shape_;
  Strides strides_;
  int64_t offset_;
};

Array as_strided_view(const Array& x, const Shape& shape, const Strides& strides, int64_t offset,
                      StreamOrDevice s) {
  return Array::make(shape, x.dtype(), std::make_shared<AsStrided>(to_stream(s), shape, strides, offset),
                     {x});
}

// The shape of a's bytes read as `to` (NumPy: the last axis scales).
Shape bit_view_shape(const Shape& in, Dtype from, Dtype to) {
  Shape out = in;
  if (size_of(from) != size_of(to)) out.back() = out.back() * size_of(from) / size_of(to);
  return out;
}

// Its input is row-contiguous (the op makes it so). A view where the input's first byte starts an
// element of the new dtype; else a copy of the input to fresh storage first, then a view of that.
class BitView final : public PrimitiveWithParams<BitView> {
 public:
  BitView(Stream s, Dtype dtype) : PrimitiveWithParams(s), dtype_(dtype) {}
  const char* name() const override { return "View"; }
  auto params() const { return std::tie(dtype_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {bit_view_shape(in[0].shape(), in[0].dtype(), dtype_)};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (out[0].size() == 0) return out[0].allocate();
    if (view_in_place(in[0], out[0])) return;
    Array copy = fresh(in[0]);
    copy.allocate();
    copy_strided(in[0], copy);
    out[0].set_view(copy, row_major_strides(out[0].shape()), 0);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    if (out[0].size() == 0) return gpu::allocate(out[0]);
    if (view_in_place(in[0], out[0])) return;
    Array copy = fresh(in[0]);
    gpu::copy(in[0], copy);
    out[0].set_view(copy, row_major_strides(out[0].shape()), 0);
  }
  // Bit patterns have no derivative (as JAX's bitcast_convert_type): zero both ways.
  std::vector<Array> vjp(const VjpArgs& a) const override { return {zeros_like(a.primals[0], stream())}; }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {zeros(bit_view_shape(a.primals[0].shape(), a.primals[0].dtype(), dtype_), dtype_, stream())};
  }
  // The batch axis stays where it is unless it is the last (which the view rescales).
  VmapResult vmap(const VmapArgs& a) const override {
    Array x = a.inputs[0];
    int axis = a.axes[0];
    if (axis == x.ndim() - 1) {
      x = moveaxis(x, axis, 0, stream());
      axis = 0;
    }
    return {{view(x, dtype_, stream())}, {axis}};
  }

 private:
  // An unevaluated array of x's shape and dtype that is no graph node's output: the scratch copy
  // whose storage the output then views.
  static Array fresh(const Array& x) { return Array(std::make_shared<ArrayNode>(x.shape(), x.dtype())); }
  bool view_in_place(const Array& x, Array& out) const {
    if (!x.row_contiguous())
      throw RuntimeError::of("view", "internal: the input is not row-contiguous", "shape {}",
                             shape_str(x.shape()));
    const int64_t byte = x.node().offset * x.itemsize(), size = size_of(dtype_);
    if (byte % size != 0) return false;
    // set_view adds the source's offset (in its own elements) to the one given.
    out.set_view(x, row_major_strides(out.shape()), byte / size - x.node().offset);
    return true;
  }
  Dtype dtype_;
};

}  // namespace
}  // namespace detail

Array diagonal(const Array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  detail::check_array("diagonal", a);
  if (a.ndim() < 2)
    throw ShapeError::of("diagonal", "the array must have at least 2 dimensions", "shape {}",
                         shape_str(a.shape()));
  const int a1 = normalize_axis("diagonal", axis1, a.ndim()),
            a2 = normalize_axis("diagonal", axis2, a.ndim());
  if (a1 == a2)
    throw ShapeError::of("diagonal", "axis1 and axis2 must differ", "axes {} and {} of shape {}", axis1,
                         axis2, shape_str(a.shape()));
  return detail::diagonal_view(a, offset, a1, a2, s);
}

Array as_strided(const Array& a, const Shape& shape, const Strides& strides, int64_t offset,
                 StreamOrDevice s) {
  detail::check_array("as_strided", a);
  if (shape.size() != strides.size())
    throw ShapeError::of("as_strided", "shape and strides need the same length", "shape {}, strides ({})",
                         shape_str(shape), fmt::join(strides, ","));
  if (static_cast<int>(shape.size()) > kMaxDims)
    throw ShapeError::of("as_strided", "too many dimensions", "{} > {}", shape.size(), kMaxDims);
  for (int64_t d : shape)
    if (d < 0) throw ShapeError::of("as_strided", "negative dimension", "shape {}", shape_str(shape));
  if (shape_size(shape) > 0) {
    // The lowest and highest elements read (an overflow reaches outside too).
    int64_t lo = offset, hi = offset;
    bool overflow = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t reach = 0;
      overflow = overflow || __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
      overflow = overflow || __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
    }
    if (overflow || lo < 0 || hi >= a.size())
      throw ValueError::of("as_strided", "the view reaches outside the array",
                           "shape {}, strides ({}), offset {} over {} elements", shape_str(shape),
                           fmt::join(strides, ","), offset, a.size());
  }
  const Array x = contiguous(flatten(a, 0, -1, s), s);
  return detail::as_strided_view(x, shape, strides, shape_size(shape) == 0 ? 0 : offset, s);
}

Array view(const Array& a, Dtype dtype, StreamOrDevice s) {
  detail::check_array("view", a);
  if (dtype == a.dtype()) return a;
  const int from = a.itemsize(), to = size_of(dtype);
  if (from != to) {
    if (a.ndim() == 0)
      throw ShapeError::of("view", "a 0-d array can only be viewed as a dtype of the same size",
                           "{} ({} bytes) as {} ({} bytes)", dtype_name(a.dtype()), from, dtype_name(dtype),
                           to);
    if (a.shape(-1) * from % to != 0)
      throw ShapeError::of("view", "the last axis' bytes must divide into the new item size",
                           "shape {} of {} ({} bytes each) as {} ({} bytes)", shape_str(a.shape()),
                           dtype_name(a.dtype()), from, dtype_name(dtype), to);
  }
  const Array x = contiguous(a, s);
  return Array::make(detail::bit_view_shape(a.shape(), a.dtype(), dtype), dtype,
                     std::make_shared<detail::BitView>(to_stream(s), dtype), {x});
}

}  // namespace kiln
