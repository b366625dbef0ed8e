// take_along_axis and its vjp (scatter-add along an axis) on the GPU through the ordinary API,
// against the same ops on the CPU: index dtypes, negative indices, duplicates, strided and
// broadcast operands, out-of-range indices, gradients and cross-entropy. Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/index_kernels.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuIndex : public detail::vk::testing::VulkanTest {
 public:
  // For the kernel-level checks below.
  using VulkanTest::ctx;
  using VulkanTest::read_vector;
  using VulkanTest::upload_vector;

 protected:
  static void expect_same(const std::function<Array(StreamOrDevice)>& fn, const std::string& what,
                          double tol = 1e-5) {
    SCOPED_TRACE(what);
    const Array cpu = fn(Device::cpu);
    const Array gpu = fn(Device::gpu);
    ASSERT_EQ(gpu.shape(), cpu.shape());
    ASSERT_EQ(gpu.dtype(), cpu.dtype());
    test::expect_close(gpu, test::values(cpu), tol, tol);
  }
};

// The vjp of take_along_axis with cotangent `upd`: scatter-add along the axis into zeros (the
// ScatterAddAlongAxis primitive, which no public op builds directly).
Array scatter_along(const Array& x, const Array& idx, const Array& upd, int axis, StreamOrDevice s) {
  const auto fn = [&](const std::vector<Array>& in) {
    return std::vector<Array>{take_along_axis(in[0], idx, axis, s)};
  };
  return vjp(fn, {x}, {upd}).second[0];
}

Array rand(const Shape& s, uint64_t seed, Dtype t = float32, double lo = -2.0, double hi = 2.0) {
  return test::random_array(s, t, seed, lo, hi);
}

// Indices in [lo, hi) (floor of uniform values), of dtype t.
Array rand_index(const Shape& s, uint64_t seed, double lo, double hi, Dtype t = int32) {
  Array i = astype(floor(rand(s, seed, float64, lo, hi)), t);
  i.eval();
  return i;
}

TEST_F(GpuIndex, TakeAlongEveryAxisAndIndexDtype) {
  const Array x = rand({4, 7, 5}, 1);
  for (int axis : {0, 1, 2, -1})
    for (Dtype t : {int32, uint32, int64}) {
      Shape is = x.shape();
      const int ax = axis < 0 ? 2 : axis;
      is[static_cast<size_t>(ax)] = 9;  // more indices than the axis holds: duplicates
      const Array idx = rand_index(is, 2 + static_cast<uint64_t>(ax), 0, static_cast<double>(x.shape(ax)), t);
      expect_same([&](StreamOrDevice s) { return take_along_axis(x, idx, axis, s); },
                  "axis " + std::to_string(axis) + " " + std::string(dtype_name(t)));
    }
}

TEST_F(GpuIndex, NegativeIndicesCountFromTheEnd) {
  const Array x = rand({6, 10}, 3);
  for (Dtype t : {int32, int64}) {
    const Array idx = rand_index({6, 4}, 4, -10, 10, t);
    expect_same([&](StreamOrDevice s) { return take_along_axis(x, idx, 1, s); }, std::string(dtype_name(t)));
    expect_same(
        [&](StreamOrDevice s) {
          return scatter_along(x, idx, rand({6, 4}, 5), 1, s);
        },
        std::string("scatter ") + std::string(dtype_name(t)));
  }
}

TEST_F(GpuIndex, StridedAndBroadcastOperands) {
  const Array x = rand({8, 6, 3}, 6);
  const Array idx = rand_index({3, 6, 2}, 7, 0, 8);
  // x transposed (strided), indices broadcast along axis 1 of the result.
  expect_same(
      [&](StreamOrDevice s) {
        return take_along_axis(transpose(x, {2, 1, 0}, s), idx, 2, s);
      },
      "transposed x");
  expect_same(
      [&](StreamOrDevice s) {
        return take_along_axis(transpose(x, {2, 1, 0}, s), rand_index({3, 1, 4}, 8, 0, 8), 2, s);
      },
      "broadcast indices");
  expect_same(
      [&](StreamOrDevice s) {
        return take_along_axis(x, transpose(rand_index({3, 6, 5}, 9, 0, 8), {2, 1, 0}), 0, s);
      },
      "transposed indices");
  const Array ints = rand({8, 6, 3}, 10, int32, -50, 50), int_idx = rand_index({8, 6, 2}, 11, 0, 3);
  expect_same([&](StreamOrDevice s) { return take_along_axis(ints, int_idx, 2, s); }, "int32 values");
}

