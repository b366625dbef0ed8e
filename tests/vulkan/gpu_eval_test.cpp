// Arrays on the GPU through the ordinary API: ops on Device::gpu against the same ops on the CPU,
// storage that stays on the device between evals, graphs mixing both devices, gradients, errors
// and threads. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/vulkan/gpu.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

using Fn = std::function<Array(const std::vector<Array>&, StreamOrDevice)>;

class GpuEval : public detail::vk::testing::VulkanTest {
 protected:
  // fn on the GPU must equal fn on the CPU (float32 tolerance) for these inputs.
  void expect_same_on_both(const Fn& fn, const std::vector<Array>& inputs, double rtol = 1e-5,
                           double atol = 1e-6) {
    const Array cpu = fn(inputs, Device::cpu);
    const Array gpu = fn(inputs, Device::gpu);
    ASSERT_EQ(gpu.shape(), cpu.shape());
    ASSERT_EQ(gpu.dtype(), cpu.dtype());
    test::expect_close(gpu, test::values(cpu), rtol, atol);
  }
  static bool on_device_only(const Array& a) {
    return a.node().buffer->on_device() && !a.node().buffer->on_host();
  }
};

Array rand(const Shape& s, uint64_t seed, Dtype t = float32) {
  return test::random_array(s, t, seed, -2.0, 2.0);
}

TEST_F(GpuEval, BinaryOpsWithBroadcasting) {
  const Array a = rand({3, 1, 5}, 1), b = rand({4, 1}, 2), c = rand({3, 4, 5}, 3);
  for (const auto& op : std::vector<std::function<Array(const Array&, const Array&, StreamOrDevice)>>{
           [](const Array&x, const Array&y, StreamOrDevice s) { return add(x, y, s); },
           [](const Array&x, const Array&y, StreamOrDevice s) { return subtract(x, y, s); },
           [](const Array&x, const Array&y, StreamOrDevice s) { return multiply(x, y, s); },
           [](const Array&x, const Array&y, StreamOrDevice s) { return divide(x, y, s); },
           [](const Array&x, const Array&y, StreamOrDevice s) { return maximum(x, y, s); }}) {
    expect_same_on_both([&](const std::vector<Array>& in, StreamOrDevice s) { return op(in[0], in[1], s); },
                        {a, b});
    expect_same_on_both([&](const std::vector<Array>& in, StreamOrDevice s) { return op(in[0], in[1], s); },
                        {c, transpose(rand({5, 4, 3}, 4))});  // a strided operand
  }
}

TEST_F(GpuEval, UnaryOps) {
  const Array x = rand({7, 33}, 5), pos = test::random_array({130}, float32, 6, 0.1, 3.0);
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return negative(in[0], s); }, {x});
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return exp(in[0], s); }, {x});
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return tanh(in[0], s); }, {x});
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return log(in[0], s); }, {pos});
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return exp(transpose(in[0], s), s); }, {x});
}

TEST_F(GpuEval, MatmulShapesAndLayouts) {
  const auto mm = [](const auto& in, StreamOrDevice s) { return matmul(in[0], in[1], s); };
  expect_same_on_both(mm, {rand({37, 19}, 7), rand({19, 45}, 8)}, 1e-4, 1e-5);
  expect_same_on_both(mm, {rand({3, 8, 5}, 9), rand({3, 5, 6}, 10)}, 1e-4, 1e-5);
  expect_same_on_both(mm, {rand({3, 8, 5}, 11), rand({5, 6}, 12)}, 1e-4, 1e-5);  // broadcast batch
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return matmul(transpose(in[0]), in[1], s); },
                      {rand({19, 37}, 13), rand({19, 4}, 14)}, 1e-4, 1e-5);  // a transposed view
  expect_same_on_both(mm, {rand({16}, 15), rand({16, 3}, 16)}, 1e-4, 1e-5);  // a vector
}

