// Reductions: one Reduce primitive parameterized by kind and axes, ArgReduce, and sum_to_shape.
// Composites (mean's wrappers, var, std, logsumexp, softmax, log_softmax) are in reduce_composite.cpp.
#include "kiln/core/ops/reduce.h"

#include <algorithm>
#include <optional>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce_primitives.h"
#include "kiln/core/ops/scan.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {

Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims) {
  Shape out;
  out.reserve(shape.size());
  size_t k = 0;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (k < axes.size() && axes[k] == d) {
      ++k;
      if (keepdims) out.push_back(1);
    } else {
      out.push_back(shape[d]);
    }
  }
  return out;
}

namespace {

const char* op_name(ReduceKind k) {
  constexpr const char* kNames[] = {"sum", "prod", "max", "min", "all", "any", "mean"};
  return kNames[static_cast<int>(k)];
}

void check_valid(const char* op, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
}

// Builds the node; the arguments are already checked and the axes normalized.
Array make_reduce(ReduceKind kind, const Array& a, Axes axes, bool keepdims, Stream s) {
  Shape shape = reduced_shape(a.shape(), axes, keepdims);
  return Array::make(std::move(shape), reduce_out_dtype(kind, a.dtype()),
                     std::make_shared<Reduce>(s, kind, std::move(axes), keepdims), {a});
}

int64_t count_over(const Shape& shape, const Axes& axes) {
  int64_t n = 1;
  for (int a : axes) n *= shape[a];
  return n;
}

// A reduction's cotangent or output with the reduced axes back as size 1, so it broadcasts.
Array with_kept_axes(const Array& a, const Axes& axes, bool keepdims, Stream s) {
  return keepdims ? a : expand_dims(a, axes, s);
}

// d prod / d x_i is the product of the other elements of its slice, computed as in JAX: the
// exclusive cumulative product from the left times the one from the right, along the reduced
// axes flattened into one. No division, so it is exact with zeros, and its own gradient (through
// cumprod's vjp) is exact too.
Array prod_others(const Array& x, const Axes& axes, Stream s) {
  if (axes.size() == 1)
    return multiply(cumprod(x, axes[0], false, false, s), cumprod(x, axes[0], true, false, s), s);
  Axes perm;
  Shape flat;
  for (int d = 0; d < x.ndim(); ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d)) {
      perm.push_back(d);
      flat.push_back(x.shape(d));
    }
  perm.insert(perm.end(), axes.begin(), axes.end());
  flat.push_back(count_over(x.shape(), axes));
  const Array xt = transpose(x, perm, s);
  const Array xf = reshape(xt, flat, s);
  const Array others = multiply(cumprod(xf, -1, false, false, s), cumprod(xf, -1, true, false, s), s);
  Axes inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
  return transpose(reshape(others, xt.shape(), s), inverse, s);
}

// Where x attains its extreme `out_kept`, 1 / (number of ties); 0 elsewhere (JAX's rule).
Array extreme_share(const Array& x, const Array& out_kept, const Axes& axes, Stream s) {
  const Array hit = stop_gradient(astype(equal(x, out_kept, s), x.dtype(), s), s);
  return divide(hit, make_reduce(ReduceKind::sum, hit, axes, true, s), s);
}

}  // namespace

const char* Reduce::name() const {
  constexpr const char* kNames[] = {"Sum", "Prod", "Max", "Min", "All", "Any", "Mean"};
  return kNames[static_cast<int>(kind_)];
}

std::vector<Shape> Reduce::output_shapes(std::span<const Array> in) const {
  // The op's own check, for shapeless compile's new shapes (max/min have no identity).
  if ((kind_ == ReduceKind::max || kind_ == ReduceKind::min) && count_over(in[0].shape(), axes_) == 0 &&
      shape_size(reduced_shape(in[0].shape(), axes_, false)) > 0)
    throw ValueError::of(op_name(kind_), "cannot reduce an empty axis (no identity)", "shape {}",
                         shape_str(in[0].shape()));
  return {reduced_shape(in[0].shape(), axes_, keepdims_)};
}

void Reduce::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  out[0].allocate();
  reduce_array(kind_, in[0], axes_, out[0]);
}

void Reduce::eval_gpu(std::span<const Array> in, std::span<Array> out) const {
  gpu::reduce(static_cast<uint8_t>(kind_), in[0], axes_, out[0]);
}

std::vector<Array> Reduce::vjp(const VjpArgs& a) const {
  const Array& x = a.primals[0];
  const Stream s = stream();
  // Integer and bool inputs are not differentiable; logical reductions have no gradient.
  if (!is_floating(x.dtype()) || kind_ == ReduceKind::all || kind_ == ReduceKind::any)
    return {zeros_like(x, s)};
  const Array g = with_kept_axes(a.cotangents[0], axes_, keepdims_, s);
  switch (kind_) {
    case ReduceKind::sum:
      return {broadcast_to(g, x.shape(), s)};
    case ReduceKind::mean:
      return {broadcast_to(divide(g, static_cast<double>(count_over(x.shape(), axes_)), s), x.shape(), s)};
    case ReduceKind::prod:
      return {multiply(g, prod_others(x, axes_, s), s)};
    default:  // max, min
      return {multiply(g, extreme_share(x, with_kept_axes(a.outputs[0], axes_, keepdims_, s), axes_, s), s)};
  }
}

