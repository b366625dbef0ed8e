#pragma once
// More ops that rearrange or create elements, at NumPy's semantics and argument names: flips and
// rolls, triangles and diagonals, grids, unflatten/unstack, per-element repeats, padding by
// reflection, and views by explicit strides or by reinterpreting bits. Compositions of the core
// primitives (both devices, every transform) except diagonal, as_strided and view, which are views
// of their own (core/ops/shape_views.cpp).
#include <string_view>

#include "kiln/core/ops/shape.h"

namespace kiln {

/// Reverses the order of the elements along `axes` (every axis when none are given): a view.
/// Any dtype. Throws ShapeError for an axis out of range or repeated.
Array flip(const Array& a, const Axes& axes, StreamOrDevice s = {});
Array flip(const Array& a, int axis, StreamOrDevice s = {});
Array flip(const Array& a, StreamOrDevice s = {});

/// NumPy roll: shifts the elements by `shift` along `axis`; those pushed past the end come back
/// at the start (negative shifts go the other way). Any dtype. Throws ShapeError for a bad axis.
Array roll(const Array& a, int64_t shift, int axis, StreamOrDevice s = {});
/// Shifts by shift[i] along axes[i]; a list of one broadcasts against the other and a repeated
/// axis adds its shifts (NumPy). Throws ShapeError when the lists do not broadcast or for a bad axis.
Array roll(const Array& a, const Shape& shift, const Axes& axes, StreamOrDevice s = {});
/// Rolls the flattened array and restores the shape (NumPy's axis=None).
Array roll(const Array& a, int64_t shift, StreamOrDevice s = {});

/// n x m (m < 0: n) array with ones at and below diagonal k (k > 0 above the main one), zeros
/// elsewhere (NumPy tri). Any dtype. Throws ValueError for a negative n or m.
Array tri(int64_t n, int64_t m = -1, int k = 0, Dtype dtype = float32, StreamOrDevice s = {});
/// NumPy tril: `a` with the elements above diagonal k of its last two axes zeroed; a 1-d `a` of n
/// elements is first broadcast to n x n (as NumPy). Any dtype. Throws ShapeError for a 0-d `a`.
Array tril(const Array& a, int k = 0, StreamOrDevice s = {});
/// NumPy triu: `a` with the elements below diagonal k of its last two axes zeroed; as tril else.
Array triu(const Array& a, int k = 0, StreamOrDevice s = {});

/// NumPy diagonal: the elements a[.., i, .., i + offset, ..] of axes axis1 and axis2 (offset < 0:
/// a[.., i - offset, .., i, ..]); both axes are removed and the diagonal becomes the last axis. A
/// strided view, of any dtype. Throws ShapeError for fewer than 2 dims, an axis out of range, or
/// axis1 == axis2.
Array diagonal(const Array& a, int offset = 0, int axis1 = 0, int axis2 = 1, StreamOrDevice s = {});
/// NumPy diag: a 1-d `a` of n elements gives the (n + |k|)-square matrix with `a` on diagonal k
/// and zeros elsewhere; a 2-d `a` gives its diagonal k (a view). Any dtype. Throws ShapeError for
/// other ranks.
Array diag(const Array& a, int k = 0, StreamOrDevice s = {});
/// NumPy trace: the sum of diagonal(a, offset, axis1, axis2) along its last axis, in sum's result
/// dtypes (bool/int8/int16 sum into int32, uint8/uint16 into uint32). Throws as diagonal.
Array trace(const Array& a, int offset = 0, int axis1 = 0, int axis2 = 1, StreamOrDevice s = {});

/// NumPy meshgrid: one coordinate array per (flattened) input over the grid they span. indexing
/// "xy" (Cartesian: the first two grid axes swapped, for 2 inputs or more) or "ij" (matrix);
/// dense outputs are broadcast views, sparse ones keep size 1 along the other axes. Each output
/// keeps its input's dtype. Throws ValueError for another indexing, ShapeError past 16 inputs.
std::vector<Array> meshgrid(const std::vector<Array>& arrays, bool sparse = false,
                            std::string_view indexing = "xy", StreamOrDevice s = {});

/// Splits `axis` into the dims `shape`, one of which may be -1 (inferred): torch/MLX unflatten, a
/// reshape. Throws ShapeError for a bad axis, an empty `shape`, or sizes that do not match.
Array unflatten(const Array& a, int axis, const Shape& shape, StreamOrDevice s = {});
/// NumPy unstack: the slices of `a` along `axis`, each without that axis (views; none for an
/// empty axis). Throws ShapeError for a 0-d `a` or a bad axis.
std::vector<Array> unstack(const Array& a, int axis = 0, StreamOrDevice s = {});

/// NumPy repeat with a count per element: element i of `axis` repeats[i] times (a single count
/// applies to every element). Any dtype. Throws ValueError for a negative count or a list that is
/// neither of size 1 nor of the axis' size, ShapeError for a bad axis.
Array repeat(const Array& a, const std::vector<int64_t>& repeats, int axis, StreamOrDevice s = {});
/// The same over the flattened array (NumPy's axis=None).
Array repeat(const Array& a, const std::vector<int64_t>& repeats, StreamOrDevice s = {});

/// NumPy atleast_1d/2d/3d: `a` with size-1 axes added until it has 1, 2 or 3 dims (a 0-d array
/// becomes (1), (1, 1) or (1, 1, 1); 1-d (n) becomes (1, n) or (1, n, 1); 2-d (m, n) becomes
/// (m, n, 1)). Views, any dtype.
Array atleast_1d(const Array& a, StreamOrDevice s = {});
Array atleast_2d(const Array& a, StreamOrDevice s = {});
Array atleast_3d(const Array& a, StreamOrDevice s = {});
std::vector<Array> atleast_1d(const std::vector<Array>& arrays, StreamOrDevice s = {});
std::vector<Array> atleast_2d(const std::vector<Array>& arrays, StreamOrDevice s = {});
std::vector<Array> atleast_3d(const std::vector<Array>& arrays, StreamOrDevice s = {});

/// NumPy's pad modes (np.pad's mode strings, as names: a string would make pad(x, w, 0) ambiguous).
enum class PadMode : uint8_t {
  constant,   ///< zeros (pad with a value: the pad of shape.h)
  edge,       ///< the edge element repeated
  reflect,    ///< mirrored about the edge element, which is not repeated: 3 2 | 1 2 3 | 2 1
  symmetric,  ///< mirrored, the edge element repeated: 2 1 | 1 2 3 | 3 2
};
/// NumPy pad by mode; widths past the axis reflect again exactly as NumPy does (a 1-element axis
/// pads by its edge). pad_width as for the constant pad. Any dtype. Throws ValueError for a
/// negative width or an empty axis padded in a mode other than constant, ShapeError for pad_width
/// of neither one pair nor one per axis.
Array pad(const Array& a, const std::vector<std::pair<int64_t, int64_t>>& pad_width, PadMode mode,
          StreamOrDevice s = {});

/// MLX as_strided: a view of a's elements, taken in row-major order (a is copied to row-major
/// first when it is not), with `shape` and `strides` in elements (0 or negative allowed) from
/// element `offset`. Any dtype. Throws ShapeError when shape and strides differ in length or a
/// dimension is negative, ValueError when an element of the view falls outside `a`. Gradient:
/// each element's cotangent is added back where it was read (overlaps accumulate).
Array as_strided(const Array& a, const Shape& shape, const Strides& strides, int64_t offset = 0,
                 StreamOrDevice s = {});
/// NumPy's a.view(dtype): a's bytes reinterpreted as `dtype`; the last axis scales by the ratio of
/// the item sizes. A view of a row-contiguous `a` whose start suits the new dtype; a copy first
/// otherwise. Any dtypes (a bool view of bytes other than 0 and 1 is unspecified). Throws
/// ShapeError for a 0-d `a` when the sizes differ, or a last axis whose bytes do not divide into
/// the new size. Its derivative is zero (bit patterns have none).
Array view(const Array& a, Dtype dtype, StreamOrDevice s = {});

}  // namespace kiln
