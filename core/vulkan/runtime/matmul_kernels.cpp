#include "kiln/core/vulkan/runtime/matmul_kernels.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

constexpr const char* kOp = "gpu matmul";

// The push constants of shaders/linalg/matmul_*.comp and matmul_splitk_reduce.comp.
struct MatmulPush {
  uint32_t m, n, k;
  uint32_t a_row_stride, a_col_stride, b_row_stride, b_col_stride, c_row_stride;
  uint32_t a_offset, b_offset, c_offset;
  uint32_t a_batch_stride, b_batch_stride, c_batch_stride;
  uint32_t d_row_stride, d_col_stride, d_offset, d_batch_stride;
  float alpha, beta;
  uint32_t splits, k_chunk;
  uint32_t batch_inner, a_inner_stride, b_inner_stride, d_inner_stride;
  // alpha and beta as doubles' (low, high) words, for the float64 kernel: float64 products must
  // not round their coefficients to float32.
  uint32_t alpha64[2], beta64[2];
};
static_assert(sizeof(MatmulPush) == 120 && sizeof(MatmulPush) <= Context::kPushConstantBytes);

// The batch strides of a GEMM view of rank 2 (none), 3 (one batch dim) or 4 (two batch dims, the
// product (i, j) numbered i * shape[1] + j): outer and inner, 0 for a dim of size 1 (never stepped).
struct BatchStrides {
  int64_t outer = 0, inner = 0;
  // A multiple of every batch offset (0 when there is one product): vector loads check this.
  int64_t step() const { return std::gcd(outer, inner); }
};
BatchStrides batch_strides(const GpuView& v) {
  const size_t rank = v.shape.size();
  auto stepped = [&](size_t i) { return v.shape[i] == 1 ? int64_t{0} : v.strides[i]; };
  if (rank == 3) return {stepped(0), 0};
  if (rank == 4) return {stepped(0), stepped(1)};
  return {};
}

// The variants of shaders/linalg/matmul_f32.comp (their `// kiln-variant:` lines, matmul_f32_t<name>
// and matmul_h16_t<name>): a bm x bn block of C per workgroup, K in steps of bk.
struct PlainTile {
  std::string_view name;
  uint32_t bm, bn, bk;
  // Bytes of shared memory: two stages of A's and B's tiles, rows padded by one vec4.
  uint32_t shared_bytes() const { return 2 * bk * ((bm / 4 + 1) + (bn / 4 + 1)) * 16; }
};
constexpr PlainTile kPlainTiles[] = {
    {"128", 128, 128, 8}, {"128k16", 128, 128, 16}, {"128x64", 128, 64, 16}, {"64x128", 64, 128, 16},
    {"64", 64, 64, 16},   {"64w", 64, 64, 16},      {"32", 32, 32, 16},      {"128wk16", 128, 128, 16},
};
const PlainTile& plain_tile(std::string_view name) {
  for (const PlainTile& t : kPlainTiles)
    if (t.name == name) return t;
  std::vector<std::string_view> names;
  for (const PlainTile& t : kPlainTiles) names.push_back(t.name);
  throw ValueError::of(kOp, "no GEMM tile of that name", "'{}' (tiles: {})", name, fmt::join(names, ", "));
}