std::vector<Array> Reduce::jvp(const JvpArgs& a) const {
  const Array &x = a.primals[0], &t = a.tangents[0];
  const Stream s = stream();
  if (!is_floating(x.dtype()) || kind_ == ReduceKind::all || kind_ == ReduceKind::any)
    return {zeros(reduced_shape(x.shape(), axes_, keepdims_), reduce_out_dtype(kind_, x.dtype()), s)};
  switch (kind_) {
    case ReduceKind::sum:
    case ReduceKind::mean:
      return {make_reduce(kind_, t, axes_, keepdims_, s)};
    case ReduceKind::prod:
      return {make_reduce(ReduceKind::sum, multiply(t, prod_others(x, axes_, s), s), axes_, keepdims_, s)};
    default: {
      const Array share = extreme_share(x, make_reduce(kind_, x, axes_, true, s), axes_, s);
      return {make_reduce(ReduceKind::sum, multiply(t, share, s), axes_, keepdims_, s)};
    }
  }
}

VmapResult Reduce::vmap(const VmapArgs& a) const {
  const int b = a.axes[0];
  if (b < 0) return {{make_reduce(kind_, a.inputs[0], axes_, keepdims_, stream())}, {-1}};
  Axes axes;
  int out_axis = b;
  for (int ax : axes_) {
    const int moved = ax >= b ? ax + 1 : ax;
    axes.push_back(moved);
    if (!keepdims_ && moved < b) --out_axis;
  }
  return {{make_reduce(kind_, a.inputs[0], std::move(axes), keepdims_, stream())}, {out_axis}};
}

std::vector<Shape> ArgReduce::output_shapes(std::span<const Array> in) const {
  if (in[0].shape(axis_) == 0 && shape_size(reduced_shape(in[0].shape(), {axis_}, false)) > 0)
    throw ValueError::of(is_max_ ? "argmax" : "argmin", "cannot reduce an empty axis", "shape {}, axis {}",
                         shape_str(in[0].shape()), axis_);
  return {reduced_shape(in[0].shape(), {axis_}, keepdims_)};
}

void ArgReduce::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  const Array& x = in[0];
  out[0].allocate();
  if (out[0].size() == 0) return;
  const ReducePlan p = plan_reduce(x.shape(), x.strides(), {axis_});
  int32_t* dst = out[0].strided_data<int32_t>();
  if (p.direct) {
    arg_reduce_dense(is_max_, x.raw_data(), x.dtype(), dst, p.outer, p.reduced, p.inner);
    return;
  }
  const Array tmp = Array::empty_available({x.size()}, x.dtype());
  copy_permuted(x, p.perm, tmp.raw_data());
  arg_reduce_dense(is_max_, tmp.raw_data(), x.dtype(), dst, p.outer, p.reduced, 1);
}

void ArgReduce::eval_gpu(std::span<const Array> in, std::span<Array> out) const {
  gpu::arg_reduce(is_max_, in[0], axis_, out[0]);
}

std::vector<Array> ArgReduce::vjp(const VjpArgs& a) const { return {zeros_like(a.primals[0], stream())}; }

std::vector<Array> ArgReduce::jvp(const JvpArgs& a) const {
  return {zeros(reduced_shape(a.primals[0].shape(), {axis_}, keepdims_), int32, stream())};
}

VmapResult ArgReduce::vmap(const VmapArgs& a) const {
  const Array& x = a.inputs[0];
  const int b = a.axes[0];
  const int axis = b >= 0 && axis_ >= b ? axis_ + 1 : axis_;
  const int out_axis = b < 0 ? -1 : (!keepdims_ && axis < b ? b - 1 : b);
  Array r = Array::make(reduced_shape(x.shape(), {axis}, keepdims_), int32,
                        std::make_shared<ArgReduce>(stream(), is_max_, axis, keepdims_), {x});
  return {{std::move(r)}, {out_axis}};
}

