// Reductions on the GPU through the ordinary API: every ReduceKind and argmax/argmin on
// Device::gpu against the same ops on the CPU, over axis sets, dtypes, strided inputs, keepdims,
// long rows (the two-pass split), many short rows, NaNs and ties. Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/reduce_kernels.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

using ReduceFn = std::function<Array(const Array&, const Axes&, bool, StreamOrDevice)>;

struct Kind {
  const char* name;
  ReduceFn fn;
};

const std::vector<Kind> kKinds = {
    {"sum", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return sum(x, a, k, s); }},
    {"prod", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return prod(x, a, k, s); }},
    {"max", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return max(x, a, k, s); }},
    {"min", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return min(x, a, k, s); }},
    {"all", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return all(x, a, k, s); }},
    {"any", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return any(x, a, k, s); }},
    {"mean", [](const Array& x, const Axes& a, bool k, StreamOrDevice s) { return mean(x, a, k, s); }},
};

class GpuReduce : public detail::vk::testing::VulkanTest {
 protected:
  // fn(x) on the GPU must equal fn(x) on the CPU: same shape and dtype, values within tolerance
  // (exactly for integer and bool results, NaN where the CPU has NaN).
  static void expect_same(const std::function<Array(StreamOrDevice)>& fn, double rtol, double atol,
                          const std::string& what) {
    SCOPED_TRACE(what);
    const Array cpu = fn(Device::cpu);
    const Array gpu = fn(Device::gpu);
    ASSERT_EQ(gpu.shape(), cpu.shape());
    ASSERT_EQ(gpu.dtype(), cpu.dtype());
    const bool exact = !is_floating(cpu.dtype());
    test::expect_close(gpu, test::values(cpu), exact ? 0.0 : rtol, exact ? 0.0 : atol);
  }
  bool storage16() { return ctx().caps().storage16; }
};

Array rand(const Shape& s, uint64_t seed, Dtype t = float32, double lo = -2.0, double hi = 2.0) {
  return test::random_array(s, t, seed, lo, hi);
}

// A bool array, mostly true, so that `all` is true for some short rows and false for others.
Array rand_bool(const Shape& s, uint64_t seed) {
  Array b = rand(s, seed) > -1.5;
  b.eval();
  return b;
}

std::string label(const char* kind, Dtype t, const Axes& axes, bool keep) {
  std::string s = std::string(kind) + " " + std::string(dtype_name(t)) + " axes (";
  for (int a : axes) s += std::to_string(a) + ",";
  return s + ") keepdims " + (keep ? "1" : "0");
}

const std::vector<Axes> kAxisSets = {{2}, {0}, {1}, {0, 2}, {0, 1, 2}, {1, 2}, {0, 1}};

TEST_F(GpuReduce, EveryKindOverAxisSetsFloat32AndInt32) {
  const Array f = rand({4, 6, 5}, 1, float32, 0.5, 1.5);  // prod of 120 values stays finite
  const Array g = rand({4, 6, 5}, 2);
  const Array i = rand({4, 6, 5}, 3, int32, -40, 40);
  for (const Kind& k : kKinds)
    for (const Axes& axes : kAxisSets)
      for (bool keep : {false, true}) {
        const Array& fx = std::string(k.name) == "prod" ? f : g;
        expect_same([&](StreamOrDevice s) { return k.fn(fx, axes, keep, s); }, 1e-5, 1e-5,
                    label(k.name, float32, axes, keep));
        expect_same([&](StreamOrDevice s) { return k.fn(i, axes, keep, s); }, 1e-5, 1e-5,
                    label(k.name, int32, axes, keep));
      }
}

