// Shape and creation ops written as compositions of the core primitives (slices, concatenate,
// where, take, reshape, broadcast_to), so each has both devices' kernels and every transform's
// rules: flip, roll, tri/tril/triu, diag, trace, meshgrid, unflatten, unstack, per-element repeat,
// atleast_nd and pad by edge or reflection.
#include "kiln/core/ops/shape_more.h"

#include <algorithm>
#include <limits>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"

namespace kiln {
namespace {

using PadWidths = std::vector<std::pair<int64_t, int64_t>>;

// a[..., sl] along `axis` only.
Array axis_slice(const Array& a, int axis, Slice sl, StreamOrDevice s) {
  std::vector<Slice> slices(axis + 1);
  slices[axis] = sl;
  return slice(a, slices, s);
}

// `a` rolled by k (0 < k < n) along `axis` of size n: its last k elements, then the rest.
Array roll_axis(const Array& a, int axis, int64_t k, StreamOrDevice s) {
  const int64_t n = a.shape(axis);
  return concatenate(
      {axis_slice(a, axis, {n - k, std::nullopt, 1}, s), axis_slice(a, axis, {0, n - k, 1}, s)}, axis, s);
}

// `a` with zeros above (lower) or below diagonal k of its last two axes (a 1-d `a` broadcast to
// n x n first).
Array triangle(const char* op, const Array& a, int k, bool lower, StreamOrDevice s) {
  detail::check_array(op, a);
  if (a.ndim() == 0) throw ShapeError::of(op, "the array must have at least 1 dimension", "got a 0-d array");
  const int64_t n = a.ndim() == 1 ? a.shape(0) : a.shape(-2), m = a.shape(-1);
  Array mask = tri(n, m, lower ? k : k - 1, bool_, s);
  if (!lower) mask = logical_not(mask, s);
  return where(mask, a, zeros({}, a.dtype(), s), s);
}

// The source index along an axis of size n (> 0) for each of the lo + n + hi padded positions:
// NumPy's np.pad for modes edge, reflect and symmetric (arraypad.py), replayed on indices. Wide
// reflections are NumPy's iteration, which reflects the already padded values again.
std::vector<int64_t> pad_source(int64_t n, int64_t lo, int64_t hi, PadMode mode) {
  const int64_t total = lo + n + hi;
  std::vector<int64_t> p(total);
  for (int64_t i = 0; i < total; ++i) p[i] = std::clamp<int64_t>(i - lo, 0, n - 1);
  if (mode == PadMode::edge || n == 1) return p;  // NumPy pads a single element by its edge in every mode
  const bool edge = mode == PadMode::symmetric;   // the edge element is part of the reflection
  int64_t left = lo, right = hi;
  while (left > 0 || right > 0) {
    // _set_reflect_both: one reflection at each end, as long as the valid part (which grows
    // with each pass) allows; the next pass reflects the result.
    const int64_t valid = total - left - right - (edge ? 0 : 1);
    if (left > 0) {
      const int64_t chunk = std::min(valid, left);
      const int64_t first = left - (edge ? 1 : 0) + chunk;  // p[first], p[first - 1], ... (chunk values)
      for (int64_t j = 0; j < chunk; ++j) p[left - chunk + j] = p[first - j];
      left -= chunk;
    }
    if (right > 0) {
      const int64_t chunk = std::min(valid, right);
      const int64_t first = total - right + (edge ? 1 : 0) - 2;
      for (int64_t j = 0; j < chunk; ++j) p[total - right + j] = p[first - j];
      right -= chunk;
    }
  }
  return p;
}

// a's elements at `source` along `axis`: runs of the same element or of neighbours in either
// direction become broadcast or sliced views joined by one concatenate (their gradients are
// slices); many short runs become one take.
Array take_runs(const Array& a, int axis, const std::vector<int64_t>& source, StreamOrDevice s) {
  struct Run {
    int64_t first, step, size;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < source.size();) {
    size_t j = i + 1;  // past the run's end
    const int64_t step = j < source.size() ? source[j] - source[i] : 1;
    if (step >= -1 && step <= 1)
      while (j < source.size() && source[j] - source[j - 1] == step) ++j;
    runs.push_back({source[i], j - i > 1 ? step : 1, static_cast<int64_t>(j - i)});
    i = j;
  }
  constexpr size_t kMaxRuns = 16;
  if (runs.size() > kMaxRuns) {
    std::vector<int32_t> idx(source.begin(), source.end());
    return take(a, Array(idx, {static_cast<int64_t>(idx.size())}), axis, s);
  }
  std::vector<Array> pieces;
  for (const Run& r : runs) {
    if (r.step == 0) {
      Shape shape = a.shape();
      shape[axis] = r.size;
      pieces.push_back(broadcast_to(axis_slice(a, axis, {r.first, r.first + 1, 1}, s), shape, s));
    } else if (r.step == 1) {
      pieces.push_back(axis_slice(a, axis, {r.first, r.first + r.size, 1}, s));
    } else {
      const int64_t stop = r.first - r.size;
      pieces.push_back(axis_slice(a, axis, {r.first, stop < 0 ? std::nullopt : std::optional(stop), -1}, s));
    }
  }
  return pieces.size() == 1 ? pieces[0] : concatenate(pieces, axis, s);
}

std::vector<Array> each(const std::vector<Array>& arrays, Array (*f)(const Array&, StreamOrDevice),
                        StreamOrDevice s) {
  std::vector<Array> out;
  for (const Array& a : arrays) out.push_back(f(a, s));
  return out;
}

}  // namespace

Array flip(const Array& a, const Axes& axes, StreamOrDevice s) {
  detail::check_array("flip", a);
  const Axes ax = normalize_axes("flip", axes, a.ndim());
  if (ax.empty()) return a;
  std::vector<Slice> slices(ax.back() + 1);
  for (int i : ax) slices[i] = {std::nullopt, std::nullopt, -1};
  return slice(a, slices, s);
}

Array flip(const Array& a, int axis, StreamOrDevice s) { return flip(a, Axes{axis}, s); }

Array flip(const Array& a, StreamOrDevice s) {
  detail::check_array("flip", a);
  return flip(a, all_axes(a.ndim()), s);
}

Array roll(const Array& a, const Shape& shift, const Axes& axes, StreamOrDevice s) {
  detail::check_array("roll", a);
  if (shift.size() != axes.size() && shift.size() != 1 && axes.size() != 1)
    throw ShapeError::of("roll", "shift and axis must broadcast", "shift ({}) and axis ({})",
                         fmt::join(shift, ","), fmt::join(axes, ","));
  const size_t n = shift.empty() || axes.empty() ? 0 : std::max(shift.size(), axes.size());
  std::vector<int64_t> total(a.ndim(), 0);
  for (size_t i = 0; i < n; ++i) {
    const int ax = normalize_axis("roll", axes[axes.size() == 1 ? 0 : i], a.ndim());
    const int64_t size = a.shape(ax);
    if (size > 0) total[ax] = (total[ax] + shift[shift.size() == 1 ? 0 : i] % size) % size;
  }
  Array out = a;
  for (int ax = 0; ax < a.ndim(); ++ax) {
    const int64_t size = a.shape(ax), k = size > 0 ? (total[ax] + size) % size : 0;
    if (k != 0) out = roll_axis(out, ax, k, s);
  }
  return out;
}

Array roll(const Array& a, int64_t shift, int axis, StreamOrDevice s) {
  return roll(a, Shape{shift}, Axes{axis}, s);
}

Array roll(const Array& a, int64_t shift, StreamOrDevice s) {
  detail::check_array("roll", a);
  return reshape(roll(flatten(a, 0, -1, s), shift, 0, s), a.shape(), s);
}

Array tri(int64_t n, int64_t m, int k, Dtype dtype, StreamOrDevice s) {
  if (m < 0 && m != -1) throw ValueError::of("tri", "m must be >= 0 (or -1: n)", "got {}", m);
  if (m == -1) m = n;
  if (n < 0) throw ValueError::of("tri", "n must be >= 0", "got {}", n);
  // Row i keeps column j when j <= i + k (in int32; a k past the corners is clamped to them).
  const int64_t kk = std::clamp<int64_t>(k, -n - 1, m + 1);
  if (n + m + 2 > std::numeric_limits<int32_t>::max())
    throw ValueError::of("tri", "too large", "{} x {}", n, m);
  const Array rows = reshape(arange(0, static_cast<double>(n), 1, int32, s), {n, 1}, s);
  const Array cols = reshape(arange(0, static_cast<double>(m), 1, int32, s), {1, m}, s);
  return astype(less_equal(cols, add(rows, static_cast<int32_t>(kk), s), s), dtype, s);
}

Array tril(const Array& a, int k, StreamOrDevice s) { return triangle("tril", a, k, true, s); }
Array triu(const Array& a, int k, StreamOrDevice s) { return triangle("triu", a, k, false, s); }

Array diag(const Array& a, int k, StreamOrDevice s) {
  detail::check_array("diag", a);
  if (a.ndim() == 2) return diagonal(a, k, 0, 1, s);
  if (a.ndim() != 1)
    throw ShapeError::of("diag", "the array must be 1-d or 2-d", "shape {}", shape_str(a.shape()));
  // `a` written with step n + 1 into the flat n x n zeros, from (0, k) or (-k, 0).
  const int64_t len = a.shape(0), n = len + std::abs(static_cast<int64_t>(k));
  const int64_t start = k >= 0 ? k : -static_cast<int64_t>(k) * n;
  const Array flat = zeros({n * n}, a.dtype(), s);
  if (len == 0) return reshape(flat, {n, n}, s);
  return reshape(slice_update(flat, a, {{start, start + (len - 1) * (n + 1) + 1, n + 1}}, s), {n, n}, s);
}

Array trace(const Array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  detail::check_array("trace", a);
  return sum(diagonal(a, offset, axis1, axis2, s), -1, false, s);
}

std::vector<Array> meshgrid(const std::vector<Array>& arrays, bool sparse, std::string_view indexing,
                            StreamOrDevice s) {
  for (const Array& a : arrays) detail::check_array("meshgrid", a);
  if (indexing != "xy" && indexing != "ij")
    throw ValueError::of("meshgrid", "indexing must be \"xy\" or \"ij\"", "got \"{}\"", indexing);
  const int nd = static_cast<int>(arrays.size());
  if (nd > kMaxDims) throw ShapeError::of("meshgrid", "too many arrays", "{} > {}", nd, kMaxDims);
  // Input i runs along grid axis i; "xy" swaps the first two (NumPy).
  auto grid_axis = [&](int i) { return indexing == "xy" && nd > 1 && i < 2 ? 1 - i : i; };
  Shape grid(nd);
  std::vector<Array> out;
  for (int i = 0; i < nd; ++i) {
    const Array x = flatten(arrays[i], 0, -1, s);
    grid[grid_axis(i)] = x.size();
    Shape shape(nd, 1);
    shape[grid_axis(i)] = x.size();
    out.push_back(reshape(x, shape, s));
  }
  if (!sparse)
    for (Array& x : out) x = broadcast_to(x, grid, s);
  return out;
}

Array unflatten(const Array& a, int axis, const Shape& shape, StreamOrDevice s) {
  detail::check_array("unflatten", a);
  const int ax = normalize_axis("unflatten", axis, a.ndim());
  if (shape.empty()) throw ShapeError::of("unflatten", "the new shape must not be empty");
  const int64_t size = a.shape(ax);
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && infer < 0) {
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ShapeError::of("unflatten", "dims must be >= 0, with at most one -1",
                           "({}) for axis {} of shape {}", fmt::join(shape, ","), ax, shape_str(a.shape()));
    } else {
      known *= shape[i];
    }
  }
  Shape dims = shape;
  if (infer >= 0) {
    if (known == 0 || size % known != 0)
      throw ShapeError::of("unflatten", "cannot infer the -1 dim", "({}) for axis {} of size {}",
                           fmt::join(shape, ","), ax, size);
    dims[infer] = size / known;
  } else if (known != size) {
    throw ShapeError::of("unflatten", "the dims must multiply to the axis' size",
                         "({}) for axis {} of size {}", fmt::join(shape, ","), ax, size);
  }
  Shape out(a.shape().begin(), a.shape().begin() + ax);
  out.insert(out.end(), dims.begin(), dims.end());
  out.insert(out.end(), a.shape().begin() + ax + 1, a.shape().end());
  if (static_cast<int>(out.size()) > kMaxDims)
    throw ShapeError::of("unflatten", "too many dimensions", "{} for shape {}", shape_str(out),
                         shape_str(a.shape()));
  return reshape(a, out, s);
}

