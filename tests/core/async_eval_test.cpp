// async_eval: results equal the synchronous ones bit for bit, host work overlaps scheduled work,
// errors of scheduled work surface at the wait (and the next evaluation works), waits from other
// threads, values traced while they are evaluated, and memory stays flat over a long asynchronous
// run.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "kiln/core/primitive.h"
#include "kiln/kiln.h"
#include "support/host_gate.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::random_array;

// A small regression model trained by hand-written SGD: the step is built lazily from the
// previous step's (possibly still running) parameters.
struct Model {
  Array w1, b1, w2;
};
std::pair<Model, Array> sgd_step(const Model& m, const Array& x, const Array& y) {
  auto loss_fn = [&](const std::vector<Array>& p) {
    const Array h = tanh(matmul(x, p[0]) + p[1]);
    const Array d = matmul(h, p[2]) - y;
    return std::vector<Array>{mean(d * d)};
  };
  auto [out, g] = value_and_grad(loss_fn, {0, 1, 2})({m.w1, m.b1, m.w2});
  return {{m.w1 - 0.1 * g[0], m.b1 - 0.1 * g[1], m.w2 - 0.1 * g[2]}, out[0]};
}

std::vector<float> train(bool async, int steps) {
  Model m{random_array({16, 32}, float32, 1), random_array({32}, float32, 2),
          random_array({32, 4}, float32, 3)};
  std::vector<Array> losses;
  for (int s = 0; s < steps; ++s) {
    const Array x = random_array({64, 16}, float32, 100 + s), y = random_array({64, 4}, float32, 200 + s);
    auto [next, loss] = sgd_step(m, x, y);
    m = next;
    losses.push_back(loss);
    if (async)
      async_eval({m.w1, m.b1, m.w2, loss});
    else
      eval(m.w1, m.b1, m.w2, loss);
  }
  std::vector<float> out;
  for (const Array& l : losses) out.push_back(l.item<float>());
  for (const Array& p : {m.w1, m.b1, m.w2})
    for (float v : p.to_vector<float>()) out.push_back(v);
  return out;
}

TEST(AsyncEval, LoopIsBitIdenticalToSynchronousLoop) {
  const std::vector<float> sync = train(false, 25), async = train(true, 25);
  ASSERT_EQ(sync.size(), async.size());
  for (size_t i = 0; i < sync.size(); ++i) ASSERT_EQ(sync[i], async[i]) << "value " << i;
}