TEST_F(GpuReduce, StridedInputs) {
  const Array x = rand({5, 7, 6}, 4);
  const Array i = rand({5, 7, 6}, 5, int32, -9, 9);
  for (const Kind& k : kKinds)
    for (const Axes& axes : std::vector<Axes>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
      // A transposed view and a strided slice: the reduced axes are not dense in memory.
      expect_same(
          [&](StreamOrDevice s) {
            return k.fn(transpose(x, {2, 0, 1}, s), axes, true, s);
          },
          1e-5, 1e-5, label(k.name, float32, axes, true) + " transposed");
      expect_same(
          [&](StreamOrDevice s) {
            return k.fn(slice(x, {1, 0, 1}, {5, 7, 6}, {2, 3, 2}, s), axes, false, s);
          },
          1e-5, 1e-5, label(k.name, float32, axes, false) + " sliced");
      expect_same(
          [&](StreamOrDevice s) {
            return k.fn(transpose(i, {1, 2, 0}, s), axes, false, s);
          },
          // mean's sum / count: GLSL's float division may be 2.5 ulp off (NVIDIA multiplies by the
          // reciprocal); every other reduction of integers is exact.
          std::string_view(k.name) == "mean" ? 0x1p-22 : 0.0, 0,
          label(k.name, int32, axes, false) + " transposed");
    }
}

TEST_F(GpuReduce, Float16AccumulatesInFloat32) {
  if (!storage16()) GTEST_SKIP() << "the device lacks 16-bit storage buffers";
  const Array x = rand({6, 9, 33}, 6, float16, 0.5, 1.5);
  for (const Kind& k : kKinds)
    for (const Axes& axes : std::vector<Axes>{{2}, {0, 1}, {1}})
      for (bool keep : {false, true})
        expect_same([&](StreamOrDevice s) { return k.fn(x, axes, keep, s); }, 2e-3, 2e-3,
                    label(k.name, float16, axes, keep));
  // A long float16 row: float32 accumulation keeps the sum accurate (a float16 one would not).
  const Array row = rand({2, 100000}, 7, float16, 0.0, 1.0);
  expect_same([&](StreamOrDevice s) { return sum(row, Axes{1}, false, s); }, 2e-3, 0, "float16 long sum");
  expect_same([&](StreamOrDevice s) { return mean(row, Axes{1}, false, s); }, 2e-3, 0, "float16 long mean");
  expect_same([&](StreamOrDevice s) { return max(row, Axes{1}, false, s); }, 0, 0, "float16 long max");
}

TEST_F(GpuReduce, BoolInputs) {
  const Array b = rand_bool({5, 3, 4}, 8);
  for (const Kind& k : kKinds)
    if (std::string(k.name) != "mean")  // mean casts bools to float32 first: a cast kernel's job
      for (const Axes& axes : kAxisSets)
        for (bool keep : {false, true})
          expect_same([&](StreamOrDevice s) { return k.fn(b, axes, keep, s); }, 1e-6, 1e-6,
                      label(k.name, bool_, axes, keep));
  // Strided columns are read in place (1-byte elements are not copied densely).
  expect_same(
      [&](StreamOrDevice s) {
        return all(transpose(b, {2, 1, 0}, s), Axes{2}, false, s);
      },
      0, 0, "all of a transposed bool array");
  // A comparison computed in the same eval on the CPU feeds it (a CPU to GPU dependency).
  const Array x = rand({9, 300}, 9);
  expect_same([&](StreamOrDevice s) { return any(greater(x, 1.95, Device::cpu), Axes{1}, false, s); }, 0, 0,
              "any of a comparison");
  // Many rows share a word of the bool output: its bytes have one writer each.
  const Array many = rand_bool({1001, 2}, 10);
  expect_same([&](StreamOrDevice s) { return all(many, Axes{1}, false, s); }, 0, 0, "all of 1001 short rows");
}

