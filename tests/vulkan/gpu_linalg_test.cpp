// The GEMM-backed primitives and the fused optimizer step on the GPU against the CPU: Linear (bias
// fused into the GEMM's epilogue, any leading dims, strided inputs) and its gradients, AddMM with
// alpha, beta and a broadcast addend, FusedAdamStep in both lerp forms and with amsgrad, and the
// creation primitives Range and Eye. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/kernels.h"
#include "kiln/optim/fused_adam_impl.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuLinalg : public detail::vk::testing::VulkanTest {
 protected:
  void TearDown() override { set_default_device(Device::cpu); }
};

Array random_array(const Shape& shape, uint64_t seed, Dtype t = float32) {
  return astype(Array(test::random_values(shape_size(shape), seed, -1.0, 1.0), shape, float64), t);
}

void expect_close(const Array& gpu, const Array& cpu, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const std::vector<double> g = test::values(gpu), c = test::values(cpu);
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], c[i], atol + rtol * std::abs(c[i])) << what << " at " << i;
}

// alpha * a @ b + beta * c in float64 from the float32 operands' values against the GPU's float32
// result: K products accumulated in float32 (each step off by at most 2^-24 of the running sum's
// scale |alpha| |a| @ |b| + |beta| |c|), plus the final rounding.
void expect_matches_float64(const Array& got, const Array& a, const Array& b, const Array* c, double alpha,
                            double beta, const std::string& what) {
  const Array a64 = astype(a, float64, Device::cpu), b64 = astype(b, float64, Device::cpu);
  Array v = multiply(matmul(a64, b64, Device::cpu), alpha, Device::cpu);
  Array s = multiply(matmul(abs(a64, Device::cpu), abs(b64, Device::cpu), Device::cpu), std::abs(alpha),
                     Device::cpu);
  if (c) {
    const Array c64 = astype(*c, float64, Device::cpu);
    v = add(v, multiply(c64, beta, Device::cpu), Device::cpu);
    s = add(s, multiply(abs(c64, Device::cpu), std::abs(beta), Device::cpu), Device::cpu);
  }
  ASSERT_EQ(got.dtype(), float32) << what;
  ASSERT_EQ(got.shape(), v.shape()) << what;
  const std::vector<double> g = test::values(got), r = test::values(v), sc = test::values(s);
  const double per_scale = static_cast<double>(a.shape(-1) + 2) * 0x1p-24;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], r[i], 0x1p-23 * std::abs(r[i]) + per_scale * sc[i] + 1e-30) << what << " at " << i;
}

// Forces the float32 GEMM's tile and split count for one test, restoring the previous options.
class GpuMatmulTiles : public GpuLinalg {
 protected:
  void SetUp() override {
    GpuLinalg::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    saved_ = detail::vk::set_matmul_options({});
  }
  void TearDown() override {
    detail::vk::set_matmul_options(saved_);
    GpuLinalg::TearDown();
  }
  void use(std::string tile, int splits) { detail::vk::set_matmul_options({std::move(tile), splits}); }
  // One matmul (or addmm with c) on the GPU against float64; returns the kernel it ran.
  std::string check(const Array& a, const Array& b, const std::string& what, const Array* c = nullptr,
                    float alpha = 1.0f, float beta = 0.0f) {
    const Array got = c ? addmm(*c, a, b, alpha, beta, Device::gpu) : matmul(a, b, Device::gpu);
    got.eval();
    std::string kernel(detail::vk::last_matmul_kernel());
    expect_matches_float64(got, a, b, c, alpha, beta, what + " (" + kernel + ")");
    return kernel;
  }

 private:
  detail::vk::MatmulOptions saved_;
};

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

// The operand [rows, cols], or with `transposed` the swapaxes view of a [cols, rows] array (rows
// contiguous, as x^T in a weight gradient is).
Array operand(Shape shape, uint64_t seed, bool transposed) {
  if (!transposed) return random_array(shape, seed);
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return swapaxes(random_array(shape, seed), -1, -2);
}

