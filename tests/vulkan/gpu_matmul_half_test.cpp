// float16 and bfloat16 GEMMs on the GPU against float64 references computed on the CPU from the
// same (rounded) operands: matmul in every layout (transposed and sliced views, batches, a
// broadcast batch, odd and empty sizes, K = 0), AddMM's alpha/beta/addend epilogue, linear, and
// matmul's gradients. Each kernel family is run where the device has it: the plain float32-tile
// kernel everywhere; the cooperative-matrix (tensor-core) kernel where the device offers
// VK_NV_cooperative_matrix, every tile and fragment shape; and that kernel's emulated build (its
// matrix operations in plain code) on any device, which checks its tiling and layouts on lavapipe.
// With KILN_EXPECT_COOPMAT=1 (run on a GPU with tensor cores) a device without the extension fails.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/kernels.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {
namespace vk = detail::vk;

const Device kCpu = Device::cpu, kGpu = Device::gpu;

bool coopmat_expected() {
  const char* v = std::getenv("KILN_EXPECT_COOPMAT");
  return v && std::strcmp(v, "1") == 0;
}

class GpuMatmulHalf : public vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    saved_ = vk::set_half_gemm_options({});
    saved_plain_ = vk::set_matmul_options({});
  }
  void TearDown() override {
    vk::set_half_gemm_options(saved_);
    vk::set_matmul_options(saved_plain_);
  }
  void use(vk::HalfGemmPath path, std::string tile = {}, vk::CoopmatShape shape = {}) {
    vk::set_half_gemm_options({path, std::move(tile), shape});
  }

 private:
  vk::HalfGemmOptions saved_;
  vk::MatmulOptions saved_plain_;
};

Array random(const Shape& shape, uint64_t seed, Dtype t) { return test::random_array(shape, t, seed); }

// An operand of shape [.., rows, cols]; with `transposed` it is the swapaxes view of a [.., cols,
// rows] array (rows contiguous), as mT(x) in a gradient is.
Array operand(Shape shape, uint64_t seed, Dtype t, bool transposed) {
  if (!transposed) return random(shape, seed, t);
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return swapaxes(random(shape, seed, t), -1, -2);
}

// alpha * a @ b + beta * c in float64 from the operands' values, and the scale of the GPU's errors
// in it: |alpha| |a| @ |b| + |beta| |c|.
struct Reference {
  std::vector<double> value, scale;
  int64_t k = 0;
};
Reference reference(const Array& a, const Array& b, const Array* c = nullptr, double alpha = 1.0,
                    double beta = 0.0) {
  const Array a64 = astype(a, float64, kCpu), b64 = astype(b, float64, kCpu);
  Array v = multiply(matmul(a64, b64, kCpu), alpha, kCpu);
  Array s = multiply(matmul(abs(a64, kCpu), abs(b64, kCpu), kCpu), std::abs(alpha), kCpu);
  if (c) {
    const Array c64 = astype(*c, float64, kCpu);
    v = add(v, multiply(c64, beta, kCpu), kCpu);
    s = add(s, multiply(abs(c64, kCpu), std::abs(beta), kCpu), kCpu);
  }
  return {test::values(v), test::values(s), a.shape(-1)};
}

// The GPU accumulates in float32 (K terms, each off by at most 2^-24 of the running sum's scale)
// and rounds once to the output's dtype (half an ulp; one is allowed, as the reference rounds from
// float64), with an absolute floor of the dtype's smallest subnormal. `roundings` counts the
// roundings between operands and result: linear's matmul rounds before its bias add, an error of
// up to an ulp of the product's scale.
void expect_matches(const Array& got, Dtype t, const Reference& r, const std::string& what,
                    int roundings = 1) {
  ASSERT_EQ(got.dtype(), t) << what;
  const std::vector<double> g = test::values(got);
  ASSERT_EQ(g.size(), r.value.size()) << what;
  const double ulp = t == float16 ? 0x1p-10 : 0x1p-7, tiny = t == float16 ? 0x1p-24 : 0x1p-126;
  const double per_scale = (roundings - 1) * ulp + static_cast<double>(r.k + 2) * 0x1p-24;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = ulp * std::abs(r.value[i]) + roundings * tiny + per_scale * r.scale[i];
    ASSERT_NEAR(g[i], r.value[i], tol) << what << " at " << i << " of " << g.size();
  }
}

