#include "kiln/core/vulkan/runtime/kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
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
struct MatmulPush {
  uint32_t m, n, k;
  uint32_t a_row_stride, a_col_stride, b_row_stride, b_col_stride, c_row_stride;
  uint32_t a_offset, b_offset, c_offset;
  uint32_t a_batch_stride, b_batch_stride, c_batch_stride;
  uint32_t d_row_stride, d_col_stride, d_offset, d_batch_stride;
  float alpha, beta;
};
static_assert(sizeof(CopyPush) == 112 && sizeof(MatmulPush) == 80);

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

void record_matmul(Recorder& r, const GpuView& a, const GpuView& b, const GpuView& c, const GpuView* d,
                   float alpha, float beta) {
  constexpr const char* op = "gpu matmul";
  check_view(a, op);
  check_view(b, op);
  check_view(c, op);
  if (d) {
    check_view(*d, op);
    if (d->dtype != c.dtype || d->shape != c.shape)
      throw ShapeError::of(op, "the addend must have the output's shape and dtype", "{} {} for {}",
                           dtype_name(d->dtype), d->shape, c.shape);
  } else if (beta != 0.0f) {
    throw ValueError::of(op, "beta without an addend", "beta {}", beta);
  }
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw ValueError::of(op, "operands' dtypes differ", "{} @ {} -> {}", dtype_name(a.dtype),
                         dtype_name(b.dtype), dtype_name(c.dtype));
  if (a.dtype != float32 && a.dtype != float64)
    throw NotImplemented::of(op, "only float32 and float64 on the GPU so far", "{}", dtype_name(a.dtype));
  const bool f64 = a.dtype == float64;
  if (f64 && !r.context().caps().float64)
    throw NotImplemented::of(op, "the device lacks float64 (shaderFloat64)", "{}", r.context().caps().name);
  const size_t rank = c.shape.size();
  if (rank < 2 || rank > 3 || a.shape.size() != rank || b.shape.size() != rank)
    throw ShapeError::of(op, "operands must be [M,K] @ [K,N] or [B,M,K] @ [B,K,N]", "{} @ {} -> {}", a.shape,
                         b.shape, c.shape);
  const int64_t m = a.shape[rank - 2], k = a.shape[rank - 1], n = b.shape[rank - 1];
  const int64_t batch = rank == 3 ? c.shape[0] : 1;
  if (b.shape[rank - 2] != k || c.shape[rank - 2] != m || c.shape[rank - 1] != n ||
      (rank == 3 && (a.shape[0] != batch || b.shape[0] != batch)))
    throw ShapeError::of(op, "shapes do not fit", "{} @ {} -> {}", a.shape, b.shape, c.shape);
  if (n > 1 && c.strides[rank - 1] != 1)
    throw ValueError::of(op, "output rows must be contiguous", "strides {}", c.strides);
  if (m == 0 || n == 0 || batch == 0) return;
  for (const GpuView* v : {&a, &b, &c, d ? d : &c})
    for (int64_t s : v->strides)
      if (s < 0) throw NotImplemented::of(op, "negative strides", "{}", v->strides);
  Context& ctx = r.context();
  if (ctx.caps().max_workgroup_invocations < 256)
    throw NotImplemented::of(op, "the matmul kernel needs 256 invocations per workgroup", "{}",
                             ctx.caps().name);
  // 128x128 tiles once there are enough of them to fill a large GPU; 64x64 otherwise (and always
  // for float64, whose kernel has only those).
  const bool big = !f64 && m >= 512 && n >= 512;
  const int64_t tile = big ? 128 : 64;
  auto u = [](int64_t x) { return static_cast<uint32_t>(x); };
  const MatmulPush p{u(m),
                     u(n),
                     u(k),
                     u(a.strides[rank - 2]),
                     u(a.strides[rank - 1]),
                     u(b.strides[rank - 2]),
                     u(b.strides[rank - 1]),
                     u(c.strides[rank - 2]),
                     u(a.offset),
                     u(b.offset),
                     u(c.offset),
                     u(rank == 3 ? a.strides[0] : 0),
                     u(rank == 3 ? b.strides[0] : 0),
                     u(rank == 3 ? c.strides[0] : 0),
                     u(d ? d->strides[rank - 2] : 0),
                     u(d ? d->strides[rank - 1] : 0),
                     u(d ? d->offset : 0),
                     u(d && rank == 3 ? d->strides[0] : 0),
                     alpha,
                     beta};
  const Groups groups{u((n + tile - 1) / tile), u((m + tile - 1) / tile), u(batch)};
  if (groups.x > ctx.caps().max_workgroup_count[0] || groups.y > ctx.caps().max_workgroup_count[1] ||
      groups.z > ctx.caps().max_workgroup_count[2])
    throw NotImplemented::of(op, "too many tiles for one dispatch", "{} @ {}", a.shape, b.shape);
  r.dispatch(builtin_shader(f64   ? "matmul_f64"
                            : big ? "matmul_f32_t128"
                                  : "matmul_f32_t64"),
             {},
             {{a.buffer, Access::read},
              {b.buffer, Access::read},
              {c.buffer, Access::write},
              {d ? d->buffer : c.buffer, Access::read}},
             p, groups);
}

}  // namespace kiln::detail::vk
