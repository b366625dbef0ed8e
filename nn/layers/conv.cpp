#include "kiln/nn/layers/conv.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/conv.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/core/shape.h"
#include "kiln/core/transforms.h"
#include "kiln/nn/init.h"

namespace kiln::nn {
namespace {

void check_at_least(const char* layer, const char* what, int64_t value, int64_t least) {
  if (value < least) throw ValueError::of(layer, what, "must be >= {}, got {}", least, value);
}

void check_groups(const char* layer, int64_t in, int64_t out, int groups) {
  check_at_least(layer, "groups", groups, 1);
  if (in % groups != 0 || out % groups != 0)
    throw ValueError::of(layer, "groups must divide in_channels and out_channels",
                         "in_channels {}, out_channels {}, groups {}", in, out, groups);
}

// Weight and bias uniform on +-1/sqrt(fan_in): PyTorch's kaiming_uniform(a = sqrt(5)) reduces to
// this bound, and _ConvNd uses the same bound for the bias.
void init_conv(ParameterInfo& weight, ParameterInfo& bias, const Shape& weight_shape, int64_t bias_size,
               int64_t fan_in, bool with_bias, Dtype dtype, const Array& key) {
  const auto keys = random::split_keys(key.valid() ? key : random::next_key(), 2);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  weight.set(init::uniform(weight_shape, -bound, bound, dtype, keys[0]));
  if (with_bias) bias.set(init::uniform({bias_size}, -bound, bound, dtype, keys[1]));
}

// Per-side padding from an amount or a mode: "same" puts the odd unit of d (k - 1) at the end,
// as PyTorch does.
void resolve_padding(const char* layer, int amount, const std::string& mode, int k, int dilation, int stride,
                     int& lo, int& hi) {
  if (mode.empty()) {
    check_at_least(layer, "padding", amount, 0);
    lo = hi = amount;
  } else if (mode == "valid") {
    lo = hi = 0;
  } else if (mode == "same") {
    if (stride != 1) throw ValueError::of(layer, "padding \"same\" needs stride 1", "got stride {}", stride);
    const int total = dilation * (k - 1);
    lo = total / 2;
    hi = total - lo;
  } else {
    throw ValueError::of(layer, "unknown padding mode", "expected \"same\" or \"valid\", got \"{}\"", mode);
  }
}

// Checks rank, dtype and channels; returns the input with a batch axis (added when unbatched).
Array batched_input(const char* layer, const Array& x, int spatial, int64_t channels, const char* layout) {
  if (!x.valid()) throw ValueError::of(layer, "the input is an empty (default-constructed) array");
  if (x.ndim() != spatial + 1 && x.ndim() != spatial + 2)
    throw ShapeError::of(layer, "input has the wrong rank", "expected {} (or unbatched), got {}", layout,
                         shape_str(x.shape()));
  if (!is_floating(x.dtype()))
    throw DtypeError::of(layer, "input must be floating-point", "got {}", dtype_name(x.dtype()));
  const int64_t c = x.shape(x.ndim() - spatial - 1);
  if (c != channels)
    throw ShapeError::of(layer, "input channels differ from in_channels", "expected {}, got input {}",
                         channels, shape_str(x.shape()));
  return x.ndim() == spatial + 2 ? x : expand_dims(x, 0);
}

void check_fits(const char* layer, const Shape& x, int axis, int padded, int k, int dilation) {
  if (x[axis] + padded < static_cast<int64_t>(dilation) * (k - 1) + 1)
    throw ShapeError::of(layer, "input is smaller than the dilated kernel",
                         "input {}, kernel {}, dilation {}, padding {} in all", shape_str(x), k, dilation,
                         padded);
}

}  // namespace

// ---------------------------------------------------------------- Conv1d

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int kernel_size, Conv1dOptions o)
    : in_(in_channels),
      out_(out_channels),
      k_(kernel_size),
      stride_(o.stride),
      dilation_(o.dilation),
      groups_(o.groups) {
  check_at_least("Conv1d", "in_channels", in_channels, 1);
  check_at_least("Conv1d", "out_channels", out_channels, 1);
  check_at_least("Conv1d", "kernel_size", kernel_size, 1);
  check_at_least("Conv1d", "stride", o.stride, 1);
  check_at_least("Conv1d", "dilation", o.dilation, 1);
  check_groups("Conv1d", in_channels, out_channels, o.groups);
  resolve_padding("Conv1d", o.padding.amount, o.padding.mode, k_, dilation_, stride_, pad_lo_, pad_hi_);
  const int64_t fan_in = in_channels / o.groups * kernel_size;
  init_conv(weight, bias, {out_channels, in_channels / o.groups, kernel_size}, out_channels, fan_in, o.bias,
            o.dtype, o.key);
}

