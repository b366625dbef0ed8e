// max_pool1d/3d, avg_pool1d/2d/3d and adaptive_avg_pool1d/2d/3d, as compositions of core ops:
//   max_pool1d  max_pool2d over a unit height.
//   max_pool3d  max_pool2d over (H, W) with D folded into the channels, then max_pool2d over
//               (D, H_out * W_out) with a (k_d, 1) window. The maximum of a box is the maximum of
//               its slices' maxima, and max_pool2d's rule composes: the first slice holding the
//               maximum, then that slice's first maximum, is the first maximum in row-major
//               (d, h, w) order (likewise the last NaN); -inf padding never wins in either pass.
//   avg_pool    the input padded with zeros (on the right up to what ceil_mode's windows cover),
//               window sums along each axis in turn (a box is separable): k strided slices added,
//               or a reshape and a sum where the windows tile the axis; then a division by
//               PyTorch's divisors, which are products of per-axis factors.
//   adaptive    per axis: a reshape and a mean where O divides L; else each window's taps (at most
//               ceil(L / O) + 1) gathered by take, the ones past a window's end masked to 0 by
//               where, summed and divided by the window lengths.
// float16/bfloat16 sums and means run in float32. Every part is a core op with CPU and GPU kernels
// and every rule, so these are differentiable to any order and batchable on both devices.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/pooling.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"