// One matmul on the GPU against the reference; returns the kernel it ran.
std::string check_matmul(const Array& a, const Array& b, Dtype t, const std::string& what) {
  const Array c = matmul(a, b, kGpu);
  c.eval();
  const std::string kernel(vk::last_matmul_kernel());
  expect_matches(c, t, reference(a, b), what + " (" + kernel + ")");
  return kernel;
}

struct Product {
  Shape a, b;
};
// Odd sizes, one element, long K, tiles with ragged edges in M, N and K, the 128-wide plain tile
// (M, N >= 512), batches and a batch broadcast over b.
const Product kProducts[] = {
    {{1, 1}, {1, 1}},          {{7, 13}, {13, 5}},         {{33, 64}, {64, 40}},
    {{1, 1000}, {1000, 1}},    {{65, 1032}, {1032, 72}},   {{130, 136}, {136, 264}},
    {{600, 40}, {40, 520}},    {{3, 20, 16}, {3, 16, 24}}, {{2, 33, 8}, {8, 72}},
    {{2, 3, 9, 17}, {17, 11}}, {{1, 5, 40}, {3, 40, 24}},
};

TEST_F(GpuMatmulHalf, MatmulMatchesFloat64ReferenceOnEveryPath) {
  uint64_t seed = 1;
  for (vk::HalfGemmPath path : {vk::HalfGemmPath::automatic, vk::HalfGemmPath::plain}) {
    use(path);
    for (Dtype t : {float16, bfloat16})
      for (const Product& p : kProducts) {
        const Array a = random(p.a, seed++, t), b = random(p.b, seed++, t);
        const std::string kernel =
            check_matmul(a, b, t,
                         fmt::format("{} {} @ {} path {}", dtype_name(t), shape_str(p.a), shape_str(p.b),
                                     static_cast<int>(path)));
        if (t == bfloat16 || path == vk::HalfGemmPath::plain) {
          EXPECT_TRUE(kernel.starts_with("matmul_h16_")) << kernel;  // bfloat16 never takes float16 tiles
        }
      }
  }
}

TEST_F(GpuMatmulHalf, TransposedSlicedAndEmptyOperands) {
  for (Dtype t : {float16, bfloat16}) {
    const std::string dt(dtype_name(t));
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Array a = operand({72, 48}, 10, t, ta), b = operand({48, 40}, 11, t, tb);
        check_matmul(a, b, t, fmt::format("{} transposed a {} b {}", dt, ta, tb));
        const Array ab = operand({2, 24, 40}, 12, t, ta), bb = operand({2, 40, 16}, 13, t, tb);
        check_matmul(ab, bb, t, fmt::format("{} batched, transposed a {} b {}", dt, ta, tb));
      }
    // Every other column of K: no contiguous dimension, the plain kernel on every device.
    const Array a = slice(random({24, 64}, 14, t), {0, 0}, {24, 64}, {1, 2}), b = random({32, 16}, 15, t);
    EXPECT_TRUE(check_matmul(a, b, t, dt + " strided K").starts_with("matmul_h16_"));
    // Attention's [batch, heads, tokens, dim] views, whose batch dims do not merge.
    const Array q = swapaxes(random({2, 8, 3, 16}, 16, t), 1, 2),
                k = swapaxes(random({2, 8, 3, 16}, 17, t), 1, 2);
    check_matmul(q, swapaxes(k, -1, -2), t, dt + " attention q @ k^T");
    // Empty results and an empty sum (zeros).
    const Array e = matmul(random({0, 5}, 18, t), random({5, 3}, 19, t), kGpu);
    EXPECT_EQ(e.shape(), (Shape{0, 3}));
    EXPECT_EQ(e.dtype(), t);
    check_matmul(random({4, 0}, 20, t), random({0, 6}, 21, t), t, dt + " K = 0");
    check_matmul(random({16, 0}, 22, t), random({0, 24}, 23, t), t, dt + " K = 0, aligned");
  }
}

