#include "kiln/core/vulkan/runtime/kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
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

namespace {

// The variants of shaders/linalg/matmul_f16_coopmat.comp (their `// kiln-variant:` lines): a bm x bn
// block of C per workgroup, wm x wn per subgroup of 32, K in steps of bk through `stages` shared
// buffers; the emulated build of each steps by emu_bk (so that it fits lavapipe's 32 KiB).
struct CoopmatTile {
  std::string_view name;
  uint32_t bm, bn, wm, wn, bk, stages, emu_bk;
  uint32_t threads() const { return 32 * (bm / wm) * (bn / wn); }
  // The shader's shared arrays: both layouts' padded tiles per stage, and 16 x 16 floats per subgroup.
  uint32_t shared_bytes(uint32_t k_step) const {
    const uint32_t a = std::max(bm * (k_step / 8 + 1), k_step * (bm / 8 + 1));
    const uint32_t b = std::max(k_step * (bn / 8 + 1), bn * (k_step / 8 + 1));
    return stages * (a + b) * 16 + threads() / 32 * 256 * 4;
  }
};
constexpr CoopmatTile kCoopmatTiles[] = {
    {"128x128", 128, 128, 64, 64, 32, 2, 16}, {"128x128_w64x32", 128, 128, 64, 32, 32, 2, 16},
    {"128x256", 128, 256, 64, 64, 16, 2, 8},  {"128x256_k32", 128, 256, 64, 64, 32, 1, 16},
    {"64x64", 64, 64, 32, 32, 32, 2, 16},
};
// Fragment shapes in the order kiln prefers them (one m16n8k16 tensor-core instruction first).
constexpr CoopmatShape kShapePreference[] = {{16, 8, 16}, {16, 16, 16}, {16, 8, 8}};

std::mutex& half_options_mutex() {
  static std::mutex m;
  return m;
}
HalfGemmOptions& half_options() {
  static HalfGemmOptions o;
  return o;
}
thread_local std::string_view tls_last_matmul;

// "16x8x16" as a shape; a zero shape when s does not read as one.
CoopmatShape parse_shape(std::string_view s) {
  CoopmatShape shape;
  if (std::sscanf(std::string(s).c_str(), "%ux%ux%u", &shape.m, &shape.n, &shape.k) != 3) return {};
  return shape;
}

// The options in force: the set ones, their empty fields filled from the environment.
HalfGemmOptions current_half_options() {
  HalfGemmOptions o;
  {
    std::lock_guard lock(half_options_mutex());
    o = half_options();
  }
  if (const char* v = std::getenv("KILN_VULKAN_COOPMAT_TILE"); o.tile.empty() && v) o.tile = v;
  if (const char* v = std::getenv("KILN_VULKAN_COOPMAT_SHAPE"); o.shape == CoopmatShape{} && v && *v) {
    o.shape = parse_shape(v);
    if (o.shape == CoopmatShape{})
      throw ValueError::of("gpu matmul", "KILN_VULKAN_COOPMAT_SHAPE must read MxNxK", "got '{}'", v);
  }
  return o;
}

bool fits(const CoopmatShape& s, const CoopmatTile& t, uint32_t k_step) {
  return s.m == 16 && (s.n == 8 || s.n == 16) && (s.k == 8 || s.k == 16) && k_step % s.k == 0 &&
         t.wn % s.n == 0;
}

// How the coopmat kernel reads an operand [rows, cols] with strides (rs, cs): as stored with cols
// contiguous (false), with rows contiguous (true), or not at all (nullopt): 16-byte loads need a
// contiguous dimension whose length, the other stride, the batch stride and the offset are
// multiples of 8 halves. Strides of size-1 dims are never stepped.
std::optional<bool> vector_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t batch_stride,
                                  int64_t batch, int64_t offset) {
  if (offset % 8 != 0 || (batch > 1 && batch_stride % 8 != 0)) return std::nullopt;
  if ((cs == 1 || cols == 1) && cols % 8 == 0 && (rows == 1 || rs % 8 == 0)) return false;
  if ((rs == 1 || rows == 1) && rows % 8 == 0 && (cols == 1 || cs % 8 == 0)) return true;
  return std::nullopt;
}

struct CoopmatPlan {
  const CoopmatTile* tile = nullptr;
  CoopmatShape shape;
  bool a_trans = false, b_trans = false;
};

