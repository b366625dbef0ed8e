// Max pooling on the GPU against the same ops on the CPU, exactly: the forward pass, the gather of
// a second operand at the argmax (the jvp) and the scatter of the gradient (the vjp), in float32,
// float64, float16 and bfloat16, with ties, NaNs and infinities (the CPU's argmax rules), windows
// of padding only, odd and large sizes, strided views, empty arrays, second order and vmap; and
// the recording layer's checks. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/pool_kernels.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;

struct PoolCase {
  Shape x;
  std::array<int, 2> kernel, stride, padding{0, 0}, dilation{1, 1};
  std::array<int64_t, 2> output_size{-1, -1};
};

const PoolCase kCases[] = {
    {{2, 3, 8, 6}, {2, 2}, {2, 2}},                          // the CPU's 2x2 tiling loop
    {{2, 3, 9, 7}, {2, 2}, {2, 2}},                          // 2x2 with an odd last row and column
    {{1, 2, 9, 11}, {3, 3}, {2, 2}, {1, 1}},                 // overlapping windows, padding
    {{3, 2, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 2}},          // everything mixed
    {{1, 1, 1, 1}, {1, 1}, {1, 1}},                          // one element
    {{2, 1, 5, 5}, {3, 3}, {1, 1}, {1, 1}},                  // stride 1: nine windows per element
    {{1, 2, 5, 5}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, {4, 4}},  // ceil mode: a window of padding only
    {{2, 3, 37, 41}, {3, 3}, {2, 2}, {1, 1}},                // 9000+ elements, not a workgroup multiple
    {{1, 3, 7, 1}, {2, 1}, {1, 1}},                          // one column
};

std::string label(const PoolCase& c) {
  return fmt::format(
      "x {} kernel ({}, {}) stride ({}, {}) padding ({}, {}) dilation ({}, {}) output ({}, {})",
      shape_str(c.x), c.kernel[0], c.kernel[1], c.stride[0], c.stride[1], c.padding[0], c.padding[1],
      c.dilation[0], c.dilation[1], c.output_size[0], c.output_size[1]);
}

Array run(const PoolCase& c, const Array& x, StreamOrDevice s) {
  return max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, c.output_size, s);
}
// The vjp of the pooling in x (scatter mode) and its jvp (gather mode with a second operand).
Array scatter(const PoolCase& c, const Array& x, const Array& g, Device d) {
  return vjp([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0], d)}; }, {x}, {g})
      .second[0];
}
Array gather(const PoolCase& c, const Array& x, const Array& src, Device d) {
  return jvp([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0], d)}; }, {x}, {src})
      .second[0];
}

// Values on a coarse grid (so windows hold ties), with some NaNs and infinities when `specials`.
Array tie_array(const Shape& shape, Dtype t, uint32_t seed, bool specials) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> grid(-4, 4), pick(0, 19);
  std::vector<double> v(static_cast<size_t>(shape_size(shape)));
  for (double& e : v) {
    e = grid(gen) * 0.25;
    const int r = pick(gen);
    if (specials && r == 0) e = std::numeric_limits<double>::quiet_NaN();
    if (specials && r == 1) e = std::numeric_limits<double>::infinity();
    if (specials && r == 2) e = -std::numeric_limits<double>::infinity();
  }
  return astype(Array(v, shape, float64), t);
}

// Exact equality, a NaN matching a NaN.
void expect_same(const Array& gpu, const Array& cpu, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const std::vector<double> g = test::values(gpu), c = test::values(cpu);
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(c[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " at " << i << ": " << g[i] << ", want NaN";
    } else {
      ASSERT_EQ(g[i], c[i]) << what << " at " << i;
    }
  }
}

class GpuPool : public vk::testing::VulkanTest {
 protected:
  // The dtypes the device has; those it lacks must throw NotImplemented naming the feature.
  std::vector<Dtype> dtypes() {
    std::vector<Dtype> out{float32};
    for (Dtype t : {float64, float16, bfloat16}) {
      const bool has = t == float64 ? ctx().caps().float64 : ctx().caps().storage16;
      if (has) {
        out.push_back(t);
      } else {
        const Array x = tie_array({1, 1, 4, 4}, t, 1, false);
        EXPECT_THROW(eval(max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {-1, -1}, Device::gpu)),
                     NotImplemented)
            << dtype_name(t);
      }
    }
    return out;
  }
};

