#include "kiln/core/shape.h"

#include <algorithm>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln {

int64_t shape_size(const Shape& shape) {
  // An empty array may have huge other dims (a file may say so): its size is 0, not an overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides row_major_strides(const Shape& shape) {
  Strides st(shape.size());
  // Unsigned: the strides of an empty array with huge dims wrap (they are never used) instead of
  // overflowing. The outermost dim never enters a stride.
  uint64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = static_cast<int64_t>(s);
    if (i > 0) s *= static_cast<uint64_t>(shape[i]);
  }
  return st;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError::of(op, "shapes cannot be broadcast", "{} and {}", shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_shapes(const char* op, const std::vector<Shape>& shapes) {
  if (shapes.empty()) return {};
  Shape out = shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) out = broadcast_shapes(op, out, shapes[i]);
  return out;
}

int normalize_axis(const char* op, int axis, int ndim) {
  if (axis < -ndim || axis >= ndim)
    throw ShapeError::of(op, "axis out of range", "axis {} for an array of {} dimensions", axis, ndim);
  return axis < 0 ? axis + ndim : axis;
}

Axes normalize_axes(const char* op, const Axes& axes, int ndim) {
  Axes out;
  out.reserve(axes.size());
  for (int a : axes) out.push_back(normalize_axis(op, a, ndim));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    throw ShapeError::of(op, "repeated axis", "axes {}", fmt::join(axes, ","));
  return out;
}

Axes all_axes(int ndim) {
  Axes a(ndim);
  for (int i = 0; i < ndim; ++i) a[i] = i;
  return a;
}

}  // namespace kiln