TEST_F(GpuReduce, LongRowsAreSplitIntoTwoPasses) {
  const Array x = rand({3, 150001}, 11);
  const Array i = rand({2, 200000}, 12, int32, -1000, 1000);
  for (const Kind& k : kKinds) {
    if (std::string(k.name) == "prod") continue;  // a product of 10^5 values is 0 or inf
    expect_same([&](StreamOrDevice s) { return k.fn(x, Axes{1}, false, s); }, 1e-4, 1e-2,
                label(k.name, float32, {1}, false) + " long rows");
    expect_same([&](StreamOrDevice s) { return k.fn(i, Axes{1}, true, s); }, 1e-5, 1e-5,
                label(k.name, int32, {1}, true) + " long rows");
  }
  const Array big = rand({1 << 21}, 13, float32, 0.0, 1.0);  // one row of 2M elements
  expect_same([&](StreamOrDevice s) { return sum(big, false, s); }, 1e-5, 0, "sum of 2^21 elements");
  expect_same([&](StreamOrDevice s) { return prod(rand({70000}, 14, float32, 0.9999, 1.0001), false, s); },
              1e-4, 0, "prod of a long row");
  const Array bools = rand_bool({1, 100000}, 15);
  expect_same([&](StreamOrDevice s) { return all(bools, Axes{1}, false, s); }, 0, 0,
              "all of a long bool row");
  expect_same([&](StreamOrDevice s) { return sum(bools, Axes{1}, false, s); }, 0, 0,
              "count of a long bool row");
}

TEST_F(GpuReduce, ManyShortRowsAndColumns) {
  const Array x = rand({5000, 3}, 16);
  for (const Kind& k : kKinds) {
    expect_same([&](StreamOrDevice s) { return k.fn(x, Axes{1}, false, s); }, 1e-5, 1e-5,
                label(k.name, float32, {1}, false) + " short rows");
    expect_same([&](StreamOrDevice s) { return k.fn(x, Axes{0}, false, s); }, 1e-4, 1e-3,
                label(k.name, float32, {0}, false) + " columns");
  }
  expect_same(
      [&](StreamOrDevice s) {
        return sum(rand({777, 1}, 17), Axes{1}, false, s);
      },
      1e-6, 1e-6, "rows of one");
}

TEST_F(GpuReduce, NaNsPropagateThroughMaxAndMin) {
  std::vector<float> v;
  for (double d : test::values(rand({6, 40}, 18))) v.push_back(static_cast<float>(d));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  v[3] = nan;                    // row 0, early
  v[40 + 39] = nan;              // row 1, last
  v[80 + 5] = v[80 + 20] = nan;  // row 2, twice
  const Array x(v, {6, 40});
  for (const Kind& k : kKinds)
    for (const Axes& axes : std::vector<Axes>{{1}, {0}, {0, 1}})
      expect_same([&](StreamOrDevice s) { return k.fn(x, axes, false, s); }, 1e-5, 1e-5,
                  label(k.name, float32, axes, false) + " with NaNs");
  for (bool is_max : {true, false})
    for (int axis : {0, 1})
      expect_same(
          [&](StreamOrDevice s) { return is_max ? argmax(x, axis, false, s) : argmin(x, axis, false, s); }, 0,
          0, std::string(is_max ? "argmax" : "argmin") + " with NaNs, axis " + std::to_string(axis));
}

TEST_F(GpuReduce, ArgReductionsTakeTheFirstOfTies) {
  // Values from a small set: every row has ties for its extreme.
  const Array f = floor(rand({37, 300}, 19, float32, 0, 4));
  const Array i = rand({300, 37}, 20, int32, 0, 3);
  for (bool is_max : {true, false})
    for (int axis : {0, 1})
      for (bool keep : {false, true}) {
        const auto arg = [&](const Array& x, StreamOrDevice s) {
          return is_max ? argmax(x, axis, keep, s) : argmin(x, axis, keep, s);
        };
        const std::string what = std::string(is_max ? "argmax" : "argmin") + " axis " + std::to_string(axis);
        expect_same([&](StreamOrDevice s) { return arg(f, s); }, 0, 0, what + " float32 ties");
        expect_same([&](StreamOrDevice s) { return arg(i, s); }, 0, 0, what + " int32 ties");
        expect_same([&](StreamOrDevice s) { return arg(transpose(f, s), s); }, 0, 0, what + " transposed");
      }
  expect_same(
      [&](StreamOrDevice s) {
        return argmax(rand({3, 120000}, 21), 1, false, s);
      },
      0, 0, "long rows");
  expect_same([&](StreamOrDevice s) { return argmin(rand({100, 6, 7}, 22), false, s); }, 0, 0, "flattened");
  if (storage16())
    expect_same(
        [&](StreamOrDevice s) {
          return argmax(rand({9, 50}, 23, float16), 1, false, s);
        },
        0, 0, "float16");
}