TEST_F(GpuEval, SumOverAnyAxes) {
  const Array x = rand({4, 6, 5}, 17);
  for (const Axes& axes : std::vector<Axes>{{2}, {0}, {1}, {0, 2}, {0, 1, 2}, {1, 2}})
    for (bool keep : {false, true})
      expect_same_on_both([&](const auto& in, StreamOrDevice s) { return sum(in[0], axes, keep, s); }, {x},
                          1e-5, 1e-5);
  expect_same_on_both(
      [](const auto& in, StreamOrDevice s) { return sum(transpose(in[0]), Axes{1}, false, s); }, {x}, 1e-5,
      1e-5);
}

TEST_F(GpuEval, ViewsCopiesAndCasts) {
  const Array x = rand({6, 8}, 18);
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return reshape(in[0], {4, 12}, s); }, {x});
  // A transposed view cannot be reshaped in place: the copy kernel runs.
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return reshape(transpose(in[0], s), {48}, s); },
                      {x});
  expect_same_on_both(
      [](const auto& in, StreamOrDevice s) {
        return slice(in[0], {1, 2}, {5, 8}, {2, 3}, s);
      },
      {x});
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return contiguous(transpose(in[0], s), s); },
                      {x});
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return astype(in[0], float16, s); }, {x}, 1e-3,
                      1e-3);
  expect_same_on_both([](const auto& in, StreamOrDevice s) { return astype(in[0], int32, s); },
                      {multiply(x, Array(10.0f))});
}

TEST_F(GpuEval, ResultsStayOnTheDeviceUntilTheHostReadsThem) {
  const Array x = rand({64, 32}, 19), w = rand({32, 16}, 20);
  const Array y = matmul(x, w, Device::gpu);
  y.eval();
  EXPECT_TRUE(on_device_only(y));
  const Array z = exp(y, Device::gpu);  // reads y on the device: no round trip
  z.eval();
  EXPECT_TRUE(on_device_only(y));
  EXPECT_TRUE(on_device_only(z));
  const std::vector<float> host = z.to_vector<float>();  // downloads once
  EXPECT_TRUE(z.node().buffer->on_host());
  test::expect_close(z, test::values(exp(matmul(x, w))), 1e-4, 1e-5);
}

TEST_F(GpuEval, GraphsMixingDevicesInOneEval) {
  // gpu -> cpu -> gpu -> cpu in one graph: the CPU node reads what the recorder has not yet
  // submitted, so eval submits in between.
  const Array x = rand({5, 7}, 21), w = rand({7, 3}, 22);
  const Array a = matmul(x, w, Device::gpu);
  const Array b = cumsum(a, 1, false, true, Device::cpu);  // no GPU kernel: runs on the CPU
  const Array c = multiply(b, b, Device::gpu);
  const Array d = sum(c, Axes{0}, false, Device::cpu);
  const Array ref = sum(square(cumsum(matmul(x, w), 1)), Axes{0});
  test::expect_close(d, test::values(ref), 1e-4, 1e-5);
}

TEST_F(GpuEval, GradientsOnTheGpu) {
  const Array x = rand({8, 6}, 23), w = rand({6, 4}, 24), b = rand({4}, 25);
  auto loss = [](const std::vector<Array>& p, StreamOrDevice s) {
    const Array h = tanh(add(matmul(p[0], p[1], s), p[2], s), s);
    return sum(multiply(h, h, s), Axes{0, 1}, false, s);
  };
  for (int arg = 0; arg < 3; ++arg) {
    auto grad_on = [&](StreamOrDevice s) {
      const ArrayFn f = [&](const std::vector<Array>& p) { return std::vector<Array>{loss(p, s)}; };
      return grad(f, {arg})({x, w, b})[0];
    };
    const Array on_gpu = grad_on(Device::gpu), on_cpu = grad_on(Device::cpu);
    test::expect_close(on_gpu, test::values(on_cpu), 1e-4, 1e-5);
  }
}

