#include "kiln/nn/layers/norm.h"

#include <algorithm>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/fused_norm.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"

namespace kiln::nn {

namespace {

constexpr int kAnyRank = 1 << 20;  // BatchNorm's own upper bound on the input rank: none

bool is_low_precision(Dtype t) { return t == float16 || t == bfloat16; }

// Statistics of half-precision input lose too much in their own dtype (a sum of squares of 4096
// values overflows float16), so normalization runs in float32 and casts back, as PyTorch's kernels.
Array compute_input(const Array& x) { return is_low_precision(x.dtype()) ? astype(x, float32) : x; }

void check_float(const char* layer, const Array& x) {
  if (!x.valid()) throw ValueError::of(layer, "input is an empty Array");
  if (!is_floating(x.dtype()))
    throw DtypeError::of(layer, "input must be floating point", "got {}", dtype_name(x.dtype()));
}

void check_eps(const char* layer, double eps) {
  if (!(eps > 0)) throw ValueError::of(layer, "eps must be > 0", "got {}", eps);
}

void check_normalized_shape(const char* layer, const Shape& shape) {
  if (shape.empty()) throw ValueError::of(layer, "normalized_shape must not be empty");
  for (int64_t d : shape)
    if (d < 1)
      throw ValueError::of(layer, "normalized_shape dimensions must be >= 1", "got {}", shape_str(shape));
}

// x's trailing dimensions must equal `shape`; returns the axes they occupy.
Axes trailing_axes(const char* layer, const Array& x, const Shape& shape) {
  const int n = static_cast<int>(shape.size());
  const bool ok = x.ndim() >= n && std::equal(shape.begin(), shape.end(), x.shape().end() - n);
  if (!ok)
    throw ShapeError::of(layer, "input's trailing dimensions must equal normalized_shape",
                         "expected (..., {}), got {}", shape_str(shape).substr(1), shape_str(x.shape()));
  Axes axes(n);
  std::iota(axes.begin(), axes.end(), x.ndim() - n);
  return axes;
}

// LayerNorm and RMSNorm run as one fused kernel over rows of the normalized_shape's size
// (core/ops/fused_norm.h): x as (..., prod(normalized_shape)) in `dtype`, parameters flattened.
Array as_rows(const Array& x, const Shape& normalized_shape, Dtype dtype) {
  Shape rows(x.shape().begin(), x.shape().end() - static_cast<long>(normalized_shape.size()));
  rows.push_back(shape_size(normalized_shape));
  return reshape(astype(x, dtype), rows);
}
Array flat_param(const Array& p) { return p.ndim() == 1 ? p : reshape(p, {p.size()}); }
// The fused kernels keep x's dtype and apply the parameters in their precision: float16/bfloat16
// input is normalized in float32 and comes back in its dtype (as PyTorch's kernels); otherwise the
// result has the promoted dtype of x and the parameters, as the formula written out would.
Dtype result_dtype(const Array& x, const Array& w, const Array& b) {
  if (is_low_precision(x.dtype())) return x.dtype();
  Dtype t = x.dtype();
  if (w.valid()) t = promote_types(t, w.dtype());
  if (b.valid()) t = promote_types(t, b.dtype());
  return t;
}

// (C) -> (1, C, 1, ...) for input of rank `ndim`.
Array channel_view(const Array& p, int ndim) {
  Shape s(ndim, 1);
  s[1] = p.shape()[0];
  return reshape(p, s);
}

double machine_epsilon(Dtype t) {
  switch (t) {
    case float16:
      return 0.0009765625;  // 2^-10
    case bfloat16:
      return 0.0078125;  // 2^-7
    case float64:
      return 2.220446049250313e-16;
    default:
      return 1.1920928955078125e-07;  // float32's
  }
}

}  // namespace

// ---- BatchNorm

BatchNorm::BatchNorm(int64_t num_features, BatchNormOptions options)
    : BatchNorm(num_features, options, 2, kAnyRank, "BatchNorm") {}

BatchNorm::BatchNorm(int64_t num_features, BatchNormOptions o, int min_rank, int max_rank, const char* name)
    : features_(num_features), options_(o), min_rank_(min_rank), max_rank_(max_rank), name_(name) {
  if (num_features < 1) throw ValueError::of(name, "num_features must be >= 1", "got {}", num_features);
  check_eps(name, o.eps);
  if (o.momentum && !(*o.momentum >= 0 && *o.momentum <= 1))
    throw ValueError::of(name, "momentum must be in [0, 1]", "got {}", *o.momentum);
  if (o.affine) {
    weight.set(ones({num_features}, o.dtype));
    bias.set(zeros({num_features}, o.dtype));
  }
  if (o.track_running_stats) {
    running_mean.set(zeros({num_features}, o.dtype));
    running_var.set(ones({num_features}, o.dtype));
    num_batches_tracked.set(zeros({}, int64));
    freeze({"running_mean", "running_var", "num_batches_tracked"}, /*recurse=*/false);
  }
}

void BatchNorm::check_input(const Array& x, bool batch_stats) const {
  check_float(name_, x);
  if (x.ndim() < min_rank_ || x.ndim() > max_rank_) {
    if (max_rank_ == kAnyRank)
      throw ShapeError::of(name_, "bad input rank", "expected (N, C, ...) input, got {}",
                           shape_str(x.shape()));
    if (min_rank_ == max_rank_)
      throw ShapeError::of(name_, "bad input rank", "expected {}-d input (N, C, ...), got {}", min_rank_,
                           shape_str(x.shape()));
    throw ShapeError::of(name_, "bad input rank", "expected {}-d to {}-d input (N, C, ...), got {}",
                         min_rank_, max_rank_, shape_str(x.shape()));
  }
  if (x.shape()[1] != features_)
    throw ShapeError::of(name_, "input's channel dimension (axis 1) must be num_features",
                         "expected {} channels, got {}", features_, shape_str(x.shape()));
  if (batch_stats && x.size() / features_ <= 1)
    throw ValueError::of(name_, "expected more than 1 value per channel when training", "got input {}",
                         shape_str(x.shape()));
}

Array BatchNorm::normalize(const Array& x, const Array& mean, const Array& var) const {
  const int n = x.ndim();
  Array y = (x - channel_view(mean, n)) * rsqrt(channel_view(var, n) + options_.eps);
  if (weight.has_value()) y = y * channel_view(weight.value(), n) + channel_view(bias.value(), n);
  return y;
}

namespace {
Axes batch_axes(const Array& x) {
  Axes axes{0};
  for (int a = 2; a < x.ndim(); ++a) axes.push_back(a);
  return axes;
}
}  // namespace

Array BatchNorm::operator()(const Array& x) const {
  const bool batch_stats = is_training() || !options_.track_running_stats;
  check_input(x, is_training());
  const Array xc = compute_input(x);
  Array y;
  if (batch_stats) {
    const Axes axes = batch_axes(xc);
    y = normalize(xc, mean(xc, axes), var(xc, axes));
  } else {
    y = normalize(xc, running_mean.value(), running_var.value());
  }
  return is_low_precision(x.dtype()) ? astype(y, x.dtype()) : y;
}

BatchNormOutput BatchNorm::forward_train(const Array& x) const {
  check_input(x, true);
  const Array xc = compute_input(x);
  const Axes axes = batch_axes(xc);
  const Array mu = mean(xc, axes), sigma2 = var(xc, axes);
  Array y = normalize(xc, mu, sigma2);
  if (is_low_precision(x.dtype())) y = astype(y, x.dtype());
  if (!options_.track_running_stats) return {y, Array(), Array(), Array()};

  // Running statistics as PyTorch: the variance folded in is the unbiased one.
  const double n = static_cast<double>(x.size() / features_);
  const Array unbiased = stop_gradient(sigma2) * (n / (n - 1.0));
  const Array batches = num_batches_tracked.value() + 1;
  const Dtype t = running_mean.value().dtype();
  Array m = options_.momentum ? Array(*options_.momentum, t) : 1.0 / astype(batches, t);
  const Array new_mean = (1.0 - m) * running_mean.value() + m * astype(stop_gradient(mu), t);
  const Array new_var = (1.0 - m) * running_var.value() + m * astype(unbiased, t);
  return {y, astype(new_mean, t), astype(new_var, running_var.value().dtype()), batches};
}

void BatchNorm::update_running_stats(const BatchNormOutput& out) {
  if (!options_.track_running_stats || !out.running_mean.valid()) return;
  running_mean.set(out.running_mean);
  running_var.set(out.running_var);
  num_batches_tracked.set(out.num_batches_tracked);
}

Array BatchNorm::train_step(const Array& x) {
  BatchNormOutput out = forward_train(x);
  update_running_stats(out);
  return out.y;
}

// ---- LayerNorm

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions o)
    : shape_(std::move(normalized_shape)), eps_(o.eps) {
  check_normalized_shape("LayerNorm", shape_);
  check_eps("LayerNorm", o.eps);
  if (o.elementwise_affine) {
    weight.set(ones(shape_, o.dtype));
    if (o.bias) bias.set(zeros(shape_, o.dtype));
  }
}

