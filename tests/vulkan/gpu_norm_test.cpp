// The fused normalizations (softmax/log_softmax along the last axis, layer_norm, rms_norm) on the
// GPU through the ordinary API, against the same ops on the CPU and a float64 reference: every
// dtype, rows of every length (one invocation, a shared workgroup, the register path, the
// streaming path past it), many short rows, strided, reversed, broadcast and unmergeable views,
// weights and biases present or not and strided, special values, empty arrays, gradients (first
// and second order, per-example under vmap) computed on the GPU, and the kernels' checks. Runs on
// lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/core/ops/fused_norm.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/norm_kernels.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "support/norm_reference.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;
using detail::RowNorm;

constexpr double kInf = std::numeric_limits<double>::infinity();
using test::is_norm;
constexpr auto& kKinds = test::kRowNorms;
std::string kind_name(RowNorm k) { return test::row_norm_name(k); }

Array apply(RowNorm k, const Array& x, const Array& w, const Array& b, StreamOrDevice s, double eps = 1e-5) {
  switch (k) {
    case RowNorm::softmax:
      return softmax(x, -1, s);
    case RowNorm::log_softmax:
      return log_softmax(x, -1, s);
    case RowNorm::layer_norm:
      return layer_norm(x, w, b, eps, s);
    case RowNorm::rms_norm:
      return rms_norm(x, w, eps, s);
  }
  return Array();
}

std::vector<double> reference(RowNorm k, const std::vector<double>& x, int64_t n,
                              const std::vector<double>& w, const std::vector<double>& b, double eps) {
  return test::row_norm_reference(k, x, n, w, b, eps);
}

test::Tolerance tolerance_of(Dtype t) {
  switch (t) {
    case float64:
      return {1e-12, 1e-12};
    case float32:
      return {2e-5, 2e-6};
    case float16:
      return {2e-3, 2e-3};
    default:
      return {1.6e-2, 1.6e-2};
  }
}

class GpuNorm : public vk::testing::VulkanTest {
 protected:
  bool can(Dtype t) {
    if (t == float64) return ctx().caps().float64;
    if (t == float16 || t == bfloat16) return ctx().caps().storage16;
    return true;
  }
  // op on the GPU against the reference of its inputs and the same op on the CPU.
  void expect_same(RowNorm k, const Array& x, const Array& w = Array(), const Array& b = Array(),
                   const std::string& what = "", double eps = 1e-5) {
    SCOPED_TRACE(kind_name(k) + " " + std::string(dtype_name(x.dtype())) + " " + shape_str(x.shape()) + " " +
                 (w.valid() ? "w " : "") + (b.valid() ? "b " : "") + what);
    const Array gpu = apply(k, x, w, b, Device::gpu, eps);
    const Array cpu = apply(k, x, w, b, Device::cpu, eps);
    ASSERT_EQ(gpu.shape(), x.shape());
    ASSERT_EQ(gpu.dtype(), x.dtype());
    const std::vector<double> wv = w.valid() && is_norm(k) ? test::values(w) : std::vector<double>{};
    const std::vector<double> bv =
        b.valid() && k == RowNorm::layer_norm ? test::values(b) : std::vector<double>{};
    const auto tol = tolerance_of(x.dtype());
    test::expect_close(gpu, reference(k, test::values(x), x.shape(-1), wv, bv, eps), tol.rtol, tol.atol);
    test::expect_close(gpu, test::values(cpu), tol.rtol, tol.atol);
  }
};

TEST_F(GpuNorm, EveryDtypeAndKind) {
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    if (!can(t)) continue;
    const Array x = test::random_array({5, 37}, t, 1, -3, 4);
    const Array w = test::random_array({37}, float32, 2, 0.5, 1.5), b = test::random_array({37}, float32, 3);
    for (RowNorm k : kKinds) {
      expect_same(k, x);
      if (!is_norm(k)) continue;
      expect_same(k, x, w);
      expect_same(k, x, w, b);
      expect_same(k, x, Array(), b, "", 0.1);
    }
  }
}

