// compile's GPU capture (core/transforms/capture.cpp): a graph wholly on the GPU is recorded once,
// on its second call, and replayed. Replays must give bit for bit what the step-by-step replay
// gives, leave inputs and earlier outputs alone, serve strided inputs, pass inputs and constants
// through, fall back where a step runs on the CPU, survive a failed submit, work from several
// threads, and keep device memory flat. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include "kiln/core/vulkan/gpu_capture.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kiln/core/vulkan/runtime/array_views.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

class GpuCapture : public detail::vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    set_default_device(Device::gpu);
    unsetenv("KILN_COMPILE_CAPTURE");
  }
  void TearDown() override {
    unsetenv("KILN_COMPILE_CAPTURE");
    set_default_device(Device::cpu);
  }
};

Array random_input(const Shape& shape, uint64_t seed) {
  return test::random_array(shape, float32, seed, -1.0, 1.0);
}

// Equal bit for bit (NaN payloads included).
void expect_same_bits(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Array g = contiguous(got, Device::cpu), w = contiguous(want, Device::cpu);
  eval({g, w});
  EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), static_cast<size_t>(g.nbytes())), 0) << what;
}

// An MLP's SGD step: {loss, w1', b1', w2', b2'} from {x, y, w1, b1, w2, b2}.
std::vector<Array> sgd_step(const std::vector<Array>& in) {
  auto loss_fn = [](const std::vector<Array>& p) {
    const Array h = maximum(add(matmul(p[0], p[2]), p[3]), 0.0f);
    const Array logits = add(matmul(h, p[4]), p[5]);
    const Array lse = logsumexp(logits, {-1}, true);
    const Array picked = sum(multiply(subtract(logits, lse), p[1]), {-1});
    return std::vector<Array>{negative(mean(picked))};
  };
  auto [values, grads] = value_and_grad(loss_fn, {2, 3, 4, 5})(in);
  std::vector<Array> out{values[0]};
  for (size_t i = 0; i < grads.size(); ++i) out.push_back(subtract(in[2 + i], multiply(grads[i], 0.1f)));
  return out;
}

std::vector<Array> mlp_inputs(uint64_t seed) {
  Array y = astype(less(random_input({16, 10}, seed + 1), -0.6f), float32);
  return {random_input({16, 12}, seed),     y,
          random_input({12, 32}, seed + 2), random_input({32}, seed + 3),
          random_input({32, 10}, seed + 4), random_input({10}, seed + 5)};
}

TEST_F(GpuCapture, TrainingLoopMatchesTheStepByStepReplayBitForBit) {
  auto captured = compile(sgd_step);
  auto plain = compile(sgd_step);
  std::vector<Array> a = mlp_inputs(11), b = a;
  for (int step = 0; step < 6; ++step) {
    const Array x = random_input({16, 12}, 100 + static_cast<uint64_t>(step));
    a[0] = x;
    b[0] = x;
    std::vector<Array> ra = captured(a);
    setenv("KILN_COMPILE_CAPTURE", "0", 1);
    std::vector<Array> rb = plain(b);
    unsetenv("KILN_COMPILE_CAPTURE");
    eval(ra);
    eval(rb);
    for (size_t i = 0; i < ra.size(); ++i) expect_same_bits(ra[i], rb[i], "output " + std::to_string(i));
    for (size_t i = 0; i < 4; ++i) {
      a[2 + i] = ra[1 + i];
      b[2 + i] = rb[1 + i];
    }
  }
  EXPECT_EQ(captured.capture_count(), 1);
  EXPECT_EQ(plain.capture_count(), 0);
  EXPECT_EQ(captured.trace_count(), 1);
  // The loss went down: the loop trained.
}

