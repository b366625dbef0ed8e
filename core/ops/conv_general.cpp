// conv3d, conv_transpose{1,2,3}d and conv_general as compositions over conv.cpp's primitives.
//
// conv_transpose2d is the ConvGradInput primitive itself (the adjoint of conv2d in its input, so
// its weight is (Cin, Cout/groups, ...) as in PyTorch). An output_padding the primitive's
// geometry cannot reach (output_padding >= stride, allowed when it is below the dilation) adds
// zero rows to the input first: they reach only the extra outputs, with zeros.
//
// conv3d folds the kernel's depth into the 2-d convolution's channels: for each depth tap kd the
// input's depth positions kd * dil + od * stride (od = 0..OD-1) are sliced out, the taps stacked
// inside each group's channels and the output depths moved into the samples, so one conv2d with
// weight (O, kD * C/groups, kH, kW) computes it: (N * OD, groups * kD * C/groups, H, W). That
// copies the input kD times (im2col copies it kH * kW times again inside conv2d).
//
// conv_transpose3d is the transpose of that: one transposed 2-d convolution of the input's depth
// slices (N * D, Cin, H, W) with weight (Cin, kD * Cout/groups, kH, kW) gives each depth tap's
// contribution, which goes to output depth d * stride + kd * dil - padding: zeros interleaved
// along depth, one pad and one add per tap.
//
// conv_general dilates the input with zeros, pads it, and runs the 1-, 2- or 3-d convolution.
#include "kiln/core/ops/conv_general.h"

#include <algorithm>
#include <string>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/conv.h"
#include "kiln/core/ops/conv_internal.h"
#include "kiln/core/ops/shape.h"

