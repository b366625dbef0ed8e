// async_eval on the GPU: the scheduler submits a command buffer and does not wait for it; the next
// step's work is recorded against arrays still on the queue; whoever needs values completes the
// work; a failed submit is reported at the wait and the next evaluation works; host preparation
// overlaps the device's work. (tests/core/async_eval_test runs again with every op on the GPU.)
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <chrono>
#include <thread>
#include <vector>

#include "support/host_gate.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

class GpuAsync : public detail::vk::testing::VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(detail::gpu_work_in_flight(), 0u);
  }
  void TearDown() override { EXPECT_EQ(detail::gpu_work_in_flight(), 0u) << "work left in flight"; }
};

Array random_input(const Shape& shape, uint64_t seed) {
  return test::random_array(shape, float32, seed, -1.0, 1.0);
}

// One step of a chain of GPU work that depends on the last step's result.
Array step(const Array& x, const Array& w) { return tanh(matmul(x, w, Device::gpu), Device::gpu); }

// Waits (up to 20 s) until the scheduler has submitted `n` evaluations that nobody completed yet
// (work in flight is completed only by a thread that needs its values, or by a later synchronous
// submit).
bool wait_in_flight(size_t n) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (detail::gpu_work_in_flight() < n) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_F(GpuAsync, SchedulerSubmitsWithoutWaitingAndTheWaiterCompletes) {
  const Array w = random_input({64, 64}, 1), x = random_input({32, 64}, 2);
  eval(w, x);
  const Array y = step(step(x, w), w);
  async_eval({y});
  ASSERT_TRUE(wait_in_flight(1));
  // Submitted, not completed: the scheduler went on without waiting; only a waiter publishes it.
  EXPECT_FALSE(y.is_available());
  const std::vector<float> got = y.to_vector<float>();
  EXPECT_TRUE(y.is_available());
  EXPECT_EQ(detail::gpu_work_in_flight(), 0u);
  EXPECT_EQ(got, step(step(x, w), w).to_vector<float>());  // the same kernels, synchronously
}

TEST_F(GpuAsync, NextStepIsRecordedAgainstWorkStillOnTheQueue) {
  const Array w = random_input({64, 64}, 3), x = random_input({32, 64}, 4);
  eval(w, x);
  const Array y1 = step(x, w);
  async_eval({y1});
  ASSERT_TRUE(wait_in_flight(1));
  const Array y2 = step(y1, w);
  async_eval({y2});
  // y2's work went onto the queue while y1's is still there, not completed: recording it did not
  // wait for y1 (the queue orders the two).
  ASSERT_TRUE(wait_in_flight(2));
  EXPECT_FALSE(y1.is_available());
  const std::vector<float> got = y2.to_vector<float>();
  EXPECT_TRUE(y1.is_available());
  EXPECT_EQ(got, step(step(x, w), w).to_vector<float>());
}

TEST_F(GpuAsync, CpuReaderOfSubmittedWorkWaitsForIt) {
  const Array w = random_input({64, 64}, 5), x = random_input({32, 64}, 6);
  eval(w, x);
  const float expected = sum(step(x, w), false, Device::cpu).item<float>();
  const Array y = step(x, w);
  async_eval({y});
  ASSERT_TRUE(wait_in_flight(1));
  const Array total = sum(y, false, Device::cpu);  // reads y on the host
  EXPECT_EQ(total.item<float>(), expected);
  EXPECT_TRUE(y.is_available());
}

TEST_F(GpuAsync, FailedSubmitIsReportedAtTheWaitAndTheNextEvalWorks) {
  const Array w = random_input({64, 64}, 7), x = random_input({32, 64}, 8);
  eval(w, x);
  const Array xw = matmul(x, w, Device::gpu);
  xw.eval();  // on the device: the scheduler's only submit is the step's own
  const Array y = tanh(xw, Device::gpu);
  ctx().inject_submit_failure_for_testing(VK_ERROR_OUT_OF_DEVICE_MEMORY);
  async_eval({y});
  // Whether the scheduler's submit or (had this thread got to y first) this thread's own failed.
  EXPECT_THROW(y.wait(), DeviceError);
  // Reported once; evaluating again computes it.
  EXPECT_EQ(y.to_vector<float>(), tanh(xw, Device::gpu).to_vector<float>());
}

TEST_F(GpuAsync, LoopBuiltOnScheduledStepsMatchesTheSynchronousLoop) {
  const Array w = random_input({48, 48}, 9), x0 = random_input({16, 48}, 10);
  auto run = [&](bool async) {
    Array x = x0;
    std::vector<Array> sums;
    for (int s = 0; s < 30; ++s) {
      x = step(x, w) * 1.5f;
      sums.push_back(sum(x, false, Device::gpu));
      if (async)
        async_eval({x, sums.back()});
      else
        eval(x, sums.back());
      if (s > 0) (void)sums[sums.size() - 2].item<float>();  // logs the previous step, as loops do
    }
    std::vector<float> out = x.to_vector<float>();
    for (const Array& v : sums) out.push_back(v.item<float>());
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

// Each step's device work ends in a gated copy (support/host_gate.h) that the host opens only when
// it goes on to prepare the next step: with async_eval the device work is still pending at that
// point; with eval it is not (each gate times out first). No timing is involved.
TEST_F(GpuAsync, HostPreparationOverlapsDeviceWork) {
  const Array w = random_input({384, 384}, 11), x0 = random_input({384, 384}, 12);
  eval(w, x0);
  constexpr int kSteps = 6;
  auto loop = [&](bool async, std::chrono::milliseconds deadline) {
    const test::HostGates gates(deadline);
    Array x = x0;
    for (int s = 0; s < kSteps; ++s) {
      if (s > 0) gates.open(s - 1);  // the host prepares step s
      for (int i = 0; i < 4; ++i) x = step(x, w);
      x = gates.gated_copy(x, s);
      if (async)
        async_eval({x});
      else
        eval(x);
    }
    gates.open(kSteps - 1);
    x.wait();
    return std::pair{gates.timed_out(), x.to_vector<float>()};
  };
  const auto [async_late, async_x] = loop(true, std::chrono::seconds(30));
  EXPECT_EQ(async_late, std::vector<int>{}) << "these steps' work was done before async_eval returned";
  const auto [sync_late, sync_x] = loop(false, std::chrono::milliseconds(20));
  EXPECT_EQ(sync_late, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(sync_x, async_x);
}

}  // namespace
}  // namespace kiln