TEST_F(GpuIndex, ScatterAddAccumulatesDuplicates) {
  // Many more updates than slots along the axis: every slot gets several.
  const Array base = rand({5, 4, 3}, 12);
  for (int axis : {0, 1, 2}) {
    Shape us = base.shape();
    us[static_cast<size_t>(axis)] = 17;
    const Array idx = rand_index(us, 13, 0, static_cast<double>(base.shape(axis)));
    const Array upd = rand(us, 14);
    expect_same([&](StreamOrDevice s) { return scatter_along(base, idx, upd, axis, s); },
                "scatter along axis " + std::to_string(axis));
    expect_same(
        [&](StreamOrDevice s) { return scatter_along(base, idx, transpose(transpose(upd) * 1.0), axis, s); },
        "strided updates, axis " + std::to_string(axis));
    expect_same([&](StreamOrDevice s) { return scatter_along(base, astype(idx, int64), upd, axis, s); },
                "int64 indices, axis " + std::to_string(axis));
  }
}

// The scatter-add kernel directly: a random base, duplicates, negative and out-of-range indices,
// against a plain loop. [P, N] base, [P, J] indices and updates along axis 1, or the transposes
// along axis 0 (strided views of the same buffers).
template <class V, class I>
void check_scatter_kernel(GpuIndex& t, bool along_rows, uint32_t seed) {
  namespace vk = detail::vk;
  vk::Context& ctx = t.ctx();
  constexpr int64_t P = 6, N = 5, J = 13;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> value(-50, 50);
  std::uniform_int_distribution<int64_t> index(-N, N - 1);
  std::vector<V> x(P * N), upd(P * J);
  std::vector<I> idx(P * J);
  // int64 values past 32 bits of either sign, so that the word-wise adds carry and borrow.
  const auto draw = [&]() -> V {
    if constexpr (std::is_same_v<V, int64_t>)
      return static_cast<V>(value(gen)) * (int64_t{1} << 33) + value(gen);
    if constexpr (std::is_same_v<V, uint32_t>) return static_cast<V>(value(gen)) * 80000000u;  // wraps
    return static_cast<V>(value(gen)) / V(4);
  };
  for (V& v : x) v = draw();
  for (V& v : upd) v = draw();
  for (I& i : idx) i = static_cast<I>(std::is_signed_v<I> ? index(gen) : (index(gen) + N) % N);
  idx[3] = static_cast<I>(N);  // out of range: dropped
  if constexpr (std::is_signed_v<I>) idx[17] = static_cast<I>(-N - 1);
  std::vector<V> ref = x;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < J; ++j) {
      int64_t k = static_cast<int64_t>(idx[p * J + j]);
      k += k < 0 ? N : 0;
      if (k >= 0 && k < N) ref[p * N + k] += upd[p * J + j];
    }
  const Dtype vt = std::is_same_v<V, float>      ? float32
                   : std::is_same_v<V, double>   ? float64
                   : std::is_same_v<V, int64_t>  ? int64
                   : std::is_same_v<V, uint32_t> ? uint32
                                                 : int32;
  const Dtype it = sizeof(I) == 8 ? int64 : std::is_signed_v<I> ? int32 : uint32;
  auto view = [&](const vk::BufferPtr& b, Dtype d, int64_t rows, int64_t cols) {
    vk::GpuView v = vk::GpuView::contiguous(b, d, {rows, cols});
    if (!along_rows) v = {b, d, {cols, rows}, {1, cols}, 0};  // the transpose
    return v;
  };
  const vk::BufferPtr xb = t.upload_vector(x), ib = t.upload_vector(idx), ub = t.upload_vector(upd);
  const vk::BufferPtr ob = ctx.allocator().allocate(x.size() * sizeof(V));
  const Shape out_shape = along_rows ? Shape{P, N} : Shape{N, P};
  vk::Recorder r(ctx);
  vk::record_scatter_add_along_axis(r, view(xb, vt, P, N), view(ib, it, P, J), view(ub, vt, P, J),
                                    along_rows ? 1 : 0, vk::GpuView::contiguous(ob, vt, out_shape));
  r.submit_and_wait();
  const std::vector<V> got = t.read_vector<V>(ob, x.size());
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) {
      const V g = along_rows ? got[p * N + n] : got[n * P + p];
      if constexpr (std::is_integral_v<V>) {
        EXPECT_EQ(g, ref[p * N + n]) << p << "," << n;
      } else {
        EXPECT_NEAR(static_cast<double>(g), static_cast<double>(ref[p * N + n]), 1e-5) << p << "," << n;
      }
    }
}