// The coopmat kernel for this float16 product, or nullopt for the plain one.
std::optional<CoopmatPlan> plan_coopmat(const Context& ctx, const HalfGemmOptions& o, const GpuView& a,
                                        const GpuView& b, int64_t m, int64_t n, int64_t k, int64_t batch) {
  constexpr const char* op = "gpu matmul";
  const bool emulated = o.path == HalfGemmPath::emulated;
  if (o.path == HalfGemmPath::plain || (!emulated && !ctx.has_coopmat_f16())) return std::nullopt;
  const size_t rank = a.shape.size();
  const auto a_layout = vector_layout(m, k, a.strides[rank - 2], a.strides[rank - 1],
                                      rank == 3 ? a.strides[0] : 0, batch, a.offset);
  const auto b_layout = vector_layout(k, n, b.strides[rank - 2], b.strides[rank - 1],
                                      rank == 3 ? b.strides[0] : 0, batch, b.offset);
  if (!a_layout || !b_layout) return std::nullopt;
  CoopmatPlan plan{nullptr, {}, *a_layout, *b_layout};
  // The tile: the asked one, else 128 x 128 when there are enough such tiles to keep a large GPU
  // busy (two workgroups on each of the H200's 132 multiprocessors), 64 x 64 otherwise.
  std::string_view tile = o.tile;
  if (tile.empty()) tile = ((m + 127) / 128) * ((n + 127) / 128) * batch >= 264 ? "128x128" : "64x64";
  for (const CoopmatTile& t : kCoopmatTiles)
    if (t.name == tile) plan.tile = &t;
  if (!plan.tile) throw ValueError::of(op, "no cooperative-matrix tile of that name", "'{}'", tile);
  const CoopmatTile& t = *plan.tile;
  const uint32_t k_step = emulated ? t.emu_bk : t.bk;
  const DeviceCaps& caps = ctx.caps();
  if (t.shared_bytes(k_step) > caps.max_shared_memory || t.threads() > caps.max_workgroup_invocations ||
      t.threads() > caps.max_workgroup_size[0])
    return std::nullopt;  // a device smaller than the ones this tile was made for
  auto listed = [&](const CoopmatShape& s) {
    return emulated || std::ranges::find(caps.coopmat_f16_shapes, s) != caps.coopmat_f16_shapes.end();
  };
  if (o.shape != CoopmatShape{}) {
    if (!fits(o.shape, t, k_step) || !listed(o.shape))
      throw ValueError::of(op, "the cooperative-matrix shape does not fit the tile or the device",
                           "{}x{}x{} for tile {}", o.shape.m, o.shape.n, o.shape.k, t.name);
    plan.shape = o.shape;
    return plan;
  }
  for (const CoopmatShape& s : kShapePreference)
    if (fits(s, t, k_step) && listed(s)) {
      plan.shape = s;
      return plan;
    }
  return std::nullopt;
}

}  // namespace

HalfGemmOptions set_half_gemm_options(HalfGemmOptions options) {
  std::lock_guard lock(half_options_mutex());
  std::swap(half_options(), options);
  return options;
}

std::string_view last_matmul_kernel() { return tls_last_matmul; }

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
  const Dtype t = a.dtype;
  if (t != float32 && t != float64 && t != float16 && t != bfloat16)
    throw NotImplemented::of(op, "GPU GEMMs take float32, float64, float16 and bfloat16", "{}",
                             dtype_name(t));
  Context& ctx = r.context();
  if (t == float64 && !ctx.caps().float64)
    throw NotImplemented::of(op, "the device lacks float64 (shaderFloat64)", "{}", ctx.caps().name);
  const bool half = t == float16 || t == bfloat16;
  if (half && !ctx.caps().storage16)
    throw NotImplemented::of(op, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(t),
                             ctx.caps().name);
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
  if (ctx.caps().max_workgroup_invocations < 256)
    throw NotImplemented::of(op, "the matmul kernel needs 256 invocations per workgroup", "{}",
                             ctx.caps().name);
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
  const std::initializer_list<Binding> bindings = {{a.buffer, Access::read},
                                                   {b.buffer, Access::read},
                                                   {c.buffer, Access::write},
                                                   {d ? d->buffer : c.buffer, Access::read}};
  auto groups_of = [&](int64_t tile_m, int64_t tile_n) {
    const Groups g{u((n + tile_n - 1) / tile_n), u((m + tile_m - 1) / tile_m), u(batch)};
    if (g.x > ctx.caps().max_workgroup_count[0] || g.y > ctx.caps().max_workgroup_count[1] ||
        g.z > ctx.caps().max_workgroup_count[2])
      throw NotImplemented::of(op, "too many tiles for one dispatch", "{} @ {}", a.shape, b.shape);
    return g;
  };

  if (t == float16) {
    const HalfGemmOptions options = current_half_options();
    if (const auto plan = plan_coopmat(ctx, options, a, b, m, n, k, batch)) {
      const bool emulated = options.path == HalfGemmPath::emulated;
      const CoopmatTile& tile = *plan->tile;
      const ShaderCode& shader =
          builtin_shader(fmt::format("matmul_f16_{}_{}", emulated ? "coopemu" : "coopmat", tile.name));
      // Constant 0 (the workgroup size by the shaders' convention) is fixed in this shader.
      r.dispatch(shader,
                 {tile.threads(), plan->shape.m, plan->shape.n, plan->shape.k, plan->a_trans ? 1u : 0u,
                  plan->b_trans ? 1u : 0u},
                 bindings, p, groups_of(tile.bm, tile.bn));
      tls_last_matmul = shader.name;
      return;
    }
  }
  // 128x128 tiles once there are enough of them to fill a large GPU; 64x64 otherwise (and always
  // for float64, whose kernel has only those). KILN_VULKAN_MATMUL_TILE=64 or 128 forces one (tuning).
  static const int forced_tile = [] {
    const char* v = std::getenv("KILN_VULKAN_MATMUL_TILE");
    return v ? std::atoi(v) : 0;
  }();
  const bool big =
      t != float64 && (forced_tile == 64 || forced_tile == 128 ? forced_tile == 128 : m >= 512 && n >= 512);
  const ShaderCode& shader = builtin_shader(t == float64 ? "matmul_f64"
                                            : half       ? (big ? "matmul_h16_t128" : "matmul_h16_t64")
                                            : big        ? "matmul_f32_t128"
                                                         : "matmul_f32_t64");
  // The 16-bit variants' constant 1 picks bfloat16; the others have no constants.
  const uint32_t spec[] = {256u, t == bfloat16 ? 1u : 0u};
  r.dispatch(shader, half ? std::span<const uint32_t>(spec) : std::span<const uint32_t>(),
             std::span<const Binding>(bindings.begin(), bindings.size()),
             std::as_bytes(std::span<const MatmulPush>(&p, 1)), groups_of(big ? 128 : 64, big ? 128 : 64));
  tls_last_matmul = shader.name;
}

}  // namespace kiln::detail::vk
