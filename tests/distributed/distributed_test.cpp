// kiln::distributed: init, the collectives (all dtypes and layouts) against float64 references, their
// vjp/jvp/vmap rules, compile, send/recv. Runs as one process (every collective the identity) and,
// with KILN_MPI, on two ranks under mpirun (tests/distributed/CMakeLists.txt). Every test runs the
// same collectives in the same order on every rank.
#include "kiln/core/distributed/distributed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "distributed/distributed_test_util.h"
#include "kiln/core/compile.h"
#include "kiln/core/distributed/communicator_impl.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/stream.h"
#include "kiln/core/transforms.h"
#include "support/error_of.h"

namespace kiln::distributed {
namespace {

using test::error_of;
using test::expect_near;
using test::rank_input;
using test::values;

// Σ over ranks of rank_input(r, ...), in float64.
std::vector<double> sum_of_inputs(int size, const Shape& shape, Dtype dtype, uint64_t salt = 0) {
  std::vector<double> total(static_cast<size_t>(shape_size(shape)), 0.0);
  for (int r = 0; r < size; ++r) {
    const std::vector<double> v = values(rank_input(r, shape, dtype, salt));
    for (size_t i = 0; i < v.size(); ++i) total[i] += v[i];
  }
  return total;
}

TEST(DistributedInit, EveryCallReturnsTheSameGroup) {
  const Group g = init();
  EXPECT_EQ(init(), g);
  EXPECT_GE(g.rank(), 0);
  EXPECT_LT(g.rank(), g.size());
  const detail::LauncherInfo launcher = detail::detect_launcher();
  if (launcher.size > 0) {  // under mpirun: the world of MPI
    EXPECT_EQ(g.backend(), "mpi");
    EXPECT_EQ(g.size(), launcher.size);
    EXPECT_EQ(g.rank(), launcher.rank);
    EXPECT_TRUE(is_available());
  } else {
    EXPECT_EQ(g.backend(), "single");
    EXPECT_EQ(g.size(), 1);
  }
  const char* env = std::getenv("KILN_DISTRIBUTED_TIMEOUT");
  EXPECT_DOUBLE_EQ(g.timeout(), env && *env ? std::atof(env) : 60.0);
  const int64_t before = g.collectives();
  g.barrier();
  EXPECT_EQ(g.collectives(), before + 1);
}

TEST(DistributedInit, DetectsALauncherFromItsVariables) {
  const detail::LauncherInfo real = detail::detect_launcher();
  if (real.size > 0) {  // under mpirun: Open MPI's variables
    EXPECT_EQ(real.variable, "OMPI_COMM_WORLD_SIZE");
    return;
  }
  ::setenv("PMI_SIZE", "4", 1);
  ::setenv("PMI_RANK", "2", 1);
  const detail::LauncherInfo pmi = detail::detect_launcher();
  EXPECT_EQ(pmi.size, 4);
  EXPECT_EQ(pmi.rank, 2);
  EXPECT_EQ(pmi.variable, "PMI_SIZE");
  ::setenv("PMI_SIZE", "four", 1);  // not a launcher's value: ignored
  EXPECT_EQ(detail::detect_launcher().size, 0);
  ::unsetenv("PMI_SIZE");
  ::unsetenv("PMI_RANK");
  EXPECT_EQ(detail::detect_launcher().size, 0);
}

TEST(DistributedInit, TimeoutFromTheEnvironmentIsChecked) {
  EXPECT_DOUBLE_EQ(detail::parse_timeout("2.5", 60), 2.5);
  EXPECT_DOUBLE_EQ(detail::parse_timeout(nullptr, 60), 60);
  EXPECT_DOUBLE_EQ(detail::parse_timeout("", 7), 7);
  for (const char* bad : {"abc", "-1", "0", "inf", "nan", "3s", " 2"})
    EXPECT_NE(error_of<ValueError>([&] { detail::parse_timeout(bad, 60); }).find("KILN_DISTRIBUTED_TIMEOUT"),
              std::string::npos)
        << bad;
}

TEST(DistributedInit, SetTimeoutIsShared) {
  const Group g = init();
  const double old = g.timeout();
  EXPECT_THROW(g.set_timeout(0), ValueError);
  EXPECT_THROW(g.set_timeout(-1), ValueError);
  EXPECT_THROW(g.set_timeout(std::nan("")), ValueError);
  g.set_timeout(12.5);
  EXPECT_DOUBLE_EQ(init().timeout(), 12.5);
  g.set_timeout(old);
}

TEST(Collectives, AllSumOfEveryDtypeAgainstAFloat64Reference) {
  const Group g = init();
  for (Dtype t : {float32, float64, float16, bfloat16, int32, int64, uint32, uint8, int8}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Array x = rank_input(g.rank(), {3, 5}, t);
    const Array y = all_sum(x, g);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(y.shape(), (Shape{3, 5}));
    expect_near(values(y), sum_of_inputs(g.size(), {3, 5}, t), test::tolerance(t));
  }
}

// A GPU array is staged through host memory: the collective runs on the CPU, after the GPU work that
// produced its input was submitted; a GPU op then reads the result (uploaded once). Gradients flow
// back onto the GPU the same way.
TEST(Collectives, GpuArraysAreStagedThroughHostMemory) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no Vulkan device";
  const Group g = init();
  const Array x = rank_input(g.rank(), {4, 3}, float32, 6);
  const Array w = rank_input(g.rank(), {4, 3}, float32, 7);
  const Array on_gpu = multiply(x, w, Device::gpu);  // squared below: sums stay positive
  const Array total = log(all_sum(multiply(on_gpu, on_gpu, Device::gpu), g), Device::gpu);
  std::vector<double> expected(12, 0.0);
  for (int r = 0; r < g.size(); ++r) {
    const std::vector<double> a = values(rank_input(r, {4, 3}, float32, 6));
    const std::vector<double> b = values(rank_input(r, {4, 3}, float32, 7));
    for (size_t i = 0; i < a.size(); ++i) expected[i] += (a[i] * b[i]) * (a[i] * b[i]);
  }
  for (double& e : expected) e = std::log(e);  // the sums are large: their logs compare absolutely
  expect_near(values(total), expected, 1e-5);