TEST_F(GpuNorm, RowsOfEveryLength) {
  // One element; fewer than a workgroup (rows share one); the register path's bound (16 per
  // invocation of 256: 4096); the streaming path past it; long rows.
  for (int64_t n : {1, 2, 7, 33, 255, 256, 257, 1000, 1031, 4096, 4097, 5000, 20000})
    for (RowNorm k : kKinds) {
      const Array x = test::random_array({3, n}, float32, 4 + static_cast<uint64_t>(n), -3, 4);
      expect_same(k, x, is_norm(k) ? test::random_array({n}, float32, 5, 0.5, 1.5) : Array(),
                  k == RowNorm::layer_norm ? test::random_array({n}, float32, 6) : Array());
    }
  for (Dtype t : {float16, bfloat16, float64}) {
    if (!can(t)) continue;
    for (int64_t n : {3, 4097, 9000})
      for (RowNorm k : kKinds) expect_same(k, test::random_array({2, n}, t, 7, -2, 2));
  }
}

TEST_F(GpuNorm, ManyShortRowsAndHigherRanks) {
  for (const Shape& s : std::vector<Shape>{{5000, 3}, {777, 1}, {1001, 7}, {300, 33}, {2, 3, 4, 65}})
    for (RowNorm k : kKinds) expect_same(k, test::random_array(s, float32, 8, -2, 2));
  if (can(float16)) expect_same(RowNorm::layer_norm, test::random_array({999, 5}, float16, 9));
}

TEST_F(GpuNorm, StridedReversedBroadcastAndUnmergeableViews) {
  const Array base = test::random_array({12, 40}, float32, 10, -2, 2);
  const Array w80 = test::random_array({80}, float32, 11, 0.5, 1.5);
  const Array strided_w = slice(w80, {1}, {80}, {2});
  const std::vector<Array> views = {
      transpose(test::random_array({40, 12}, float32, 12)),
      slice(base, {1, 3}, {12, 40}, {2, 3}),
      slice(base, {Slice{.start = std::nullopt, .stop = std::nullopt, .step = -1},
                   Slice{.start = std::nullopt, .stop = std::nullopt, .step = -1}}),
      broadcast_to(slice(base, {0, 0}, {1, 40}), {5, 40}),
      transpose(test::random_array({4, 3, 40}, float32, 13), {1, 0, 2}),
      transpose(test::random_array({40, 3, 4}, float32, 14), {2, 1, 0}),
  };
  for (size_t v = 0; v < views.size(); ++v) {
    const int64_t n = views[v].shape(-1);
    const Array w = n == 40 ? strided_w : test::random_array({n}, float32, 15);
    for (RowNorm k : kKinds)
      expect_same(k, views[v], is_norm(k) ? w : Array(), Array(), "view " + std::to_string(v));
  }
  if (can(bfloat16)) expect_same(RowNorm::softmax, transpose(test::random_array({30, 6}, bfloat16, 16)));
}

TEST_F(GpuNorm, SpecialValuesAsOnTheCpu) {
  const std::vector<std::vector<float>> rows = {
      {-INFINITY, 0.0f, 1.0f}, {-INFINITY, -INFINITY, -INFINITY}, {INFINITY, 1.0f, 2.0f},
      {NAN, 1.0f, 2.0f},       {1000.0f, 1001.0f, 1002.0f},       {3.0f, 3.0f, 3.0f}};
  for (const auto& row : rows)
    for (RowNorm k : kKinds) {
      // The same row many times, so that both the register and the streaming path see it.
      for (int64_t repeat : {int64_t{1}, int64_t{2000}}) {
        const Array x = repeat == 1 ? Array(row, {1, 3})
                                    : reshape(broadcast_to(Array(row, {1, 3}), {repeat, 3}), {1, 3 * repeat});
        SCOPED_TRACE(kind_name(k) + " row starting " + std::to_string(row[0]) + " x" +
                     std::to_string(repeat));
        const std::vector<double> gpu = test::values(apply(k, x, Array(), Array(), Device::gpu));
        const std::vector<double> cpu = test::values(apply(k, x, Array(), Array(), Device::cpu));
        for (size_t i = 0; i < gpu.size(); ++i) {
          if (std::isnan(cpu[i]))
            EXPECT_TRUE(std::isnan(gpu[i])) << "at " << i << ": " << gpu[i];
          else if (std::isinf(cpu[i]))
            EXPECT_EQ(gpu[i], cpu[i]) << "at " << i;
          else
            EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * (1 + std::fabs(cpu[i]))) << "at " << i;
        }
      }
    }
}