TEST_F(GpuReduce, EmptyReductionsGiveTheIdentity) {
  const Array e = zeros({3, 0});
  for (const Kind& k : kKinds) {
    if (std::string(k.name) == "max" || std::string(k.name) == "min") continue;  // no identity: ValueError
    expect_same([&](StreamOrDevice s) { return k.fn(e, Axes{1}, false, s); }, 0, 0,
                label(k.name, float32, {1}, false));
  }
}

// float64 accumulates in double: sums of positive values (no cancellation) within 1e-12 of the
// CPU's pairwise sums, long rows through the two-pass split too.
TEST_F(GpuReduce, Float64EveryKind) {
  if (!ctx().caps().float64) GTEST_SKIP() << "the device lacks shaderFloat64 (MissingFeatures covers it)";
  const Array pos = rand({5, 7, 33}, 40, float64, 0.5, 1.5);
  const Array mixed = rand({5, 7, 33}, 41, float64);
  for (const Kind& k : kKinds)
    for (const Axes& axes : kAxisSets)
      for (bool keep : {false, true}) {
        expect_same([&](StreamOrDevice s) { return k.fn(pos, axes, keep, s); }, 1e-12, 0,
                    label(k.name, float64, axes, keep));
        if (std::string(k.name) != "prod")
          expect_same([&](StreamOrDevice s) { return k.fn(mixed, axes, keep, s); }, 1e-12, 1e-13,
                      label(k.name, float64, axes, keep) + " mixed signs");
      }
  expect_same(
      [&](StreamOrDevice s) {
        return sum(transpose(mixed, {2, 0, 1}, s), Axes{0, 2}, false, s);
      },
      1e-12, 1e-13, "float64 transposed");
  const Array row = rand({3, 150001}, 42, float64, 0.0, 1.0);
  for (const Kind& k : kKinds) {
    if (std::string(k.name) == "prod") continue;
    expect_same([&](StreamOrDevice s) { return k.fn(row, Axes{1}, false, s); }, 1e-12, 0,
                label(k.name, float64, {1}, false) + " long rows");
  }
  for (bool is_max : {true, false})
    for (int axis : {0, 1}) {
      const Array ties = floor(rand({37, 300}, 43, float64, 0, 4));
      expect_same(
          [&](StreamOrDevice s) {
            return is_max ? argmax(ties, axis, false, s) : argmin(ties, axis, false, s);
          },
          0, 0, std::string(is_max ? "argmax" : "argmin") + " float64 ties, axis " + std::to_string(axis));
    }
  // NaNs win max/min and the arg reductions, as on the CPU.
  std::vector<double> v = test::values(rand({4, 9}, 44, float64));
  v[2] = v[9 + 8] = std::numeric_limits<double>::quiet_NaN();
  const Array nans(v, {4, 9});
  for (int axis : {0, 1}) {
    expect_same([&](StreamOrDevice s) { return max(nans, Axes{axis}, false, s); }, 0, 0, "float64 max NaN");
    expect_same([&](StreamOrDevice s) { return argmin(nans, axis, false, s); }, 0, 0, "float64 argmin NaN");
  }
}

