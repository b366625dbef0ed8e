#pragma once
// MLX's general gathers and scatters (one index array per chosen axis, each position picking a
// slice of given sizes), the scatters that combine (add, max, min, prod), masked_scatter, slice
// updates that accumulate, and slices whose start is an array (dynamic slicing).
//
// Indices and starts may have any integer dtype; negative ones count from the end, and nothing is
// clamped. One already evaluated when the op is called is checked there (ValueError from the op);
// a computed one is checked at eval, as take does: ValueError on the CPU, named after the kernel
// that meets it (gather for the gathers, dynamic slices and scatter_add; scatter, scatter_max,
// scatter_min, scatter_prod for those and dynamic_slice_update; take for masked_scatter), and on
// the GPU, which cannot see it before the submit, the element reads 0 or its update is dropped
// (core/vulkan/gpu_gather.h). A window's error names the first index of it that leaves the axis.
#include "kiln/core/ops/shape.h"

namespace kiln {

/// MLX's gather: indices[i] (integer dtype) indexes axis axes[i]; the index arrays broadcast
/// together to a shape B, and each position of B reads the slice of `slice_sizes` (one per dim of
/// a) that starts at the indices along `axes` and at 0 along the other axes. Result: B +
/// slice_sizes. No index arrays: the slice at the origin. Throws ShapeError (a 0-d array, counts,
/// a slice size outside [0, dim]), ValueError (one index per axis, repeated axes, an index whose
/// slice leaves its axis), DtypeError (non-integer indices). Its vjp is scatter_add.
Array gather(const Array& a, const std::vector<Array>& indices, const Axes& axes, const Shape& slice_sizes,
             StreamOrDevice s = {});

/// MLX's scatter: copy of `a` with `updates` written at the slices gather(a, indices, axes, S)
/// reads, where updates has shape B + S (a's rank of trailing dims S; its leading dims broadcast
/// to the indices' shape B; cast to a's dtype). Of updates aimed at one element the last in
/// row-major order of B wins, on both devices. Any dtype. Errors as gather's, ShapeError for
/// updates of another shape. Gradients go to the winning updates only (as JAX).
Array scatter(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
              StreamOrDevice s = {});
/// scatter whose updates add up (repeated indices accumulate, in index order on both devices).
/// Numeric dtypes (DtypeError). Note: with one index array, scatter_add(a, {i}, u, {0}) picks
/// index.h's take-style overload; write std::vector<Array>{i} and Axes{0} for this one.
Array scatter_add(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                  StreamOrDevice s = {});
/// scatter keeping the largest of the old value and the updates aimed at it (NaN wins). Numeric
/// dtypes. Gradient (as JAX): shared equally by the old value and the updates equal to the result.
Array scatter_max(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                  StreamOrDevice s = {});
/// scatter keeping the smallest; otherwise as scatter_max.
Array scatter_min(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                  StreamOrDevice s = {});
/// scatter multiplying the old value by every update aimed at it. Numeric dtypes (integers wrap).
/// Gradient: each factor gets the product of the others (exact with zero factors: no division by
/// them); second derivatives are exact only away from zero factors.
Array scatter_prod(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                   StreamOrDevice s = {});

/// PyTorch's masked_scatter: copy of `a` whose positions where `mask` (bool, broadcasting to a's
/// shape) is true get, in row-major order, consecutive elements of `values` (any shape, read
/// flattened, cast to a's dtype). Throws DtypeError (mask not bool), ShapeError (mask does not
/// broadcast), ValueError (fewer values than true positions: at the call for an evaluated mask,
/// else as take's out-of-range index at eval).
Array masked_scatter(const Array& a, const Array& mask, const Array& values, StreamOrDevice s = {});

/// slice_update that accumulates: a copy of `a` with a[slices] = a[slices] + update (update
/// broadcasting to the slice, cast to a's dtype). Numeric dtypes (DtypeError); ShapeError when the
/// update does not fit. Gradients as add's.
Array slice_update_add(const Array& a, const Array& update, const std::vector<Slice>& slices,
                       StreamOrDevice s = {});
/// As slice_update_add with a[slices] * update; gradients as multiply's.
Array slice_update_prod(const Array& a, const Array& update, const std::vector<Slice>& slices,
                        StreamOrDevice s = {});
/// As slice_update_add with maximum(a[slices], update); gradients as maximum's (ties go to a).
Array slice_update_max(const Array& a, const Array& update, const std::vector<Slice>& slices,
                       StreamOrDevice s = {});
/// As slice_update_add with minimum(a[slices], update); gradients as minimum's (ties go to a).
Array slice_update_min(const Array& a, const Array& update, const std::vector<Slice>& slices,
                       StreamOrDevice s = {});

/// MLX's slice with an array start: a[start[i] : start[i] + slice_size[i]] along axis axes[i],
/// whole along the others. `start` (integer, shape (len(axes))) is an input of the graph, so
/// compile traces it as data (one trace serves every start) and vmap batches it. Throws ShapeError
/// (start's shape, counts, a size outside [0, dim]), ValueError (repeated axes, a start whose slice
/// leaves its axis), DtypeError (non-integer start).
Array dynamic_slice(const Array& a, const Array& start, const Axes& axes, const Shape& slice_size,
                    StreamOrDevice s = {});
/// MLX's slice_update with an array start: a copy of `a` with `update` (a's rank, cast to a's
/// dtype) written from start[i] along axis axes[i] and from 0 along the others. Errors as
/// dynamic_slice's; ShapeError for an update of another rank or larger than a.
Array dynamic_slice_update(const Array& a, const Array& update, const Array& start, const Axes& axes,
                           StreamOrDevice s = {});

}  // namespace kiln