TEST_F(GpuNorm, EmptyArrays) {
  for (const Shape& s : std::vector<Shape>{{0, 5}, {3, 0}, {2, 0, 4}})
    for (RowNorm k : kKinds) {
      const Array w = is_norm(k) ? ones({s.back()}) : Array();
      const Array y = apply(k, zeros(s), w, Array(), Device::gpu);
      y.eval();
      EXPECT_EQ(y.shape(), s);
      const Array g = grad([&](const Array& a) {
        return sum(apply(k, a, w, Array(), Device::gpu), false, Device::gpu);
      })(zeros(s));
      EXPECT_EQ(g.shape(), s);
    }
}

// value_and_grad of sum(op(x, w, b) * c) on the GPU against the CPU, for x, w and b.
TEST_F(GpuNorm, GradientsComputeOnTheGpuAndMatchTheCpu) {
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    if (!can(t)) continue;
    const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : t == float16 ? 4e-3 : 3e-2;
    for (int64_t n : {9, 300, 5000}) {
      const Array x = test::random_array({4, n}, t, 17, -2, 2), c = test::random_array({4, n}, t, 18);
      const Array w = test::random_array({n}, float32, 19, 0.5, 1.5),
                  b = test::random_array({n}, float32, 20);
      for (RowNorm k : kKinds) {
        SCOPED_TRACE(kind_name(k) + " " + std::string(dtype_name(t)) + " n " + std::to_string(n));
        const auto grads = [&](Device d) {
          const ArrayFn f = [&, d](const std::vector<Array>& a) {
            return std::vector<Array>{sum(multiply(apply(k, a[0], a[1], a[2], d), c, d), false, d)};
          };
          return grad(f, {0, 1, 2})({x, w, b});
        };
        const std::vector<Array> gpu = grads(Device::gpu), cpu = grads(Device::cpu);
        for (size_t i = 0; i < 3; ++i) {
          EXPECT_EQ(gpu[i].dtype(), cpu[i].dtype());
          test::expect_close(gpu[i], test::values(cpu[i]), tol, tol * (i == 0 ? 1 : 10));
        }
      }
    }
  }
  // A broadcast cotangent (the gradient of a plain sum): stride-0 rows and columns.
  for (RowNorm k : kKinds) {
    const Array x = test::random_array({6, 50}, float32, 21, -2, 2);
    const auto g = [&](Device d) {
      return grad(
          [&, d](const Array& a) { return sum(square(apply(k, a, Array(), Array(), d), d), false, d); })(x);
    };
    test::expect_close(g(Device::gpu), test::values(g(Device::cpu)), 1e-5, 1e-5);
  }
}

