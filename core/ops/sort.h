#pragma once
// Sorting along one axis.
#include "kiln/core/array.h"

namespace kiln {

/// Sorted copy along `axis` (ascending; NaNs last). Stable.
Array sort(const Array& a, int axis = -1, StreamOrDevice s = {});
/// Indices (int32) that sort `a` along `axis`; stable.
Array argsort(const Array& a, int axis = -1, StreamOrDevice s = {});
/// The k largest values along `axis`, in descending order. Throws ValueError unless 0 < k <= size.
Array topk(const Array& a, int k, int axis = -1, StreamOrDevice s = {});
/// Indices (int32) of the k largest values along `axis`, in descending order of value.
Array argtopk(const Array& a, int k, int axis = -1, StreamOrDevice s = {});

}  // namespace kiln