TEST_F(GpuReduce, Int64AndUint32) {
  const Array u = rand({6, 5, 19}, 45, uint32, 0, 4e9);
  for (const Kind& k : kKinds)
    if (std::string(k.name) != "mean")  // mean takes float inputs only, as on the CPU
      for (const Axes& axes : kAxisSets)
        expect_same([&](StreamOrDevice s) { return k.fn(u, axes, false, s); }, 0, 0,
                    label(k.name, uint32, axes, false));
  for (bool is_max : {true, false})
    expect_same([&](StreamOrDevice s) { return is_max ? argmax(u, 2, false, s) : argmin(u, 0, false, s); }, 0,
                0, "uint32 arg reductions");
  if (!ctx().caps().int64) GTEST_SKIP() << "the device lacks shaderInt64 (MissingFeatures covers it)";
  const Array i = rand({6, 5, 19}, 46, int64, -3e12, 3e12);  // sums and extremes past 32 bits
  const Array small = rand({6, 5, 19}, 47, int64, -3, 4);    // products that stay exact
  for (const Kind& k : kKinds)
    if (std::string(k.name) != "mean")
      for (const Axes& axes : kAxisSets) {
        const Array& x = std::string(k.name) == "prod" ? small : i;
        expect_same([&](StreamOrDevice s) { return k.fn(x, axes, true, s); }, 0, 0,
                    label(k.name, int64, axes, true));
      }
  expect_same(
      [&](StreamOrDevice s) {
        return sum(rand({2, 100003}, 48, int64, -1e13, 1e13), Axes{1}, false, s);
      },
      0, 0, "int64 long rows");
  for (bool is_max : {true, false})
    for (int axis : {0, 2})
      expect_same(
          [&](StreamOrDevice s) {
            return is_max ? argmax(small, axis, false, s) : argmin(small, axis, false, s);
          },
          0, 0, "int64 arg reductions with ties");
}

// int8 and uint8 are read as bytes (strided columns in place, other layouts widened to int32);
// sums go to int32 / uint32, max/min write bytes.
TEST_F(GpuReduce, ByteDtypes) {
  for (Dtype t : {int8, uint8}) {
    const Array x = t == int8 ? rand({7, 6, 9}, 49, int8, -128, 127) : rand({7, 6, 9}, 50, uint8, 0, 255);
    for (const Kind& k : kKinds) {
      if (std::string(k.name) == "mean") continue;
      for (const Axes& axes : kAxisSets)
        for (bool keep : {false, true})
          expect_same([&](StreamOrDevice s) { return k.fn(x, axes, keep, s); }, 0, 0,
                      label(k.name, t, axes, keep));
      expect_same(
          [&](StreamOrDevice s) {
            return k.fn(transpose(x, {2, 0, 1}, s), Axes{0, 2}, false, s);
          },
          0, 0, label(k.name, t, {0, 2}, false) + " transposed");
      expect_same(
          [&](StreamOrDevice s) {
            return k.fn(transpose(x, {2, 1, 0}, s), Axes{2}, false, s);
          },
          0, 0, label(k.name, t, {2}, false) + " strided columns");
    }
    for (bool is_max : {true, false})
      for (int axis : {0, 1, 2})
        expect_same(
            [&](StreamOrDevice s) { return is_max ? argmax(x, axis, false, s) : argmin(x, axis, false, s); },
            0, 0, std::string(dtype_name(t)) + " arg reduction, axis " + std::to_string(axis));
    expect_same(
        [&](StreamOrDevice s) {
          return argmax(transpose(x, {1, 2, 0}, s), 0, false, s);
        },
        0, 0, std::string(dtype_name(t)) + " argmax transposed");
    const Array row =
        t == int8 ? rand({2, 100001}, 51, int8, -128, 127) : rand({2, 100001}, 52, uint8, 0, 255);
    for (const char* name : {"sum", "max", "min"})
      for (const Kind& k : kKinds)
        if (std::string(k.name) == name)
          expect_same([&](StreamOrDevice s) { return k.fn(row, Axes{1}, false, s); }, 0, 0,
                      label(name, t, {1}, false) + " long rows");
  }
  const Array b = rand_bool({40, 33}, 53);
  for (int axis : {0, 1})
    expect_same([&](StreamOrDevice s) { return argmin(b, axis, false, s); }, 0, 0, "bool argmin");
}

