// Ops that build a larger array from pieces: concatenate, stack, pad, repeat, tile.
#include <algorithm>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu_gather.h"

namespace kiln {
namespace detail {
namespace {

// Pointer to element `index` along `axis` of an evaluated array.
char* at_axis(const Array& a, int axis, int64_t index) {
  return static_cast<char*>(a.raw_data()) + index * a.strides()[axis] * a.itemsize();
}

class Concatenate final : public PrimitiveWithParams<Concatenate> {
 public:
  Concatenate(Stream s, int axis) : PrimitiveWithParams(s), axis_(axis) {}
  const char* name() const override { return "Concatenate"; }
  auto params() const { return std::tie(axis_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  // Checked as concatenate() checks: shapeless compile replays it on new shapes.
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    const Shape& first = in[0].shape();
    Shape shape = first;
    shape[axis_] = 0;
    for (const Array& x : in) {
      bool same = x.shape().size() == first.size();
      for (size_t d = 0; same && d < first.size(); ++d)
        same = static_cast<int>(d) == axis_ || x.shape()[d] == first[d];
      if (!same)
        throw ShapeError::of("concatenate", "shapes must match except along the axis",
                             "{} and {} along axis {}", shape_str(first), shape_str(x.shape()), axis_);
      shape[axis_] += x.shape()[axis_];
    }
    return {shape};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Array& o = out[0];
    o.allocate();
    int64_t at = 0;
    for (const Array& x : in) {
      if (x.size() > 0)
        copy_strided(x.raw_data(), x.dtype(), x.strides(), at_axis(o, axis_, at), o.dtype(), o.strides(),
                     x.shape());
      at += x.shape()[axis_];
    }
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::concatenate(in, axis_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    std::vector<int64_t> offsets{0};
    for (const Array& x : a.primals) offsets.push_back(offsets.back() + x.shape()[axis_]);
    std::vector<Array> out;
    for (int arg : a.argnums) {
      const Array& x = a.primals[arg];
      Shape starts(x.ndim(), 0), steps(x.ndim(), 1);
      starts[axis_] = offsets[arg];
      out.push_back(slice_view(a.cotangents[0], starts, steps, x.shape(), stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    std::vector<Array> t;
    for (const Array& x : a.primals) t.push_back(zeros_like(x, stream()));
    for (size_t i = 0; i < a.argnums.size(); ++i) t[a.argnums[i]] = a.tangents[i];
    return {concatenate(t, axis_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t b = batch_size(a.inputs, a.axes);
    std::vector<Array> xs;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      xs.push_back(batch_front(a.inputs[i], a.axes[i], b, stream()));
    return {{concatenate(xs, axis_ + 1, stream())}, {0}};
  }

 private:
  int axis_;
};

using PadWidths = std::vector<std::pair<int64_t, int64_t>>;

// Inputs: the array and its fill value as a 0-d array of the same dtype (so the value can carry
// a gradient too).
class Pad final : public PrimitiveWithParams<Pad> {
 public:
  Pad(Stream s, Shape low, Shape high)
      : PrimitiveWithParams(s), low_(std::move(low)), high_(std::move(high)) {}
  const char* name() const override { return "Pad"; }
  auto params() const { return std::tie(low_, high_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {shape(in[0].shape())};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array &x = in[0], &v = in[1];
    Array& o = out[0];
    o.allocate();
    copy_strided(v.raw_data(), v.dtype(), Strides(o.ndim(), 0), o.raw_data(), o.dtype(), o.strides(),
                 o.shape());
    int64_t offset = 0;
    for (int i = 0; i < o.ndim(); ++i) offset += low_[i] * o.strides()[i];
    copy_strided(x.raw_data(), x.dtype(), x.strides(),
                 static_cast<char*>(o.raw_data()) + offset * o.itemsize(), o.dtype(), o.strides(), x.shape());
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::pad(in[0], in[1], low_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    const Array inner = slice_view(g, low_, Shape(low_.size(), 1), a.primals[0].shape(), stream());
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0)
        out.push_back(inner);
      else
        out.push_back(subtract(sum(g, false, stream()), sum(inner, false, stream()), stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    Array t[2] = {zeros_like(a.primals[0], stream()), zeros_like(a.primals[1], stream())};
    for (size_t i = 0; i < a.argnums.size(); ++i) t[a.argnums[i]] = a.tangents[i];
    return {make(t[0], t[1], low_, high_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t b = batch_size(a.inputs, a.axes);
    const Array x = batch_front(a.inputs[0], a.axes[0], b, stream());
    Shape low = low_, high = high_;
    low.insert(low.begin(), 0);
    high.insert(high.begin(), 0);
    if (a.axes[1] < 0) return {{make(x, a.inputs[1], low, high, stream())}, {0}};
    // A per-example fill value: pad with anything, then choose the value outside the interior.
    const Array padded = make(x, zeros({}, x.dtype(), stream()), low, high, stream());
    const Array inside = make(ones(x.shape(), bool_, stream()), Array(false), low, high, stream());
    Shape vs(padded.ndim(), 1);
    vs[0] = b;
    const Array v = reshape(a.inputs[1], vs, stream());
    return {{where(inside, padded, v, stream())}, {0}};
  }

  static Array make(const Array& x, const Array& value, const Shape& low, const Shape& high,
                    StreamOrDevice s) {
    auto prim = std::make_shared<Pad>(to_stream(s), low, high);
    return Array::make(prim->shape(x.shape()), x.dtype(), prim, {x, value});
  }

 private:
  Shape shape(const Shape& in) const {
    Shape out = in;
    for (size_t i = 0; i < out.size(); ++i) out[i] += low_[i] + high_[i];
    return out;
  }
  Shape low_, high_;
};

}  // namespace
}  // namespace detail

Array concatenate(const std::vector<Array>& arrays, int axis, StreamOrDevice s) {
  if (arrays.empty()) throw ValueError::of("concatenate", "needs at least one array");
  for (const Array& x : arrays) detail::check_array("concatenate", x);
  const Shape& first = arrays[0].shape();
  if (first.empty()) throw ShapeError::of("concatenate", "zero-dimensional arrays cannot be concatenated");
  const int ax = normalize_axis("concatenate", axis, static_cast<int>(first.size()));
  Dtype dtype = arrays[0].dtype();
  Shape shape = first;
  shape[ax] = 0;
  for (const Array& x : arrays) {
    bool ok = x.ndim() == static_cast<int>(first.size());
    for (size_t i = 0; ok && i < first.size(); ++i)
      ok = static_cast<int>(i) == ax || x.shape()[i] == first[i];
    if (!ok)
      throw ShapeError::of("concatenate", "shapes must match except along the axis",
                           "{} and {} along axis {}", shape_str(first), shape_str(x.shape()), ax);
    dtype = promote_types(dtype, x.dtype());
    shape[ax] += x.shape()[ax];
  }
  std::vector<Array> inputs;
  for (const Array& x : arrays) inputs.push_back(astype(x, dtype, s));
  if (inputs.size() == 1) return inputs[0];
  return Array::make(std::move(shape), dtype, std::make_shared<detail::Concatenate>(to_stream(s), ax),
                     std::move(inputs));
}

Array stack(const std::vector<Array>& arrays, int axis, StreamOrDevice s) {
  if (arrays.empty()) throw ValueError::of("stack", "needs at least one array");
  for (const Array& x : arrays) detail::check_array("stack", x);
  for (const Array& x : arrays)
    if (x.shape() != arrays[0].shape())
      throw ShapeError::of("stack", "all arrays must have the same shape", "{} and {}",
                           shape_str(arrays[0].shape()), shape_str(x.shape()));
  const int ax = normalize_axis("stack", axis, arrays[0].ndim() + 1);
  std::vector<Array> expanded;
  for (const Array& x : arrays) expanded.push_back(expand_dims(x, ax, s));
  return concatenate(expanded, ax, s);
}

Array pad(const Array& a, const std::vector<std::pair<int64_t, int64_t>>& pad_width, const Operand& value,
          StreamOrDevice s) {
  detail::check_array("pad", a);
  const int nd = a.ndim();
  if (static_cast<int>(pad_width.size()) != nd && pad_width.size() != 1)
    throw ShapeError::of("pad", "pad_width needs one (before, after) pair per dimension, or one for all",
                         "{} pairs for shape {}", pad_width.size(), shape_str(a.shape()));
  Shape low, high;
  bool any = false;
  for (int i = 0; i < nd; ++i) {
    const auto [lo, hi] = pad_width.size() == 1 ? pad_width[0] : pad_width[i];
    if (lo < 0 || hi < 0)
      throw ValueError::of("pad", "pad widths must be non-negative", "({}, {}) for axis {}", lo, hi, i);
    low.push_back(lo);
    high.push_back(hi);
    any = any || lo > 0 || hi > 0;
  }
  if (!value.is_scalar()) detail::check_array("pad", value.array());
  Array v = value.to_array(a.dtype(), s);
  if (v.size() != 1)
    throw ShapeError::of("pad", "the pad value must be a scalar", "value of shape {}", shape_str(v.shape()));
  if (v.ndim() != 0) v = reshape(v, {}, s);
  if (!any) return a;
  return detail::Pad::make(a, v, low, high, s);
}

Array repeat(const Array& a, int repeats, int axis, StreamOrDevice s) {
  detail::check_array("repeat", a);
  if (repeats < 0) throw ValueError::of("repeat", "repeats must be non-negative", "got {}", repeats);
  const int ax = normalize_axis("repeat", axis, a.ndim());
  if (repeats == 1) return a;
  // Each element gets its own axis of `repeats` broadcast copies, which the reshape then merges.
  Array x = expand_dims(a, ax + 1, s);
  Shape wide = x.shape();
  wide[ax + 1] = repeats;
  Shape shape = a.shape();
  shape[ax] *= repeats;
  return reshape(broadcast_to(x, wide, s), shape, s);
}

Array repeat(const Array& a, int repeats, StreamOrDevice s) {
  detail::check_array("repeat", a);
  return repeat(flatten(a, 0, -1, s), repeats, 0, s);
}

Array tile(const Array& a, const Shape& reps, StreamOrDevice s) {
  detail::check_array("tile", a);
  for (int64_t r : reps)
    if (r < 0)
      throw ValueError::of("tile", "reps must be non-negative", "reps ({}) for shape {}",
                           fmt::join(reps, ","), shape_str(a.shape()));
  const size_t nd = std::max(reps.size(), a.shape().size());
  if (nd > static_cast<size_t>(kMaxDims))
    throw ShapeError::of("tile", "too many dimensions", "reps ({}) for shape {}", fmt::join(reps, ","),
                         shape_str(a.shape()));
  Shape shape(nd - a.shape().size(), 1), r(nd - reps.size(), 1);
  shape.insert(shape.end(), a.shape().begin(), a.shape().end());
  r.insert(r.end(), reps.begin(), reps.end());
  if (std::all_of(r.begin(), r.end(), [](int64_t v) { return v == 1; })) return reshape(a, shape, s);
  // (1, d0, 1, d1, ...) broadcast to (r0, d0, r1, d1, ...), merged pairwise to (r0*d0, r1*d1, ...).
  Shape split, wide, out;
  for (size_t i = 0; i < nd; ++i) {
    split.insert(split.end(), {1, shape[i]});
    wide.insert(wide.end(), {r[i], shape[i]});
    out.push_back(r[i] * shape[i]);
  }
  return reshape(broadcast_to(reshape(a, split, s), wide, s), out, s);
}

}  // namespace kiln