// Each step's work is a gated copy (support/host_gate.h) that the host opens only when it goes on to
// prepare the next step: with async_eval every step's work is still pending at that point; with
// eval none is (each gate times out first), so the check tells the two apart without timing.
TEST(AsyncEval, HostPreparationOverlapsScheduledWork) {
  constexpr int kSteps = 6;
  auto loop = [&](bool async, std::chrono::milliseconds deadline) {
    const test::HostGates gates(deadline);
    Array x = random_array({8}, float32, 5);
    for (int s = 0; s < kSteps; ++s) {
      if (s > 0) gates.open(s - 1);  // the host prepares step s
      x = gates.gated_copy(x + 1.0f, s);
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

TEST(AsyncEval, ErrorIsRaisedAtTheWaitAndTheNextEvaluationWorks) {
  const Array a = random_array({10}, float32, 7);
  const Array bad_index = Array(std::vector<int32_t>{1, 2, 3}, {3}) + 100;  // known only at eval time
  // On the CPU, which checks indices known only at eval time (the GPU cannot before its submit:
  // docs/gpu.md); in the gpu. pass the index and z are computed on the GPU around it.
  const Array y = take(a, bad_index, Device::cpu);
  const Array z = y * 2.0f;
  async_eval({z});
  EXPECT_THROW(z.wait(), ValueError);
  EXPECT_THROW(y.to_vector<float>(), ValueError);
  EXPECT_THROW(eval(y), ValueError);
  // Nothing is stuck: the same inputs with good indices evaluate, synchronously and not.
  const Array good = take(a, Array(std::vector<int32_t>{1, 2, 3}, {3}));
  async_eval({good});
  EXPECT_EQ(good.to_vector<float>(),
            (std::vector<float>{a.to_vector<float>()[1], a.to_vector<float>()[2], a.to_vector<float>()[3]}));
}

TEST(AsyncEval, WaitsFromOtherThreadsAndSchedulingFromMany) {
  const Array shared = random_array({32, 32}, float32, 9);
  eval(shared);
  constexpr int kThreads = 4;
  std::vector<Array> results(kThreads);
  // Each thread schedules its own graph over the shared array...
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t)
    producers.emplace_back([&, t] {
      Array r = shared;
      for (int i = 0; i < 10; ++i) r = tanh(matmul(r, shared) * (0.01f * static_cast<float>(t + 1)));
      async_eval({r});
      results[t] = r;
    });
  for (auto& th : producers) th.join();
  // ...and other threads wait on them.
  std::vector<std::vector<float>> got(kThreads);
  std::vector<std::thread> waiters;
  for (int t = 0; t < kThreads; ++t)
    waiters.emplace_back([&, t] { got[t] = results[(t + 1) % kThreads].to_vector<float>(); });
  for (auto& th : waiters) th.join();
  for (int t = 0; t < kThreads; ++t) {
    Array r = shared;
    for (int i = 0; i < 10; ++i)
      r = tanh(matmul(r, shared) * (0.01f * static_cast<float>((t + 1) % kThreads + 1)));
    EXPECT_EQ(got[t], r.to_vector<float>()) << "thread " << t;
  }
}

// Tracing a primal (grad's make_tracer) while an asynchronous evaluation of it may be detaching
// its node: the primal's primitive is read once, not checked and then read (a TSan run crashed
// when the evaluation detached the node between the two). The window is narrow: these rounds
// exercise it and check the gradients, but did not reproduce the crash on demand.
TEST(AsyncEval, TracingAValueWhileItIsEvaluated) {
  const Array base = random_array({256}, float32, 7);
  for (int i = 0; i < 300; ++i) {
    const Array p = tanh(base * (0.01f * static_cast<float>(i + 1)));
    async_eval({p});
    auto [out, g] = value_and_grad(
        [](const std::vector<Array>& in) { return std::vector<Array>{sum(in[0] * in[0])}; }, {0})({p});
    const std::vector<float> pv = p.to_vector<float>(), gv = g[0].to_vector<float>();
    ASSERT_EQ(gv.size(), pv.size());
    for (size_t j = 0; j < pv.size(); j += 37) ASSERT_FLOAT_EQ(gv[j], 2.0f * pv[j]) << "round " << i;
  }
}

// The usual loop: schedule step n, then wait for step n - 1's loss (to log it). At most a step or
// two is outstanding, so memory measured at the same point of steps 100 and 300 is the same; a
// leak of one step's arrays per step would add megabytes.
TEST(AsyncEval, MemoryStaysFlatOverALongRun) {
  Model m{random_array({16, 32}, float32, 1), random_array({32}, float32, 2),
          random_array({32, 4}, float32, 3)};
  const Array x = random_array({64, 16}, float32, 11), y = random_array({64, 4}, float32, 12);
  Array previous_loss;
  size_t at_100 = 0;
  for (int s = 0; s <= 300; ++s) {
    auto [next, loss] = sgd_step(m, x, y);
    m = next;
    async_eval({m.w1, m.b1, m.w2, loss});
    if (previous_loss.valid()) {
      EXPECT_TRUE(std::isfinite(previous_loss.item<float>()));
    }
    previous_loss = loss;
    // Measured with the step's work done, so the figures compare the memory kept alive, not how
    // far the scheduler happens to lag behind (a few queued steps under load).
    if (s == 100) {
      for (const Array& a : {m.w1, m.b1, m.w2, loss}) a.wait();
      at_100 = memory_stats().active_bytes;
    }
  }
  for (const Array& a : {m.w1, m.b1, m.w2, previous_loss}) a.wait();
  // The scheduler may still be unwinding a job it took (its tape holds that step's intermediates
  // until the walk returns; under ASan that was 68 KiB past the bound): give it time. A leak never
  // comes back down.
  const size_t bound = at_100 + 64 * 1024;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (memory_stats().active_bytes > bound && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LE(memory_stats().active_bytes, bound) << "at step 100: " << at_100;
}

TEST(AsyncEval, InsideATraceEvaluatesAtOnce) {
  auto f = [](const Array& x) {
    const Array y = x * x;
    async_eval({y});
    return sum(y);
  };
  const Array x = random_array({5}, float64, 13);
  const Array g = grad(ScalarFn(f))(x);
  test::expect_close(g, test::values(2.0 * x), 1e-12, 1e-12);
}

}  // namespace
}  // namespace kiln