TEST_F(GpuMatmulTiles, EveryTileMatchesFloat64OnRaggedAndTransposedOperands) {
  uint64_t seed = 100;
  for (const char* tile : {"128", "128k16", "128x64", "64x128", "64", "64w", "32", "128wk16"}) {
    use(tile, 1);
    const std::string expect = std::string("matmul_f32_t") + tile;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Array a = operand({70, 45}, seed++, ta), b = operand({45, 133}, seed++, tb);
        EXPECT_EQ(check(a, b, fmt::format("tile {} a^T {} b^T {}", tile, ta, tb)), expect);
        // Sizes of multiples of 4: 16-byte loads of each layout.
        const Array a4 = operand({68, 44}, seed++, ta), b4 = operand({44, 132}, seed++, tb);
        EXPECT_EQ(check(a4, b4, fmt::format("tile {} vec4 a^T {} b^T {}", tile, ta, tb)), expect);
        // Whole tiles of every shape (M and N multiples of 128, K of 16): no bounds checks (two of
        // the layouts: each case is a pipeline to compile, seconds each on some drivers).
        if (ta != tb) continue;
        const Array aw = operand({256, 48}, seed++, ta), bw = operand({48, 128}, seed++, tb);
        EXPECT_EQ(check(aw, bw, fmt::format("tile {} whole tiles a^T {} b^T {}", tile, ta, tb)), expect);
        EXPECT_TRUE(detail::vk::last_matmul_aligned()) << tile;
      }
    const Array a = random_array({3, 9, 33}, seed++), b = random_array({33, 17}, seed++);
    const Array c = random_array({17}, seed++);
    EXPECT_EQ(check(a, b, fmt::format("tile {} addmm broadcast batch", tile), &c, 0.5f, -1.5f), expect);
  }
}

// A right operand shared by every product (a weight under (B, T, C) rows) folds the batch into the
// rows: one GEMM; operands whose batch and rows do not step as one stay batched.
TEST_F(GpuMatmulTiles, ASharedRightOperandFoldsTheBatchIntoRows) {
  uint64_t seed = 150;
  const Array a = random_array({3, 5, 7}, seed++), w = random_array({7, 4}, seed++);
  const Array bias = random_array({4}, seed++), c = random_array({3, 5, 4}, seed++);
  check(a, w, "(3, 5, 7) @ (7, 4)");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 1);
  check(a, w, "with a broadcast bias", &bias, 0.5f, 2.0f);
  EXPECT_EQ(detail::vk::last_matmul_batch(), 1);
  check(a, w, "with a full addend", &c, 1.0f, 1.0f);
  EXPECT_EQ(detail::vk::last_matmul_batch(), 1);
  check(random_array({2, 3, 5, 7}, seed++), w, "(2, 3, 5, 7) @ (7, 4)");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 1);
  // Rows that do not follow the batch (a [5, 3, 7] array seen as (3, 5, 7)), and a transposed
  // addend: batched products.
  check(swapaxes(random_array({5, 3, 7}, seed++), 0, 1), w, "rows apart from the batch");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 3);
  const Array c_t = swapaxes(random_array({5, 3, 4}, seed++), 0, 1);
  check(a, w, "with a transposed addend", &c_t, 1.0f, 1.0f);
  EXPECT_EQ(detail::vk::last_matmul_batch(), 3);
  check(a, random_array({3, 7, 4}, seed++), "a batched right operand");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 3);
}