std::vector<Array> unstack(const Array& a, int axis, StreamOrDevice s) {
  detail::check_array("unstack", a);
  if (a.ndim() == 0)
    throw ShapeError::of("unstack", "the array must have at least 1 dimension", "got a 0-d array");
  const int ax = normalize_axis("unstack", axis, a.ndim());
  const int64_t n = a.shape(ax);
  std::vector<Array> out;
  if (n == 0) return out;
  for (Array& piece : split(a, static_cast<int>(n), ax, s)) out.push_back(squeeze(piece, ax, s));
  return out;
}

Array repeat(const Array& a, const std::vector<int64_t>& repeats, int axis, StreamOrDevice s) {
  detail::check_array("repeat", a);
  const int ax = normalize_axis("repeat", axis, a.ndim());
  const int64_t n = a.shape(ax);
  for (int64_t r : repeats)
    if (r < 0)
      throw ValueError::of("repeat", "repeats must be non-negative", "got ({})", fmt::join(repeats, ","));
  if (repeats.size() == 1) {
    if (repeats[0] > std::numeric_limits<int>::max())
      throw ValueError::of("repeat", "too many repeats", "got {}", repeats[0]);
    return repeat(a, static_cast<int>(repeats[0]), ax, s);
  }
  if (static_cast<int64_t>(repeats.size()) != n)
    throw ValueError::of("repeat", "repeats needs one count per element of the axis, or one for all",
                         "{} counts for axis {} of shape {}", repeats.size(), ax, shape_str(a.shape()));
  if (std::all_of(repeats.begin(), repeats.end(), [](int64_t r) { return r == 1; })) return a;
  std::vector<int32_t> idx;
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(idx.size()) + repeats[i] > std::numeric_limits<int32_t>::max())
      throw ValueError::of("repeat", "too many repeats", "more than 2^31 - 1 elements along the axis");
    idx.insert(idx.end(), repeats[i], static_cast<int32_t>(i));
  }
  return take(a, Array(idx, {static_cast<int64_t>(idx.size())}), ax, s);
}