  // d/dx sum(all_sum(x * w)) = all_sum(1) * w = size * w, computed through GPU multiplies.
  const auto f = [&](const std::vector<Array>& in) {
    return std::vector<Array>{sum(all_sum(multiply(in[0], w, Device::gpu), g))};
  };
  std::vector<double> dx_expected = values(w);
  for (double& e : dx_expected) e *= g.size();
  expect_near(values(grad(f)({x})[0]), dx_expected, 1e-5);
}

TEST(Collectives, AllSumOfViewsScalarsAndEmptyArrays) {
  const Group g = init();
  // A transposed view, a broadcast (stride 0) view, a scalar and an empty array: all row-major out.
  const Array base = rank_input(g.rank(), {4, 3}, float32);
  const std::vector<double> base_sum = sum_of_inputs(g.size(), {4, 3}, float32);
  const Array t = all_sum(transpose(base), g);
  std::vector<double> want(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want[j * 4 + i] = base_sum[i * 3 + j];
  expect_near(values(t), want, 1e-4);
  const Array row = rank_input(g.rank(), {3}, float64);
  const std::vector<double> row_sum = sum_of_inputs(g.size(), {3}, float64);
  const std::vector<double> b = values(all_sum(broadcast_to(row, {2, 3}), g));
  expect_near(b, {row_sum[0], row_sum[1], row_sum[2], row_sum[0], row_sum[1], row_sum[2]}, 1e-10);
  const Array scalar = all_sum(Array(static_cast<int32_t>(g.rank() + 1)), g);
  EXPECT_EQ(scalar.item<int32_t>(), g.size() * (g.size() + 1) / 2);
  const Array empty = all_sum(zeros({0, 3}), g);
  empty.eval();
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
}

TEST(Collectives, AllMeanKeepsFloatsAndPromotesIntegers) {
  const Group g = init();
  const Array x = rank_input(g.rank(), {6}, float32, 1);
  const Array m = all_mean(x, g);
  EXPECT_EQ(m.dtype(), float32);
  std::vector<double> want = sum_of_inputs(g.size(), {6}, float32, 1);
  for (double& v : want) v /= g.size();
  expect_near(values(m), want, 1e-5);
  const Array mi = all_mean(Array({static_cast<int32_t>(g.rank()), 3}), g);
  EXPECT_TRUE(is_floating(mi.dtype()));
  expect_near(values(mi), {(g.size() - 1) / 2.0, 3.0}, 1e-6);
}

TEST(Collectives, AllGatherConcatenatesInRankOrder) {
  const Group g = init();
  for (Dtype t : {float32, int64, bfloat16, bool_}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Array x = t == bool_ ? astype(rank_input(g.rank(), {2, 3}, float32, 2) > 0.0, bool_)
                               : rank_input(g.rank(), {2, 3}, t, 2);
    const Array y = all_gather(x, g);
    EXPECT_EQ(y.shape(), (Shape{2 * g.size(), 3}));
    std::vector<double> want;
    for (int r = 0; r < g.size(); ++r) {
      const Array xr =
          t == bool_ ? astype(rank_input(r, {2, 3}, float32, 2) > 0.0, bool_) : rank_input(r, {2, 3}, t, 2);
      const std::vector<double> v = values(xr);
      want.insert(want.end(), v.begin(), v.end());
    }
    expect_near(values(y), want, 0);
  }
  // A scalar gathers to (size,); a transposed view is sent row-major.
  const Array s = all_gather(Array(static_cast<float>(10 * g.rank())), g);
  EXPECT_EQ(s.shape(), (Shape{g.size()}));
  for (int r = 0; r < g.size(); ++r) EXPECT_EQ(values(s)[r], 10.0 * r);
  const Array t = all_gather(transpose(reshape(arange(6) + 6 * g.rank(), {2, 3})), g);
  EXPECT_EQ(t.shape(), (Shape{3 * g.size(), 2}));
  for (int r = 0; r < g.size(); ++r) {
    const std::vector<double> v = values(t);
    expect_near({v.begin() + 6 * r, v.begin() + 6 * r + 6},
                {6.0 * r, 6.0 * r + 3, 6.0 * r + 1, 6.0 * r + 4, 6.0 * r + 2, 6.0 * r + 5}, 0);
  }
}

TEST(Collectives, BroadcastGivesEveryRankTheRootsArray) {
  const Group g = init();
  for (int root : {0, g.size() - 1}) {
    const Array y = broadcast(rank_input(g.rank(), {4, 2}, float64, 3), root, g);
    expect_near(values(y), values(rank_input(root, {4, 2}, float64, 3)), 0);
  }
  EXPECT_THROW(broadcast(Array(1.0f), g.size(), g), ValueError);
  EXPECT_THROW(broadcast(Array(1.0f), -1, g), ValueError);
}

TEST(Collectives, BadArgumentsAreErrorsAtTheCall) {
  const Group g = init();
  EXPECT_THROW(all_sum(Array(), g), ValueError);
  EXPECT_THROW(all_gather(Array(), g), ValueError);
  EXPECT_THROW(all_mean(Array(), g), ValueError);
  EXPECT_THROW(broadcast(Array(), 0, g), ValueError);
  EXPECT_THROW(send(Array(), 0, g), ValueError);
  EXPECT_THROW(all_sum(Array({true, false}), g), DtypeError);
  EXPECT_THROW(send(Array(1.0f), g.rank(), g), ValueError);  // itself (or no other rank)
  EXPECT_THROW(recv({2}, float32, g.rank(), g), ValueError);
  EXPECT_THROW(send(Array(1.0f), g.size(), g), ValueError);
  EXPECT_THROW(recv({-1}, float32, 0, g), ShapeError);
  if (g.size() == 1) {
    EXPECT_NE(error_of<ValueError>([&] { send(Array(1.0f), 0, g); }).find("no other rank"),
              std::string::npos);
    EXPECT_NE(error_of<ValueError>([&] { recv({1}, float32, 0, g); }).find("no other rank"),
              std::string::npos);
  }
}

// d/dx of sum(all_sum(x) * w_rank): every rank's output depends on every x, so the gradient is
// the all_sum of the cotangents, Σ_r w_r.
TEST(CollectiveGradients, AllSumVjpIsTheAllSumOfCotangents) {
  const Group g = init();
  const Array x = rank_input(g.rank(), {2, 3}, float64, 4);
  const Array w = rank_input(g.rank(), {2, 3}, float64, 5);
  const auto f = [&](const std::vector<Array>& in) { return std::vector<Array>{sum(all_sum(in[0], g) * w)}; };
  const Array dx = grad(f)({x})[0];
  expect_near(values(dx), sum_of_inputs(g.size(), {2, 3}, float64, 5), 1e-10);
}

// d/dx of sum(all_gather(x) * c_rank) is this rank's slice of c_rank.
TEST(CollectiveGradients, AllGatherVjpIsTheRanksSlice) {
  const Group g = init();
  const Array x = rank_input(g.rank(), {2, 3}, float64, 6);
  const Array c = rank_input(g.rank(), {2 * g.size(), 3}, float64, 7);
  const auto f = [&](const std::vector<Array>& in) {
    return std::vector<Array>{sum(all_gather(in[0], g) * c)};
  };
  const std::vector<double> dx = values(grad(f)({x})[0]), cv = values(c);
  expect_near(dx, {cv.begin() + 6 * g.rank(), cv.begin() + 6 * g.rank() + 6}, 0);
  // A scalar: (size,) gathered, its own element back.
  const auto fs = [&](const std::vector<Array>& in) {
    return std::vector<Array>{sum(all_gather(in[0], g) * arange(1.0, g.size() + 1.0, 1.0, float64))};
  };
  EXPECT_DOUBLE_EQ(grad(fs)({Array(2.0)})[0].item<double>(), g.rank() + 1.0);
}

// y = broadcast(x, root): only the root's x matters, so the root gets Σ_r cotangent_r, others 0.
TEST(CollectiveGradients, BroadcastVjpSumsTheCotangentsOnTheRoot) {
  const Group g = init();
  const int root = g.size() - 1;
  const Array x = rank_input(g.rank(), {4}, float64, 8);
  const Array w = rank_input(g.rank(), {4}, float64, 9);
  const auto f = [&](const std::vector<Array>& in) {
    return std::vector<Array>{sum(broadcast(in[0], root, g) * w)};
  };
  const std::vector<double> dx = values(grad(f)({x})[0]);
  if (g.rank() == root)
    expect_near(dx, sum_of_inputs(g.size(), {4}, float64, 9), 1e-10);
  else
    expect_near(dx, {0, 0, 0, 0}, 0);
}

TEST(CollectiveGradients, JvpsAreTheCollectivesOfTheTangents) {
  const Group g = init();
  const Array x = rank_input(g.rank(), {3}, float64, 10);
  const Array t = rank_input(g.rank(), {3}, float64, 11);
  const auto [ys, ts] = jvp(
      [&](const std::vector<Array>& in) {
        return std::vector<Array>{all_sum(in[0] * in[0], g), all_gather(in[0], g), broadcast(in[0], 0, g)};
      },
      {x}, {t});
  // d(all_sum(x^2)) = all_sum(2 x t); the others are linear.
  std::vector<double> want(3, 0.0);
  std::vector<double> gathered;
  for (int r = 0; r < g.size(); ++r) {
    const std::vector<double> xr = values(rank_input(r, {3}, float64, 10)),
                              tr = values(rank_input(r, {3}, float64, 11));
    for (int i = 0; i < 3; ++i) want[i] += 2 * xr[i] * tr[i];
    gathered.insert(gathered.end(), tr.begin(), tr.end());
  }
  expect_near(values(ts[0]), want, 1e-10);
  expect_near(values(ts[1]), gathered, 0);
  expect_near(values(ts[2]), values(rank_input(0, {3}, float64, 11)), 0);
}

// vmap over any axis gives what the collective of each example gives.
TEST(CollectiveGradients, VmapMatchesTheCollectivePerExample) {
  const Group g = init();
  const Array x = rank_input(g.rank(), {2, 4, 3}, float32, 12);  // 4 examples of (2, 3) along axis 1
  const auto per_example = [&](const std::function<Array(const Array&)>& f) {
    std::vector<Array> out;
    for (int64_t b = 0; b < 4; ++b) out.push_back(f(squeeze(slice(x, {0, b, 0}, {2, b + 1, 3}), 1)));
    return stack(out, 0);
  };
  const auto check = [&](const std::function<Array(const Array&)>& f) {
    const Array batched =
        vmap([&](const std::vector<Array>& in) { return std::vector<Array>{f(in[0])}; }, {1}, {0})({x})[0];
    expect_near(values(batched), values(per_example(f)), 1e-5);
  };
  check([&](const Array& e) { return all_sum(e, g); });
  check([&](const Array& e) { return all_gather(e, g); });
  check([&](const Array& e) { return broadcast(e, g.size() - 1, g); });
  // Scalars per example: (4,) of this rank gathers to (4, size).
  const Array s = rank_input(g.rank(), {4}, float32, 13);
  const Array gs =
      vmap([&](const std::vector<Array>& in) { return std::vector<Array>{all_gather(in[0], g)}; })({s})[0];
  EXPECT_EQ(gs.shape(), (Shape{4, g.size()}));
  for (int r = 0; r < g.size(); ++r)
    for (int64_t b = 0; b < 4; ++b)
      EXPECT_EQ(values(gs)[b * g.size() + r], values(rank_input(r, {4}, float32, 13))[b]);
}

TEST(CollectiveGradients, CompiledFunctionsCommunicateOnEveryCall) {
  const Group g = init();
  const CompiledFunction f = compile([&](const std::vector<Array>& in) {
    return std::vector<Array>{all_sum(in[0] * 2.0f, g) + all_sum(in[0] * 2.0f, g)};
  });
  for (uint64_t salt : {14, 15}) {
    const Array y = f({rank_input(g.rank(), {5}, float32, salt)})[0];
    std::vector<double> want = sum_of_inputs(g.size(), {5}, float32, salt);
    for (double& v : want) v *= 4;
    expect_near(values(y), want, 1e-4);
  }
}

TEST(PointToPoint, SendAndRecvPairUp) {
  const Group g = init();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  // Rank 0 sends to the last rank, which answers; ranks in between take no part.
  const int last = g.size() - 1;
  const Array x = rank_input(g.rank(), {3, 2}, float32, 16);
  if (g.rank() == 0) {
    const Array sent = send(transpose(x), last, g);  // a view: sent row-major
    expect_near(values(sent), values(transpose(x)), 0);
    const Array back = recv({4}, int64, last, g);
    expect_near(values(back), {0, 1, 2, 3}, 0);
  } else if (g.rank() == last) {
    const Array got = recv({2, 3}, float32, 0, g);
    expect_near(values(got), values(transpose(rank_input(0, {3, 2}, float32, 16))), 0);
    send(astype(arange(4), int64), 0, g).eval();
  }
}

// A two-stage pipeline: rank 0 computes h = x * w and sends it; the last rank computes the loss
// sum(h^2) and sends dL/dh back. On rank 0, the vjp of send receives it: dL/dw = x * 2 h.
TEST(PointToPoint, SendVjpReceivesTheCotangentFromTheReceiver) {
  const Group g = init();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  const int last = g.size() - 1;
  const Array x = rank_input(0, {4}, float64, 17), w = rank_input(0, {4}, float64, 18);
  if (g.rank() == 0) {
    const auto [outs, grads] =
        vjp([&](const std::vector<Array>& in) { return std::vector<Array>{send(x * in[0], last, g)}; }, {w},
            {zeros({4}, float64)});
    std::vector<double> want;
    for (int i = 0; i < 4; ++i) want.push_back(values(x)[i] * 2 * values(x)[i] * values(w)[i]);
    expect_near(values(grads[0]), want, 1e-10);
  } else if (g.rank() == last) {
    const Array h = recv({4}, float64, 0, g);
    const Array dh =
        grad([](const std::vector<Array>& in) { return std::vector<Array>{sum(in[0] * in[0])}; })({h})[0];
    send(dh, 0, g).eval();
  }
}

}  // namespace
}  // namespace kiln::distributed
