#pragma once
// The shared strided copy: moves elements between any two layouts, converting dtypes on the way.
// contiguous(), astype, reshape of a non-contiguous input, concatenate, pad and slice_update use it.
#include "kiln/core/array.h"

namespace kiln::detail {

/// Copies the `shape`-sized block at `src` (strides `src_strides`, dtype `src_t`) into `dst`
/// (strides `dst_strides`, dtype `dst_t`), converting with convert<>. Both pointers address the
/// block's element 0; strides are in elements and may be 0 in `src` (broadcast) but must not make
/// `dst` overlap itself. Large copies run on the CPU pool.
void copy_strided(const void* src, Dtype src_t, const Strides& src_strides, void* dst, Dtype dst_t,
                  const Strides& dst_strides, const Shape& shape);

/// Copies `src`'s elements into `dst`, which already has storage (allocate() or set_view). The
/// shapes must be equal, or `src`'s must broadcast to `dst`'s; dtypes may differ.
void copy_strided(const Array& src, Array& dst);

/// A row-contiguous, evaluated copy of an available array in dtype `dtype` (no copy when `a` is
/// already row-contiguous with that dtype). For kernels that want dense operands.
Array dense_copy(const Array& a, Dtype dtype);
inline Array dense_copy(const Array& a) { return dense_copy(a, a.dtype()); }

}  // namespace kiln::detail