TEST_F(GpuIndex, ScatterAddKernelAgainstALoop) {
  for (bool along_rows : {true, false}) {
    SCOPED_TRACE(along_rows ? "axis 1" : "axis 0 of transposed views");
    check_scatter_kernel<float, int32_t>(*this, along_rows, 1);
    check_scatter_kernel<float, int64_t>(*this, along_rows, 2);
    check_scatter_kernel<float, uint32_t>(*this, along_rows, 3);
    check_scatter_kernel<int32_t, int64_t>(*this, along_rows, 4);
    check_scatter_kernel<uint32_t, int32_t>(*this, along_rows, 5);
    check_scatter_kernel<int64_t, int32_t>(*this, along_rows, 6);  // needs no shaderInt64
    if (ctx().caps().float64) check_scatter_kernel<double, int64_t>(*this, along_rows, 7);
  }
}

// 8-byte values are moved as bits (no 64-bit device feature needed): float64 and int64 past 32
// bits, every axis, both index widths, a transposed x.
TEST_F(GpuIndex, TakeAlongAxisOf8ByteValues) {
  const Array f = rand({4, 7, 5}, 30, float64);
  const Array i = rand({4, 7, 5}, 31, int64, -3e15, 3e15);
  for (const Array* x : {&f, &i})
    for (int axis : {0, 1, 2})
      for (Dtype t : {int32, int64}) {
        Shape is = x->shape();
        is[static_cast<size_t>(axis)] = 6;
        const Array idx =
            rand_index(is, 32 + static_cast<uint64_t>(axis), -x->shape(axis), x->shape(axis), t);
        const std::string what = std::string(dtype_name(x->dtype())) + " axis " + std::to_string(axis) + " " +
                                 std::string(dtype_name(t));
        expect_same([&](StreamOrDevice s) { return take_along_axis(*x, idx, axis, s); }, what, 0);
      }
  expect_same(
      [&](StreamOrDevice s) {
        return take_along_axis(transpose(f, {2, 1, 0}, s), rand_index({5, 7, 3}, 35, 0, 4), 2, s);
      },
      "float64 transposed", 0);
}

// float64 scatter-add (take_along_axis's vjp) adds in double: within 1e-12 of the CPU.
TEST_F(GpuIndex, Float64ScatterAddAndGradient) {
  const Array base = rand({5, 4, 3}, 36, float64);
  const Array idx = rand_index({5, 11, 3}, 37, -4, 4);
  const Array upd = rand({5, 11, 3}, 38, float64);
  if (!ctx().caps().float64) {
    EXPECT_THROW(eval(scatter_along(base, idx, upd, 1, Device::gpu)), NotImplemented);
    GTEST_SKIP() << "the device lacks shaderFloat64";
  }
  expect_same([&](StreamOrDevice s) { return scatter_along(base, idx, upd, 1, s); }, "float64 scatter",
              1e-12);
  const Array w = rand({5, 11, 3}, 39, float64);
  const auto run = [&](Device d) {
    return value_and_grad([&, d](const Array& a) {
      return sum(multiply(take_along_axis(a, idx, 1, d), w, d), false, d);
    })(base);
  };
  const auto [cv, cg] = run(Device::cpu);
  const auto [gv, gg] = run(Device::gpu);
  test::expect_close(gv, test::values(cv), 1e-12, 1e-12);
  test::expect_close(gg, test::values(cg), 1e-12, 1e-12);
}