namespace kiln {
namespace detail {
namespace {

using Ints = std::vector<int>;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
// Output size of a convolution over `in` positions padded by `pad_total` in all.
int64_t forward_size(int64_t in, int64_t k, int stride, int64_t pad_total, int dilation) {
  return floor_div(in + pad_total - static_cast<int64_t>(dilation) * (k - 1) - 1, stride) + 1;
}
int64_t transposed_size(int64_t in, int64_t k, int stride, int padding, int output_padding, int dilation) {
  return (in - 1) * stride - 2 * static_cast<int64_t>(padding) + static_cast<int64_t>(dilation) * (k - 1) +
         output_padding + 1;
}

void check_operands(const char* op, const Array& x, const Array& w, int rank, const char* layout) {
  if (!x.valid() || !w.valid())
    throw ValueError::of(op, "an operand is an empty (default-constructed) array");
  if (x.ndim() != rank)
    throw ShapeError::of(op, "input has the wrong rank", "expected {} {}, got {}", rank, layout,
                         shape_str(x.shape()));
  if (w.ndim() != rank)
    throw ShapeError::of(op, "weight has the wrong rank", "expected {}, got {}", rank, shape_str(w.shape()));
  const Dtype t = promote_types(x.dtype(), w.dtype());
  if (!is_floating(t))
    throw DtypeError::of(op, "convolution needs floating-point operands", "input {}, weight {}",
                         dtype_name(x.dtype()), dtype_name(w.dtype()));
}

void check_at_least(const char* op, const Ints& v, const char* name, int min) {
  for (int x : v)
    if (x < min) throw ValueError::of(op, name, "got {}", x);
}

std::string shapes_str(const Array& x, const Array& w, int groups) {
  return fmt::format("input {}, weight {}, groups {}", shape_str(x.shape()), shape_str(w.shape()), groups);
}

void check_kernel(const char* op, const Array& x, const Array& w, int groups) {
  for (int i = 2; i < w.ndim(); ++i)
    if (w.shape(i) < 1)
      throw ShapeError::of(op, "kernel size must be positive", "{}", shapes_str(x, w, groups));
}

// A forward convolution's channels: x (N, C, ...), w (O, C / groups, ...).
void check_forward_channels(const char* op, const Array& x, const Array& w, int groups) {
  if (groups < 1) throw ValueError::of(op, "groups must be >= 1", "got {}", groups);
  if (x.shape(1) % groups != 0)
    throw ShapeError::of(op, "input channels are not divisible by groups", "{}", shapes_str(x, w, groups));
  if (w.shape(0) % groups != 0)
    throw ShapeError::of(op, "output channels are not divisible by groups", "{}", shapes_str(x, w, groups));
  if (w.shape(1) * groups != x.shape(1))
    throw ShapeError::of(op, "weight channels differ from input channels / groups", "{}",
                         shapes_str(x, w, groups));
  check_kernel(op, x, w, groups);
}

// A transposed convolution's channels: x (N, Cin, ...), w (Cin, Cout / groups, ...).
void check_transposed_channels(const char* op, const Array& x, const Array& w, int groups) {
  if (groups < 1) throw ValueError::of(op, "groups must be >= 1", "got {}", groups);
  if (x.shape(1) % groups != 0)
    throw ShapeError::of(op, "input channels are not divisible by groups", "{}", shapes_str(x, w, groups));
  if (w.shape(0) != x.shape(1))
    throw ShapeError::of(op, "weight's first dim differs from the input channels",
                         "{} (the weight is (Cin, Cout / groups, k...))", shapes_str(x, w, groups));
  check_kernel(op, x, w, groups);
}

// Checks a transposed convolution's parameters and returns its output's spatial sizes.
Shape transposed_output(const char* op, const Array& x, const Array& w, const Ints& stride,
                        const Ints& padding, const Ints& output_padding, const Ints& dilation, int groups) {
  check_at_least(op, stride, "stride must be >= 1", 1);
  check_at_least(op, dilation, "dilation must be >= 1", 1);
  check_at_least(op, padding, "padding must be >= 0", 0);
  check_at_least(op, output_padding, "output_padding must be >= 0", 0);
  for (size_t i = 0; i < stride.size(); ++i)
    if (output_padding[i] >= std::max(stride[i], dilation[i]))
      throw ValueError::of(op, "output_padding must be smaller than stride or dilation",
                           "output_padding {}, stride {}, dilation {}", output_padding[i], stride[i],
                           dilation[i]);
  check_transposed_channels(op, x, w, groups);
  Shape out;
  for (size_t i = 0; i < stride.size(); ++i) {
    const int ax = static_cast<int>(i) + 2;
    out.push_back(
        transposed_size(x.shape(ax), w.shape(ax), stride[i], padding[i], output_padding[i], dilation[i]));
    if (out.back() < 1)
      throw ShapeError::of(op, "the output would be empty", "{}: size {} along spatial axis {}",
                           shapes_str(x, w, groups), out.back(), i);
  }
  return out;
}

// Checks a forward convolution's parameters (symmetric padding) and returns its output's sizes.
Shape forward_output(const char* op, const Array& x, const Array& w, const Ints& stride, const Ints& padding,
                     const Ints& dilation, int groups) {
  check_at_least(op, stride, "stride must be >= 1", 1);
  check_at_least(op, dilation, "dilation must be >= 1", 1);
  check_at_least(op, padding, "padding must be >= 0", 0);
  check_forward_channels(op, x, w, groups);
  Shape out;
  for (size_t i = 0; i < stride.size(); ++i) {
    const int ax = static_cast<int>(i) + 2;
    out.push_back(forward_size(x.shape(ax), w.shape(ax), stride[i], 2 * int64_t{padding[i]}, dilation[i]));
    if (out.back() < 1)
      throw ShapeError::of(op, "input is smaller than the dilated kernel", "{}, padding {}, dilation {}",
                           shapes_str(x, w, groups), fmt::join(padding, ","), fmt::join(dilation, ","));
  }
  return out;
}

using Pad = std::vector<std::pair<int64_t, int64_t>>;
Array pad_axis(const Array& x, int axis, int64_t lo, int64_t hi, StreamOrDevice s) {
  if (lo == 0 && hi == 0) return x;
  Pad p(static_cast<size_t>(x.ndim()), {0, 0});
  p[static_cast<size_t>(axis)] = {lo, hi};
  return pad(x, p, 0, s);
}
Array slice_axis(const Array& x, int axis, int64_t start, int64_t stop, int64_t step, StreamOrDevice s) {
  std::vector<Slice> sl(static_cast<size_t>(axis) + 1);
  sl.back() = Slice{start, stop, step};
  return slice(x, sl, s);
}
// (.., L, ..) -> (.., (L - 1) * factor + 1, ..) with factor - 1 zeros between neighbours.
Array interleave_zeros(const Array& x, int axis, int factor, StreamOrDevice s) {
  if (factor == 1) return x;
  const int64_t n = x.shape(axis);
  Shape merged = x.shape();
  merged[static_cast<size_t>(axis)] = n * factor;
  const Array e = pad_axis(expand_dims(x, axis + 1, s), axis + 1, 0, factor - 1, s);
  return slice_axis(reshape(e, merged, s), axis, 0, (n - 1) * factor + 1, 1, s);
}

// conv3d with symmetric padding on validated operands (see the top of the file).
Array conv3d_core(const Array& x, const Array& w, const Ints& st, const Ints& pd, const Ints& dl, int groups,
                  const Shape& out, StreamOrDevice s) {
  const int64_t n = x.shape(0), c = x.shape(1), h = x.shape(3), wd = x.shape(4);
  const int64_t o = w.shape(0), cg = w.shape(1), kd = w.shape(2), kh = w.shape(3), kw = w.shape(4);
  const int64_t od = out[0];
  const Array xt = transpose(pad_axis(x, 2, pd[0], pd[0], s), {0, 2, 1, 3, 4}, s);  // (N, Dp, C, H, W)
  std::vector<Array> taps;
  for (int64_t k = 0; k < kd; ++k) {
    const int64_t start = k * dl[0];
    const Array t = slice_axis(xt, 1, start, start + (od - 1) * st[0] + 1, st[0], s);
    taps.push_back(reshape(t, {n, od, groups, c / groups, h, wd}, s));
  }
  const Array cols = reshape(stack(taps, 3, s), {n * od, groups * kd * cg, h, wd}, s);
  const Array w2 = reshape(transpose(w, {0, 2, 1, 3, 4}, s), {o, kd * cg, kh, kw}, s);
  const Array y = conv2d(cols, w2, {st[1], st[2]}, {pd[1], pd[2]}, {dl[1], dl[2]}, groups, s);
  return transpose(reshape(y, {n, od, o, out[1], out[2]}, s), {0, 2, 1, 3, 4}, s);
}

// conv_transpose2d on validated operands, out_hw its output's (H, W).
Array conv_transpose2d_core(const Array& x, const Array& w, std::array<int, 2> st, std::array<int, 2> pd,
                            std::array<int, 2> op, std::array<int, 2> dl, int groups,
                            std::array<int64_t, 2> out_hw, StreamOrDevice s) {
  // Rows beyond what ConvGradInput's geometry reaches (output_padding >= stride): zero input rows.
  const Array xp = pad_axis(pad_axis(x, 2, 0, op[0] / st[0], s), 3, 0, op[1] / st[1], s);
  return conv2d_transpose(xp, w, st, pd, dl, groups, out_hw, s);
}

// conv_transpose3d on validated operands (see the top of the file).
Array conv_transpose3d_core(const Array& x, const Array& w, const Ints& st, const Ints& pd, const Ints& op,
                            const Ints& dl, int groups, const Shape& out, StreamOrDevice s) {
  const int64_t n = x.shape(0), cin = x.shape(1), id = x.shape(2), h = x.shape(3), wd = x.shape(4);
  const int64_t cog = w.shape(1), kd = w.shape(2), kh = w.shape(3), kw = w.shape(4);
  const int64_t od = out[0];
  const Array x2 = reshape(transpose(x, {0, 2, 1, 3, 4}, s), {n * id, cin, h, wd}, s);
  const Array w2 = reshape(transpose(w, {0, 2, 1, 3, 4}, s), {cin, kd * cog, kh, kw}, s);
  const Array z = conv_transpose2d_core(x2, w2, {st[1], st[2]}, {pd[1], pd[2]}, {op[1], op[2]},
                                        {dl[1], dl[2]}, groups, {out[1], out[2]}, s);
  // (N, D, groups, kD, Cout/groups, OH, OW), input depths spread `stride` apart.
  const Array zs = interleave_zeros(reshape(z, {n, id, groups, kd, cog, out[1], out[2]}, s), 1, st[0], s);
  const int64_t spread = (id - 1) * st[0] + 1;
  const int64_t full = std::max(pd[0] + od, spread + (kd - 1) * dl[0]);
  Array acc;
  for (int64_t k = 0; k < kd; ++k) {
    const Array tap = squeeze(slice_axis(zs, 3, k, k + 1, 1, s), 3, s);
    const Array placed = pad_axis(tap, 1, k * dl[0], full - k * dl[0] - spread, s);
    acc = acc.valid() ? add(acc, placed, s) : placed;
  }
  const Array y =
      reshape(slice_axis(acc, 1, pd[0], pd[0] + od, 1, s), {n, od, groups * cog, out[1], out[2]}, s);
  return transpose(y, {0, 2, 1, 3, 4}, s);
}

Ints per_axis(const char* op, const char* name, const Ints& v, int dims, int fallback) {
  if (v.empty()) return Ints(static_cast<size_t>(dims), fallback);
  if (v.size() == 1) return Ints(static_cast<size_t>(dims), v[0]);
  if (static_cast<int>(v.size()) != dims)
    throw ValueError::of(op, "a parameter list has the wrong length", "{} has {} values for {} spatial axes",
                         name, v.size(), dims);
  return v;
}

template <size_t N>
Ints ints(const std::array<int, N>& a) {
  return Ints(a.begin(), a.end());
}

}  // namespace
}  // namespace detail

Array conv3d(const Array& input, const Array& weight, std::array<int, 3> stride, std::array<int, 3> padding,
             std::array<int, 3> dilation, int groups, StreamOrDevice s) {
  detail::check_operands("conv3d", input, weight, 5, "(N, C, D, H, W)");
  const detail::Ints st = detail::ints(stride), pd = detail::ints(padding), dl = detail::ints(dilation);
  const Shape out = detail::forward_output("conv3d", input, weight, st, pd, dl, groups);
  return detail::conv3d_core(input, weight, st, pd, dl, groups, out, s);
}

Array conv_transpose1d(const Array& input, const Array& weight, int stride, int padding, int output_padding,
                       int dilation, int groups, StreamOrDevice s) {
  detail::check_operands("conv_transpose1d", input, weight, 3, "(N, C, W)");
  const Shape out = detail::transposed_output("conv_transpose1d", input, weight, {stride}, {padding},
                                              {output_padding}, {dilation}, groups);
  const Shape& xs = input.shape();
  const Shape& ws = weight.shape();
  const Array y = detail::conv_transpose2d_core(
      reshape(input, {xs[0], xs[1], 1, xs[2]}, s), reshape(weight, {ws[0], ws[1], 1, ws[2]}, s), {1, stride},
      {0, padding}, {0, output_padding}, {1, dilation}, groups, {1, out[0]}, s);
  return reshape(y, {y.shape(0), y.shape(1), out[0]}, s);
}

Array conv_transpose2d(const Array& input, const Array& weight, std::array<int, 2> stride,
                       std::array<int, 2> padding, std::array<int, 2> output_padding,
                       std::array<int, 2> dilation, int groups, StreamOrDevice s) {
  detail::check_operands("conv_transpose2d", input, weight, 4, "(N, C, H, W)");
  const Shape out = detail::transposed_output("conv_transpose2d", input, weight, detail::ints(stride),
                                              detail::ints(padding), detail::ints(output_padding),
                                              detail::ints(dilation), groups);
  return detail::conv_transpose2d_core(input, weight, stride, padding, output_padding, dilation, groups,
                                       {out[0], out[1]}, s);
}

Array conv_transpose3d(const Array& input, const Array& weight, std::array<int, 3> stride,
                       std::array<int, 3> padding, std::array<int, 3> output_padding,
                       std::array<int, 3> dilation, int groups, StreamOrDevice s) {
  detail::check_operands("conv_transpose3d", input, weight, 5, "(N, C, D, H, W)");
  const detail::Ints st = detail::ints(stride), pd = detail::ints(padding), op = detail::ints(output_padding),
                     dl = detail::ints(dilation);
  const Shape out = detail::transposed_output("conv_transpose3d", input, weight, st, pd, op, dl, groups);
  return detail::conv_transpose3d_core(input, weight, st, pd, op, dl, groups, out, s);
}

Array conv_general(const Array& input, const Array& weight, std::vector<int> stride,
                   std::vector<int> padding_lo, std::vector<int> padding_hi, std::vector<int> kernel_dilation,
                   std::vector<int> input_dilation, int groups, bool flip, StreamOrDevice s) {
  const char* op = "conv_general";
  if (!input.valid() || !weight.valid())
    throw ValueError::of(op, "an operand is an empty (default-constructed) array");
  const int dims = input.ndim() - 2;
  if (dims < 1 || dims > 3)
    throw ShapeError::of(op, "input must have 1 to 3 spatial axes", "(N, C, spatial...), got {}",
                         shape_str(input.shape()));
  detail::check_operands(op, input, weight, input.ndim(), "(N, C, spatial...)");
  const detail::Ints st = detail::per_axis(op, "stride", stride, dims, 1);
  const detail::Ints lo = detail::per_axis(op, "padding_lo", padding_lo, dims, 0);
  const detail::Ints hi = detail::per_axis(op, "padding_hi", padding_hi, dims, 0);
  const detail::Ints kdil = detail::per_axis(op, "kernel_dilation", kernel_dilation, dims, 1);
  const detail::Ints idil = detail::per_axis(op, "input_dilation", input_dilation, dims, 1);
  detail::check_at_least(op, st, "stride must be >= 1", 1);
  detail::check_at_least(op, kdil, "kernel_dilation must be >= 1", 1);
  detail::check_at_least(op, idil, "input_dilation must be >= 1", 1);
  detail::check_at_least(op, lo, "padding_lo must be >= 0", 0);
  detail::check_at_least(op, hi, "padding_hi must be >= 0", 0);
  detail::check_forward_channels(op, input, weight, groups);
  for (int i = 0; i < dims; ++i) {
    const int ax = i + 2;
    const int64_t dilated = (input.shape(ax) - 1) * idil[static_cast<size_t>(i)] + 1;
    const int64_t n = detail::forward_size(dilated, weight.shape(ax), st[static_cast<size_t>(i)],
                                           int64_t{lo[static_cast<size_t>(i)]} + hi[static_cast<size_t>(i)],
                                           kdil[static_cast<size_t>(i)]);
    if (n < 1)
      throw ShapeError::of(op, "input is smaller than the dilated kernel",
                           "{}: along spatial axis {}, dilated input {}, padding {}+{}, kernel dilation {}",
                           detail::shapes_str(input, weight, groups), i, dilated, lo[static_cast<size_t>(i)],
                           hi[static_cast<size_t>(i)], kdil[static_cast<size_t>(i)]);
  }
  Array w = weight;
  if (flip) {
    std::vector<Slice> rev(static_cast<size_t>(weight.ndim()));
    for (int i = 2; i < weight.ndim(); ++i)
      rev[static_cast<size_t>(i)] = Slice{std::nullopt, std::nullopt, -1};
    w = slice(weight, rev, s);
  }
  // Input dilation, then the asymmetric part of the padding; the symmetric part goes to the conv.
  Array x = input;
  detail::Ints sym(static_cast<size_t>(dims));
  for (int i = 0; i < dims; ++i) {
    const size_t k = static_cast<size_t>(i);
    x = detail::interleave_zeros(x, i + 2, idil[k], s);
    sym[k] = std::min(lo[k], hi[k]);
    x = detail::pad_axis(x, i + 2, lo[k] - sym[k], hi[k] - sym[k], s);
  }
  if (dims == 1) return conv1d(x, w, st[0], sym[0], kdil[0], groups, s);
  if (dims == 2) return conv2d(x, w, {st[0], st[1]}, {sym[0], sym[1]}, {kdil[0], kdil[1]}, groups, s);
  const Shape out = detail::forward_output(op, x, w, st, sym, kdil, groups);
  return detail::conv3d_core(x, w, st, sym, kdil, groups, out, s);
}

}  // namespace kiln