TEST_F(GpuPool, ForwardGatherAndScatterMatchTheCpuExactly) {
  uint32_t seed = 1;
  for (Dtype t : dtypes()) {
    for (const PoolCase& c : kCases) {
      for (bool specials : {false, true}) {
        const std::string what = fmt::format("{} {} specials {}", dtype_name(t), label(c), specials);
        const Array x = tie_array(c.x, t, seed++, specials);
        const Array y = run(c, x, Device::cpu);
        expect_same(run(c, x, Device::gpu), y, what + " forward");
        // Gradients on a coarse grid: where windows overlap their sums are exact in every dtype.
        const Array g = tie_array(y.shape(), t, seed++, false);
        expect_same(scatter(c, x, g, Device::gpu), scatter(c, x, g, Device::cpu), what + " scatter");
        const Array src = test::random_array(c.x, t, seed++);
        expect_same(gather(c, x, src, Device::gpu), gather(c, x, src, Device::cpu), what + " gather");
      }
    }
  }
}

TEST_F(GpuPool, HalfTypesAccumulateOverlapsInFloat) {
  // Stride 1 with a 3x3 window: up to nine gradients land on one element; 16-bit types sum them in
  // float32 and round once, as the CPU does.
  const PoolCase c{{2, 2, 12, 13}, {3, 3}, {1, 1}, {1, 1}};
  for (Dtype t : dtypes()) {
    const Array x = test::random_array(c.x, t, 40, -1.0, 1.0);
    const Array ones_ish = test::random_array(run(c, x, Device::cpu).shape(), t, 41, 0.9, 1.1);
    const Array big = tie_array(c.x, t, 42, false);  // many ties
    for (const Array& in : {x, big})
      expect_same(scatter(c, in, ones_ish, Device::gpu), scatter(c, in, ones_ish, Device::cpu),
                  std::string(dtype_name(t)) + " overlapping scatter");
  }
}

TEST_F(GpuPool, StridedViewsAreReadInPlace) {
  const PoolCase c{{2, 3, 9, 8}, {3, 2}, {2, 2}, {1, 1}, {2, 1}};
  for (Dtype t : dtypes()) {
    // A transposed view (H and W swapped), a sliced one, and one with the channels reversed.
    const Array base = tie_array({2, 3, 8, 9}, t, 50, true);
    const Array xt = swapaxes(base, 2, 3);
    const Array wide = tie_array({4, 3, 18, 8}, t, 51, true);
    const Array xs = slice(wide, {0, 0, 0, 0}, {4, 3, 18, 8}, {2, 1, 2, 1});
    const Array xf = slice(tie_array(c.x, t, 52, true), {Slice{}, Slice{std::nullopt, std::nullopt, -1}});
    for (const Array& x : {xt, xs, xf}) {
      const std::string what = fmt::format("{} strides {}", dtype_name(t), shape_str(x.strides()));
      const Array y = run(c, x, Device::cpu);
      expect_same(run(c, x, Device::gpu), y, what + " forward");
      const Array g =
          swapaxes(tie_array({y.shape(0), y.shape(1), y.shape(3), y.shape(2)}, t, 53, false), 2, 3);
      expect_same(scatter(c, x, g, Device::gpu), scatter(c, x, g, Device::cpu), what + " scatter");
      const Array src = swapaxes(test::random_array({2, 3, 8, 9}, t, 54), 2, 3);
      expect_same(gather(c, x, src, Device::gpu), gather(c, x, src, Device::cpu), what + " gather");
    }
  }
}

TEST_F(GpuPool, EmptyArrays) {
  for (const Shape& s : {Shape{0, 3, 6, 6}, Shape{2, 0, 6, 6}}) {
    const PoolCase c{s, {2, 2}, {2, 2}};
    const Array x = zeros(s, float32);
    const Array y = run(c, x, Device::gpu);
    eval(y);
    EXPECT_EQ(y.shape(), (Shape{s[0], s[1], 3, 3}));
    EXPECT_EQ(y.size(), 0);
    const Array dx = scatter(c, x, zeros(y.shape(), float32), Device::gpu);
    eval(dx);
    EXPECT_EQ(dx.shape(), s);
  }
  // An empty plane whose one window is all padding: -inf, as on the CPU.
  const PoolCase c{{1, 2, 0, 3}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 3}};
  const Array x = zeros(c.x, float32);
  expect_same(run(c, x, Device::gpu), run(c, x, Device::cpu), "padding-only windows");
}

