#include "kiln/core/vulkan/runtime/index_kernels.h"

#include <array>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

struct TakePush {
  uint32_t total, rank, axis, n, x_offset, idx_offset, out_offset;
  std::array<uint32_t, kMaxIndexRank> shape;
  std::array<int32_t, kMaxIndexRank> x_strides, idx_strides;
};
struct ScatterPush {
  uint32_t total, rank, axis, updates, x_offset, idx_offset, upd_offset;
  std::array<uint32_t, kMaxIndexRank> shape;
  std::array<int32_t, kMaxIndexRank> x_strides, idx_strides, upd_strides;
};
static_assert(sizeof(TakePush) == 100 && sizeof(ScatterPush) == 124);

// The indices' dtype as the shaders number it (kIndexType in shaders/index/index_common.glsl).
uint32_t index_type(Dtype t, const char* op) {
  switch (t) {
    case int32:
      return 0;
    case uint32:
      return 1;
    case int64:
      return 2;
    default:
      throw NotImplemented::of(op, "indices on the GPU must be int32, uint32 or int64", "{}", dtype_name(t));
  }
}

// Dims around `axis` merged where every view allows (size-1 dims dropped); the axis stays one dim
// (its strides in `axis_strides`, which are taken apart from the merging). Returns the new axis.
int merge_around_axis(Shape& shape, std::vector<Strides*> strides, int axis) {
  Shape pre(shape.begin(), shape.begin() + axis), post(shape.begin() + axis + 1, shape.end());
  std::vector<Strides> pre_s, post_s;
  std::vector<int64_t> at_axis;
  for (Strides* s : strides) {
    pre_s.emplace_back(s->begin(), s->begin() + axis);
    post_s.emplace_back(s->begin() + axis + 1, s->end());
    at_axis.push_back((*s)[static_cast<size_t>(axis)]);
  }
  std::vector<Strides*> pre_p, post_p;
  for (size_t v = 0; v < strides.size(); ++v) {
    pre_p.push_back(&pre_s[v]);
    post_p.push_back(&post_s[v]);
  }
  collapse(pre, pre_p);
  collapse(post, post_p);
  const int64_t axis_size = shape[static_cast<size_t>(axis)];
  shape = pre;
  shape.push_back(axis_size);
  shape.insert(shape.end(), post.begin(), post.end());
  for (size_t v = 0; v < strides.size(); ++v) {
    Strides s = pre_s[v];
    s.push_back(at_axis[v]);
    s.insert(s.end(), post_s[v].begin(), post_s[v].end());
    *strides[v] = std::move(s);
  }
  return static_cast<int>(pre.size());
}

template <class T, size_t M>
void fill(std::array<T, M>& dst, const std::vector<int64_t>& src) {
  dst.fill(0);
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<T>(src[i]);
}

void check_rank_along(const Shape& shape, const char* op) {
  if (shape.size() > static_cast<size_t>(kMaxIndexRank))
    throw NotImplemented::of(op, "too many dimensions for the GPU indexing kernels",
                             "{} after merging, at most {}", shape.size(), kMaxIndexRank);
}

void check_axis(const GpuView& v, int axis, const char* op) {
  if (axis < 0 || static_cast<size_t>(axis) >= v.shape.size())
    throw ShapeError::of(op, "axis out of range", "axis {} for shape {}", axis, v.shape);
}

// Throws unless a and b have equal shapes off `axis`.
void check_off_axis(const GpuView& a, const GpuView& b, int axis, const char* op) {
  bool same = a.shape.size() == b.shape.size();
  for (size_t d = 0; same && d < a.shape.size(); ++d)
    same = static_cast<int>(d) == axis || a.shape[d] == b.shape[d];
  if (!same)
    throw ShapeError::of(op, "shapes differ off the axis", "{} and {} along axis {}", a.shape, b.shape, axis);
}

// The scatter_add_along_axis.comp variant adding values of dtype t (uint32 adds as int32 does).
const char* scatter_add_variant(Dtype t, const char* op) {
  switch (t) {
    case float32:
      return "scatter_add_along_axis_f32";
    case float64:
      return "scatter_add_along_axis_f64";
    case int32:
    case uint32:
      return "scatter_add_along_axis_i32";
    case int64:
      return "scatter_add_along_axis_i64";
    default:
      throw NotImplemented::of(op, "no GPU kernel for this dtype", "{}", dtype_name(t));
  }
}

}  // namespace