TEST_F(GpuMatmulHalf, AddmmEpilogueAndLinear) {
  for (Dtype t : {float16, bfloat16}) {
    const std::string dt(dtype_name(t));
    // 24 x 40 x 16 fits the tensor-core kernel; 20 x 11 x 14 only the plain one.
    for (const Product& p : {Product{{3, 24, 40}, {3, 40, 16}}, Product{{3, 20, 11}, {3, 11, 14}}}) {
      const Array a = random(p.a, 30, t), b = random(p.b, 31, t);
      const int64_t m = p.a[1], n = p.b[2];
      for (const Shape& cs : std::vector<Shape>{{3, m, n}, {n}, {m, 1}, {}}) {
        const Array c = random(cs, 32, t);
        for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, {0.5f, -2.0f}, {2.0f, 0.0f}}) {
          const std::string what = fmt::format("{} addmm {} @ {} c {} alpha {} beta {}", dt, shape_str(p.a),
                                               shape_str(p.b), shape_str(cs), alpha, beta);
          expect_matches(addmm(c, a, b, alpha, beta, kGpu), t, reference(a, b, &c, alpha, beta), what);
        }
      }
    }
    // An empty sum: beta * c alone.
    const Array a0 = random({8, 0}, 33, t), b0 = random({0, 16}, 34, t), c0 = random({16}, 35, t);
    expect_matches(addmm(c0, a0, b0, 1.0f, 0.5f, kGpu), t, reference(a0, b0, &c0, 1.0, 0.5),
                   dt + " addmm K = 0");
    // linear in 16 bits is x @ w^T (a transposed operand), then the bias add: two roundings.
    const Array x = random({2, 9, 48}, 36, t), w = random({24, 48}, 37, t), bias = random({24}, 38, t);
    expect_matches(linear(x, w, bias, kGpu), t, reference(x, transpose(w), &bias, 1.0, 1.0), dt + " linear",
                   2);
    expect_matches(linear(x, w, Array(), kGpu), t, reference(x, transpose(w)), dt + " linear without bias");
  }
}

TEST_F(GpuMatmulHalf, GradientsMatchFloat64References) {
  for (Dtype t : {float16, bfloat16}) {
    const std::string dt(dtype_name(t));
    // da = g @ b^T and db = a^T @ g: both products read a transposed operand. A batched a against a
    // shared b sums b's gradient over the batch in one GEMM.
    for (const Product& p :
         {Product{{24, 40}, {40, 16}}, Product{{2, 24, 40}, {40, 16}}, Product{{7, 9}, {9, 5}}}) {
      const Array a = random(p.a, 40, t), b = random(p.b, 41, t);
      Shape gs = p.a;
      gs.back() = p.b.back();
      const Array g = random(gs, 42, t);
      const auto [out, grads] =
          vjp([](const std::vector<Array>& in) { return std::vector<Array>{matmul(in[0], in[1], kGpu)}; },
              {a, b}, {g});
      ASSERT_EQ(grads.size(), 2u);
      const std::string what = fmt::format("{} gradient of {} @ {}", dt, shape_str(p.a), shape_str(p.b));
      expect_matches(grads[0], t, reference(g, swapaxes(b, -1, -2)), what + ", d a");
      const Array a2 = reshape(a, {-1, p.a.back()}), g2 = reshape(g, {-1, p.b.back()});
      expect_matches(grads[1], t, reference(transpose(a2), g2), what + ", d b");
    }
  }
}