TEST_F(GpuPool, GradientsAndSecondOrderMatchTheCpu) {
  const PoolCase c{{2, 3, 10, 9}, {3, 3}, {2, 2}, {1, 1}};
  for (Dtype t : dtypes()) {
    if (t != float32 && t != float64) continue;
    const Array x = test::random_array(c.x, t, 60), w = test::random_array(c.x, t, 61, 0.5, 1.5);
    auto loss = [&c](Device d) {
      return [&c, d](const std::vector<Array>& in) -> std::vector<Array> {
        const Array y = run(c, multiply(in[0], in[1], d), d);
        return {sum(multiply(multiply(y, y, d), y, d), {0, 1, 2, 3}, false, d)};
      };
    };
    const auto g = grad(loss(Device::gpu), {0, 1})({x, w});
    const auto cg = grad(loss(Device::cpu), {0, 1})({x, w});
    for (size_t i = 0; i < 2; ++i) {
      const double tol = t == float32 ? 1e-5 : 1e-12;
      test::expect_close(g[i], cg[i], tol, tol);
    }
    // Second order: the gradient of <dL/dx, v> in w runs scatter's and gather's vjps.
    auto second = [&](Device d) {
      return grad(
          [&, d](const std::vector<Array>& in) -> std::vector<Array> {
            const Array gx = grad(loss(d), {0})({in[0], in[1]})[0];
            return {sum(multiply(gx, in[2], d), {0, 1, 2, 3}, false, d)};
          },
          {1});
    };
    const Array v = test::random_array(c.x, t, 62);
    const double tol = t == float32 ? 1e-4 : 1e-11;
    test::expect_close(second(Device::gpu)({x, w, v})[0], second(Device::cpu)({x, w, v})[0], tol, tol);
  }
}

TEST_F(GpuPool, VmapMatchesTheCpu) {
  const PoolCase c{{2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 2}};
  Shape b = c.x;
  b.insert(b.begin() + 2, 3);
  const Array xb = tie_array(b, float32, 70, true);
  auto f = [&c](Device d) {
    return vmap([&c, d](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0], d)}; }, {2},
                {1});
  };
  expect_same(f(Device::gpu)({xb})[0], f(Device::cpu)({xb})[0], "vmap");
}

TEST_F(GpuPool, RecordingChecksItsViews) {
  vk::Recorder& r = vk::thread_recorder();
  const vk::PoolDims d{.n = 1, .c = 1, .h = 4, .w = 4, .oh = 2, .ow = 2, .kernel = {2, 2}, .stride = {2, 2}};
  auto view = [&](Dtype t, const Shape& s) {
    return vk::GpuView::contiguous(ctx().allocator().allocate(static_cast<size_t>(shape_size(s)) * 8), t, s);
  };
  const vk::GpuView x = view(float32, {1, 1, 4, 4}), y = view(float32, {1, 1, 2, 2});
  EXPECT_THROW(vk::record_max_pool(r, d, view(int32, {1, 1, 4, 4}), nullptr, view(int32, {1, 1, 2, 2})),
               NotImplemented);
  EXPECT_THROW(vk::record_max_pool(r, d, x, nullptr, view(float32, {1, 1, 3, 2})), ShapeError);
  EXPECT_THROW(vk::record_max_pool(r, d, view(float32, {1, 1, 4, 5}), nullptr, y), ShapeError);
  EXPECT_THROW(vk::record_max_pool(r, d, x, nullptr, view(float64, {1, 1, 2, 2})), ValueError);
  vk::PoolDims bad = d;
  bad.stride = {0, 2};
  EXPECT_THROW(vk::record_max_pool(r, bad, x, nullptr, y), ValueError);
  EXPECT_THROW(vk::record_max_pool_scatter(r, d, x, view(float32, {1, 1, 2, 3}), view(float32, {1, 1, 4, 4})),
               ShapeError);
  gpu::discard_pending();
}

}  // namespace
}  // namespace kiln
