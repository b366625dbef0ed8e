#include "kiln/nn/layers/pooling.h"

#include <algorithm>
#include <array>

#include "kiln/core/error.h"
#include "kiln/core/ops/pooling.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/shape.h"

namespace kiln::nn {
namespace {

void check_at_least(const char* layer, const char* what, int value, int least) {
  if (value < least) throw ValueError::of(layer, what, "must be >= {}, got {}", least, value);
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// PyTorch's pooling_output_shape: in ceil mode a last window must start inside the input or the
// left padding, never in the right padding.
int64_t pooled_size(int64_t n, int k, int s, int p, int d, bool ceil_mode) {
  const int64_t span = n + 2 * p - static_cast<int64_t>(d) * (k - 1) - 1;
  int64_t out = floor_div(span + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

struct Geometry {
  Array x;  // (N, C, H, W): the input with a batch axis
  int64_t oh = 0, ow = 0;
};

Geometry prepare(const char* layer, const Array& x, IntPair k, IntPair s, IntPair p, IntPair d,
                 bool ceil_mode) {
  if (!x.valid()) throw ValueError::of(layer, "the input is an empty (default-constructed) array");
  if (x.ndim() != 3 && x.ndim() != 4)
    throw ShapeError::of(layer, "input has the wrong rank", "expected (N, C, H, W) or (C, H, W), got {}",
                         shape_str(x.shape()));
  if (!is_floating(x.dtype()))
    throw DtypeError::of(layer, "input must be floating-point", "got {}", dtype_name(x.dtype()));
  Geometry g{x.ndim() == 4 ? x : expand_dims(x, 0)};
  g.oh = pooled_size(g.x.shape(2), k.h, s.h, p.h, d.h, ceil_mode);
  g.ow = pooled_size(g.x.shape(3), k.w, s.w, p.w, d.w, ceil_mode);
  if (g.oh < 1 || g.ow < 1)
    throw ShapeError::of(layer, "output size would be < 1", "input {}, kernel ({}, {}), output ({}, {})",
                         shape_str(x.shape()), k.h, k.w, g.oh, g.ow);
  return g;
}

void check_padding(const char* layer, IntPair k, IntPair p, IntPair d) {
  check_at_least(layer, "padding", std::min(p.h, p.w), 0);
  if (p.h > ((k.h - 1) * d.h + 1) / 2 || p.w > ((k.w - 1) * d.w + 1) / 2)
    throw ValueError::of(layer, "padding must be at most half of the (dilated) kernel size",
                         "padding ({}, {}), kernel ({}, {}), dilation ({}, {})", p.h, p.w, k.h, k.w, d.h,
                         d.w);
}

}  // namespace

// ---------------------------------------------------------------- MaxPool2d

MaxPool2d::MaxPool2d(IntPair kernel_size, MaxPool2dOptions o)
    : k_(kernel_size),
      stride_(o.stride.value_or(kernel_size)),
      padding_(o.padding),
      dilation_(o.dilation),
      ceil_mode_(o.ceil_mode) {
  check_at_least("MaxPool2d", "kernel_size", std::min(k_.h, k_.w), 1);
  check_at_least("MaxPool2d", "stride", std::min(stride_.h, stride_.w), 1);
  check_at_least("MaxPool2d", "dilation", std::min(dilation_.h, dilation_.w), 1);
  check_padding("MaxPool2d", k_, padding_, dilation_);
}

Array MaxPool2d::operator()(const Array& x) const {
  // prepare() keeps the layer's own checks and messages and computes ceil_mode's sizes, which the
  // core op takes as an explicit output size; the windows, padding and gradient are core's.
  const Geometry g = prepare("MaxPool2d", x, k_, stride_, padding_, dilation_, ceil_mode_);
  const Array y = max_pool2d(g.x, {k_.h, k_.w}, {stride_.h, stride_.w}, {padding_.h, padding_.w},
                             {dilation_.h, dilation_.w}, {g.oh, g.ow});
  return x.ndim() == 3 ? squeeze(y, Axes{0}) : y;
}

// ---------------------------------------------------------------- AvgPool2d

AvgPool2d::AvgPool2d(IntPair kernel_size, AvgPool2dOptions o)
    : k_(kernel_size),
      stride_(o.stride.value_or(kernel_size)),
      padding_(o.padding),
      ceil_mode_(o.ceil_mode),
      count_include_pad_(o.count_include_pad),
      divisor_override_(o.divisor_override) {
  check_at_least("AvgPool2d", "kernel_size", std::min(k_.h, k_.w), 1);
  check_at_least("AvgPool2d", "stride", std::min(stride_.h, stride_.w), 1);
  check_padding("AvgPool2d", k_, padding_, IntPair(1));
  if (divisor_override_) check_at_least("AvgPool2d", "divisor_override", *divisor_override_, 1);
}

Array AvgPool2d::operator()(const Array& x) const {
  // prepare() keeps the layer's checks and messages; the windows, divisors and rules are core
  // avg_pool2d's.
  prepare("AvgPool2d", x, k_, stride_, padding_, IntPair(1), ceil_mode_);
  return avg_pool2d(x, {k_.h, k_.w}, std::array<int, 2>{stride_.h, stride_.w}, {padding_.h, padding_.w},
                    ceil_mode_, count_include_pad_, divisor_override_);
}

}  // namespace kiln::nn
