// Slicing: strided views (slice, split) and writing into a slice (slice_update).
#include <algorithm>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_gather.h"

namespace kiln {
namespace detail {
namespace {

// CPython's PySlice_AdjustIndices: clamps start/stop into the axis and counts the elements.
struct AxisSlice {
  int64_t start, step, size;
};
AxisSlice normalize_slice(const Slice& sl, int64_t n) {
  const int64_t step = sl.step;
  auto clamp = [&](std::optional<int64_t> v, int64_t missing) {
    if (!v) return missing;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = clamp(sl.start, step < 0 ? n - 1 : 0);
  const int64_t stop = clamp(sl.stop, step < 0 ? -1 : n);
  int64_t size = 0;
  if (step < 0 && stop < start) size = (start - stop - 1) / (-step) + 1;
  if (step > 0 && start < stop) size = (stop - start - 1) / step + 1;
  return {size == 0 ? 0 : start, step, size};
}

struct SliceSpec {
  Shape starts, steps, shape;
  bool identity(const Shape& in) const {
    for (size_t i = 0; i < in.size(); ++i)
      if (starts[i] != 0 || steps[i] != 1 || shape[i] != in[i]) return false;
    return true;
  }
};
SliceSpec normalize_slices(const char* op, const Array& a, const std::vector<Slice>& slices) {
  if (static_cast<int>(slices.size()) > a.ndim())
    throw ShapeError::of(op, "more slices than dimensions", "{} slices for shape {}", slices.size(),
                         shape_str(a.shape()));
  SliceSpec spec;
  for (int i = 0; i < a.ndim(); ++i) {
    const Slice sl = i < static_cast<int>(slices.size()) ? slices[i] : Slice{};
    if (sl.step == 0) throw ValueError::of(op, "slice step cannot be zero", "axis {}", i);
    const AxisSlice n = normalize_slice(sl, a.shape()[i]);
    spec.starts.push_back(n.start);
    spec.steps.push_back(n.step);
    spec.shape.push_back(n.size);
  }
  return spec;
}

// Element offset of a slice's first element and the slice's strides, for a layout with `strides`.
std::pair<int64_t, Strides> slice_layout(const Strides& strides, const Shape& starts, const Shape& steps,
                                         const Shape& shape) {
  int64_t offset = 0;
  Strides st(strides.size());
  for (size_t i = 0; i < strides.size(); ++i) {
    offset += starts[i] * strides[i];
    st[i] = strides[i] * steps[i];
  }
  return {shape_size(shape) == 0 ? 0 : offset, std::move(st)};
}

class SliceView final : public PrimitiveWithParams<SliceView> {
 public:
  SliceView(Stream s, Shape starts, Shape steps, Shape shape)
      : PrimitiveWithParams(s),
        starts_(std::move(starts)),
        steps_(std::move(steps)),
        shape_(std::move(shape)) {}
  const char* name() const override { return "Slice"; }
  auto params() const { return std::tie(starts_, steps_, shape_); }
  std::vector<Shape> output_shapes(std::span<const Array>) const override { return {shape_}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    auto [offset, st] = slice_layout(in[0].strides(), starts_, steps_, shape_);
    out[0].set_view(in[0], std::move(st), offset);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    return {
        slice_update_view(zeros(a.primals[0].shape(), g.dtype(), stream()), g, starts_, steps_, stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {slice_view(a.tangents[0], starts_, steps_, shape_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Array x = batch_front(a.inputs[0], a.axes[0], 1, stream());
    return {{slice_view(x, prepend(starts_, 0), prepend(steps_, 1), prepend(shape_, x.shape(0)), stream())},
            {0}};
  }

 private:
  static Shape prepend(Shape v, int64_t x) {
    v.insert(v.begin(), x);
    return v;
  }
  Shape starts_, steps_, shape_;
};

class SliceUpdate final : public PrimitiveWithParams<SliceUpdate> {
 public:
  SliceUpdate(Stream s, Shape starts, Shape steps)
      : PrimitiveWithParams(s), starts_(std::move(starts)), steps_(std::move(steps)) {}
  const char* name() const override { return "SliceUpdate"; }
  auto params() const { return std::tie(starts_, steps_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array &a = in[0], &u = in[1];
    Array& o = out[0];
    // Writing in place when nobody else can see `a` turns a loop of updates (a KV cache) from
    // quadratic into linear work.
    if (!o.donate_from(a)) {
      o.allocate();
      copy_strided(a, o);
    }
    auto [offset, st] = slice_layout(o.strides(), starts_, steps_, u.shape());
    char* dst = static_cast<char*>(o.raw_data()) + offset * o.itemsize();
    copy_strided(u.raw_data(), u.dtype(), u.strides(), dst, o.dtype(), st, u.shape());
  }
  // In place on the GPU too when nobody else can see `a` (the facade donates its device buffer).
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::slice_update(in[0], in[1], starts_, steps_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &g = a.cotangents[0], &u = a.primals[1];
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0)
        out.push_back(slice_update_view(g, zeros(u.shape(), g.dtype(), stream()), starts_, steps_, stream()));
      else
        out.push_back(slice_view(g, starts_, steps_, u.shape(), stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    Array t[2] = {zeros_like(a.primals[0], stream()), zeros_like(a.primals[1], stream())};
    for (size_t i = 0; i < a.argnums.size(); ++i) t[a.argnums[i]] = a.tangents[i];
    return {slice_update_view(t[0], t[1], starts_, steps_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t b = batch_size(a.inputs, a.axes);
    const Array x = batch_front(a.inputs[0], a.axes[0], b, stream());
    const Array u = batch_front(a.inputs[1], a.axes[1], b, stream());
    Shape starts = starts_, steps = steps_;
    starts.insert(starts.begin(), 0);
    steps.insert(steps.begin(), 1);
    return {{slice_update_view(x, u, starts, steps, stream())}, {0}};
  }

 private:
  Shape starts_, steps_;
};

// Several slices of one axis at once; each output is a view. Its vjp joins the cotangents in one
// concatenate instead of summing one zero-padded array per piece.
class Split final : public PrimitiveWithParams<Split> {
 public:
  Split(Stream s, int axis, Shape starts, Shape sizes)
      : PrimitiveWithParams(s), axis_(axis), starts_(std::move(starts)), sizes_(std::move(sizes)) {}
  const char* name() const override { return "Split"; }
  auto params() const { return std::tie(axis_, starts_, sizes_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return shapes(in[0].shape()); }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t offset = out[i].size() == 0 ? 0 : starts_[i] * in[0].strides()[axis_];
      out[i].set_view(in[0], in[0].strides(), offset);
    }
  }
  // Views of the input's buffer, wherever it lives.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const int64_t n = a.primals[0].shape()[axis_];
    bool tiles = true;  // the pieces cover the axis once, in order
    int64_t at = 0;
    for (size_t i = 0; i < starts_.size(); ++i) {
      if (sizes_[i] > 0 && starts_[i] != at) tiles = false;
      at += sizes_[i];
    }
    tiles = tiles && at == n;
    std::vector<Array> parts;
    for (size_t i = 0; i < starts_.size(); ++i)
      if (sizes_[i] > 0) parts.push_back(a.cotangents[i]);
    if (tiles && !parts.empty()) return {concatenate(parts, axis_, stream())};
    Array total = zeros(a.primals[0].shape(), a.cotangents[0].dtype(), stream());
    for (size_t i = 0; i < starts_.size(); ++i) {
      if (sizes_[i] == 0) continue;
      std::vector<std::pair<int64_t, int64_t>> widths(a.primals[0].ndim(), {0, 0});
      widths[axis_] = {starts_[i], n - starts_[i] - sizes_[i]};
      total = add(total, pad(a.cotangents[i], widths, 0, stream()), stream());
    }
    return {total};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return split_pieces(a.tangents[0], axis_, starts_, sizes_, stream());
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Array x = batch_front(a.inputs[0], a.axes[0], 1, stream());
    auto outs = split_pieces(x, axis_ + 1, starts_, sizes_, stream());
    return {outs, std::vector<int>(outs.size(), 0)};
  }

  static std::vector<Array> split_pieces(const Array& a, int axis, const Shape& starts, const Shape& sizes,
                                         StreamOrDevice s) {
    auto prim = std::make_shared<Split>(to_stream(s), axis, starts, sizes);
    return Array::make_many(prim->shapes(a.shape()), std::vector<Dtype>(sizes.size(), a.dtype()), prim, {a});
  }

 private:
  std::vector<Shape> shapes(const Shape& in) const {
    std::vector<Shape> out;
    for (int64_t n : sizes_) {
      Shape sh = in;
      sh[axis_] = n;
      out.push_back(sh);
    }
    return out;
  }
  int axis_;
  Shape starts_, sizes_;
};

}  // namespace

Array slice_view(const Array& a, const Shape& starts, const Shape& steps, const Shape& shape,
                 StreamOrDevice s) {
  return Array::make(shape, a.dtype(), std::make_shared<SliceView>(to_stream(s), starts, steps, shape), {a});
}

Array slice_update_view(const Array& a, const Array& update, const Shape& starts, const Shape& steps,
                        StreamOrDevice s) {
  return Array::make(a.shape(), a.dtype(), std::make_shared<SliceUpdate>(to_stream(s), starts, steps),
                     {a, update});
}

}  // namespace detail

Array slice(const Array& a, const std::vector<Slice>& slices, StreamOrDevice s) {
  detail::check_array("slice", a);
  const auto spec = detail::normalize_slices("slice", a, slices);
  if (spec.identity(a.shape())) return a;
  return detail::slice_view(a, spec.starts, spec.steps, spec.shape, s);
}

Array slice(const Array& a, const Shape& start, const Shape& stop, const Shape& strides, StreamOrDevice s) {
  detail::check_array("slice", a);
  const size_t nd = a.ndim();
  if (start.size() != nd || stop.size() != nd || (!strides.empty() && strides.size() != nd))
    throw ShapeError::of("slice", "start, stop and strides need one entry per dimension",
                         "start ({}), stop ({}), strides ({}) for shape {}", fmt::join(start, ","),
                         fmt::join(stop, ","), fmt::join(strides, ","), shape_str(a.shape()));
  std::vector<Slice> slices;
  for (size_t i = 0; i < nd; ++i) slices.push_back({start[i], stop[i], strides.empty() ? 1 : strides[i]});
  return slice(a, slices, s);
}

Array slice_update(const Array& a, const Array& update, const std::vector<Slice>& slices, StreamOrDevice s) {
  detail::check_array("slice_update", a);
  detail::check_array("slice_update", update);
  const auto spec = detail::normalize_slices("slice_update", a, slices);
  const Shape& target = spec.shape;
  bool ok = update.ndim() <= static_cast<int>(target.size());
  for (int i = 0; ok && i < update.ndim(); ++i) {
    const int64_t d = update.shape()[i], t = target[target.size() - update.ndim() + i];
    ok = d == t || d == 1;
  }
  if (!ok)
    throw ShapeError::of("slice_update", "update does not fit the slice", "update {} into slice {} of {}",
                         shape_str(update.shape()), shape_str(target), shape_str(a.shape()));
  if (shape_size(target) == 0) return a;
  const Array u = broadcast_to(astype(update, a.dtype(), s), target, s);
  return detail::slice_update_view(a, u, spec.starts, spec.steps, s);
}

std::vector<Array> split(const Array& a, int sections, int axis, StreamOrDevice s) {
  detail::check_array("split", a);
  const int ax = normalize_axis("split", axis, a.ndim());
  const int64_t n = a.shape()[ax];
  if (sections <= 0) throw ValueError::of("split", "sections must be positive", "got {}", sections);
  if (n % sections != 0)
    throw ValueError::of("split", "sections do not divide the axis evenly",
                         "{} sections of axis {} (size {}) of {}", sections, ax, n, shape_str(a.shape()));
  Shape starts, sizes;
  for (int i = 0; i < sections; ++i) {
    starts.push_back(i * (n / sections));
    sizes.push_back(n / sections);
  }
  return detail::Split::split_pieces(a, ax, starts, sizes, s);
}

std::vector<Array> split(const Array& a, const Shape& indices, int axis, StreamOrDevice s) {
  detail::check_array("split", a);
  const int ax = normalize_axis("split", axis, a.ndim());
  const int64_t n = a.shape()[ax];
  Shape starts, sizes;
  for (size_t i = 0; i <= indices.size(); ++i) {
    const std::optional<int64_t> b = i == 0 ? std::optional<int64_t>(0) : indices[i - 1];
    const std::optional<int64_t> e = i == indices.size() ? std::optional<int64_t>() : indices[i];
    const auto piece = detail::normalize_slice({b, e, 1}, n);
    starts.push_back(piece.start);
    sizes.push_back(piece.size);
  }
  return detail::Split::split_pieces(a, ax, starts, sizes, s);
}

}  // namespace kiln