// bfloat16 accumulates in float32 and rounds once to bfloat16, as the CPU does.
TEST_F(GpuReduce, Bfloat16AccumulatesInFloat32) {
  if (!storage16()) GTEST_SKIP() << "the device lacks 16-bit storage buffers";
  const Array x = rand({6, 9, 33}, 54, bfloat16, 0.5, 1.5);
  for (const Kind& k : kKinds)
    for (const Axes& axes : std::vector<Axes>{{2}, {0, 1}, {1}})
      for (bool keep : {false, true})
        expect_same([&](StreamOrDevice s) { return k.fn(x, axes, keep, s); }, 1e-2, 1e-2,
                    label(k.name, bfloat16, axes, keep));
  const Array row = rand({2, 100000}, 55, bfloat16, 0.0, 1.0);
  expect_same([&](StreamOrDevice s) { return sum(row, Axes{1}, false, s); }, 1e-2, 0, "bfloat16 long sum");
  expect_same([&](StreamOrDevice s) { return mean(row, Axes{1}, false, s); }, 1e-2, 0, "bfloat16 long mean");
  expect_same([&](StreamOrDevice s) { return max(row, Axes{1}, false, s); }, 0, 0, "bfloat16 long max");
  for (int axis : {0, 1})
    expect_same(
        [&](StreamOrDevice s) {
          return argmax(floor(rand({30, 40}, 56, bfloat16, 0, 4)), axis, false, s);
        },
        0, 0, "bfloat16 argmax with ties");
}

// On a device without shaderFloat64 / shaderInt64 the 64-bit reductions say which feature is
// missing; lavapipe has both, so this runs on hardware that lacks them.
TEST_F(GpuReduce, MissingFeaturesThrowNotImplemented) {
  const auto expect_missing = [](const std::function<Array()>& fn, const char* feature) {
    try {
      eval(fn());
      FAIL() << "expected NotImplemented naming " << feature;
    } catch (const NotImplemented& e) {
      EXPECT_NE(std::string(e.what()).find(feature), std::string::npos) << e.what();
    }
  };
  const bool f64 = ctx().caps().float64, i64 = ctx().caps().int64;
  if (f64 && i64) GTEST_SKIP() << "the device has shaderFloat64 and shaderInt64";
  if (!f64) {
    expect_missing(
        [] {
          return sum(rand({4, 5}, 24, float64), Axes{1}, false, Device::gpu);
        },
        "shaderFloat64");
    expect_missing([] { return argmax(rand({4, 5}, 25, float64), 1, false, Device::gpu); }, "shaderFloat64");
  }
  if (!i64)
    expect_missing(
        [] {
          return max(rand({4, 5}, 26, int64, -9, 9), Axes{0}, false, Device::gpu);
        },
        "shaderInt64");
}

TEST_F(GpuReduce, GradientsThroughGpuReductionsMatchTheCpu) {
  for (Dtype t : {float32, float64}) {
    if (t == float64 && !ctx().caps().float64) continue;
    const Array x = rand({6, 11}, 26, t);
    const double tol = t == float64 ? 1e-12 : 1e-5;
    for (const Kind& k : kKinds) {
      const std::string name = k.name;
      if (name == "all" || name == "any") continue;
      const auto loss = [&](Device d) {
        return value_and_grad([&, d](const Array& a) { return sum(k.fn(a, Axes{1}, false, d), false, d); })(
            x);
      };
      SCOPED_TRACE(name + " " + std::string(dtype_name(t)));
      try {
        const auto [gv, gg] = loss(Device::gpu);
        const auto [cv, cg] = loss(Device::cpu);
        test::expect_close(gv, test::values(cv), tol, tol);
        test::expect_close(gg, test::values(cg), tol, tol);
      } catch (const Error& e) {
        // The vjps of prod, max and min need kernels not written yet (cumprod, equal, ...); the
        // base eval_gpu throws NotImplemented naming them.
        const std::string msg = e.what();
        if (name == "sum" || name == "mean" || msg.find("GPU") == std::string::npos) throw;
        std::cout << "[ note ] gradient of " << name << " not all on the GPU yet: " << msg << "\n";
      }
    }
  }
}

// Turns the subgroup variants off for its lifetime (the shared-memory trees run instead).
struct WithoutSubgroups {
  explicit WithoutSubgroups(bool off) { detail::vk::set_reduce_subgroups(!off); }
  ~WithoutSubgroups() { detail::vk::set_reduce_subgroups(true); }
};