Array repeat(const Array& a, const std::vector<int64_t>& repeats, StreamOrDevice s) {
  detail::check_array("repeat", a);
  return repeat(flatten(a, 0, -1, s), repeats, 0, s);
}

Array atleast_1d(const Array& a, StreamOrDevice s) {
  detail::check_array("atleast_1d", a);
  return a.ndim() >= 1 ? a : reshape(a, {1}, s);
}

Array atleast_2d(const Array& a, StreamOrDevice s) {
  detail::check_array("atleast_2d", a);
  if (a.ndim() >= 2) return a;
  return reshape(a, a.ndim() == 0 ? Shape{1, 1} : Shape{1, a.shape(0)}, s);
}

Array atleast_3d(const Array& a, StreamOrDevice s) {
  detail::check_array("atleast_3d", a);
  switch (a.ndim()) {
    case 0:
      return reshape(a, {1, 1, 1}, s);
    case 1:
      return reshape(a, {1, a.shape(0), 1}, s);
    case 2:
      return reshape(a, {a.shape(0), a.shape(1), 1}, s);
    default:
      return a;
  }
}

std::vector<Array> atleast_1d(const std::vector<Array>& arrays, StreamOrDevice s) {
  return each(
      arrays, [](const Array& a, StreamOrDevice st) { return atleast_1d(a, st); }, s);
}
std::vector<Array> atleast_2d(const std::vector<Array>& arrays, StreamOrDevice s) {
  return each(
      arrays, [](const Array& a, StreamOrDevice st) { return atleast_2d(a, st); }, s);
}
std::vector<Array> atleast_3d(const std::vector<Array>& arrays, StreamOrDevice s) {
  return each(
      arrays, [](const Array& a, StreamOrDevice st) { return atleast_3d(a, st); }, s);
}