TEST_F(GpuIndex, IndicesComputedOnTheDevice) {
  // argmax on the GPU feeds take_along_axis in the same eval: the indices never reach the host.
  const Array x = rand({7, 12}, 18);
  expect_same([&](StreamOrDevice s) { return take_along_axis(x, argmax(x, 1, true, s), 1, s); },
              "argmax feed");
}

TEST_F(GpuIndex, OutOfRangeIndices) {
  const Array x = rand({3, 4}, 19);
  // Indices held on the host are checked at eval as on the CPU. (The op function checks indices
  // that are already evaluated, so they are made lazily here to reach eval.)
  const Array bad = Array(std::vector<int32_t>{0, 1, 4, 2, 3, -5}, {3, 2});
  for (Device d : {Device::cpu, Device::gpu}) {
    const Array lazy = subtract(add(bad, Array(int32_t{1}), Device::cpu), Array(int32_t{1}), Device::cpu);
    ASSERT_FALSE(lazy.is_available());
    EXPECT_THROW(eval(take_along_axis(x, lazy, 1, d)), ValueError);
  }
  // Indices computed on the device cannot be checked before the submit: the kernel reads 0 for
  // them and scatter_add drops their updates (documented in index_facade.cpp).
  const Array on_device = astype(Array(std::vector<float>{0, 1, 4, 2, 3, -5}, {3, 2}), int32, Device::gpu);
  const Array taken = take_along_axis(x, on_device, 1, Device::gpu);
  const std::vector<double> xv = test::values(x);
  test::expect_close(taken, std::vector<double>{xv[0], xv[1], 0.0, xv[4 + 2], xv[8 + 3], 0.0}, 0, 0);
  // Fresh lazy indices: the op function checks indices that are already evaluated (as above).
  const Array on_device_again =
      astype(Array(std::vector<float>{0, 1, 4, 2, 3, -5}, {3, 2}), int32, Device::gpu);
  const Array added = scatter_along(x, on_device_again, ones({3, 2}), 1, Device::gpu);
  test::expect_close(added, std::vector<double>{1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, 0, 0);
}

TEST_F(GpuIndex, GradientOfATakeAlongAxisLoss) {
  const Array x = rand({9, 6}, 20);
  const Array idx = rand_index({9, 4}, 21, 0, 6);  // duplicates within rows
  const Array w = rand({9, 4}, 22);
  const auto run = [&](Device d) {
    return value_and_grad(
        [&, d](const Array& a) { return sum(multiply(take_along_axis(a, idx, 1, d), w, d), false, d); })(x);
  };
  const auto [cv, cg] = run(Device::cpu);
  const auto [gv, gg] = run(Device::gpu);
  test::expect_close(gv, test::values(cv), 1e-5, 1e-5);
  test::expect_close(gg, test::values(cg), 1e-5, 1e-5);
}

TEST_F(GpuIndex, CrossEntropyValueAndGradient) {
  const Array logits = rand({16, 10}, 23, float32, -3, 3);
  const Array targets = rand_index({16}, 24, 0, 10);
  const auto run = [&] {
    return value_and_grad([&](const Array& z) { return nn::cross_entropy(z, targets); })(logits);
  };
  const auto [cv, cg] = run();
  set_default_device(Device::gpu);
  const auto [gv, gg] = run();
  set_default_device(Device::cpu);
  test::expect_close(gv, test::values(cv), 1e-5, 1e-5);
  test::expect_close(gg, test::values(cg), 1e-5, 1e-5);
}

}  // namespace
}  // namespace kiln
