#pragma once
// The gather family of the gpu facade (STYLE.md R9; the same conventions as gpu.h, and no Vulkan
// header): take and gather by index arrays, their scatter-adds, put_along_axis, and the joins that
// copy their inputs into views of their output. core/vulkan/runtime/gather_facade.cpp implements
// it; a build without Vulkan links runtime/disabled_gather.cpp, which throws DeviceError.
//
// Indices may have any integer dtype and layout; negative ones count from the end. The callers
// check indices held on the host before recording, as the CPU does; an index computed on the
// device in the same eval cannot be seen before the submit, so one outside [-n, n) reads 0 (take,
// gather) or has its update dropped (scatters). Every output gets fresh device storage.
#include <span>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// out = x's slices at `indices` along `axis` (out: x.shape[:axis] + indices.shape + x.shape[axis+1:]).
void take(const Array& x, const Array& indices, int axis, Array& out);
/// out[b, ...] = x[i0[b], i1[b], ..., ...] for k index arrays of one shape B (out: B + x.shape[k:]).
void gather(const Array& x, std::span<const Array> indices, Array& out);
/// out = x with updates (take's output shape for these indices) added at `indices` along `axis`;
/// duplicates add in index order, as on the CPU (deterministic).
void scatter_add(const Array& x, const Array& indices, const Array& updates, int axis, Array& out);
/// out = x with updates (gather's output shape) added at the rows the k index arrays pick.
void scatter_add_nd(const Array& x, const Array& updates, std::span<const Array> indices, Array& out);
/// out = x with values put at `indices` along `axis` (indices and values: x's shape but along the
/// axis); the last of duplicate indices wins, as on the CPU.
void put_along_axis(const Array& x, const Array& indices, const Array& values, int axis, Array& out);
/// out = the inputs (one dtype) joined along `axis`.
void concatenate(std::span<const Array> inputs, int axis, Array& out);
/// out = `value` (a 0-d array of x's dtype) everywhere but x, which starts at `low` in each dim.
void pad(const Array& x, const Array& value, const Shape& low, Array& out);
/// out = x with `update` written at the strided slice starts[i] + k * steps[i] (steps may be negative).
void slice_update(const Array& x, const Array& update, const Shape& starts, const Shape& steps, Array& out);

}  // namespace kiln::gpu