// A float32 [rows, cols] array with NaNs in some rows, two in some (max/min and argmax/argmin must
// keep them, argmax/argmin the first).
Array with_nans(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v;
  for (double d : test::values(rand({rows, cols}, seed))) v.push_back(static_cast<float>(d));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < rows; r += 3) {
    const int64_t c = (r * 7) % cols;
    v[static_cast<size_t>(r * cols + c)] = nan;
    if (r % 2 == 0 && c + 1 < cols)
      v[static_cast<size_t>(r * cols + c + 1)] = nan;  // neighbours: one subgroup
  }
  return Array(v, {rows, cols});
}

// Row reductions with the subgroup joins (lavapipe's subgroups are 8 wide, NVIDIA's 32) and with
// them turned off, against the CPU: rows whose invocations (about 4 elements each) are fewer than a
// subgroup (the tree), one subgroup (32 and 128 columns: lavapipe's, NVIDIA's), several, a whole
// workgroup and more, several rows per workgroup, long rows split in two
// passes; every kind in float32 (NaNs in a third of the rows), int32 and uint32, bool all/any,
// float64 and float16 where the device has them, argmax/argmin with ties and NaNs.
TEST_F(GpuReduce, SubgroupJoinsAndSharedMemoryTreesMatchTheCpu) {
  std::cout << "[ note ] subgroup arithmetic: " << (ctx().caps().subgroup_arithmetic ? "yes" : "no")
            << ", subgroup size " << ctx().caps().subgroup_size << "\n";
  uint64_t seed = 500;
  for (bool off : {false, true}) {
    const WithoutSubgroups scope(off);
    for (int64_t cols : {1, 3, 7, 8, 9, 16, 31, 32, 33, 64, 100, 128, 255, 256, 257, 1000, 70001}) {
      const int64_t rows = cols > 10000 ? 3 : 37;
      const std::string what = fmt::format("{} cols {}", off ? "tree" : "subgroups", cols);
      const Array f = with_nans(rows, cols, seed++), g = rand({rows, cols}, seed++, float32, 0.9, 1.1);
      const Array i = rand({rows, cols}, seed++, int32, -1000, 1000);
      const Array u = rand({rows, cols}, seed++, uint32, 0, 3000);
      const Array b = rand_bool({rows, cols}, seed++);
      for (const Kind& k : kKinds) {
        const std::string name = k.name;
        const Array& fx = name == "prod" ? g : f;
        expect_same([&](StreamOrDevice s) { return k.fn(fx, Axes{1}, false, s); }, 1e-5, 1e-4,
                    what + " float32 " + name);
        if (name == "mean") continue;
        expect_same([&](StreamOrDevice s) { return k.fn(i, Axes{1}, false, s); }, 0, 0,
                    what + " int32 " + name);
        expect_same([&](StreamOrDevice s) { return k.fn(u, Axes{1}, false, s); }, 0, 0,
                    what + " uint32 " + name);
        expect_same([&](StreamOrDevice s) { return k.fn(b, Axes{1}, false, s); }, 0, 0,
                    what + " bool " + name);
        if (ctx().caps().float64)
          expect_same([&](StreamOrDevice s) { return k.fn(astype(fx, float64), Axes{1}, false, s); }, 1e-12,
                      1e-12, what + " float64 " + name);
        if (storage16() && name != "prod")
          expect_same([&](StreamOrDevice s) { return k.fn(astype(fx, float16), Axes{1}, false, s); }, 2e-3,
                      2e-2, what + " float16 " + name);
      }
      const Array ties = floor(rand({rows, cols}, seed++, float32, 0, 3));
      for (bool is_max : {true, false}) {
        const auto arg = [&](const Array& x, StreamOrDevice s) {
          return is_max ? argmax(x, 1, false, s) : argmin(x, 1, false, s);
        };
        const std::string a = what + (is_max ? " argmax" : " argmin");
        expect_same([&](StreamOrDevice s) { return arg(f, s); }, 0, 0, a + " float32 with NaNs");
        expect_same([&](StreamOrDevice s) { return arg(ties, s); }, 0, 0, a + " float32 ties");
        expect_same([&](StreamOrDevice s) { return arg(i, s); }, 0, 0, a + " int32");
        expect_same([&](StreamOrDevice s) { return arg(u, s); }, 0, 0, a + " uint32");
        expect_same([&](StreamOrDevice s) { return arg(astype(ties, uint8), s); }, 0, 0, a + " uint8");
        if (ctx().caps().float64)
          expect_same([&](StreamOrDevice s) { return arg(astype(f, float64), s); }, 0, 0, a + " float64");
      }
    }
  }
}