TEST_F(GpuCapture, InputsAndEarlierOutputsStayUnchanged) {
  auto f = compile([](const std::vector<Array>& in) { return std::vector<Array>{exp(in[0]) * in[1]}; });
  const Array x1 = random_input({33, 7}, 1), y1 = random_input({33, 7}, 2), x2 = random_input({33, 7}, 3),
              y2 = random_input({33, 7}, 4);
  const Array r0 = f({x1, y1})[0];
  r0.eval();
  const std::vector<double> x1_before = test::values(x1);
  const Array r1 = f({x1, y1})[0];  // captured
  const Array r2 = f({x2, y2})[0];  // replayed with other values
  eval({r1, r2});
  EXPECT_EQ(f.capture_count(), 1);
  expect_same_bits(r1, r0, "the captured call");
  setenv("KILN_COMPILE_CAPTURE", "0", 1);
  const Array want2 = f({x2, y2})[0];
  expect_same_bits(r2, want2, "a later replay");
  EXPECT_EQ(test::values(x1), x1_before);
  expect_same_bits(r1, r0, "an earlier output after a later replay");
}

TEST_F(GpuCapture, StridedInputsAndPassThroughOutputs) {
  const Array k = random_input({5, 9}, 7);
  k.eval();
  auto f = compile([k](const std::vector<Array>& in) {
    return std::vector<Array>{in[0], add(in[0], k), k, sum(in[1], {0})};
  });
  const Array base = random_input({9, 5}, 8), other = random_input({4, 3}, 9);
  const Array x = transpose(base);  // a strided view
  std::vector<Array> r;
  for (int call = 0; call < 3; ++call) r = f({x, other});
  EXPECT_EQ(f.capture_count(), 1);
  EXPECT_EQ(r[0].id(), x.id());  // inputs pass through as themselves
  EXPECT_EQ(r[2].id(), k.id());  // and so do constants
  setenv("KILN_COMPILE_CAPTURE", "0", 1);
  expect_same_bits(r[1], add(x, k), "input + constant");
  expect_same_bits(r[3], sum(other, {0}), "sum");
}

TEST_F(GpuCapture, AGraphWithACpuStepIsReplayedStepByStep) {
  auto f = compile([](const std::vector<Array>& in) {
    const Array on_cpu = exp(in[0], Device::cpu);
    return std::vector<Array>{multiply(on_cpu, 2.0f)};
  });
  const Array x = random_input({8}, 3);
  Array r;
  for (int call = 0; call < 3; ++call) r = f({x})[0];
  EXPECT_EQ(f.capture_count(), 0);
  const std::vector<double> got = test::values(r), xs = test::values(x);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(got[i], 2.0 * std::exp(xs[i]), 1e-5 * std::exp(xs[i]));
}

TEST_F(GpuCapture, NewShapesCaptureTheirOwnProgram) {
  auto f = compile([](const std::vector<Array>& in) { return std::vector<Array>{tanh(in[0]) + 1.0f}; });
  for (int call = 0; call < 3; ++call) {
    f({random_input({4, 4}, 1)})[0].eval();
    f({random_input({6, 2}, 2)})[0].eval();
  }
  EXPECT_EQ(f.capture_count(), 2);
  const Array x = random_input({6, 2}, 5);
  const Array got = f({x})[0];
  setenv("KILN_COMPILE_CAPTURE", "0", 1);
  expect_same_bits(got, tanh(x) + 1.0f, "the second shape's program");
}

// A captured graph is recorded in order of depth: two independent chains of three products, then
// their sum, take one barrier per depth (3), not one per dependent dispatch (5 in the order of a
// depth-first walk, one chain after the other). The replayed values are those of the graph.
TEST_F(GpuCapture, IndependentWorkIsRecordedSideBySide) {
  const Array x1 = random_input({16, 16}, 30), x2 = random_input({16, 16}, 31),
              w = random_input({16, 16}, 32);
  eval({x1, x2, w});
  auto chains = [&](const Array& a0, const Array& b0) {
    Array a = a0, b = b0;
    for (int i = 0; i < 3; ++i) {
      a = matmul(a, w);
      b = matmul(b, w);
    }
    return add(a, b);
  };
  const auto program = detail::capture_eval(std::vector<Array>{chains(x1, x2)});
  EXPECT_EQ(gpu::captured_commands(*program), 7u);
  EXPECT_EQ(gpu::captured_barriers(*program), 3u);
  auto f = compile([&](const std::vector<Array>& in) { return std::vector<Array>{chains(in[0], in[1])}; });
  for (int call = 0; call < 2; ++call) f({x1, x2})[0].eval();
  EXPECT_EQ(f.capture_count(), 1);
  const Array got = f({x1, x2})[0];
  setenv("KILN_COMPILE_CAPTURE", "0", 1);
  expect_same_bits(got, chains(x1, x2), "the replay against the graph");
}