namespace {
const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::constant:
      return "constant";
    case PadMode::edge:
      return "edge";
    case PadMode::reflect:
      return "reflect";
    case PadMode::symmetric:
      return "symmetric";
  }
  return "?";
}
}  // namespace

Array pad(const Array& a, const PadWidths& pad_width, PadMode mode, StreamOrDevice s) {
  detail::check_array("pad", a);
  if (mode == PadMode::constant) return pad(a, pad_width, 0, s);
  if (mode != PadMode::edge && mode != PadMode::reflect && mode != PadMode::symmetric)
    throw ValueError::of("pad", "unknown mode", "{}", static_cast<int>(mode));
  const int nd = a.ndim();
  if (static_cast<int>(pad_width.size()) != nd && pad_width.size() != 1)
    throw ShapeError::of("pad", "pad_width needs one (before, after) pair per dimension, or one for all",
                         "{} pairs for shape {}", pad_width.size(), shape_str(a.shape()));
  for (int i = 0; i < nd; ++i) {
    const auto [lo, hi] = pad_width.size() == 1 ? pad_width[0] : pad_width[i];
    if (lo < 0 || hi < 0)
      throw ValueError::of("pad", "pad widths must be non-negative", "({}, {}) for axis {}", lo, hi, i);
    if ((lo > 0 || hi > 0) && a.shape(i) == 0)
      throw ValueError::of("pad", "an empty axis can only be padded in mode \"constant\"",
                           "axis {} of shape {} in mode {}", i, shape_str(a.shape()), mode_name(mode));
  }
  Array out = a;
  for (int i = 0; i < nd; ++i) {
    const auto [lo, hi] = pad_width.size() == 1 ? pad_width[0] : pad_width[i];
    if (lo > 0 || hi > 0) out = take_runs(out, i, pad_source(a.shape(i), lo, hi, mode), s);
  }
  return out;
}

}  // namespace kiln