TEST_F(GpuMatmulHalf, PlainSplitKMatchesFloat64Reference) {
  // The float32 tiles' split-K on 16-bit operands: slices summed in float32, rounded once after the
  // epilogue; long K over a small ragged output, transposed operands, batches and addmm.
  use(vk::HalfGemmPath::plain);
  vk::set_matmul_options({"64", 4});
  uint64_t seed = 90;
  for (Dtype t : {float16, bfloat16}) {
    for (bool ta : {false, true}) {
      const Array a = operand({21, 1100}, seed++, t, ta), b = operand({1100, 13}, seed++, t, !ta);
      EXPECT_EQ(check_matmul(a, b, t, fmt::format("{} split-K a^T {}", dtype_name(t), ta)),
                "matmul_h16_t64+splitk4");
    }
    const Array a = random({2, 9, 700}, seed++, t), b = random({2, 700, 11}, seed++, t);
    const Array c = random({11}, seed++, t);
    expect_matches(addmm(c, a, b, 0.5f, -1.5f, kGpu), t, reference(a, b, &c, 0.5, -1.5),
                   fmt::format("{} split-K addmm", dtype_name(t)));
    EXPECT_EQ(vk::last_matmul_kernel(), "matmul_h16_t64+splitk4");
  }
}

TEST_F(GpuMatmulHalf, PlainWideTileMatchesFloat64Reference) {
  // The 128 x 128 float32 tile (large products) on 16-bit operands: float16 whole tiles (no bounds
  // checks), bfloat16 ragged edges with both operands transposed. Two pipelines only: lavapipe takes
  // seconds to compile each of this kernel's 16-bit forms.
  use(vk::HalfGemmPath::plain);
  vk::set_matmul_options({"128wk16", 1});
  const Array a = operand({256, 48}, 95, float16, false), b = operand({48, 128}, 96, float16, false);
  EXPECT_EQ(check_matmul(a, b, float16, "float16 whole tiles"), "matmul_h16_t128wk16");
  const Array ar = operand({130, 45}, 97, bfloat16, true), br = operand({45, 70}, 98, bfloat16, true);
  EXPECT_EQ(check_matmul(ar, br, bfloat16, "bfloat16 ragged, transposed"), "matmul_h16_t128wk16");
}