// The variants of shaders/linalg/matmul_f16_coopmat.comp (their `// kiln-variant:` lines): a bm x bn
// block of C per workgroup, wm x wn per subgroup of 32, K in steps of bk through `stages` shared
// buffers; the emulated build of each steps by emu_bk (so that it fits lavapipe's 32 KiB).
struct CoopmatTile {
  std::string_view name;
  uint32_t bm, bn, wm, wn, bk, stages, emu_bk;
  uint32_t threads() const { return 32 * (bm / wm) * (bn / wn); }
  // The shader's one shared array (uvec4s): either layout's padded tiles per stage, or the
  // epilogue's band of 16 rows of every subgroup's accumulators (floats).
  uint32_t shared_bytes(uint32_t k_step) const {
    const uint32_t a = std::max(bm * (k_step / 8 + 1), k_step * (bm / 8 + 1));
    const uint32_t b = std::max(k_step * (bn / 8 + 1), bn * (k_step / 8 + 1));
    return std::max(stages * (a + b), bm / wm * 16 * bn / 4) * 16;
  }
};
constexpr CoopmatTile kCoopmatTiles[] = {
    {"128x128", 128, 128, 64, 64, 32, 2, 16},
    {"128x128_w64x32", 128, 128, 64, 32, 32, 2, 16},
    {"128x256", 128, 256, 64, 64, 16, 2, 8},
    {"128x256_k32", 128, 256, 64, 64, 32, 1, 16},
    {"64x64", 64, 64, 32, 32, 32, 2, 16},
    // The probe's tiling (../shared/vkbench: single stage, 8 subgroups of 64 x 32).
    {"128x128_w64x32_s1", 128, 128, 64, 32, 32, 1, 16},
};
// Fragment shapes in the order kiln prefers them (one m16n8k16 tensor-core instruction first).
constexpr CoopmatShape kShapePreference[] = {{16, 8, 16}, {16, 16, 16}, {16, 8, 8}};

std::mutex& options_mutex() {
  static std::mutex m;
  return m;
}
HalfGemmOptions& half_options() {
  static HalfGemmOptions o;
  return o;
}
MatmulOptions& plain_options() {
  static MatmulOptions o;
  return o;
}
thread_local std::string tls_last_matmul;
thread_local int64_t tls_last_matmul_batch = 0;
thread_local bool tls_last_matmul_aligned = false;

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
    std::lock_guard lock(options_mutex());
    o = half_options();
  }
  if (const char* v = std::getenv("KILN_VULKAN_COOPMAT_TILE"); o.tile.empty() && v) o.tile = v;
  if (const char* v = std::getenv("KILN_VULKAN_COOPMAT_SHAPE"); o.shape == CoopmatShape{} && v && *v) {
    o.shape = parse_shape(v);
    if (o.shape == CoopmatShape{})
      throw ValueError::of(kOp, "KILN_VULKAN_COOPMAT_SHAPE must read MxNxK", "got '{}'", v);
  }
  return o;
}
MatmulOptions current_plain_options() {
  MatmulOptions o;
  {
    std::lock_guard lock(options_mutex());
    o = plain_options();
  }
  if (const char* v = std::getenv("KILN_VULKAN_MATMUL_TILE"); o.tile.empty() && v) o.tile = v;
  if (const char* v = std::getenv("KILN_VULKAN_MATMUL_SPLITK"); o.splits == 0 && v && *v) {
    char* end = nullptr;
    const long s = std::strtol(v, &end, 10);
    if (*end != '\0' || s < 1 || s > 1024)
      throw ValueError::of(kOp, "KILN_VULKAN_MATMUL_SPLITK must be a count of K slices, 1 to 1024",
                           "got '{}'", v);
    o.splits = static_cast<int>(s);
  }
  return o;
}

bool fits(const CoopmatShape& s, const CoopmatTile& t, uint32_t k_step) {
  return s.m == 16 && (s.n == 8 || s.n == 16) && (s.k == 8 || s.k == 16) && k_step % s.k == 0 &&
         t.wn % s.n == 0;
}

// How the coopmat kernel reads an operand [rows, cols] with strides (rs, cs): as stored with cols
// contiguous (false), with rows contiguous (true), or not at all (nullopt): 16-byte loads need a
// contiguous dimension whose length, the other stride, the batch strides and the offset are
// multiples of 8 halves. Strides of size-1 dims are never stepped.
std::optional<bool> vector_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t batch_step,
                                  int64_t offset) {
  if (offset % 8 != 0 || batch_step % 8 != 0) return std::nullopt;
  if ((cs == 1 || cols == 1) && cols % 8 == 0 && (rows == 1 || rs % 8 == 0)) return false;
  if ((rs == 1 || rows == 1) && rows % 8 == 0 && (cols == 1 || cs % 8 == 0)) return true;
  return std::nullopt;
}