TEST_F(GpuMatmulTiles, TwoBatchDimsThatDoNotMergeAreReadInPlace) {
  // Attention's [batch, heads, tokens, dim] views of [batch, tokens, heads, dim] arrays: one GEMM of
  // batch * heads products, each operand stepping by an outer and an inner batch stride (no
  // row-major copy: GpuCapture.AttentionHeadViewsAreReadWithoutACopy counts the commands).
  uint64_t seed = 300;
  auto heads = [&](const Shape& btd, int64_t h) {  // (B, H, T, D) view of a (B, T, H, D) array
    return swapaxes(random_array({btd[0], btd[1], h, btd[2]}, seed++), 1, 2);
  };
  const Array q = heads({2, 9, 8}, 3), k = heads({2, 9, 8}, 3), v = heads({2, 9, 8}, 3);
  const Array kt = swapaxes(k, -1, -2);
  check(q, kt, "q @ k^T");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 6);
  check(random_array({2, 3, 9, 9}, seed++), v, "scores @ v");
  const Array c = heads({2, 9, 9}, 3);
  check(q, kt, "addmm with an addend of two batch strides", &c, 0.5f, 2.0f);
  check(q, random_array({3, 8, 5}, seed++), "b broadcast over the outer batch dim");
  const Array q7 = heads({2, 9, 7}, 3), k7t = swapaxes(heads({2, 5, 7}, 3), -1, -2);
  check(q7, k7t, "rows of 7 (scalar loads)");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 6);
  // Split-K: the partial sums and the reduction's addend index both batch dims.
  use("64w", 3);
  const Array qk = heads({2, 5, 300}, 3), kk = swapaxes(heads({2, 6, 300}, 3), -1, -2);
  const Array ck = heads({2, 5, 6}, 3);
  EXPECT_EQ(check(qk, kk, "split-K", &ck, 1.0f, 1.0f), "matmul_f32_t64w+splitk3");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 6);
  use("", 0);
  // float64 takes the same two strides, where the device has it.
  if (ctx().caps().float64) {
    const Array q64 = swapaxes(random_array({2, 9, 3, 8}, seed++, float64), 1, 2);
    const Array k64t = swapaxes(swapaxes(random_array({2, 9, 3, 8}, seed++, float64), 1, 2), -1, -2);
    expect_close(matmul(q64, k64t, Device::gpu), matmul(q64, k64t, Device::cpu), 1e-12, 1e-12, "float64");
    EXPECT_EQ(detail::vk::last_matmul_batch(), 6);
  }
  // Three batch dims that merge neither into one nor into two: a row-major copy first, still right.
  const Array odd = transpose(random_array({2, 3, 2, 5, 4}, seed++), {0, 2, 1, 3, 4});
  check(odd, random_array({4, 6}, seed++), "three batch dims through a copy");
  EXPECT_EQ(detail::vk::last_matmul_batch(), 12);
}

TEST_F(GpuMatmulTiles, RowsOfWholeVectorsAreStoredWithTheEpilogue) {
  // N a multiple of 4: the tile writes C's rows as vec4s (ragged M, a bias, a full and a transposed
  // addend, alpha, batches, every tile shape); N = 6 next to it takes the scalar stores.
  uint64_t seed = 400;
  for (const char* tile : {"64w", "128x64", "64x128", "32"}) {
    use(tile, 1);
    const std::string what = std::string("tile ") + tile;
    for (int64_t n : {4, 36, 6}) {
      const Array a = random_array({37, 40}, seed++), b = random_array({40, n}, seed++);
      const Array c = random_array({37, n}, seed++), bias = random_array({n}, seed++);
      const Array c_t = swapaxes(random_array({n, 37}, seed++), 0, 1);
      const std::string wn = fmt::format("{} n {}", what, n);
      check(a, b, wn);
      check(a, b, wn + " full addend", &c, 0.5f, 2.0f);
      check(a, b, wn + " bias", &bias, 1.0f, 1.0f);
      check(a, b, wn + " transposed addend", &c_t, -1.0f, 0.25f);
      check(a, b, wn + " alpha, beta 0", &c, 0.5f, 0.0f);
      const Array ab = random_array({3, 20, 24}, seed++), bb = random_array({3, 24, n}, seed++);
      check(ab, bb, wn + " batched");
    }
  }
}

TEST_F(GpuMatmulTiles, WholeTilesRunWithoutBoundsChecks) {
  // M and N multiples of the tile and K of its step take the kernel without bounds checks, with
  // batches, the addend epilogue and split-K; a ragged M, a ragged K and K = 0 keep the checks.
  uint64_t seed = 500;
  const Array a = random_array({2, 128, 32}, seed++), b = random_array({2, 32, 64}, seed++);
  const Array c = random_array({2, 128, 64}, seed++);
  EXPECT_EQ(check(a, b, "batched whole tiles, addend", &c, 0.5f, -1.5f), "matmul_f32_t64w");
  EXPECT_TRUE(detail::vk::last_matmul_aligned());
  const Array ar = random_array({2, 100, 32}, seed++);
  check(ar, b, "ragged M");
  EXPECT_FALSE(detail::vk::last_matmul_aligned());
  const Array ak = random_array({128, 40}, seed++), bk = random_array({40, 64}, seed++);
  check(ak, bk, "K = 40");
  EXPECT_FALSE(detail::vk::last_matmul_aligned());
  const Array a0 = random_array({128, 0}, seed++), b0 = random_array({0, 64}, seed++);
  check(a0, b0, "K = 0");
  EXPECT_FALSE(detail::vk::last_matmul_aligned());
  use("64w", 4);
  const Array as = random_array({64, 1024}, seed++), bs = random_array({1024, 64}, seed++);
  EXPECT_EQ(check(as, bs, "split-K whole tiles"), "matmul_f32_t64w+splitk4");
  EXPECT_TRUE(detail::vk::last_matmul_aligned());
}