// replay_and_wait runs a captured program alone (what gpu_bench's replayed chain times): a chain of
// dependent elementwise dispatches recorded without fusion gives the step-by-step values, and a
// replay while capturing, or of no program, is refused.
TEST_F(GpuCapture, ReplayAndWaitRunsTheProgramAlone) {
  const Array x = random_input({1000}, 33);
  eval({x});
  auto chain = [&] {
    Array y = x;
    for (int i = 0; i < 40; ++i) y = (i % 2) ? multiply(y, 0.999f) : add(y, 0.001f);
    return y;
  };
  const Array y = chain();
  const auto program = detail::capture_eval(std::vector<Array>{y});
  EXPECT_EQ(gpu::captured_commands(*program), 40u);
  EXPECT_EQ(gpu::captured_barriers(*program), 39u);
  for (int replay = 0; replay < 2; ++replay) gpu::replay_and_wait(program);
  expect_same_bits(y, chain(), "the replayed chain against the graph");
  EXPECT_THROW(gpu::replay_and_wait(nullptr), ValueError);
  gpu::begin_capture();
  EXPECT_THROW(gpu::replay_and_wait(program), ValueError);
  gpu::abort_capture();
}

// A strided view that two products read (attention's per-head views, whose batch dims do not merge)
// is copied once per recording: one copy and two GEMMs.
// Attention's per-head views, whose batch dims do not merge into one, are read in place: the GEMM
// steps two batch strides (one command per product, no copy).
TEST_F(GpuCapture, AttentionHeadViewsAreReadWithoutACopy) {
  const Array base = random_input({2, 5, 3, 4}, 43), w = random_input({4, 6}, 44);
  eval({base, w});
  const Array heads = transpose(base, {0, 2, 1, 3});  // (B, H, T, D) of a (B, T, H, D) array
  const Array keys = transpose(base, {0, 2, 3, 1});   // (B, H, D, T)
  const auto program = detail::capture_eval(std::vector<Array>{matmul(heads, w), matmul(heads, keys)});
  EXPECT_EQ(gpu::captured_commands(*program), 2u);
}

// A view that the GEMM cannot read in place (three batch dims that merge neither into one nor into
// two) is copied once for all the products of one recording that read it.
TEST_F(GpuCapture, AViewReadByTwoProductsIsCopiedOnce) {
  const Array base = random_input({2, 3, 2, 5, 4}, 40);
  const Array w1 = random_input({4, 6}, 41), w2 = random_input({4, 7}, 42);
  eval({base, w1, w2});
  const Array view = transpose(base, {0, 2, 1, 3, 4});
  const auto program = detail::capture_eval(std::vector<Array>{matmul(view, w1), matmul(view, w2)});
  EXPECT_EQ(gpu::captured_commands(*program), 3u);
  // Evaluated at once, both products read the one copy right.
  const Array a = matmul(view, w1), b = matmul(view, w2);
  eval({a, b});
  const Array dense = contiguous(view, Device::cpu);
  test::expect_close(a, matmul(dense, w1, Device::cpu), 1e-5, 1e-5);
  test::expect_close(b, matmul(dense, w2, Device::cpu), 1e-5, 1e-5);
}

TEST_F(GpuCapture, ThreadsReplayOneProgramAtOnce) {
  auto f = compile([](const std::vector<Array>& in) {
    return std::vector<Array>{add(matmul(in[0], in[1]), 1.0f), sum(in[0], {1})};
  });
  const Array w = random_input({24, 8}, 42);
  f({random_input({16, 24}, 0), w})[0].eval();
  f({random_input({16, 24}, 0), w})[0].eval();
  ASSERT_EQ(f.capture_count(), 1);
  std::vector<std::vector<Array>> results(4);
  std::vector<Array> xs;
  for (uint64_t t = 0; t < 4; ++t) xs.push_back(random_input({16, 24}, 50 + t));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        results[t] = f({xs[t], w});
        eval(results[t]);
      }
    });
  for (auto& th : threads) th.join();
  setenv("KILN_COMPILE_CAPTURE", "0", 1);
  for (size_t t = 0; t < 4; ++t) {
    expect_same_bits(results[t][0], add(matmul(xs[t], w), 1.0f), "matmul, thread " + std::to_string(t));
    expect_same_bits(results[t][1], sum(xs[t], {1}), "sum, thread " + std::to_string(t));
  }
}

