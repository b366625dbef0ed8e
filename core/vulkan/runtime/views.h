#pragma once
// Checks and shape arithmetic on GpuViews shared by the kernels' recording helpers (kernels.cpp,
// elementwise.cpp): bounds of a view, merging of dimensions, the workgroup size.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// Workgroup size of the 1-D kernels, within the device's limits.
inline constexpr uint32_t kWorkgroup = 256;
/// The shaders index with int32.
inline constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

/// Push-constant fields: offsets, strides and sizes checked to fit (check_view, kMaxIndex).
inline int32_t i32(int64_t v) { return static_cast<int32_t>(v); }
inline uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

/// The shader-variant suffix of a float dtype (`// kiln-variant:` names such as norm_rows_f32),
/// nullptr for other dtypes.
inline const char* float_variant(Dtype t) {
  switch (t) {
    case float32:
      return "f32";
    case float64:
      return "f64";
    case float16:
      return "f16";
    case bfloat16:
      return "bf16";
    default:
      return nullptr;
  }
}

inline uint32_t workgroup_size(const Context& ctx) {
  return std::min({kWorkgroup, ctx.caps().max_workgroup_invocations, ctx.caps().max_workgroup_size[0]});
}

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// Checks that every element of v lies in its buffer and indexes within int32. Throws ValueError,
/// ShapeError or NotImplemented (past 2^31 elements).
inline void check_view(const GpuView& v, const char* op) {
  if (!v.buffer) throw ValueError::of(op, "a view has no buffer");
  if (v.strides.size() != v.shape.size())
    throw ShapeError::of(op, "strides and shape differ in rank", "shape {}, strides {}", v.shape, v.strides);
  int64_t lo = v.offset, hi = v.offset;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] < 0) throw ShapeError::of(op, "negative dimension", "{}", v.shape);
    if (v.shape[d] == 0) return;  // empty: nothing is touched
    const int64_t reach = (v.shape[d] - 1) * v.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t capacity = static_cast<int64_t>(v.buffer->capacity()) / size_of(v.dtype);
  if (lo < 0 || hi >= capacity)
    throw ValueError::of(op, "view reaches outside its buffer",
                         "shape {}, strides {}, offset {}, buffer of {} elements", v.shape, v.strides,
                         v.offset, capacity);
  if (hi > kMaxIndex || numel(v.shape) > kMaxIndex)
    throw NotImplemented::of(op, "views past 2^31 elements are not supported on the GPU yet", "shape {}",
                             v.shape);
}

/// Merges adjacent dims that are contiguous in every view (and drops size-1 dims), so strided
/// kernels see as few dims as possible. strides[i] are the views' strides over `shape`.
inline void collapse(Shape& shape, std::span<Strides* const> strides) {
  Shape out_shape;
  std::vector<Strides> out(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out_shape.empty();
    for (size_t v = 0; v < strides.size() && merge; ++v) merge = out[v].back() == (*strides[v])[d] * shape[d];
    if (merge) {
      out_shape.back() *= shape[d];
      for (size_t v = 0; v < strides.size(); ++v) out[v].back() = (*strides[v])[d];
    } else {
      out_shape.push_back(shape[d]);
      for (size_t v = 0; v < strides.size(); ++v) out[v].push_back((*strides[v])[d]);
    }
  }
  shape = std::move(out_shape);
  for (size_t v = 0; v < strides.size(); ++v) *strides[v] = std::move(out[v]);
}
template <size_t N>
void collapse(Shape& shape, std::array<Strides*, N> strides) {
  collapse(shape, std::span<Strides* const>(strides));
}

/// A view of `shape` that walks memory linearly (what the kernels' contiguous paths need).
inline bool is_linear(const Shape& shape, const Strides& strides) {
  return shape.empty() || (shape.size() == 1 && strides[0] == 1);
}

/// Throws NotImplemented when the merged shape has more dims than the strided kernels take.
inline void check_rank(const Shape& collapsed, const char* op) {
  if (collapsed.size() > static_cast<size_t>(kMaxStridedRank))
    throw NotImplemented::of(op, "too many dimensions for the strided GPU kernels",
                             "{} after merging, at most {}", collapsed.size(), kMaxStridedRank);
}

/// Throws unless `out` is row-major contiguous with `shape` (size-1 dims may have any stride).
inline void check_contiguous_out(const GpuView& out, const Shape& shape, const char* op) {
  if (out.shape != shape) throw ShapeError::of(op, "output shape differs", "{} vs {}", out.shape, shape);
  int64_t expect = 1;
  for (size_t d = out.shape.size(); d-- > 0;) {
    if (out.shape[d] != 1 && out.strides[d] != expect)
      throw ValueError::of(op, "output must be contiguous", "strides {}", out.strides);
    expect *= out.shape[d];
  }
}

}  // namespace kiln::detail::vk