TEST_F(GpuMatmulTiles, SplitKMatchesFloat64) {
  // Long K over few outputs in 1 to 9 slices (the last one short), on several tiles, with both
  // layouts of each operand, batches, a broadcast batch and the addend epilogue.
  uint64_t seed = 200;
  for (const char* tile : {"64", "32", "128x64"})
    for (int splits : {2, 5, 9}) {
      use(tile, splits);
      const std::string what = fmt::format("tile {} splits {}", tile, splits);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          if (splits != 5 && ta != tb) continue;
          const Array a = operand({37, 1203}, seed++, ta), b = operand({1203, 29}, seed++, tb);
          const std::string kernel = check(a, b, fmt::format("{} a^T {} b^T {}", what, ta, tb));
          EXPECT_EQ(kernel, fmt::format("matmul_f32_t{}+splitk{}", tile, splits));
          const Array a4 = operand({36, 1200}, seed++, ta), b4 = operand({1200, 28}, seed++, tb);
          check(a4, b4, fmt::format("{} vec4 a^T {} b^T {}", what, ta, tb));
          // Whole tiles and K slices of whole steps: no bounds checks.
          const Array aw = operand({128, 1024}, seed++, ta), bw = operand({1024, 64}, seed++, tb);
          check(aw, bw, fmt::format("{} whole tiles a^T {} b^T {}", what, ta, tb));
        }
      const Array a = random_array({3, 21, 500}, seed++), b = random_array({3, 500, 19}, seed++);
      const Array c = random_array({3, 21, 19}, seed++);
      check(a, b, what + " batched");
      check(a, b, what + " batched addmm", &c, 2.0f, 0.5f);
      const Array bb = random_array({500, 19}, seed++), bias = random_array({19}, seed++);
      check(a, bb, what + " broadcast batch, bias", &bias, 1.0f, 1.0f);
    }
  // More slices than K has steps: the plan keeps only non-empty ones; K = 1 in one slice.
  use("64", 100);
  const Array a = random_array({5, 40}, seed++), b = random_array({40, 6}, seed++);
  EXPECT_EQ(check(a, b, "40 deep in 100 slices"), "matmul_f32_t64+splitk3");
  const Array x = random_array({5, 1}, seed++), y = random_array({1, 6}, seed++);
  EXPECT_EQ(check(x, y, "K = 1"), "matmul_f32_t64");
}