TEST_F(GpuMatmulHalf, EmulatedCoopmatKernelMatchesOnEveryTile) {
  // The tensor-core kernel's tiling, both layouts of each operand, ragged edges and batches, with
  // its matrix operations done in plain code: runs on any device (lavapipe in CI).
  struct Tile {
    const char* name;
    vk::CoopmatShape shape;
  };
  const Tile tiles[] = {
      {"64x64", {16, 8, 16}},       {"64x64", {16, 16, 16}},          {"64x64", {16, 8, 8}},
      {"128x128", {16, 8, 16}},     {"128x128_w64x32", {16, 16, 16}}, {"128x256", {16, 8, 8}},
      {"128x256_k32", {16, 8, 16}}, {"128x128_w64x32_s1", {16, 8, 8}}};
  uint64_t seed = 50;
  for (const Tile& tile : tiles) {
    use(vk::HalfGemmPath::emulated, tile.name, tile.shape);
    const std::string expect = std::string("matmul_f16_coopemu_") + tile.name;
    const std::string what =
        fmt::format("tile {} shape {}x{}x{}", tile.name, tile.shape.m, tile.shape.n, tile.shape.k);
    const bool all_layouts =
        (std::strcmp(tile.name, "64x64") == 0 && tile.shape.n == 8 && tile.shape.k == 16) ||
        std::strcmp(tile.name, "128x256") == 0;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        if (!all_layouts && ta != tb) continue;
        const Array a = operand({136, 72}, seed++, float16, ta), b = operand({72, 264}, seed++, float16, tb);
        EXPECT_EQ(check_matmul(a, b, float16, fmt::format("{} a {} b {}", what, ta, tb)), expect);
      }
    // Whole tiles of every tile shape: no bounds checks.
    const Array aw = random({256, 64}, seed++, float16), bw = random({64, 256}, seed++, float16);
    EXPECT_EQ(check_matmul(aw, bw, float16, what + " whole tiles"), expect);
    EXPECT_TRUE(vk::last_matmul_aligned()) << what;
    // K = 0 keeps the checks (the kernel fetches a first step before it knows there is none).
    const Array a0 = random({256, 0}, seed++, float16), b0 = random({0, 256}, seed++, float16);
    EXPECT_EQ(check_matmul(a0, b0, float16, what + " K = 0"), expect);
    EXPECT_FALSE(vk::last_matmul_aligned()) << what;
    if (all_layouts && tile.shape.k == 16) {  // the products the automatic path runs on tensor cores
      for (const Product& p : kProducts) {
        const Array a = random(p.a, seed++, float16), b = random(p.b, seed++, float16);
        check_matmul(a, b, float16, fmt::format("{} {} @ {}", what, shape_str(p.a), shape_str(p.b)));
      }
    }
    if (all_layouts) {  // attention's (B, H, T, D) views: two batch strides, read in place
      const Array q = swapaxes(random({2, 24, 3, 16}, seed++, float16), 1, 2);
      const Array kt = swapaxes(swapaxes(random({2, 40, 3, 16}, seed++, float16), 1, 2), -1, -2);
      EXPECT_EQ(check_matmul(q, kt, float16, what + " q @ k^T"), expect);
      EXPECT_EQ(vk::last_matmul_batch(), 6);
    }
    const Array a = random({2, 24, 40}, seed++, float16), b = random({40, 16}, seed++, float16);
    EXPECT_EQ(check_matmul(a, b, float16, what + " broadcast batch"), expect);
    const Array c = random({24, 16}, seed++, float16);
    expect_matches(addmm(c, a, b, 0.5f, -1.5f, kGpu), float16, reference(a, b, &c, 0.5, -1.5),
                   what + " addmm");
    EXPECT_EQ(vk::last_matmul_kernel(), expect);
    // Unaligned operands still take the plain kernel.
    const Array x = random({9, 7}, seed++, float16), y = random({7, 8}, seed++, float16);
    EXPECT_TRUE(check_matmul(x, y, float16, what + " K = 7").starts_with("matmul_h16_"));
  }
}

TEST_F(GpuMatmulHalf, CoopmatKernelRunsWhereTheDeviceHasIt) {
  if (coopmat_expected()) {
    ASSERT_TRUE(ctx().has_coopmat_f16())
        << "KILN_EXPECT_COOPMAT=1, but " << ctx().caps().name
        << " offers no float16 cooperative matrices (VK_NV_cooperative_matrix; KILN_VULKAN_DISABLE_COOPMAT=1 "
           "turns them off)";
  }
  const Array a = random({256, 512}, 60, float16), b = random({512, 384}, 61, float16);
  const std::string kernel = check_matmul(a, b, float16, "256 x 512 x 384");
  if (ctx().has_coopmat_f16())
    EXPECT_TRUE(kernel.starts_with("matmul_f16_coopmat_")) << kernel;
  else
    EXPECT_TRUE(kernel.starts_with("matmul_h16_")) << kernel;
  // bfloat16 and unaligned float16 take the plain kernel everywhere.
  EXPECT_TRUE(check_matmul(astype(a, bfloat16), astype(b, bfloat16), bfloat16, "bfloat16")
                  .starts_with("matmul_h16_"));
  EXPECT_TRUE(check_matmul(random({9, 7}, 62, float16), random({7, 8}, 63, float16), float16, "K = 7")
                  .starts_with("matmul_h16_"));
}

