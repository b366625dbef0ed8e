#include "kiln/core/vulkan/runtime/kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/gather_kernels.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

template <class T, size_t M>
void fill(std::array<T, M>& dst, const std::vector<int64_t>& src) {
  dst.fill(0);
  std::transform(src.begin(), src.end(), dst.begin(), [](int64_t x) { return static_cast<T>(x); });
}

const char* type_tag(Dtype t) {
  switch (t) {
    case float32:
      return "f32";
    case float16:
      return "f16";
    case int32:
      return "i32";
    default:
      return nullptr;
  }
}

struct CopyPush {
  uint32_t n, rank, src_offset, dst_offset;
  std::array<uint32_t, kMaxStridedRank> shape;
  std::array<int32_t, kMaxStridedRank> src_strides, dst_strides;
};
struct ReducePush {
  uint32_t rows, cols, row_stride, in_offset, out_offset;
};
static_assert(sizeof(CopyPush) == 112);

}  // namespace

GpuView GpuView::contiguous(BufferPtr buffer, Dtype dtype, Shape shape, int64_t offset) {
  Strides strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return {std::move(buffer), dtype, std::move(shape), std::move(strides), offset};
}

void record_copy(Recorder& r, const GpuView& src, const GpuView& dst) {
  constexpr const char* op = "gpu copy";
  check_view(src, op);
  check_view(dst, op);
  if (src.shape != dst.shape) throw ShapeError::of(op, "shapes differ", "{} vs {}", src.shape, dst.shape);
  const int64_t n = numel(src.shape);
  if (n == 0) return;
  std::string name;
  if (src.dtype == dst.dtype && size_of(src.dtype) == 4)
    name = "copy_u32";
  else if (src.dtype == dst.dtype && size_of(src.dtype) == 2)
    name = "copy_u16";
  else if (type_tag(src.dtype) && type_tag(dst.dtype))
    name = fmt::format("cast_{}_{}", type_tag(src.dtype), type_tag(dst.dtype));
  else
    throw NotImplemented::of(op, "no GPU kernel for this cast", "{} to {}", dtype_name(src.dtype),
                             dtype_name(dst.dtype));
  Context& ctx = r.context();
  if ((size_of(src.dtype) == 2 || size_of(dst.dtype) == 2) && !ctx.caps().storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{}", ctx.caps().name);
  Shape shape = src.shape;
  Strides ss = src.strides, ds = dst.strides;
  collapse<2>(shape, {&ss, &ds});
  check_rank(shape, op);
  const bool strided = !(is_linear(shape, ss) && is_linear(shape, ds));
  // A strided copy whose innermost dim is contiguous on both sides (attention's heads merged back
  // into rows) moves whole 8- or 16-byte units where aligned: a quarter of the invocations and
  // their index arithmetic (record_move).
  if (strided && src.dtype == dst.dtype && ss.back() == 1 && ds.back() == 1 && shape.back() > 1)
    return record_move(r, src, dst);
  CopyPush p{static_cast<uint32_t>(n),
             static_cast<uint32_t>(shape.size()),
             static_cast<uint32_t>(src.offset),
             static_cast<uint32_t>(dst.offset),
             {},
             {},
             {}};
  fill(p.shape, shape);
  fill(p.src_strides, ss);
  fill(p.dst_strides, ds);
  const uint32_t wg = workgroup_size(ctx);
  r.dispatch(builtin_shader(name), {wg, strided ? 1u : 0u},
             {{src.buffer, Access::read}, {dst.buffer, Access::write}}, p,
             Groups::linear((n + wg - 1) / wg, ctx));
}

void record_sum_last_axis(Recorder& r, const GpuView& x, const GpuView& out) {
  constexpr const char* op = "gpu sum";
  check_view(x, op);
  check_view(out, op);
  if (x.dtype != float32 || out.dtype != float32)
    throw NotImplemented::of(op, "only float32 on the GPU so far", "{}", dtype_name(x.dtype));
  if (x.shape.empty()) throw ShapeError::of(op, "needs at least one axis", "{}", x.shape);
  const Shape outer(x.shape.begin(), x.shape.end() - 1);
  check_contiguous_out(out, outer, op);
  const int64_t cols = x.shape.back();
  if (cols > 1 && x.strides.back() != 1)
    throw NotImplemented::of(op, "the reduced axis must be contiguous", "strides {}", x.strides);
  Shape rows_shape = outer;
  Strides rs(x.strides.begin(), x.strides.end() - 1);
  collapse<1>(rows_shape, {&rs});
  if (rows_shape.size() > 1)
    throw NotImplemented::of(op, "the outer axes must merge into one", "shape {}, strides {}", x.shape,
                             x.strides);
  const int64_t rows = numel(outer);
  if (rows == 0) return;
  if (cols == 0)
    throw NotImplemented::of(op, "empty rows (a fill) are not a reduction kernel", "{}", x.shape);
  Context& ctx = r.context();
  // A power-of-two workgroup: 64 invocations for short rows, else 256 (within the device's limit).
  const uint32_t wg = std::bit_floor(std::min(cols <= 64 ? 64u : kWorkgroup, workgroup_size(ctx)));
  if (wg * sizeof(float) > ctx.caps().max_shared_memory)
    throw NotImplemented::of(op, "not enough shared memory", "{}", ctx.caps().max_shared_memory);
  const ReducePush p{static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                     static_cast<uint32_t>(rs.empty() ? cols : rs[0]), static_cast<uint32_t>(x.offset),
                     static_cast<uint32_t>(out.offset)};
  r.dispatch(builtin_shader("reduce_sum_rows"), {wg}, {{x.buffer, Access::read}, {out.buffer, Access::write}},
             p, Groups::linear(static_cast<uint64_t>(rows), ctx));
}

}  // namespace kiln::detail::vk