TEST_F(GpuMatmulTiles, AutomaticPlanSplitsKWhereTilesAreFew) {
  // As on a GPU of 132 compute units: a 64 x 96 output (2 tiles of 64 x 64) with K = 2048 takes 8
  // slices of 256, as does a weight gradient x^T @ dy (x [K, 64]); 16 tiles with K = 4096 take 16,
  // 64 tiles 8 (4 x 132 / 64, rounded down);
  // under 66 tiles, a K of 512 or more takes up to 8 slices of at least 64 (the MLP's 128 x 784 x 512
  // takes 7 slices of 112: K rounds to whole steps of the tile); outputs of many tiles, and K under
  // 512, never split.
  const ScopedEnv units("KILN_VULKAN_COMPUTE_UNITS", "132");
  const Array a = random_array({64, 2048}, 300), b = random_array({2048, 96}, 301);
  EXPECT_EQ(check(a, b, "64 x 2048 x 96"), "matmul_f32_t64w+splitk8");
  const Array x = random_array({2048, 64}, 302), dy = random_array({2048, 40}, 303);
  EXPECT_EQ(check(transpose(x), dy, "x^T @ dy"), "matmul_f32_t64w+splitk8");
  const Array g = random_array({4096, 256}, 304), h = random_array({4096, 256}, 305);
  EXPECT_EQ(check(transpose(g), h, "256 x 4096 x 256"), "matmul_f32_t64w+splitk16");
  // 64 tiles take 8 slices (512 workgroups), not 9: at most four workgroups per unit.
  const Array w = random_array({2304, 512}, 314), e = random_array({2304, 512}, 315);
  EXPECT_EQ(check(transpose(w), e, "512 x 2304 x 512"), "matmul_f32_t64w+splitk8");
  const Array big_a = random_array({1536, 40}, 306), big_b = random_array({40, 1536}, 307);
  EXPECT_EQ(check(big_a, big_b, "1536 x 40 x 1536"), "matmul_f32_t64w");
  const Array s = random_array({64, 512}, 308), t = random_array({512, 64}, 309);
  EXPECT_EQ(check(s, t, "64 x 512 x 64"), "matmul_f32_t64w+splitk8");
  const Array mlp_x = random_array({128, 784}, 310), mlp_w = random_array({784, 512}, 311);
  EXPECT_EQ(check(mlp_x, mlp_w, "128 x 784 x 512"), "matmul_f32_t64w+splitk7");
  const Array u = random_array({64, 448}, 312), v = random_array({448, 64}, 313);
  EXPECT_EQ(check(u, v, "64 x 448 x 64"), "matmul_f32_t64w");
  // With the host's few units (lavapipe) the same product splits less or not at all.
  const ScopedEnv few("KILN_VULKAN_COMPUTE_UNITS", "1");
  EXPECT_EQ(check(a, b, "64 x 2048 x 96 on one unit"), "matmul_f32_t64w");
  // Four 128 x 128 tiles per unit or more take the 128 x 128 tile where the device's shared memory
  // holds its two stages (33792 bytes: the H200's 49152 does, lavapipe's 32768 does not), ragged
  // edges too; three tiles stay on 64 x 64.
  const std::string wide =
      ctx().caps().max_shared_memory >= 33792 ? "matmul_f32_t128wk16" : "matmul_f32_t64w";
  const Array p = random_array({256, 48}, 314), q = random_array({48, 256}, 315);
  EXPECT_EQ(check(p, q, "256 x 48 x 256 on one unit"), wide);
  const Array pr = random_array({250, 45}, 316), qr = random_array({45, 260}, 317);
  EXPECT_EQ(check(pr, qr, "250 x 45 x 260 on one unit"), wide);
  const Array p3 = random_array({384, 48}, 318), q3 = random_array({48, 128}, 319);
  EXPECT_EQ(check(p3, q3, "384 x 48 x 128 on one unit"), "matmul_f32_t64w");
}

TEST_F(GpuMatmulTiles, OptionsFromTheEnvironmentAndBadOptions) {
  const Array a = random_array({20, 300}, 400), b = random_array({300, 12}, 401);
  {
    const ScopedEnv tile("KILN_VULKAN_MATMUL_TILE", "32"), splits("KILN_VULKAN_MATMUL_SPLITK", "3");
    EXPECT_EQ(check(a, b, "from the environment"), "matmul_f32_t32+splitk3");
  }
  {
    const ScopedEnv splits("KILN_VULKAN_MATMUL_SPLITK", "many");
    EXPECT_THROW(eval(matmul(a, b, Device::gpu)), ValueError);
  }
  {
    const ScopedEnv splits("KILN_VULKAN_MATMUL_SPLITK", "0");
    EXPECT_THROW(eval(matmul(a, b, Device::gpu)), ValueError);
  }
  use("100", 0);
  EXPECT_THROW(eval(matmul(a, b, Device::gpu)), ValueError);
}

TEST_F(GpuLinalg, LinearMatchesTheCpuWithAndWithoutBias) {
  struct Case {
    Shape x;
    int64_t units;
  };
  for (const Case& c : {Case{{1, 5}, 3}, Case{{33, 70}, 65}, Case{{2, 3, 17}, 129}, Case{{4, 0}, 6}}) {
    const int64_t in = c.x.back();
    const Array x = random_array(c.x, 1), w = random_array({c.units, in}, 2), b = random_array({c.units}, 3);
    const std::string what = "linear " + shape_str(c.x) + " units " + std::to_string(c.units);
    expect_close(linear(x, w, b, Device::gpu), linear(x, w, b, Device::cpu), 1e-5, 1e-5, what + " with bias");
    expect_close(linear(x, w, Array(), Device::gpu), linear(x, w, Array(), Device::cpu), 1e-5, 1e-5, what);
  }
  // Strided operands: a transposed x and a sliced weight.
  const Array xt = transpose(random_array({40, 24}, 4)), big_w = random_array({30, 80}, 5);
  const Array w = slice(big_w, {0, 0}, {30, 80}, {2, 2});  // (15, 40), strides (160, 2)
  expect_close(linear(xt, w, random_array({15}, 6), Device::gpu),
               linear(xt, w, random_array({15}, 6), Device::cpu), 1e-5, 1e-5, "strided");
  // Leading dims that do not merge into rows (a [tokens, batch, features] view of a
  // [batch, tokens, features] array), in float32 and float64 (the 8-byte copy path).
  for (Dtype t : {float32, float64}) {
    if (t == float64 && !ctx().caps().float64) continue;
    const Array xs = swapaxes(random_array({5, 3, 40}, 10, t), 0, 1), ws = random_array({15, 40}, 11, t);
    expect_close(linear(xs, ws, random_array({15}, 12, t), Device::gpu),
                 linear(xs, ws, random_array({15}, 12, t), Device::cpu), 1e-5, 1e-5,
                 "unmergeable rows " + std::string(dtype_name(t)));
  }
}