namespace kiln {
namespace {

template <size_t N>
using Ints = std::array<int, N>;
template <size_t N>
using Sizes = std::array<int64_t, N>;

template <class A>
std::string tuple_str(const A& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// PyTorch's pooling_output_shape: in ceil mode a last window must start inside the input or the
// left padding, never in the right padding.
int64_t pooled_size(int64_t n, int k, int s, int p, int d, bool ceil_mode) {
  const int64_t span = n + 2 * int64_t{p} - int64_t{d} * (k - 1) - 1;
  int64_t out = floor_div(span + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

// The input with a batch axis ((C, spatial...) gets N = 1), after the checks every op shares.
template <size_t N>
Array batched_input(const char* op, const Array& x) {
  if (!x.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
  const int nd = x.ndim();
  if (nd != static_cast<int>(N) + 1 && nd != static_cast<int>(N) + 2)
    throw ShapeError::of(op, "input has the wrong rank",
                         "expected {}-d (N, C, spatial) or {}-d (C, spatial), got {}", N + 2, N + 1,
                         shape_str(x.shape()));
  if (!is_floating(x.dtype()))
    throw DtypeError::of(op, "input must be floating-point", "got {}", dtype_name(x.dtype()));
  for (int d = nd - static_cast<int>(N) - 1; d < nd; ++d)
    if (x.shape(d) == 0)
      throw ShapeError::of(op, "the channel and spatial dimensions must be non-empty", "got {}",
                           shape_str(x.shape()));
  return nd == static_cast<int>(N) + 2 ? x : expand_dims(x, 0);
}

// y computed from the batched input, for the original x: the batch axis dropped again if x had none.
template <size_t N>
Array unbatched(const Array& x, const Array& y, Stream s) {
  return x.ndim() == static_cast<int>(N) + 1 ? squeeze(y, Axes{0}, s) : y;
}

// Float16/bfloat16 sums and means run in float32.
Dtype compute_dtype(Dtype t) { return t == float16 || t == bfloat16 ? float32 : t; }

template <size_t N>
struct Windows {
  Ints<N> k, s, p, d;
  Sizes<N> in, out;
};

// PyTorch's checks of the window parameters and its output sizes.
template <size_t N>
Windows<N> windows(const char* op, const Array& xb, const Ints<N>& k, const std::optional<Ints<N>>& stride,
                   const Ints<N>& p, const Ints<N>& d, bool ceil_mode) {
  Windows<N> w{k, stride.value_or(k), p, d, {}, {}};
  for (size_t i = 0; i < N; ++i) {
    if (k[i] < 1) throw ValueError::of(op, "kernel size must be >= 1", "got {}", tuple_str(k));
    if (w.s[i] < 1) throw ValueError::of(op, "stride must be >= 1", "got {}", tuple_str(w.s));
    if (d[i] < 1) throw ValueError::of(op, "dilation must be >= 1", "got {}", tuple_str(d));
    if (p[i] < 0) throw ValueError::of(op, "padding must be >= 0", "got {}", tuple_str(p));
    if (p[i] > (int64_t{k[i] - 1} * d[i] + 1) / 2)
      throw ValueError::of(op, "padding must be at most half of the (dilated) kernel size",
                           "padding {}, kernel {}, dilation {}", tuple_str(p), tuple_str(k), tuple_str(d));
  }
  for (size_t i = 0; i < N; ++i) {
    w.in[i] = xb.shape(2 + static_cast<int>(i));
    w.out[i] = pooled_size(w.in[i], k[i], w.s[i], p[i], d[i], ceil_mode);
  }
  for (size_t i = 0; i < N; ++i)
    if (w.out[i] < 1)
      throw ShapeError::of(op, "output size would be < 1",
                           "input {}, kernel {}, padding {}, dilation {}, output {}", shape_str(xb.shape()),
                           tuple_str(k), tuple_str(p), tuple_str(d), tuple_str(w.out));
  return w;
}

template <size_t N>
std::optional<Ints<N>> optional_ints(const std::optional<int>& v) {
  if (!v) return std::nullopt;
  Ints<N> r;
  r.fill(*v);
  return r;
}

// ---------------------------------------------------------------- average pooling

// The sums of the windows along `axis` of y, whose extent there is exactly (out - 1) s + k.
Array window_sums(const Array& y, int axis, int k, int s, int64_t out, Stream st) {
  if (k == 1 && s == 1) return y;
  if (k == s) {  // the windows tile the axis
    Shape split = y.shape();
    split[axis] = out;
    split.insert(split.begin() + axis + 1, k);
    return sum(reshape(y, split, st), axis + 1, false, st);
  }
  Shape start(y.ndim(), 0), stop = y.shape(), step(y.ndim(), 1);
  step[axis] = s;
  Array acc;
  for (int t = 0; t < k; ++t) {
    start[axis] = t;
    stop[axis] = t + (out - 1) * s + 1;
    const Array tap = slice(y, start, stop, step, st);
    acc = t == 0 ? tap : add(acc, tap, st);
  }
  return acc;
}

template <size_t N>
Array avg_pool(const char* op, const Array& x, const Ints<N>& kernel, const std::optional<Ints<N>>& stride,
               const Ints<N>& padding, bool ceil_mode, bool count_include_pad,
               std::optional<int> divisor_override, StreamOrDevice sd) {
  const Array xb = batched_input<N>(op, x);
  Ints<N> ones;
  ones.fill(1);
  const Windows<N> w = windows<N>(op, xb, kernel, stride, padding, ones, ceil_mode);
  if (divisor_override && *divisor_override < 1)
    throw ValueError::of(op, "divisor_override must be >= 1", "got {}", *divisor_override);
  const Stream s = to_stream(sd);
  Array y = astype(xb, compute_dtype(x.dtype()), s);
  // Zeros on the left by p, and on the right up to the windows' extent (out - 1) s + k: more than
  // p in ceil mode, or less (the input's tail that no window reaches is cut).
  std::vector<std::pair<int64_t, int64_t>> widths(y.ndim(), {0, 0});
  Shape stop = y.shape();
  bool pads = false, cuts = false;
  for (size_t i = 0; i < N; ++i) {
    const int ax = 2 + static_cast<int>(i);
    const int64_t need = (w.out[i] - 1) * w.s[i] + w.k[i];
    const int64_t right = need - w.in[i] - w.p[i];
    widths[ax] = {w.p[i], std::max<int64_t>(right, 0)};
    stop[ax] = need;
    pads = pads || w.p[i] > 0 || right > 0;
    cuts = cuts || right < 0;
  }
  if (pads) y = pad(y, widths, 0, s);
  if (cuts) y = slice(y, Shape(y.ndim(), 0), stop, {}, s);
  for (size_t i = 0; i < N; ++i) y = window_sums(y, 2 + static_cast<int>(i), w.k[i], w.s[i], w.out[i], s);
  // PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to the input,
  // per axis; their product.
  std::vector<double> divisor{1.0};
  for (size_t i = 0; i < N; ++i) {
    std::vector<double> next;
    next.reserve(divisor.size() * static_cast<size_t>(w.out[i]));
    for (double f : divisor)
      for (int64_t j = 0; j < w.out[i]; ++j) {
        const int64_t start = j * w.s[i] - w.p[i], end = std::min<int64_t>(start + w.k[i], w.in[i] + w.p[i]);
        const int64_t real = std::min<int64_t>(end, w.in[i]) - std::max<int64_t>(start, 0);
        next.push_back(f * static_cast<double>(count_include_pad ? end - start : real));
      }
    divisor = std::move(next);
  }
  if (divisor_override) std::fill(divisor.begin(), divisor.end(), static_cast<double>(*divisor_override));
  const Shape out_shape(w.out.begin(), w.out.end());
  y = divide(y, Array(divisor, out_shape, y.dtype()), s);
  return unbatched<N>(x, astype(y, x.dtype(), s), s);
}

// ---------------------------------------------------------------- adaptive average pooling

// The means of PyTorch's adaptive windows along `axis` (of size in) of y: [floor(i in / out),
// ceil((i + 1) in / out)).
Array adaptive_means(const Array& y, int axis, int64_t in, int64_t out, Stream s) {
  if (in == out) return y;
  if (in % out == 0) {
    Shape split = y.shape();
    split[axis] = out;
    split.insert(split.begin() + axis + 1, in / out);
    return mean(reshape(y, split, s), axis + 1, false, s);
  }
  std::vector<int64_t> starts(out), ends(out);
  int64_t taps = 0;
  for (int64_t i = 0; i < out; ++i) {
    starts[i] = i * in / out;
    ends[i] = ((i + 1) * in + out - 1) / out;
    taps = std::max(taps, ends[i] - starts[i]);
  }
  Shape along(y.ndim(), 1);
  along[axis] = out;
  Array acc;
  for (int64_t t = 0; t < taps; ++t) {
    std::vector<int32_t> index(out);
    std::vector<bool> inside(out);
    bool all_inside = true;
    for (int64_t i = 0; i < out; ++i) {
      inside[i] = starts[i] + t < ends[i];
      index[i] = static_cast<int32_t>(std::min(starts[i] + t, ends[i] - 1));
      all_inside = all_inside && inside[i];
    }
    Array tap = take(y, Array(index, {out}), axis, s);
    // where, not a multiply by 0: an inf or NaN at a clamped tap must not leak into the window.
    if (!all_inside) tap = where(Array(inside, along), tap, 0, s);
    acc = t == 0 ? tap : add(acc, tap, s);
  }
  std::vector<double> lengths(out);
  for (int64_t i = 0; i < out; ++i) lengths[i] = static_cast<double>(ends[i] - starts[i]);
  return divide(acc, Array(lengths, along, y.dtype()), s);
}

template <size_t N>
Array adaptive_avg_pool(const char* op, const Array& x, const Sizes<N>& output_size, StreamOrDevice sd) {
  const Array xb = batched_input<N>(op, x);
  for (int64_t o : output_size)
    if (o < 1) throw ValueError::of(op, "output_size entries must be >= 1", "got {}", tuple_str(output_size));
  const Stream s = to_stream(sd);
  Array y = astype(xb, compute_dtype(x.dtype()), s);
  for (size_t i = 0; i < N; ++i) {
    const int ax = 2 + static_cast<int>(i);
    y = adaptive_means(y, ax, xb.shape(ax), output_size[i], s);
  }
  return unbatched<N>(x, astype(y, x.dtype(), s), s);
}

}  // namespace

// ---------------------------------------------------------------- max pooling

Array max_pool1d(const Array& x, int kernel, std::optional<int> stride, int padding, int dilation,
                 bool ceil_mode, StreamOrDevice sd) {
  const char* op = "max_pool1d";
  const Array xb = batched_input<1>(op, x);
  const Windows<1> w =
      windows<1>(op, xb, {kernel}, optional_ints<1>(stride), {padding}, {dilation}, ceil_mode);
  const Stream s = to_stream(sd);
  const Array y =
      max_pool2d(expand_dims(xb, 2, s), {1, w.k[0]}, {1, w.s[0]}, {0, w.p[0]}, {1, w.d[0]}, {1, w.out[0]}, s);
  return unbatched<1>(x, squeeze(y, Axes{2}, s), s);
}

Array max_pool3d(const Array& x, std::array<int, 3> kernel, std::optional<std::array<int, 3>> stride,
                 std::array<int, 3> padding, std::array<int, 3> dilation, bool ceil_mode, StreamOrDevice sd) {
  const char* op = "max_pool3d";
  const Array xb = batched_input<3>(op, x);
  const Windows<3> w = windows<3>(op, xb, kernel, stride, padding, dilation, ceil_mode);
  const Stream s = to_stream(sd);
  const int64_t n = xb.shape(0), c = xb.shape(1), depth = xb.shape(2);
  const int64_t oh = w.out[1], ow = w.out[2];
  const Array planes = reshape(xb, {n, c * depth, xb.shape(3), xb.shape(4)}, s);
  const Array hw =
      max_pool2d(planes, {w.k[1], w.k[2]}, {w.s[1], w.s[2]}, {w.p[1], w.p[2]}, {w.d[1], w.d[2]}, {oh, ow}, s);
  const Array y = max_pool2d(reshape(hw, {n, c, depth, oh * ow}, s), {w.k[0], 1}, {w.s[0], 1}, {w.p[0], 0},
                             {w.d[0], 1}, {w.out[0], oh * ow}, s);
  return unbatched<3>(x, reshape(y, {n, c, w.out[0], oh, ow}, s), s);
}

// ---------------------------------------------------------------- average pooling

Array avg_pool1d(const Array& x, int kernel, std::optional<int> stride, int padding, bool ceil_mode,
                 bool count_include_pad, std::optional<int> divisor_override, StreamOrDevice s) {
  return avg_pool<1>("avg_pool1d", x, {kernel}, optional_ints<1>(stride), {padding}, ceil_mode,
                     count_include_pad, divisor_override, s);
}
Array avg_pool2d(const Array& x, std::array<int, 2> kernel, std::optional<std::array<int, 2>> stride,
                 std::array<int, 2> padding, bool ceil_mode, bool count_include_pad,
                 std::optional<int> divisor_override, StreamOrDevice s) {
  return avg_pool<2>("avg_pool2d", x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     s);
}
Array avg_pool3d(const Array& x, std::array<int, 3> kernel, std::optional<std::array<int, 3>> stride,
                 std::array<int, 3> padding, bool ceil_mode, bool count_include_pad,
                 std::optional<int> divisor_override, StreamOrDevice s) {
  return avg_pool<3>("avg_pool3d", x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     s);
}

Array adaptive_avg_pool1d(const Array& x, int64_t output_size, StreamOrDevice s) {
  return adaptive_avg_pool<1>("adaptive_avg_pool1d", x, {output_size}, s);
}
Array adaptive_avg_pool2d(const Array& x, std::array<int64_t, 2> output_size, StreamOrDevice s) {
  return adaptive_avg_pool<2>("adaptive_avg_pool2d", x, output_size, s);
}
Array adaptive_avg_pool3d(const Array& x, std::array<int64_t, 3> output_size, StreamOrDevice s) {
  return adaptive_avg_pool<3>("adaptive_avg_pool3d", x, output_size, s);
}

}  // namespace kiln