// Whether a GEMM of bm x bn tiles stepping K by bk can drop its bounds checks (both kernels'
// kAligned): every tile inside the matrices, and K > 0, since the kernels fetch a first step before
// they know there is none. Split-K slices are whole steps, so K decides for them too. Recorded for
// last_matmul_aligned(). KILN_VULKAN_MATMUL_CHECKED=1 keeps the checks, to compare.
bool whole_tiles(int64_t m, int64_t n, int64_t k, uint32_t bm, uint32_t bn, uint32_t bk) {
  static const bool always_checked = env_flag("KILN_VULKAN_MATMUL_CHECKED");
  tls_last_matmul_aligned = !always_checked && k > 0 && m % bm == 0 && n % bn == 0 && k % bk == 0;
  return tls_last_matmul_aligned;
}

struct CoopmatPlan {
  const CoopmatTile* tile = nullptr;
  CoopmatShape shape;
  bool a_trans = false, b_trans = false;
};

// The coopmat kernel for this float16 product, or nullopt for the plain one.
std::optional<CoopmatPlan> plan_coopmat(const Context& ctx, const HalfGemmOptions& o, const GpuView& a,
                                        const GpuView& b, int64_t m, int64_t n, int64_t k, int64_t batch) {
  const bool emulated = o.path == HalfGemmPath::emulated;
  if (o.path == HalfGemmPath::plain || (!emulated && !ctx.has_coopmat_f16())) return std::nullopt;
  const size_t rank = a.shape.size();
  const auto a_layout =
      vector_layout(m, k, a.strides[rank - 2], a.strides[rank - 1], batch_strides(a).step(), a.offset);
  const auto b_layout =
      vector_layout(k, n, b.strides[rank - 2], b.strides[rank - 1], batch_strides(b).step(), b.offset);
  if (!a_layout || !b_layout) return std::nullopt;
  CoopmatPlan plan{nullptr, {}, *a_layout, *b_layout};
  // The tile: the asked one, else 128 x 128 in the probe's single-stage tiling when there are
  // enough such tiles to keep a large GPU busy (two workgroups on each compute unit), 64 x 64
  // otherwise. On the H200 the single-stage 128 x 128 was the fastest of every tile and fragment
  // shape at 4096^3 (159 TFLOP/s against 137 for the two-stage one; KILN_GPU_BENCH_TILES=1).
  std::string_view tile = o.tile;
  if (tile.empty())
    tile = ((m + 127) / 128) * ((n + 127) / 128) * batch >= 2 * int64_t{compute_units(ctx)}
               ? "128x128_w64x32_s1"
               : "64x64";
  for (const CoopmatTile& t : kCoopmatTiles)
    if (t.name == tile) plan.tile = &t;
  if (!plan.tile) throw ValueError::of(kOp, "no cooperative-matrix tile of that name", "'{}'", tile);
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
      throw ValueError::of(kOp, "the cooperative-matrix shape does not fit the tile or the device",
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

struct PlainPlan {
  const PlainTile* tile = nullptr;
  uint32_t splits = 1, k_chunk = 0;
};

int64_t tiles_of(const PlainTile& t, int64_t m, int64_t n, int64_t batch) {
  return ((m + t.bm - 1) / t.bm) * ((n + t.bn - 1) / t.bn) * batch;
}

// The float32-tile plan. On the H200 (gpu_bench's KILN_GPU_BENCH_TILES=1 sweep, GPU time per
// dispatch) the 64 x 64 tile with 8 x 8 outputs per invocation ("64w", 64 invocations) was the
// fastest or within noise of it on every shape tried among the tiles of 8 x 8 outputs (4096^3 3.49
// ms against 3.89 for 128 x 128), so it is the tile but for large products (below). When even those
// tiles leave compute units idle and K is long, K is split into slices of at least 256 for up to
// four workgroups per unit (the sweep's best: 256 x 768 x 4096 55 us in 16 slices against 228 us
// unsplit; 1024 x 256 x 4096 66 us in 8). When they fill less than half the units, a K of 512 or
// more is split too, in up to 8 slices of at least 64: the MLP's 128 x 512 products (16 tiles) took
// 53 us at K 784 and 37 us at K 512 unsplit, 16.7 and 13.9 in 8 slices (the reduction's dispatch
// included).
PlainPlan plan_plain(const Context& ctx, const MatmulOptions& o, int64_t m, int64_t n, int64_t k,
                     int64_t batch) {
  const int64_t cu = compute_units(ctx);
  PlainPlan plan;
  plan.tile = &plain_tile(o.tile.empty() ? "64w" : o.tile);
  const int64_t tiles = tiles_of(*plan.tile, m, n, batch);
  int64_t splits = o.splits;
  if (splits == 0) {
    splits = 1;
    // Slices for at most four workgroups per unit: one more would start a fifth on some units
    // and make every unit wait for them (the GPT's 64-tile weight gradients, 1024 x 256 x 4096:
    // 68.5 us in 9 slices, 58.2 in 8 on the H200).
    const int64_t fill = 4 * cu / tiles;
    if (tiles < cu && k >= 1024)
      splits = std::min<int64_t>(fill, k / 256);
    else if (2 * tiles < cu && k >= 512)
      splits = std::min<int64_t>({fill, k / 64, 8});
  }
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(1, k));
  // Large products (four 128 x 128 tiles per compute unit or more: two waves of its two workgroups a
  // unit) take the 128 x 128 tile with 8 x 16 outputs per invocation and K steps of 16 ("128wk16",
  // 254 registers, 128 invocations), which loads half as much per product as the 64 x 64 tile. On the
  // H200 (KILN_GPU_BENCH_TILES=1) 4096^3 ran 2.95 ms against 3.30. The GPT's products of 192 and 256
  // such tiles ran 5-8% faster alone too (4096 x 1024 x 256 73 us against 79) but made the compiled
  // step slower (5.41-5.51 ms against 5.14-5.23), where they share the GPU with the other kernels of
  // their depth; with fewer tiles it idles units (4096 x 256 x 1024: 64 tiles, 293 us against 83).
  const PlainTile& wide = plain_tile("128wk16");
  if (o.tile.empty() && splits == 1 && tiles_of(wide, m, n, batch) >= 4 * cu &&
      wide.shared_bytes() <= ctx.caps().max_shared_memory)
    plan.tile = &wide;
  // K slices in whole steps of the tile; fewer slices when rounding leaves the last ones empty.
  const int64_t bk = plan.tile->bk;
  const int64_t chunk = std::max<int64_t>(bk, ((k + splits - 1) / splits + bk - 1) / bk * bk);
  plan.splits = static_cast<uint32_t>(splits == 1 ? 1 : (k + chunk - 1) / chunk);
  plan.k_chunk = static_cast<uint32_t>(plan.splits == 1 ? std::max<int64_t>(k, 1) : chunk);
  return plan;
}

}  // namespace

