#include "kiln/nn/layers/pooling.h"

#include <algorithm>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/conv.h"
#include "kiln/core/ops/creation.h"
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

// The input padded with `value` on the left by p and cut or padded on the right so that its
// spatial extent is exactly what the windows cover: (out - 1) s + d (k - 1) + 1.
Array padded(const Geometry& g, IntPair k, IntPair s, IntPair p, IntPair d, double value) {
  const int64_t h = g.x.shape(2), w = g.x.shape(3);
  const int64_t need_h = (g.oh - 1) * s.h + static_cast<int64_t>(d.h) * (k.h - 1) + 1;
  const int64_t need_w = (g.ow - 1) * s.w + static_cast<int64_t>(d.w) * (k.w - 1) + 1;
  const int64_t hi_h = need_h - h - p.h, hi_w = need_w - w - p.w;
  Array xp = g.x;
  if (p.h > 0 || p.w > 0 || hi_h > 0 || hi_w > 0)
    xp = pad(xp, {{0, 0}, {0, 0}, {p.h, std::max<int64_t>(hi_h, 0)}, {p.w, std::max<int64_t>(hi_w, 0)}},
             value);
  if (hi_h < 0 || hi_w < 0) xp = slice(xp, {0, 0, 0, 0}, {xp.shape(0), xp.shape(1), need_h, need_w});
  return xp;
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
  const IntPair d(1);
  const Geometry g = prepare("AvgPool2d", x, k_, stride_, padding_, d, ceil_mode_);
  const Array xp = padded(g, k_, stride_, padding_, d, 0.0);
  const int64_t n = xp.shape(0), c = xp.shape(1);
  // Window sums as a convolution of each channel with a ones kernel: im2col + GEMM, and conv2d's
  // vjp is the gradient.
  const Array planes = reshape(xp, {n * c, 1, xp.shape(2), xp.shape(3)});
  const Array sums = conv2d(planes, ones({1, 1, k_.h, k_.w}, x.dtype()), {stride_.h, stride_.w});
  // The divisor of window (i, j) factors into a row part and a column part (PyTorch's avg_pool2d).
  auto extents = [&](int64_t out, int64_t in, int k, int s, int p) {
    std::vector<double> pool(out), real(out);
    for (int64_t i = 0; i < out; ++i) {
      const int64_t start = i * s - p, end = std::min<int64_t>(start + k, in + p);
      pool[i] = static_cast<double>(end - start);
      real[i] = static_cast<double>(std::min<int64_t>(end, in) - std::max<int64_t>(start, 0));
    }
    return count_include_pad_ ? pool : real;
  };
  const auto rows = extents(g.oh, g.x.shape(2), k_.h, stride_.h, padding_.h);
  const auto cols = extents(g.ow, g.x.shape(3), k_.w, stride_.w, padding_.w);
  std::vector<double> divisor(static_cast<size_t>(g.oh * g.ow));
  for (int64_t i = 0; i < g.oh; ++i)
    for (int64_t j = 0; j < g.ow; ++j)
      divisor[i * g.ow + j] = divisor_override_ ? *divisor_override_ : rows[i] * cols[j];
  const Array y = reshape(sums, {n, c, g.oh, g.ow}) / Array(divisor, {g.oh, g.ow}, x.dtype());
  return x.ndim() == 3 ? squeeze(y, Axes{0}) : y;
}

}  // namespace kiln::nn