TEST_F(GpuCapture, AFailedSubmitIsReportedAndTheNextReplayWorks) {
  auto f = compile([](const std::vector<Array>& in) { return std::vector<Array>{sqrt(abs(in[0])) * 3.0f}; });
  const Array x = random_input({100}, 9);
  f({x})[0].eval();
  f({x})[0].eval();
  ASSERT_EQ(f.capture_count(), 1);
  const Array bad = f({x})[0];
  ctx().inject_submit_failure_for_testing(VK_ERROR_OUT_OF_DEVICE_MEMORY);
  EXPECT_THROW(bad.eval(), DeviceError);
  const Array good = f({x})[0];
  setenv("KILN_COMPILE_CAPTURE", "0", 1);
  expect_same_bits(good, sqrt(abs(x)) * 3.0f, "after the failure");
  expect_same_bits(bad, sqrt(abs(x)) * 3.0f, "the failed array, evaluated again");
}

TEST_F(GpuCapture, GradOfACapturedFunctionTracesItsSteps) {
  auto f = compile([](const std::vector<Array>& in) { return std::vector<Array>{sum(sin(in[0]) * in[0])}; });
  const Array x = random_input({10}, 4);
  for (int call = 0; call < 3; ++call) f({x})[0].eval();
  ASSERT_EQ(f.capture_count(), 1);
  const Array g = grad([&](const std::vector<Array>& in) { return f(in); })({x})[0];
  const std::vector<double> got = test::values(g), xs = test::values(x);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(got[i], std::cos(xs[i]) * xs[i] + std::sin(xs[i]), 1e-5);
}

TEST_F(GpuCapture, DeviceMemoryStaysFlatOverManyReplays) {
  auto step = compile(sgd_step);
  std::vector<Array> in = mlp_inputs(3);
  auto run = [&](int steps) {
    for (int s = 0; s < steps; ++s) {
      std::vector<Array> r = step(in);
      for (size_t i = 0; i < 4; ++i) in[2 + i] = r[1 + i];
      eval(r);
    }
  };
  run(5);
  const size_t warm = memory_stats().device_active_bytes;
  run(50);
  EXPECT_EQ(step.capture_count(), 1);
  EXPECT_LE(memory_stats().device_active_bytes, warm);
}

// A replay's copies in and out: byte_copy gives byte ranges for row-contiguous arrays of one dtype
// and size (an offset view included) and refuses the rest, which replays copy as strided views.
TEST_F(GpuCapture, DenseCopiesAreByteRangesOfRowContiguousArrays) {
  Array base = random_input({6, 4}, 71), other = random_input({3, 4}, 72);
  eval(base, other);
  const Array rows = slice(base, {2, 0}, {5, 4});  // rows 2..4: contiguous, 8 elements in
  const Array flipped = transpose(other), halves = astype(other, float16);
  eval(rows, flipped, halves);
  const auto c = detail::vk::byte_copy(rows, other);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->src_offset, 8u * 4u);
  EXPECT_EQ(c->dst_offset, 0u);
  EXPECT_EQ(c->bytes, 12u * 4u);
  EXPECT_FALSE(detail::vk::byte_copy(flipped, other).has_value());  // strided source
  EXPECT_FALSE(detail::vk::byte_copy(other, flipped).has_value());  // strided destination
  EXPECT_FALSE(detail::vk::byte_copy(other, halves).has_value());   // another dtype
  EXPECT_FALSE(detail::vk::byte_copy(other, base).has_value());     // another size
}

}  // namespace
}  // namespace kiln
