#pragma once
// Shapes, strides and axis helpers shared by every op.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;  // in elements, not bytes
using Axes = std::vector<int>;

/// Maximum rank an array may have.
inline constexpr int kMaxDims = 16;

/// Number of elements of a shape (1 for a scalar).
int64_t shape_size(const Shape& shape);
/// Row-major strides of a dense array of this shape.
Strides row_major_strides(const Shape& shape);
/// "(2,3)" as NumPy prints shapes; used in error messages.
std::string shape_str(const Shape& shape);
std::ostream& operator<<(std::ostream& os, const Shape& s);

/// NumPy broadcasting of two or more shapes; throws ShapeError naming `op` if they do not fit.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
Shape broadcast_shapes(const char* op, const std::vector<Shape>& shapes);

/// Maps a possibly negative axis into [0, ndim); throws ShapeError naming `op` when out of range.
int normalize_axis(const char* op, int axis, int ndim);
/// Normalizes, sorts and de-duplicates-checks a list of axes (a repeated axis is an error).
Axes normalize_axes(const char* op, const Axes& axes, int ndim);
/// All axes 0..ndim-1.
Axes all_axes(int ndim);

}  // namespace kiln