Array LayerNorm::operator()(const Array& x) const {
  check_float("LayerNorm", x);
  trailing_axes("LayerNorm", x, shape_);
  const Array w = weight.has_value() ? flat_param(weight.value()) : Array();
  const Array b = bias.has_value() ? flat_param(bias.value()) : Array();
  const Array rows = as_rows(x, shape_, result_dtype(x, w, b));
  return reshape(layer_norm(rows, w, b, eps_), x.shape());
}

// ---- RMSNorm

RMSNorm::RMSNorm(Shape normalized_shape, RMSNormOptions o)
    : shape_(std::move(normalized_shape)), eps_(o.eps) {
  check_normalized_shape("RMSNorm", shape_);
  if (o.eps) check_eps("RMSNorm", *o.eps);
  if (o.elementwise_affine) weight.set(ones(shape_, o.dtype));
}

Array RMSNorm::operator()(const Array& x) const {
  check_float("RMSNorm", x);
  trailing_axes("RMSNorm", x, shape_);
  const double eps = eps_ ? *eps_ : machine_epsilon(x.dtype());
  const Array w = weight.has_value() ? flat_param(weight.value()) : Array();
  const Array rows = as_rows(x, shape_, result_dtype(x, w, Array()));
  return reshape(rms_norm(rows, w, eps), x.shape());
}