Array Conv1d::operator()(const Array& x) const {
  const auto c = detail::compute_dtype(*this);  // a mixed-precision policy's 16-bit dtype
  Array in = detail::to_compute(batched_input("Conv1d", x, 1, in_, "(N, C, L)"), c);
  check_fits("Conv1d", in.shape(), 2, pad_lo_ + pad_hi_, k_, dilation_);
  int p = pad_lo_;
  if (pad_lo_ != pad_hi_) {  // "same" with an odd total: pad explicitly, the extra unit at the end
    in = pad(in, {{0, 0}, {0, 0}, {pad_lo_, pad_hi_}});
    p = 0;
  }
  Array y = conv1d(in, detail::to_compute(weight.value(), c), stride_, p, dilation_, groups_);
  if (bias.has_value()) y = y + reshape(detail::to_compute(bias.value(), c), {out_, 1});
  return x.ndim() == 2 ? squeeze(y, Axes{0}) : y;
}

// ---------------------------------------------------------------- Conv2d

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, IntPair kernel_size, Conv2dOptions o)
    : in_(in_channels),
      out_(out_channels),
      k_(kernel_size),
      stride_(o.stride),
      dilation_(o.dilation),
      groups_(o.groups) {
  check_at_least("Conv2d", "in_channels", in_channels, 1);
  check_at_least("Conv2d", "out_channels", out_channels, 1);
  check_at_least("Conv2d", "kernel_size", std::min(kernel_size.h, kernel_size.w), 1);
  check_at_least("Conv2d", "stride", std::min(o.stride.h, o.stride.w), 1);
  check_at_least("Conv2d", "dilation", std::min(o.dilation.h, o.dilation.w), 1);
  check_groups("Conv2d", in_channels, out_channels, o.groups);
  resolve_padding("Conv2d", o.padding.amount.h, o.padding.mode, k_.h, dilation_.h, stride_.h, pad_lo_.h,
                  pad_hi_.h);
  resolve_padding("Conv2d", o.padding.amount.w, o.padding.mode, k_.w, dilation_.w, stride_.w, pad_lo_.w,
                  pad_hi_.w);
  const int64_t fan_in = in_channels / o.groups * k_.h * k_.w;
  init_conv(weight, bias, {out_channels, in_channels / o.groups, k_.h, k_.w}, out_channels, fan_in, o.bias,
            o.dtype, o.key);
}

Array Conv2d::operator()(const Array& x) const {
  const auto c = detail::compute_dtype(*this);  // a mixed-precision policy's 16-bit dtype
  Array in = detail::to_compute(batched_input("Conv2d", x, 2, in_, "(N, C, H, W)"), c);
  check_fits("Conv2d", in.shape(), 2, pad_lo_.h + pad_hi_.h, k_.h, dilation_.h);
  check_fits("Conv2d", in.shape(), 3, pad_lo_.w + pad_hi_.w, k_.w, dilation_.w);
  IntPair p = pad_lo_;
  if (pad_lo_ != pad_hi_) {  // "same" with an odd total: pad explicitly, the extra unit at the end
    in = pad(in, {{0, 0}, {0, 0}, {pad_lo_.h, pad_hi_.h}, {pad_lo_.w, pad_hi_.w}});
    p = 0;
  }
  Array y = conv2d(in, detail::to_compute(weight.value(), c), {stride_.h, stride_.w}, {p.h, p.w},
                   {dilation_.h, dilation_.w}, groups_);
  if (bias.has_value()) y = y + reshape(detail::to_compute(bias.value(), c), {out_, 1, 1});
  return x.ndim() == 3 ? squeeze(y, Axes{0}) : y;
}