TEST_F(GpuNorm, SecondOrderAndVmapOnTheGpu) {
  const Array x = test::random_array({3, 20}, float32, 22, -2, 2),
              w = test::random_array({20}, float32, 23, 0.5, 1.5);
  const Array xs = test::random_array({4, 3, 20}, float32, 24, -2, 2),
              ws = test::random_array({4, 20}, float32, 25);
  for (RowNorm k : kKinds) {
    SCOPED_TRACE(kind_name(k));
    // Gradient of the gradient's norm: the backward kernel differentiated through its composite.
    const auto second = [&](Device d) {
      const ScalarFn inner = [&, d](const Array& a) {
        return sum(square(apply(k, a, w, Array(), d), d), false, d);
      };
      return grad([&, d](const Array& a) { return sum(square(grad(inner)(a), d), false, d); })(x);
    };
    test::expect_close(second(Device::gpu), test::values(second(Device::cpu)), 1e-4, 1e-4);
    // Per-example gradients with per-example weights.
    const auto per_example = [&](Device d) {
      const ArrayFn loss = [&, d](const std::vector<Array>& a) {
        return std::vector<Array>{sum(square(apply(k, a[0], a[1], Array(), d), d), false, d)};
      };
      return vmap(grad(loss, {0, 1}), {0, 0})({xs, ws});
    };
    const std::vector<Array> gpu = per_example(Device::gpu), cpu = per_example(Device::cpu);
    for (size_t i = 0; i < 2; ++i) test::expect_close(gpu[i], test::values(cpu[i]), 1e-5, 1e-5);
  }
}

// Kernel-level: record_norm_rows' checks, and NotImplemented for what the device lacks.
TEST_F(GpuNorm, RecordChecksAndMissingFeatures) {
  vk::Recorder r(ctx());
  const Array x = test::random_array({3, 8}, float32, 26);
  const vk::GpuView in = vk::GpuView::contiguous(upload_vector(x.to_vector<float>()), float32, {3, 8});
  const vk::GpuView out = vk::GpuView::contiguous(ctx().allocator().allocate(24 * 4), float32, {3, 8});
  const vk::GpuView w = vk::GpuView::contiguous(upload_vector(std::vector<float>(8, 1.0f)), float32, {8});
  EXPECT_THROW(vk::record_norm_rows(r, RowNorm::softmax, 0, in, nullptr, nullptr,
                                    vk::GpuView::contiguous(out.buffer, int32, {3, 8})),
               ValueError);
  EXPECT_THROW(vk::record_norm_rows(r, RowNorm::softmax, 0, vk::GpuView::contiguous(in.buffer, float32, {24}),
                                    nullptr, nullptr, vk::GpuView::contiguous(out.buffer, float32, {24})),
               ShapeError);
  EXPECT_THROW(vk::record_norm_rows(r, RowNorm::softmax, 0, in, &w, nullptr, out), ValueError);
  EXPECT_THROW(vk::record_norm_rows(r, RowNorm::layer_norm, 0, in, &in, nullptr, out), ShapeError);
  EXPECT_THROW(
      vk::record_norm_rows(r, RowNorm::layer_norm, 0, vk::GpuView::contiguous(in.buffer, int32, {3, 8}),
                           nullptr, nullptr, vk::GpuView::contiguous(out.buffer, int32, {3, 8})),
      ValueError);
  EXPECT_THROW(vk::record_norm_rows_vjp(r, RowNorm::layer_norm, 0, in, nullptr,
                                        vk::GpuView::contiguous(in.buffer, float32, {8, 3}), out, nullptr),
               ShapeError);
  EXPECT_THROW(vk::record_norm_rows_vjp(r, RowNorm::softmax, 0, in, nullptr, in, out, &out), ValueError);
  EXPECT_EQ(r.pending(), 0u);
  // The kernel itself, recorded and submitted here: rms_norm with a weight.
  vk::record_norm_rows(r, RowNorm::rms_norm, 1e-5, in, &w, nullptr, out);
  r.submit_and_wait();
  test::expect_close(Array(read_vector<float>(out.buffer, 24), {3, 8}),
                     reference(RowNorm::rms_norm, test::values(x), 8, {}, {}, 1e-5), 2e-5, 2e-6);

  if (!ctx().caps().float64) {
    try {
      eval(layer_norm(test::random_array({2, 3}, float64, 27), Array(), Array(), 1e-5, Device::gpu));
      FAIL() << "expected NotImplemented";
    } catch (const NotImplemented& e) {
      EXPECT_NE(std::string(e.what()).find("shaderFloat64"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
