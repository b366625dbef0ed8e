#pragma once
// Iteration over strided operands: dimensions that are contiguous in every operand are merged, so
// a loop runs linearly over dense data and walks strides only where it must.
#include <array>
#include <cstdint>
#include <span>

#include "kiln/core/shape.h"

namespace kiln::detail {

/// A shape and N operand stride sets after merging mergeable dimensions. Broadcast dims have stride 0.
template <int N>
struct StridedLayout {
  Shape shape;  // collapsed shape (at least one dim)
  std::array<Strides, N> strides;
};

/// Collapses dims of `shape` where, for every operand, stride[i] == stride[i+1] * shape[i+1].
template <int N>
StridedLayout<N> collapse(const Shape& shape, const std::array<const Strides*, N>& strides) {
  StridedLayout<N> out;
  const int nd = static_cast<int>(shape.size());
  for (int i = 0; i < nd; ++i) {
    if (shape[i] == 1) continue;  // size-1 dims never move the index
    bool merge = !out.shape.empty();
    if (merge)
      for (int k = 0; k < N; ++k)
        if (out.strides[k].back() != (*strides[k])[i] * shape[i]) merge = false;
    if (merge) {
      out.shape.back() *= shape[i];
      for (int k = 0; k < N; ++k) out.strides[k].back() = (*strides[k])[i];
    } else {
      out.shape.push_back(shape[i]);
      for (int k = 0; k < N; ++k) out.strides[k].push_back((*strides[k])[i]);
    }
  }
  if (out.shape.empty()) {
    out.shape.push_back(1);
    for (int k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

/// Strides of `in` broadcast to `out_shape` (0 on broadcast dims); in_shape right-aligns with out_shape.
Strides broadcast_strides(const Shape& in_shape, const Strides& in_strides, const Shape& out_shape);

/// Calls body(offsets, n, inner_strides) for each innermost row of the layout, over rows
/// [row_begin, row_end); `offsets` are each operand's element offset at the row start.
template <int N, class Body>
void for_each_row(const StridedLayout<N>& l, int64_t row_begin, int64_t row_end, Body&& body) {
  const int nd = static_cast<int>(l.shape.size());
  const int64_t inner = l.shape[nd - 1];
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = l.strides[k][nd - 1];
  // Decompose row_begin into an index over the outer dims.
  std::array<int64_t, kMaxDims> idx{};
  std::array<int64_t, N> off{};
  int64_t r = row_begin;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = r % l.shape[d];
    r /= l.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * l.strides[k][d];
  }
  for (int64_t row = row_begin; row < row_end; ++row) {
    body(off, inner, inner_stride);
    for (int d = nd - 2; d >= 0; --d) {  // odometer increment
      for (int k = 0; k < N; ++k) off[k] += l.strides[k][d];
      if (++idx[d] < l.shape[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= idx[d] * l.strides[k][d];
      idx[d] = 0;
    }
  }
}

/// Number of innermost rows of a layout.
template <int N>
int64_t row_count(const StridedLayout<N>& l) {
  int64_t n = 1;
  for (size_t d = 0; d + 1 < l.shape.size(); ++d) n *= l.shape[d];
  return n;
}

}  // namespace kiln::detail
