#pragma once
// The scatters that combine (core/ops/index_more.h) in the gpu facade (STYLE.md R9; the same
// conventions as gpu_gather.h, no Vulkan header). core/vulkan/runtime/gather_facade.cpp implements
// it on the stable row sort of the scatter-adds; a build without Vulkan links
// runtime/disabled_gather.cpp, which throws DeviceError.
#include <span>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// How a scatter combines an element with the updates aimed at it: `set` keeps the last update in
/// index order (the old value when none), the others reduce the old value and every update.
enum class ScatterOp { set, max, min, prod };

/// out = x with updates (gather's output shape, x's dtype) combined by `op` into the rows the k
/// index arrays (one shape B) pick from x's leading k dims; each element walks its updates in
/// index order, as the CPU does (deterministic, equal to the CPU bit for bit). max and min
/// propagate NaN. set: any dtype; max, min, prod: numeric ones. An index computed on the device
/// outside [-n, n) has its update dropped.
void scatter_reduce_nd(const Array& x, const Array& updates, std::span<const Array> indices, ScatterOp op,
                       Array& out);

}  // namespace kiln::gpu