namespace {

// Checks the arguments, then builds one Reduce node (or none when no axis is reduced).
Array reduce(ReduceKind kind, const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  const char* op = op_name(kind);
  check_valid(op, a);
  Axes ax = normalize_axes(op, axes, a.ndim());
  if ((kind == ReduceKind::max || kind == ReduceKind::min) && count_over(a.shape(), ax) == 0 &&
      shape_size(reduced_shape(a.shape(), ax, false)) > 0)
    throw ValueError::of(op, "cannot reduce an empty axis (no identity)", "shape {}, axes ({})",
                         shape_str(a.shape()), fmt::join(axes, ","));
  if (kind == ReduceKind::mean && !is_floating(a.dtype()))
    return reduce(kind, astype(a, float32, s), ax, keepdims, s);
  if (ax.empty())
    return astype(a, reduce_out_dtype(kind, a.dtype()), s);  // NumPy's axis=(): nothing to reduce
  return make_reduce(kind, a, std::move(ax), keepdims, to_stream(s));
}

Array arg_reduce(bool is_max, const Array& a, std::optional<int> axis, bool keepdims, StreamOrDevice s) {
  const char* op = is_max ? "argmax" : "argmin";
  check_valid(op, a);
  if (!axis) {  // over the flattened array; keepdims keeps every axis as size 1
    const Array flat = a.ndim() == 1 ? a : reshape(a, {a.size()}, s);
    Array r = arg_reduce(is_max, flat, 0, false, s);
    return keepdims ? reshape(r, Shape(a.ndim(), 1), s) : r;
  }
  const int ax = normalize_axis(op, *axis, a.ndim());
  if (a.shape(ax) == 0 && shape_size(reduced_shape(a.shape(), {ax}, false)) > 0)
    throw ValueError::of(op, "cannot reduce an empty axis", "shape {}, axis {}", shape_str(a.shape()), *axis);
  return Array::make(reduced_shape(a.shape(), {ax}, keepdims), int32,
                     std::make_shared<ArgReduce>(to_stream(s), is_max, ax, keepdims), {a});
}

}  // namespace
}  // namespace detail

using detail::ReduceKind;

Array sum(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::sum, a, axes, keepdims, s);
}
Array sum(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("sum", a);
  return sum(a, all_axes(a.ndim()), keepdims, s);
}
Array sum(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return sum(a, Axes{axis}, keepdims, s);
}

Array mean(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::mean, a, axes, keepdims, s);
}
Array mean(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("mean", a);
  return mean(a, all_axes(a.ndim()), keepdims, s);
}
Array mean(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return mean(a, Axes{axis}, keepdims, s);
}

Array prod(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::prod, a, axes, keepdims, s);
}
Array prod(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("prod", a);
  return prod(a, all_axes(a.ndim()), keepdims, s);
}
Array prod(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return prod(a, Axes{axis}, keepdims, s);
}

Array max(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::max, a, axes, keepdims, s);
}
Array max(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("max", a);
  return max(a, all_axes(a.ndim()), keepdims, s);
}
Array max(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return max(a, Axes{axis}, keepdims, s);
}

Array min(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::min, a, axes, keepdims, s);
}
Array min(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("min", a);
  return min(a, all_axes(a.ndim()), keepdims, s);
}
Array min(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return min(a, Axes{axis}, keepdims, s);
}

Array all(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::all, a, axes, keepdims, s);
}
Array all(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("all", a);
  return all(a, all_axes(a.ndim()), keepdims, s);
}
Array any(const Array& a, const Axes& axes, bool keepdims, StreamOrDevice s) {
  return detail::reduce(ReduceKind::any, a, axes, keepdims, s);
}
Array any(const Array& a, bool keepdims, StreamOrDevice s) {
  detail::check_valid("any", a);
  return any(a, all_axes(a.ndim()), keepdims, s);
}

Array argmax(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return detail::arg_reduce(true, a, axis, keepdims, s);
}
Array argmax(const Array& a, bool keepdims, StreamOrDevice s) {
  return detail::arg_reduce(true, a, std::nullopt, keepdims, s);
}
Array argmin(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return detail::arg_reduce(false, a, axis, keepdims, s);
}
Array argmin(const Array& a, bool keepdims, StreamOrDevice s) {
  return detail::arg_reduce(false, a, std::nullopt, keepdims, s);
}

Array sum_to_shape(const Array& a, const Shape& shape, StreamOrDevice s) {
  detail::check_valid("sum_to_shape", a);
  if (a.shape() == shape) return a;  // the common case of every broadcasting vjp: no node
  const int lead = a.ndim() - static_cast<int>(shape.size());
  if (lead < 0)
    throw ShapeError::of("sum_to_shape", "the target has more dimensions than the array", "{} to {}",
                         shape_str(a.shape()), shape_str(shape));
  Axes axes;
  bool inner = false;  // some non-leading axis is summed (kept as size 1)
  for (int i = 0; i < lead; ++i) axes.push_back(i);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t have = a.shape()[lead + i];
    if (shape[i] == have) continue;
    if (shape[i] != 1)
      throw ShapeError::of("sum_to_shape", "the array is not a broadcast of the target shape", "{} to {}",
                           shape_str(a.shape()), shape_str(shape));
    axes.push_back(lead + static_cast<int>(i));
    inner = true;
  }
  // Only size-1 axes to drop: a view.
  if (a.size() == shape_size(shape)) return reshape(a, shape, s);
  Array r = detail::make_reduce(ReduceKind::sum, a, std::move(axes), /*keepdims=*/inner, to_stream(s));
  if (r.dtype() != a.dtype()) r = astype(r, a.dtype(), s);
  return r.shape() == shape ? r : reshape(r, shape, s);
}

}  // namespace kiln