TEST_F(GpuLinalg, LinearGradientsMatchTheCpu) {
  const Array x = random_array({9, 31}, 7), w = random_array({12, 31}, 8), b = random_array({12}, 9);
  auto loss = [](Device d) {
    return [d](const std::vector<Array>& in) -> std::vector<Array> {
      return {sum(square(tanh(linear(in[0], in[1], in[2], d), d), d), {0, 1}, false, d)};
    };
  };
  const auto g = grad(loss(Device::gpu), {0, 1, 2})({x, w, b});
  const auto c = grad(loss(Device::cpu), {0, 1, 2})({x, w, b});
  for (size_t i = 0; i < 3; ++i) expect_close(g[i], c[i], 1e-4, 1e-5, "gradient " + std::to_string(i));
}

TEST_F(GpuLinalg, BatchedMatmulOfAttentionLayoutViews) {
  // [batch, heads, tokens, dim] views of [batch, tokens, heads, dim] arrays: batch dims that do not
  // merge into one, as attention makes them.
  const Array q = swapaxes(random_array({2, 5, 3, 4}, 13), 1, 2),
              k = swapaxes(random_array({2, 5, 3, 4}, 14), 1, 2);
  const Array kt = swapaxes(k, -1, -2);
  expect_close(matmul(q, kt, Device::gpu), matmul(q, kt, Device::cpu), 1e-5, 1e-6, "q @ k^T");
  const Array b = random_array({3, 4, 6}, 15);  // broadcast over the leading batch dim
  expect_close(matmul(q, b, Device::gpu), matmul(q, b, Device::cpu), 1e-5, 1e-6, "broadcast batch");
}

TEST_F(GpuLinalg, AddmmMatchesTheCpu) {
  const Array a = random_array({3, 20, 11}, 10), b = random_array({3, 11, 14}, 11);
  for (const Shape& cs : std::vector<Shape>{{3, 20, 14}, {14}, {20, 1}, {}}) {
    const Array c = random_array(cs, 12);
    for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, {0.5f, -2.0f}, {2.0f, 0.0f}}) {
      const std::string what = fmt::format("addmm c {} alpha {} beta {}", shape_str(cs), alpha, beta);
      expect_close(addmm(c, a, b, alpha, beta, Device::gpu), addmm(c, a, b, alpha, beta, Device::cpu), 1e-5,
                   1e-5, what);
    }
  }
}

TEST_F(GpuLinalg, FusedAdamStepMatchesTheCpu) {
  const Shape shape{257, 3};
  for (Dtype t : {float32, float64}) {
    if (t == float64 && !ctx().caps().float64) continue;
    for (double beta1 : {0.9, 0.3}) {
      for (bool amsgrad : {false, true}) {
        const optim::detail::AdamConstants k{beta1, 0.999, 1e-8, amsgrad};
        // AdamW's decay (its own 0-d input) with amsgrad; plain Adam without.
        const std::optional<double> decay = amsgrad ? std::optional<double>(0.97) : std::nullopt;
        const Array p = random_array(shape, 20, t), g = random_array(shape, 21, t),
                    m = random_array(shape, 22, t);
        const Array v = abs(random_array(shape, 23, t)), vmax = abs(random_array(shape, 24, t));
        const std::optional<Array> vm = amsgrad ? std::optional<Array>(vmax) : std::nullopt;
        set_default_device(Device::gpu);
        const std::vector<Array> on_gpu = optim::detail::adam_update(k, p, g, m, v, vm, 1e-3, 0.5, decay);
        eval(on_gpu);
        set_default_device(Device::cpu);
        const std::vector<Array> on_cpu = optim::detail::adam_update(k, p, g, m, v, vm, 1e-3, 0.5, decay);
        ASSERT_EQ(on_gpu.size(), amsgrad ? 4u : 3u);
        ASSERT_EQ(on_gpu.size(), on_cpu.size());
        const double rtol = t == float32 ? 2e-6 : 1e-14;
        for (size_t i = 0; i < on_gpu.size(); ++i)
          expect_close(on_gpu[i], on_cpu[i], rtol, rtol,
                       fmt::format("{} beta1 {} amsgrad {} decay {} output {}", dtype_name(t), beta1, amsgrad,
                                   decay.value_or(1.0), i));
      }
    }
  }
}