void record_take_along_axis(Recorder& r, const GpuView& x, const GpuView& idx, int axis, const GpuView& out) {
  constexpr const char* op = "gpu take_along_axis";
  check_view(x, op);
  check_view(idx, op);
  check_view(out, op);
  check_axis(x, axis, op);
  check_off_axis(x, idx, axis, op);
  check_contiguous_out(out, idx.shape, op);
  if (out.dtype != x.dtype) throw ValueError::of(op, "output dtype differs", "{}", dtype_name(out.dtype));
  const uint32_t itype = index_type(idx.dtype, op);
  Context& ctx = r.context();
  const char* shader = size_of(x.dtype) == 8   ? "take_along_axis_u64"
                       : size_of(x.dtype) == 4 ? "take_along_axis_u32"
                       : size_of(x.dtype) == 2 ? "take_along_axis_u16"
                                               : nullptr;
  if (!shader) throw NotImplemented::of(op, "no GPU kernel for this dtype", "{}", dtype_name(x.dtype));
  if (size_of(x.dtype) == 2 && !ctx.caps().storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{}", ctx.caps().name);
  const int64_t total = numel(idx.shape);
  if (total == 0) return;
  const int64_t n = x.shape[static_cast<size_t>(axis)];
  Shape shape = idx.shape;
  Strides xs = x.strides, is = idx.strides;
  const int ax = merge_around_axis(shape, {&xs, &is}, axis);
  check_rank_along(shape, op);
  TakePush p{static_cast<uint32_t>(total),
             static_cast<uint32_t>(shape.size()),
             static_cast<uint32_t>(ax),
             static_cast<uint32_t>(n),
             static_cast<uint32_t>(x.offset),
             static_cast<uint32_t>(idx.offset),
             static_cast<uint32_t>(out.offset),
             {},
             {},
             {}};
  fill(p.shape, shape);
  fill(p.x_strides, xs);
  fill(p.idx_strides, is);
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(shader), {wg, itype},
             {{x.buffer, Access::read}, {idx.buffer, Access::read}, {out.buffer, Access::write}}, p,
             Groups::linear(static_cast<uint64_t>((total + wg - 1) / wg), ctx));
}

void record_scatter_add_along_axis(Recorder& r, const GpuView& x, const GpuView& idx, const GpuView& upd,
                                   int axis, const GpuView& out) {
  constexpr const char* op = "gpu scatter_add_along_axis";
  check_view(x, op);
  check_view(idx, op);
  check_view(upd, op);
  check_view(out, op);
  check_axis(x, axis, op);
  check_off_axis(x, idx, axis, op);
  if (upd.shape != idx.shape)
    throw ShapeError::of(op, "updates and indices differ in shape", "{} vs {}", upd.shape, idx.shape);
  check_contiguous_out(out, x.shape, op);
  if (out.offset != 0) throw ValueError::of(op, "the output must start its buffer", "offset {}", out.offset);
  if (out.dtype != x.dtype || upd.dtype != x.dtype)
    throw ValueError::of(op, "dtypes differ", "{}, {} into {}", dtype_name(x.dtype), dtype_name(upd.dtype),
                         dtype_name(out.dtype));
  const char* shader = scatter_add_variant(x.dtype, op);
  if (x.dtype == float64 && !r.context().caps().float64)
    throw NotImplemented::of(op, "float64 needs the device feature shaderFloat64", "{} lacks it",
                             r.context().caps().name);
  const uint32_t itype = index_type(idx.dtype, op);
  const int64_t total = numel(x.shape);
  if (total == 0) return;
  // One stride list per view over x's shape: the indices' and updates' axis strides step over j.
  Shape shape = x.shape;
  Strides xs = x.strides, is = idx.strides, us = upd.strides;
  const int ax = merge_around_axis(shape, {&xs, &is, &us}, axis);
  check_rank_along(shape, op);
  ScatterPush p{static_cast<uint32_t>(total),
                static_cast<uint32_t>(shape.size()),
                static_cast<uint32_t>(ax),
                static_cast<uint32_t>(idx.shape[static_cast<size_t>(axis)]),
                static_cast<uint32_t>(x.offset),
                static_cast<uint32_t>(idx.offset),
                static_cast<uint32_t>(upd.offset),
                {},
                {},
                {},
                {}};
  fill(p.shape, shape);
  fill(p.x_strides, xs);
  fill(p.idx_strides, is);
  fill(p.upd_strides, us);
  Context& ctx = r.context();
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(shader), {wg, itype},
             {{x.buffer, Access::read},
              {idx.buffer, Access::read},
              {upd.buffer, Access::read},
              {out.buffer, Access::write}},
             p, Groups::linear(static_cast<uint64_t>((total + wg - 1) / wg), ctx));
}

}  // namespace kiln::detail::vk
