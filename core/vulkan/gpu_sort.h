#pragma once
// The sorting calls of the gpu facade (core/vulkan/gpu.h), for the eval_gpu of Sort, ArgSort and
// ArgTopK (core/ops/sort.cpp). core/vulkan/runtime/sort_facade.cpp implements them; without
// Vulkan, runtime/disabled_sort.cpp throws DeviceError. Every dtype the CPU sorts is sorted, in
// the CPU's exact order (NaN placement and ties included), so results are equal, not close.
#include "kiln/core/array.h"

namespace kiln::gpu {

/// out = x sorted along `axis`, ascending, NaNs last, stable (Sort::eval_cpu's order); out has x's
/// shape and dtype.
void sort(const Array& x, int axis, Array& out);
/// out = the int32 positions along `axis` that sort x as sort() does (ArgSort).
void argsort(const Array& x, int axis, Array& out);
/// out = the int32 positions along `axis` of x's k largest elements, in descending order, NaNs
/// first, ties by lower position (ArgTopK); out has x's shape with k along the axis.
void argtopk(const Array& x, int k, int axis, Array& out);

}  // namespace kiln::gpu