TEST_F(GpuLinalg, AdamTrainingStepRunsOnTheGpu) {
  // A few optimizer steps of a tiny model with the GPU as default device give the CPU's weights.
  auto train = [](Device d) {
    set_default_device(d);
    random::seed(4);
    nn::Linear layer(6, 3);
    optim::Adam opt(optim::AdamOptions{.lr = 1e-2});
    const Array x = random_array({16, 6}, 30), y = random_array({16, 3}, 31);
    auto step =
        nn::value_and_grad(layer, [&](const Array& in) { return mean(square(subtract(layer(in), y))); });
    for (int i = 0; i < 5; ++i) opt.update(layer, step(x).second);
    Array w = layer.parameters().at("weight");
    w.eval();
    set_default_device(Device::cpu);
    return w;
  };
  expect_close(train(Device::gpu), train(Device::cpu), 1e-5, 1e-6, "weights after 5 steps");
}

TEST_F(GpuLinalg, RangeAndEyeMatchTheCpu) {
  for (Dtype t : {float32, float16, int32, uint8, int64, float64}) {
    if ((t == int64 && !ctx().caps().int64) || (t == float64 && !ctx().caps().float64)) continue;
    const std::string what(dtype_name(t));
    expect_close(arange(-3.0, 40.0, 0.75, t, Device::gpu), arange(-3.0, 40.0, 0.75, t, Device::cpu), 0, 0,
                 "arange " + what);
    expect_close(arange(0.0, 200.0, 1.0, t, Device::gpu), arange(0.0, 200.0, 1.0, t, Device::cpu), 0, 0,
                 "arange " + what);
    // start + i * step: a driver may fuse it into one fma (NVIDIA's does), an ulp off the CPU.
    expect_close(linspace(-1.0, 1.0, 101, t, Device::gpu), linspace(-1.0, 1.0, 101, t, Device::cpu),
                 t == float64 ? 0x1p-52 : 0x1p-23, 1e-15, "linspace " + what);
    for (int k : {-2, 0, 3})
      expect_close(eye(5, 7, k, t, Device::gpu), eye(5, 7, k, t, Device::cpu), 0, 0,
                   fmt::format("eye k {} {}", k, what));
  }
  expect_close(eye(3, 3, 0, bool_, Device::gpu), eye(3, 3, 0, bool_, Device::cpu), 0, 0, "eye bool");
  EXPECT_EQ(arange(0.0, 0.0, 1.0, float32, Device::gpu).size(), 0);
}

TEST_F(GpuLinalg, Float64MatmulMatchesTheCpu) {
  if (!ctx().caps().float64) {
    const Array a = random_array({3, 4}, 40, float64), b = random_array({4, 2}, 41, float64);
    EXPECT_THROW(eval(matmul(a, b, Device::gpu)), NotImplemented);
    GTEST_SKIP() << "the device lacks shaderFloat64";
  }
  struct Case {
    Shape a, b;
  };
  // Odd sizes, sizes past one 64-wide tile, K not a multiple of the kernel's step, batches (one
  // broadcast), a vector product and an empty K.
  for (const Case& c : {Case{{1, 1}, {1, 1}}, Case{{7, 13}, {13, 5}}, Case{{65, 130}, {130, 67}},
                        Case{{3, 20, 17}, {3, 17, 9}}, Case{{2, 33, 8}, {8, 70}}, Case{{1, 300}, {300, 1}},
                        Case{{4, 0}, {0, 6}}}) {
    const Array a = random_array(c.a, 42, float64), b = random_array(c.b, 43, float64);
    expect_close(matmul(a, b, Device::gpu), matmul(a, b, Device::cpu), 1e-13, 1e-13,
                 "matmul " + shape_str(c.a) + " @ " + shape_str(c.b));
  }
  // Transposed operands, attention-layout views whose batch dims do not merge (copied first).
  const Array at = transpose(random_array({31, 12}, 44, float64)), b = random_array({31, 10}, 45, float64);
  expect_close(matmul(at, b, Device::gpu), matmul(at, b, Device::cpu), 1e-13, 1e-13, "transposed");
  const Array q = swapaxes(random_array({2, 5, 3, 4}, 46, float64), 1, 2),
              k = swapaxes(random_array({2, 5, 3, 4}, 47, float64), 1, 2);
  const Array kt = swapaxes(k, -1, -2);
  expect_close(matmul(q, kt, Device::gpu), matmul(q, kt, Device::cpu), 1e-13, 1e-13, "attention q @ k^T");
}