TEST_F(GpuMatmulHalf, EveryCoopmatTileAndShapeMatches) {
  if (!ctx().has_coopmat_f16()) GTEST_SKIP() << "no float16 cooperative matrices on " << ctx().caps().name;
  uint64_t seed = 70;
  // Every tile steps K by 16 or 32, so each takes every shape of the kernel's (16 x {8, 16} x {8, 16}).
  for (const char* tile :
       {"128x128", "128x128_w64x32", "128x256", "128x256_k32", "64x64", "128x128_w64x32_s1"})
    for (const vk::CoopmatShape& shape : ctx().caps().coopmat_f16_shapes) {
      if (shape.m != 16 || (shape.n != 8 && shape.n != 16) || (shape.k != 8 && shape.k != 16)) continue;
      use(vk::HalfGemmPath::automatic, tile, shape);
      const std::string expect = std::string("matmul_f16_coopmat_") + tile;
      const std::string what = fmt::format("tile {} shape {}x{}x{}", tile, shape.m, shape.n, shape.k);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const Array a = operand({264, 136}, seed++, float16, ta),
                      b = operand({136, 520}, seed++, float16, tb);
          EXPECT_EQ(check_matmul(a, b, float16, fmt::format("{} a {} b {}", what, ta, tb)), expect);
        }
      const Array aw = random({256, 64}, seed++, float16), bw = random({64, 256}, seed++, float16);
      EXPECT_EQ(check_matmul(aw, bw, float16, what + " whole tiles"), expect);
      EXPECT_TRUE(vk::last_matmul_aligned()) << what;
      const Array a = random({3, 40, 96}, seed++, float16), b = random({3, 96, 24}, seed++, float16);
      const Array c = random({24}, seed++, float16);
      expect_matches(addmm(c, a, b, 0.5f, 2.0f, kGpu), float16, reference(a, b, &c, 0.5, 2.0),
                     what + " addmm");
      EXPECT_EQ(vk::last_matmul_kernel(), expect);
    }
}

// Sets an environment variable for one scope, restoring its previous value (or absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(GpuMatmulHalf, KernelOptionsFromTheEnvironment) {
  use(vk::HalfGemmPath::emulated);
  const Array a = random({16, 16}, 80, float16), b = random({16, 16}, 81, float16);
  {
    const ScopedEnv tile("KILN_VULKAN_COOPMAT_TILE", "128x256"), shape("KILN_VULKAN_COOPMAT_SHAPE", "16x8x8");
    EXPECT_EQ(check_matmul(a, b, float16, "tile and shape from the environment"),
              "matmul_f16_coopemu_128x256");
  }
  {
    const ScopedEnv shape("KILN_VULKAN_COOPMAT_SHAPE", "16 by 8");
    EXPECT_THROW(eval(matmul(a, b, kGpu)), ValueError);
  }
  // KILN_VULKAN_DISABLE_COOPMAT=1 leaves the extension off in a context made from the environment.
  vk::ContextOptions options;
  {
    const ScopedEnv off("KILN_VULKAN_DISABLE_COOPMAT", "1");
    options = vk::ContextOptions::from_env();
  }
  EXPECT_TRUE(options.disable_coopmat);
  options.cache_dir.clear();
  const auto without = vk::Context::create(options);
  EXPECT_FALSE(without->caps().coopmat_nv);
  EXPECT_TRUE(without->caps().coopmat_f16_shapes.empty());
  EXPECT_FALSE(without->has_coopmat_f16());
}

TEST_F(GpuMatmulHalf, BadKernelOptionsThrow) {
  const Array a = random({16, 16}, 82, float16), b = random({16, 16}, 83, float16);
  use(vk::HalfGemmPath::emulated, "100x100");
  EXPECT_THROW(eval(matmul(a, b, kGpu)), ValueError);
  // The 128x256 emulated tile steps K by 8: a 16-deep fragment does not fit it.
  use(vk::HalfGemmPath::emulated, "128x256", {16, 8, 16});
  EXPECT_THROW(eval(matmul(a, b, kGpu)), ValueError);
  use(vk::HalfGemmPath::emulated, "64x64", {32, 8, 16});
  EXPECT_THROW(eval(matmul(a, b, kGpu)), ValueError);
}

}  // namespace
}  // namespace kiln
