// async_eval on the GPU: the scheduler submits a command buffer and does not wait for it; the next
// step's work is recorded against arrays still on the queue; whoever needs values completes the
// work; a failed submit is reported at the wait and the next evaluation works; host preparation
// overlaps the device's work. (tests/core/async_eval_test runs again with every op on the GPU.)
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <chrono>
#include <thread>
#include <vector>

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

// The device's work for a step takes about as long as the host's preparation of the next: waiting
// for each step serially costs their sum, the asynchronous loop about the larger of the two.
TEST_F(GpuAsync, HostPreparationOverlapsDeviceWork) {
  const Array w = random_input({384, 384}, 11), x0 = random_input({384, 384}, 12);
  eval(w, x0);
  auto device_work = [&](Array x) {
    for (int i = 0; i < 4; ++i) x = step(x, w);
    return x;
  };
  // How long one step takes on this device (lavapipe here; CI machines differ).
  device_work(x0).eval();
  const auto t0 = Clock::now();
  device_work(x0).eval();
  const auto work = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  constexpr int kSteps = 6;
  auto loop = [&](bool async) {
    const auto start = Clock::now();
    Array x = x0;
    for (int s = 0; s < kSteps; ++s) {
      std::this_thread::sleep_for(work);  // host-side preparation of the step
      x = device_work(x);
      if (async)
        async_eval({x});
      else
        eval(x);
    }
    x.wait();
    return std::pair{std::chrono::duration<double>(Clock::now() - start).count(), x.to_vector<float>()};
  };
  const auto [sync_s, sync_x] = loop(false);
  const auto [async_s, async_x] = loop(true);
  EXPECT_EQ(sync_x, async_x);
  // Serial: about 2 * kSteps * work; overlapped: about (kSteps + 1) * work. A generous bound.
  EXPECT_LT(async_s, 0.85 * sync_s) << "sync " << sync_s << " s, async " << async_s
                                    << " s, one step's device work " << work.count() << " us";
}

}  // namespace
}  // namespace kiln