// ---- GroupNorm

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions o)
    : groups_(num_groups), channels_(num_channels), eps_(o.eps) {
  if (num_groups < 1 || num_channels < 1 || num_channels % num_groups != 0)
    throw ValueError::of("GroupNorm", "num_groups must be >= 1 and divide num_channels",
                         "num_groups {}, num_channels {}", num_groups, num_channels);
  check_eps("GroupNorm", o.eps);
  if (o.affine) {
    weight.set(ones({num_channels}, o.dtype));
    bias.set(zeros({num_channels}, o.dtype));
  }
}

Array GroupNorm::operator()(const Array& x) const {
  check_float("GroupNorm", x);
  if (x.ndim() < 2 || x.shape()[1] != channels_)
    throw ShapeError::of("GroupNorm", "input must be (N, C, ...) with C = num_channels",
                         "expected {} channels, got {}", channels_, shape_str(x.shape()));
  const Array xc = compute_input(x);
  const Array g = reshape(xc, {x.shape()[0], groups_, -1});
  Array y = reshape((g - mean(g, -1, true)) * rsqrt(var(g, Axes{-1}, true) + eps_), x.shape());
  if (weight.has_value())
    y = y * channel_view(weight.value(), x.ndim()) + channel_view(bias.value(), x.ndim());
  return is_low_precision(x.dtype()) ? astype(y, x.dtype()) : y;
}

}  // namespace kiln::nn