// Reductions over leading and middle axes (kept axes ending contiguous) read columns: the bias
// gradient's sum over [4096, 768] against a float64 reference, narrow and wide column counts,
// blocks (a middle axis, and two leading axes), one row, many rows (two passes), a slice at an
// offset, every kind and dtypes of every kernel family, NaN columns.
TEST_F(GpuReduce, ColumnReductionsOverLeadingAndMiddleAxes) {
  const Array big = rand({4096, 768}, 600);
  const Array reference = sum(astype(big, float64), Axes{0}, false, Device::cpu);
  test::expect_close(sum(big, Axes{0}, false, Device::gpu), test::values(reference), 1e-5, 1e-3);
  struct Case {
    Shape shape;
    Axes axes;
  };
  const Case cases[] = {{{300, 2}, {0}},       {{1000, 65}, {0}},      {{5, 333, 40}, {1}},
                        {{6, 50, 70}, {0, 1}}, {{3, 1, 20}, {1}},      {{70000, 3}, {0}},
                        {{20000, 130}, {0}},   {{2, 3, 4, 5}, {0, 2}}, {{4, 7, 9, 3}, {1, 2}}};
  uint64_t seed = 610;
  for (const Case& c : cases) {
    const std::string shape = fmt::format("{} axes {}", c.shape, c.axes.size() == 1 ? c.axes[0] : -1);
    const Array f = rand(c.shape, seed++), g = rand(c.shape, seed++, float32, 0.95, 1.05);
    const Array i = rand(c.shape, seed++, int32, -100, 100), b = rand_bool(c.shape, seed++);
    for (const Kind& k : kKinds) {
      const std::string name = k.name;
      const Array& fx = name == "prod" ? g : f;
      expect_same([&](StreamOrDevice s) { return k.fn(fx, c.axes, false, s); }, 1e-4, 1e-3,
                  shape + " float32 " + name);
      expect_same([&](StreamOrDevice s) { return k.fn(fx, c.axes, true, s); }, 1e-4, 1e-3,
                  shape + " float32 keepdims " + name);
      if (name == "mean") continue;
      expect_same([&](StreamOrDevice s) { return k.fn(i, c.axes, false, s); }, 0, 0,
                  shape + " int32 " + name);
      expect_same([&](StreamOrDevice s) { return k.fn(b, c.axes, false, s); }, 0, 0, shape + " bool " + name);
      expect_same([&](StreamOrDevice s) { return k.fn(astype(i, int8), c.axes, false, s); }, 0, 0,
                  shape + " int8 " + name);
      if (storage16() && name != "prod")
        expect_same([&](StreamOrDevice s) { return k.fn(astype(fx, bfloat16), c.axes, false, s); }, 2e-2,
                    5e-2, shape + " bfloat16 " + name);
      if (ctx().caps().int64)
        expect_same([&](StreamOrDevice s) { return k.fn(astype(i, int64), c.axes, false, s); }, 0, 0,
                    shape + " int64 " + name);
    }
  }
  // A slice at an offset (rows 1.., columns 2..) and NaNs in some columns.
  const Array m = with_nans(400, 37, 620);
  const Array sliced = slice(m, {1, 2}, {400, 37});
  for (const Kind& k : kKinds) {
    expect_same([&](StreamOrDevice s) { return k.fn(sliced, Axes{0}, false, s); }, 1e-4, 1e-3,
                std::string("slice ") + k.name);
    expect_same([&](StreamOrDevice s) { return k.fn(m, Axes{0}, false, s); }, 1e-4, 1e-3,
                std::string("NaN columns ") + k.name);
  }
}

}  // namespace
}  // namespace kiln
