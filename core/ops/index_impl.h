#pragma once
// Internals shared by the index families (index.cpp, index_more.cpp): loading and checking index
// arrays on the host, and the builders of index.cpp's Gather and ScatterAddND primitives.
#include <span>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/cpu/dispatch.h"

namespace kiln::detail {

/// Same-size element types move as raw bits: f(TypeTag<uintN_t>) for the dtype's size.
template <class F>
void visit_bits(Dtype t, F&& f) {
  switch (size_of(t)) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    default:
      return f(TypeTag<uint64_t>{});
  }
}

/// Throws DtypeError naming `op` unless `idx` has an integer dtype.
void check_index_dtype(const char* op, const Array& idx);
/// Indices as dense int64 over `shape` (which idx broadcasts to), wrapped into [0, n); one outside
/// [-n, n) throws ValueError ("[op] index out of range: index i is out of bounds for axis a with
/// size n"). idx must be available.
std::vector<int64_t> load_indices(const char* op, const Array& idx, const Shape& shape, int64_t n, int axis);
/// load_indices when idx is already available (so the error points at the op's call); else nothing.
void check_known(const char* op, const Array& idx, int64_t n, int axis);
/// For eval_gpu: load_indices when idx is held on the host (computed ones are seen only by the kernel).
void check_host_indices(const char* op, const Array& idx, int64_t n, int axis);
/// Flat row numbers into a's leading k dims from k available index arrays of one shape.
std::vector<int64_t> load_rows(const char* op, const Shape& a_shape, std::span<const Array> indices);
/// Output storage holding a copy of `a` (taking a's buffer when nobody else holds it).
void init_from(Array& out, const Array& a);

/// Gather: k index arrays of one shape B (checked, wrapped at eval) -> B + a.shape[k:].
Array make_gather(const Array& a, std::vector<Array> indices, StreamOrDevice s);
/// ScatterAddND: a with `upd` (B + a.shape[k:]) added at the rows the k index arrays (shape B) pick.
Array make_scatter_nd(const Array& a, const Array& upd, std::vector<Array> indices, StreamOrDevice s);

}  // namespace kiln::detail
