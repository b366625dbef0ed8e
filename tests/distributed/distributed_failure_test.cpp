// A rank that stops taking part, or dies, gives the other ranks a RuntimeError after the group's
// timeout instead of a hang. Run on two ranks by tests/distributed/CMakeLists.txt, one test per
// mpirun (the group is unusable after the failure), with KILN_DISTRIBUTED_TIMEOUT=1. As one
// process every test is skipped.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "kiln/core/distributed/distributed.h"
#include "kiln/core/ops/creation.h"
#include "support/error_of.h"

namespace kiln::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// all_sum on every rank but the last, which leaves: through `leave`. The others must get the
// timeout error, naming the collective, the rank and the wait, and then find the group unusable.
void expect_timeout_when_the_last_rank_leaves(void (*leave)()) {
  const Group g = init();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  ASSERT_DOUBLE_EQ(g.timeout(), 1.0) << "run with KILN_DISTRIBUTED_TIMEOUT=1";
  g.barrier();  // every rank has started
  if (g.rank() == g.size() - 1) return leave();
  const auto start = Clock::now();
  const std::string msg = test::error_of<RuntimeError>([&] { all_sum(ones({1000}), g).eval(); });
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(msg.find(fmt::format("[all_sum] communication failed: rank {} of {}", g.rank(), g.size())),
            std::string::npos)
      << msg;
  EXPECT_TRUE(msg.find("timed out after 1.0 s") != std::string::npos ||
              msg.find("MPI failed") != std::string::npos)
      << msg;
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 10.0);
  const std::string again = test::error_of<RuntimeError>([&] { all_gather(ones({2}), g).eval(); });
  EXPECT_NE(again.find("[all_gather] the group failed earlier"), std::string::npos) << again;
  if (!::testing::Test::HasFailure()) std::printf("rank %d caught: %s\n", g.rank(), msg.c_str());
}

// The last rank returns from the test without taking part (as after an exception of its own) and
// ends normally.
TEST(DistributedFailure, ARankThatStopsGivesTheOthersAnError) {
  expect_timeout_when_the_last_rank_leaves([] {});
}

// The last rank dies (no MPI_Finalize, exit code 3). Run with Open MPI's
// orte_abort_on_non_zero_status=0: by default mpirun itself ends the job at once, with its own
// message naming the rank that died.
TEST(DistributedFailure, ARankThatDiesGivesTheOthersAnError) {
  expect_timeout_when_the_last_rank_leaves([] { std::_Exit(3); });
}

}  // namespace
}  // namespace kiln::distributed