uint32_t compute_units(const Context& ctx) {
  if (const char* v = std::getenv("KILN_VULKAN_COMPUTE_UNITS"); v && std::atoi(v) > 0)
    return static_cast<uint32_t>(std::atoi(v));
  if (ctx.caps().is_cpu()) return std::max(1u, std::thread::hardware_concurrency());
  return 132;
}

MatmulOptions set_matmul_options(MatmulOptions options) {
  std::lock_guard lock(options_mutex());
  std::swap(plain_options(), options);
  return options;
}

HalfGemmOptions set_half_gemm_options(HalfGemmOptions options) {
  std::lock_guard lock(options_mutex());
  std::swap(half_options(), options);
  return options;
}

std::string_view last_matmul_kernel() { return tls_last_matmul; }
int64_t last_matmul_batch() { return tls_last_matmul_batch; }
bool last_matmul_aligned() { return tls_last_matmul_aligned; }

void record_matmul(Recorder& r, const GpuView& a, const GpuView& b, const GpuView& c, const GpuView* d,
                   double alpha, double beta) {
  check_view(a, kOp);
  check_view(b, kOp);
  check_view(c, kOp);
  if (d) {
    check_view(*d, kOp);
    if (d->dtype != c.dtype || d->shape != c.shape)
      throw ShapeError::of(kOp, "the addend must have the output's shape and dtype", "{} {} for {}",
                           dtype_name(d->dtype), d->shape, c.shape);
  } else if (beta != 0.0) {
    throw ValueError::of(kOp, "beta without an addend", "beta {}", beta);
  }
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw ValueError::of(kOp, "operands' dtypes differ", "{} @ {} -> {}", dtype_name(a.dtype),
                         dtype_name(b.dtype), dtype_name(c.dtype));
  const Dtype t = a.dtype;
  if (t != float32 && t != float64 && t != float16 && t != bfloat16)
    throw NotImplemented::of(kOp, "GPU GEMMs take float32, float64, float16 and bfloat16", "{}",
                             dtype_name(t));
  Context& ctx = r.context();
  if (t == float64 && !ctx.caps().float64)
    throw NotImplemented::of(kOp, "the device lacks float64 (shaderFloat64)", "{}", ctx.caps().name);
  const bool half = t == float16 || t == bfloat16;
  if (half && !ctx.caps().storage16)
    throw NotImplemented::of(kOp, "the device lacks 16-bit storage buffers", "{} on {}", dtype_name(t),
                             ctx.caps().name);
  const size_t rank = c.shape.size();
  if (rank < 2 || rank > 4 || a.shape.size() != rank || b.shape.size() != rank)
    throw ShapeError::of(kOp, "operands must be [M,K] @ [K,N] with up to two batch dims before them",
                         "{} @ {} -> {}", a.shape, b.shape, c.shape);
  const int64_t m = a.shape[rank - 2], k = a.shape[rank - 1], n = b.shape[rank - 1];
  const size_t batch_dims = rank - 2;
  const int64_t batch = std::accumulate(c.shape.begin(), c.shape.begin() + static_cast<long>(batch_dims),
                                        int64_t{1}, std::multiplies<>());
  const int64_t batch_inner = rank == 4 ? c.shape[1] : 1;
  if (b.shape[rank - 2] != k || c.shape[rank - 2] != m || c.shape[rank - 1] != n ||
      !std::equal(c.shape.begin(), c.shape.begin() + static_cast<long>(batch_dims), a.shape.begin()) ||
      !std::equal(c.shape.begin(), c.shape.begin() + static_cast<long>(batch_dims), b.shape.begin()))
    throw ShapeError::of(kOp, "shapes do not fit", "{} @ {} -> {}", a.shape, b.shape, c.shape);
  if (n > 1 && c.strides[rank - 1] != 1)
    throw ValueError::of(kOp, "output rows must be contiguous", "strides {}", c.strides);
  // The output's products are numbered through one batch stride: its batch dims must merge.
  const BatchStrides cb = batch_strides(c);
  const int64_t c_batch_stride = cb.inner != 0 ? cb.inner : cb.outer;
  if (cb.inner != 0 && cb.outer != 0 && cb.outer != cb.inner * c.shape[1])
    throw ValueError::of(kOp, "the output's batch dims must merge into one", "{} strides {}", c.shape,
                         c.strides);
  if (m == 0 || n == 0 || batch == 0) return;
  tls_last_matmul_batch = batch;
  tls_last_matmul_aligned = false;
  for (const GpuView* v : {&a, &b, &c, d ? d : &c})
    for (int64_t s : v->strides)
      if (s < 0) throw NotImplemented::of(kOp, "negative strides", "{}", v->strides);
  if (ctx.caps().max_workgroup_invocations < 256)
    throw NotImplemented::of(kOp, "the matmul kernel needs 256 invocations per workgroup", "{}",
                             ctx.caps().name);
  auto u = [](int64_t x) { return static_cast<uint32_t>(x); };
  const BatchStrides ab = batch_strides(a), bb = batch_strides(b),
                     db = d ? batch_strides(*d) : BatchStrides{};
  MatmulPush p{u(m),
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
               u(ab.outer),
               u(bb.outer),
               u(c_batch_stride),
               u(d ? d->strides[rank - 2] : 0),
               u(d ? d->strides[rank - 1] : 0),
               u(d ? d->offset : 0),
               u(db.outer),
               static_cast<float>(alpha),
               static_cast<float>(beta),
               1,
               u(std::max<int64_t>(k, 1)),
               u(batch_inner),
               u(ab.inner),
               u(bb.inner),
               u(db.inner),
               {},
               {}};
  std::memcpy(p.alpha64, &alpha, sizeof alpha);  // x86-64 and GLSL's packDouble2x32: low word first
  std::memcpy(p.beta64, &beta, sizeof beta);
  // Specialization constant kTwoBatchDims (shaders/linalg/matmul_push.glsl).
  const uint32_t two_batch_dims = batch_inner > 1 ? 1u : 0u;
  const DeviceCaps& caps = ctx.caps();
  auto groups_of = [&](int64_t tile_m, int64_t tile_n, int64_t z) {
    const Groups g{u((n + tile_n - 1) / tile_n), u((m + tile_m - 1) / tile_m), u(z)};
    if (g.x > caps.max_workgroup_count[0] || g.y > caps.max_workgroup_count[1] ||
        z > caps.max_workgroup_count[2])
      throw NotImplemented::of(kOp, "too many tiles for one dispatch", "{} @ {}", a.shape, b.shape);
    return g;
  };
  const BufferPtr& d_buffer = d ? d->buffer : c.buffer;

  if (t == float16) {
    const HalfGemmOptions options = current_half_options();
    if (const auto plan = plan_coopmat(ctx, options, a, b, m, n, k, batch)) {
      const bool emulated = options.path == HalfGemmPath::emulated;
      const CoopmatTile& tile = *plan->tile;
      const ShaderCode& shader =
          builtin_shader(fmt::format("matmul_f16_{}_{}", emulated ? "coopemu" : "coopmat", tile.name));
      // Constant 0 (the workgroup size by the shaders' convention) is fixed in this shader.
      const bool aligned = whole_tiles(m, n, k, tile.bm, tile.bn, emulated ? tile.emu_bk : tile.bk);
      r.dispatch(shader,
                 {tile.threads(), plan->shape.m, plan->shape.n, plan->shape.k, plan->a_trans ? 1u : 0u,
                  plan->b_trans ? 1u : 0u, two_batch_dims, aligned ? 1u : 0u},
                 {{a.buffer, Access::read},
                  {b.buffer, Access::read},
                  {c.buffer, Access::write},
                  {d_buffer, Access::read}},
                 p, groups_of(tile.bm, tile.bn, batch));
      tls_last_matmul = shader.name;
      return;
    }
  }
  if (t == float64) {
    const ShaderCode& shader = builtin_shader("matmul_f64");
    r.dispatch(shader, {256u, two_batch_dims},
               {{a.buffer, Access::read},
                {b.buffer, Access::read},
                {c.buffer, Access::write},
                {d_buffer, Access::read}},
               p, groups_of(64, 64, batch));
    tls_last_matmul = shader.name;
    return;
  }

  // float32 tiles (16-bit operands widened as they load). Each operand is fetched along its
  // contiguous dimension: A by M when M has stride 1 and K does not (a transposed view), B by K.
  const PlainPlan plan = plan_plain(ctx, current_plain_options(), m, n, k, batch);
  const bool a_trans = p.a_col_stride != 1 && (p.a_row_stride == 1 || m == 1);
  const bool b_trans = p.b_col_stride != 1 && (p.b_row_stride == 1 || k == 1);
  const ShaderCode& shader =
      builtin_shader(fmt::format("matmul_{}_t{}", half ? "h16" : "f32", plan.tile->name));
  const uint32_t bfloat = t == bfloat16 ? 1u : 0u;
  // float32 operands whose contiguous dimension's length, other strides and offset are multiples of
  // 4 load as vec4s (KILN_VULKAN_MATMUL_SCALAR=1 turns that off, to compare).
  static const bool scalar_only = env_flag("KILN_VULKAN_MATMUL_SCALAR");
  auto vec4_ok = [&](bool trans, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t batch_step,
                     int64_t offset) {
    if (half || scalar_only || offset % 4 != 0 || batch_step % 4 != 0) return false;
    return trans ? rs == 1 && rows % 4 == 0 && (cols == 1 || cs % 4 == 0)
                 : cs == 1 && cols % 4 == 0 && (rows == 1 || rs % 4 == 0);
  };
  const uint32_t a_vec = vec4_ok(a_trans, m, k, p.a_row_stride, p.a_col_stride, ab.step(), a.offset);
  const uint32_t b_vec = vec4_ok(b_trans, k, n, p.b_row_stride, p.b_col_stride, bb.step(), b.offset);
  // C's rows (column stride 1) as vec4s: N, the row stride, the batch stride and the offset multiples of 4.
  const uint32_t c_vec = vec4_ok(false, m, n, p.c_row_stride, 1, p.c_batch_stride, c.offset);
  const Groups groups = groups_of(plan.tile->bm, plan.tile->bn, batch * plan.splits);
  const uint32_t aligned = whole_tiles(m, n, k, plan.tile->bm, plan.tile->bn, plan.tile->bk) ? 1u : 0u;
  if (plan.splits == 1) {
    // Binding 4 (the split-K scratch) is not touched without split-K: any buffer does.
    r.dispatch(shader,
               {256u, bfloat, a_trans ? 1u : 0u, b_trans ? 1u : 0u, 0u, a_vec, b_vec, c_vec, two_batch_dims,
                aligned},
               {{a.buffer, Access::read},
                {b.buffer, Access::read},
                {c.buffer, Access::write},
                {d_buffer, Access::read},
                {a.buffer, Access::read},
                {a.buffer, Access::read},
                {b.buffer, Access::read},
                {c.buffer, Access::write}},
               p, groups);
    tls_last_matmul = shader.name;
    return;
  }
  // Split-K: partial sums of each K slice into scratch [batch * splits][M][N] (float32), then one
  // invocation per output element adds them and applies the epilogue.
  const uint64_t mn = static_cast<uint64_t>(m) * static_cast<uint64_t>(n);
  const uint64_t scratch_elems = mn * static_cast<uint64_t>(batch) * plan.splits;
  if (scratch_elems > std::numeric_limits<uint32_t>::max() ||
      scratch_elems * 4 > caps.max_storage_buffer_range)
    throw NotImplemented::of(kOp, "the split-K scratch would exceed one storage buffer",
                             "{} @ {} in {} slices", a.shape, b.shape, plan.splits);
  const BufferPtr scratch = ctx.allocator().allocate(scratch_elems * sizeof(float));
  p.splits = plan.splits;
  p.k_chunk = plan.k_chunk;
  // Partial sums go out as scalars: 16-byte stores of the scratch made the GPT's weight-gradient
  // products slower on the H200 (70 -> 95 us), unlike C's.
  r.dispatch(
      shader,
      {256u, bfloat, a_trans ? 1u : 0u, b_trans ? 1u : 0u, 1u, a_vec, b_vec, 0u, two_batch_dims, aligned},
      {{a.buffer, Access::read},
       {b.buffer, Access::read},
       {a.buffer, Access::read},  // C is not written in the first pass
       {d_buffer, Access::read},
       {scratch, Access::write},
       {a.buffer, Access::read},
       {b.buffer, Access::read},
       {a.buffer, Access::read}},
      p, groups);
  constexpr uint32_t wg = 256;
  const Groups reduce_groups{u(static_cast<int64_t>((mn + wg - 1) / wg)), 1, u(batch)};
  if (reduce_groups.x > caps.max_workgroup_count[0])
    throw NotImplemented::of(kOp, "too many outputs for one split-K reduction", "{} @ {}", a.shape, b.shape);
  r.dispatch(builtin_shader(half ? "matmul_splitk_reduce_h16" : "matmul_splitk_reduce_f32"),
             {wg, bfloat, two_batch_dims},
             {{scratch, Access::read}, {c.buffer, Access::write}, {d_buffer, Access::read}}, p,
             reduce_groups);
  tls_last_matmul = fmt::format("{}+splitk{}", shader.name, plan.splits);
}

}  // namespace kiln::detail::vk