TEST_F(GpuEval, UnsupportedKernelIsAnErrorAndTheNextEvalWorks) {
  // The strided elementwise kernels take at most 8 dims after merging: 9 reversed axes of size 2
  // merge into none, so exp has no GPU kernel for this view, after a multiply that has one.
  const Array x = rand({512}, 42);
  const Array m = reshape(multiply(x, x, Device::gpu), Shape(9, 2), Device::gpu);
  const Array bad = exp(transpose(m, Device::gpu), Device::gpu);
  try {
    bad.eval();
    FAIL() << "expected NotImplemented";
  } catch (const NotImplemented& e) {
    EXPECT_NE(std::string(e.what()).find("too many dimensions"), std::string::npos) << e.what();
  }
  const Array ok = multiply(rand({3}, 26), Array(2.0f), Device::gpu);
  EXPECT_NO_THROW(ok.eval());
  EXPECT_EQ(gpu::has_pending(), false);
}

TEST_F(GpuEval, DeviceFailureAtSubmitIsADeviceErrorAndLaterEvalsWork) {
  const Array x = rand({16, 16}, 27);
  const Array y = exp(x, Device::gpu);
  ctx().inject_submit_failure_for_testing(VK_ERROR_OUT_OF_DEVICE_MEMORY);
  EXPECT_THROW(y.eval(), DeviceError);
  EXPECT_FALSE(y.is_available());
  y.eval();  // the same array, computed again
  test::expect_close(y, test::values(exp(x)), 1e-5, 1e-6);
}

TEST_F(GpuEval, MemoryStaysFlatOverRepeatedSteps) {
  const Array w0 = rand({64, 64}, 28), x = rand({32, 64}, 29);
  Array w = w0;
  size_t after_warmup = 0;
  for (int step = 0; step < 40; ++step) {
    const Array g =
        matmul(transpose(x, Device::gpu), tanh(matmul(x, w, Device::gpu), Device::gpu), Device::gpu);
    w = subtract(w, multiply(g, Array(1e-3f), Device::gpu), Device::gpu);
    w.eval();
    const size_t active = memory_stats().device_active_bytes;  // w, g and x's upload are alive
    if (step == 5) after_warmup = active;
    if (step > 5) {
      ASSERT_EQ(active, after_warmup) << "step " << step;
    }
  }
  EXPECT_GT(after_warmup, 0u);
}

TEST_F(GpuEval, SmallHostArraysNeedNoCopyOnTheQueue) {
  // Where device memory is not mapped (a discrete GPU; KILN_VULKAN_FORCE_STAGING=1 on lavapipe, as
  // the staged.* run of this test does), a host array a kernel reads is written by the host into
  // mapped upload memory: no submit and wait of its own per constant.
  detail::vk::DeviceAllocator& uploads = ctx().upload_allocator();
  const size_t before = uploads.counters().active_bytes;
  const Array x = rand({3, 5}, 41);
  const Array y = add(multiply(x, Array(3.0f), Device::gpu), Array(0.5f), Device::gpu);
  y.eval();
  const bool direct = !ctx().allocator().mapped();
  EXPECT_EQ(uploads.counters().active_bytes > before, direct);
  test::expect_close(y, test::values(add(multiply(x, Array(3.0f)), Array(0.5f))), 1e-6, 1e-6);
}

TEST_F(GpuEval, ThreadsEvaluatingOverlappingGraphs) {
  const Array x = rand({32, 32}, 30);
  const Array shared = exp(matmul(x, x, Device::gpu), Device::gpu);  // every thread needs it
  const std::vector<double> ref = test::values(exp(matmul(x, x)));
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const Array mine = add(shared, Array(static_cast<float>(t)), Device::gpu);
      results[t] = subtract(mine, Array(static_cast<float>(t)), Device::gpu).to_vector<float>();
    });
  for (auto& th : threads) th.join();
  for (const auto& r : results) {
    ASSERT_EQ(r.size(), ref.size());
    for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(r[i], ref[i], 1e-4 * std::abs(ref[i]) + 1e-4);
  }
}

TEST_F(GpuEval, DefaultDeviceCanBeTheGpu) {
  set_default_device(Device::gpu);
  const Array y = add(rand({4}, 31), Array(1.0f));
  EXPECT_EQ(y.primitive()->device(), Device::gpu);
  set_default_device(Device::cpu);
  EXPECT_EQ(add(rand({4}, 31), Array(1.0f)).primitive()->device(), Device::cpu);
}

}  // namespace
}  // namespace kiln