// ---------------------------------------------------------------- ConvTranspose2d

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, IntPair kernel_size,
                                 ConvTranspose2dOptions o)
    : in_(in_channels),
      out_(out_channels),
      k_(kernel_size),
      stride_(o.stride),
      padding_(o.padding),
      output_padding_(o.output_padding),
      dilation_(o.dilation),
      groups_(o.groups) {
  const char* layer = "ConvTranspose2d";
  check_at_least(layer, "in_channels", in_channels, 1);
  check_at_least(layer, "out_channels", out_channels, 1);
  check_at_least(layer, "kernel_size", std::min(kernel_size.h, kernel_size.w), 1);
  check_at_least(layer, "stride", std::min(o.stride.h, o.stride.w), 1);
  check_at_least(layer, "dilation", std::min(o.dilation.h, o.dilation.w), 1);
  check_at_least(layer, "padding", std::min(o.padding.h, o.padding.w), 0);
  check_at_least(layer, "output_padding", std::min(o.output_padding.h, o.output_padding.w), 0);
  if (o.output_padding.h >= std::max(o.stride.h, o.dilation.h) ||
      o.output_padding.w >= std::max(o.stride.w, o.dilation.w))
    throw ValueError::of(layer, "output_padding must be smaller than either stride or dilation",
                         "output_padding ({}, {}), stride ({}, {}), dilation ({}, {})", o.output_padding.h,
                         o.output_padding.w, o.stride.h, o.stride.w, o.dilation.h, o.dilation.w);
  check_groups(layer, in_channels, out_channels, o.groups);
  const int64_t fan_in = out_channels / o.groups * k_.h * k_.w;
  init_conv(weight, bias, {in_channels, out_channels / o.groups, k_.h, k_.w}, out_channels, fan_in, o.bias,
            o.dtype, o.key);
}

Array ConvTranspose2d::operator()(const Array& x) const {
  const auto c = detail::compute_dtype(*this);  // a mixed-precision policy's 16-bit dtype
  Array in = detail::to_compute(batched_input("ConvTranspose2d", x, 2, in_, "(N, C, H, W)"), c);
  const Array w = detail::to_compute(weight.value(), c);
  auto out_size = [](int64_t n, int s, int p, int d, int k, int op) {
    return (n - 1) * s - 2 * p + d * (k - 1) + op + 1;
  };
  const int64_t oh = out_size(in.shape(2), stride_.h, padding_.h, dilation_.h, k_.h, output_padding_.h);
  const int64_t ow = out_size(in.shape(3), stride_.w, padding_.w, dilation_.w, k_.w, output_padding_.w);
  if (oh < 1 || ow < 1)
    throw ShapeError::of("ConvTranspose2d", "output size would be < 1", "input {}, output ({}, {})",
                         shape_str(x.shape()), oh, ow);
  // The transposed convolution is conv2d's input gradient, which core computes directly (no zeros
  // inserted between the input's elements, and grad/vmap/compile go through conv's own rules).
  // conv2d of an (oh, ow) image has H + floor(output_padding / stride) output rows: the quotient is
  // nonzero only when dilation > stride allows output_padding >= stride; the extra cotangent rows
  // are zeros and contribute nothing.
  const Dtype t = promote_types(in.dtype(), w.dtype());
  Array cot = astype(in, t);
  const int eh = output_padding_.h / stride_.h, ew = output_padding_.w / stride_.w;
  if (eh > 0 || ew > 0) cot = pad(cot, {{0, 0}, {0, 0}, {0, eh}, {0, ew}});
  const std::array<int, 2> stride{stride_.h, stride_.w}, padding{padding_.h, padding_.w},
      dilation{dilation_.h, dilation_.w};
  const int groups = groups_;
  auto forward = [&](const std::vector<Array>& v) {
    return std::vector<Array>{conv2d(v[0], w, stride, padding, dilation, groups)};
  };
  Array y = vjp(forward, {zeros({in.shape(0), out_, oh, ow}, t)}, {cot}).second[0];
  if (bias.has_value()) y = y + reshape(detail::to_compute(bias.value(), c), {out_, 1, 1});
  return x.ndim() == 3 ? squeeze(y, Axes{0}) : y;
}

}  // namespace kiln::nn