TEST_F(GpuLinalg, Float64LinearAddmmAndGradientsMatchTheCpu) {
  if (!ctx().caps().float64) GTEST_SKIP() << "the device lacks shaderFloat64";
  const Array x = random_array({2, 9, 23}, 50, float64), w = random_array({70, 23}, 51, float64),
              bias = random_array({70}, 52, float64);
  expect_close(linear(x, w, bias, Device::gpu), linear(x, w, bias, Device::cpu), 1e-13, 1e-13, "linear");
  expect_close(linear(x, w, Array(), Device::gpu), linear(x, w, Array(), Device::cpu), 1e-13, 1e-13,
               "linear without bias");
  // alpha and beta exact in float32: the facade passes them as float (gpu.h).
  const Array a = random_array({3, 20, 11}, 53, float64), b = random_array({3, 11, 14}, 54, float64);
  for (const Shape& cs : std::vector<Shape>{{3, 20, 14}, {14}, {20, 1}})
    expect_close(addmm(random_array(cs, 55, float64), a, b, 0.75, -1.5, Device::gpu),
                 addmm(random_array(cs, 55, float64), a, b, 0.75, -1.5, Device::cpu), 1e-13, 1e-13,
                 "addmm c " + shape_str(cs));
  // Gradients through vjp with a given cotangent: every step a GEMM or an elementwise kernel (the
  // bias's gradient, a float64 Sum, is the reductions' to test).
  auto f = [](Device d) {
    return [d](const std::vector<Array>& in) -> std::vector<Array> {
      return {matmul(tanh(linear(in[0], in[1], Array(), d), d), in[2], d)};
    };
  };
  const std::vector<Array> primals{random_array({9, 31}, 56, float64), random_array({12, 31}, 57, float64),
                                   random_array({12, 5}, 58, float64)};
  const std::vector<Array> ct{random_array({9, 5}, 59, float64)};
  const auto g = vjp(f(Device::gpu), primals, ct).second;
  const auto c = vjp(f(Device::cpu), primals, ct).second;
  ASSERT_EQ(g.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_close(g[i], c[i], 1e-12, 1e-12, "gradient " + std::to_string(i));
}

TEST_F(GpuLinalg, MatmulOfNegativeStrideViews) {
  // Flipped views (negative strides) are copied to dense temporaries before the GEMM.
  std::vector<Dtype> dtypes{float32};
  if (ctx().caps().float64) dtypes.push_back(float64);
  for (Dtype t : dtypes) {
    const double tol = t == float32 ? 1e-5 : 1e-13;
    const Array a = slice(random_array({6, 9}, 60, t), {Slice{std::nullopt, std::nullopt, -1}});
    const Array b = slice(random_array({9, 4}, 61, t), {Slice{}, Slice{std::nullopt, std::nullopt, -1}});
    const Array c = slice(random_array({6, 4}, 62, t), {Slice{std::nullopt, std::nullopt, -1}});
    const std::string what(dtype_name(t));
    expect_close(matmul(a, b, Device::gpu), matmul(a, b, Device::cpu), tol, tol, what + " flipped operands");
    expect_close(addmm(c, a, b, 1.0, 1.0, Device::gpu), addmm(c, a, b, 1.0, 1.0, Device::cpu), tol, tol,
                 what + " flipped addend");
    const Array batched = slice(random_array({3, 6, 9}, 63, t), {Slice{std::nullopt, std::nullopt, -1}});
    expect_close(matmul(batched, b, Device::gpu), matmul(batched, b, Device::cpu), tol, tol,
                 what + " flipped batch");
  }
}

}  // namespace
}  // namespace kiln
