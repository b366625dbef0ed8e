// Array basics: construction, element access, printing, errors, deep graphs, buffer donation,
// the allocator's statistics and concurrent evaluation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "support/device.h"
#include "support/op_test.h"

namespace kiln {
namespace {

std::string str(const Array& a) {
  std::ostringstream os;
  os << a;
  return os.str();
}

// ---------------------------------------------------------------- construction

TEST(ArrayConstruct, ScalarsTakeTheDtypeOfTheirCppType) {
  EXPECT_EQ(Array(true).dtype(), bool_);
  EXPECT_EQ(Array(uint8_t{1}).dtype(), uint8);
  EXPECT_EQ(Array(int8_t{1}).dtype(), int8);
  EXPECT_EQ(Array(int32_t{1}).dtype(), int32);
  EXPECT_EQ(Array(int64_t{1}).dtype(), int64);
  EXPECT_EQ(Array(1LL).dtype(), int64);
  EXPECT_EQ(Array(uint32_t{1}).dtype(), uint32);
  EXPECT_EQ(Array(float16_t(1.0f)).dtype(), float16);
  EXPECT_EQ(Array(bfloat16_t(1.0f)).dtype(), bfloat16);
  EXPECT_EQ(Array(1.0f).dtype(), float32);
  EXPECT_EQ(Array(1.0).dtype(), float64);
  const Array s(2.5f);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.size(), 1);
  EXPECT_TRUE(s.is_available());
  EXPECT_EQ(Array(2.7, int32).item<int32_t>(), 2);  // a scalar converted on the way in
  EXPECT_EQ(Array(300, uint8).dtype(), uint8);
}

TEST(ArrayConstruct, InitializerListsAndVectors) {
  const Array a({1, 2, 3});
  EXPECT_EQ(a.dtype(), int32);
  EXPECT_EQ(a.shape(), Shape{3});
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  const Array b({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const Array c(std::vector<double>{1.5, -2.5, 3.25, 0.1}, {2, 1, 2});
  EXPECT_EQ(c.dtype(), float64);
  EXPECT_EQ(c.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{1.5, -2.5, 3.25, 0.1}));
  const Array flags(std::vector<bool>{true, false, true}, {3});
  EXPECT_EQ(flags.dtype(), bool_);
  EXPECT_EQ(flags.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  const Array empty(std::vector<float>{}, {0, 4});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.shape(), (Shape{0, 4}));
}

TEST(ArrayConstruct, VectorWithDtypeConverts) {
  // Floats to ints truncate toward zero; to float16 rounds to nearest even.
  const Array i(std::vector<double>{1.9, -1.9, 2.5}, {3}, int32);
  EXPECT_EQ(i.dtype(), int32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 2}));
  const Array h(std::vector<float>{0.1f, 1.0f + 1.0f / 2048, 65504.0f}, {3}, float16);
  EXPECT_EQ(h.dtype(), float16);
  EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{0.0999755859375, 1.0, 65504.0}));
  const Array b(std::vector<int32_t>{0, 3, -1}, {3}, bool_);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{false, true, true}));
  const Array f(std::vector<bool>{true, false}, {2}, float32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.0f, 0.0f}));
}

TEST(ArrayConstruct, SizeMismatchAndNegativeDimensionsThrow) {
  EXPECT_THROW(Array({1, 2, 3}, {2, 2}), ShapeError);
  EXPECT_THROW(Array(std::vector<float>{1, 2, 3, 4}, {3}), ShapeError);
  EXPECT_THROW(Array(std::vector<float>{}, {-1}), ShapeError);
  EXPECT_THROW(Array(std::vector<float>{1, 2}, {-2, -1}), ShapeError);
  try {
    Array(std::vector<float>{1, 2, 3}, {2, 2});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[array]"), std::string::npos) << what;
    EXPECT_NE(what.find("(2,2)"), std::string::npos) << what;
  }
}

TEST(ArrayConstruct, ShapeQueries) {
  const Array a = zeros({2, 3, 4}, float64);
  EXPECT_EQ(a.ndim(), 3);
  EXPECT_EQ(a.size(), 24);
  EXPECT_EQ(a.itemsize(), 8);
  EXPECT_EQ(a.nbytes(), 192);
  EXPECT_EQ(a.shape(0), 2);
  EXPECT_EQ(a.shape(-1), 4);
  EXPECT_EQ(a.shape(-3), 2);
  EXPECT_THROW(a.shape(3), ShapeError);
  EXPECT_THROW(a.shape(-4), ShapeError);
  EXPECT_EQ(zeros({5}, bfloat16).nbytes(), 10);
  EXPECT_EQ(zeros({0, 7}).nbytes(), 0);
}

// ---------------------------------------------------------------- element access

TEST(ArrayAccess, ItemConvertsAndNeedsOneElement) {
  EXPECT_EQ(Array(2.75f).item<float>(), 2.75f);
  EXPECT_EQ(Array(2.75f).item<double>(), 2.75);
  EXPECT_EQ(Array(2.75f).item<int32_t>(), 2);
  EXPECT_EQ(Array(-2.75).item<int64_t>(), -2);
  EXPECT_EQ(Array(7).item<bool>(), true);
  EXPECT_EQ(Array(uint32_t{4000000000u}).item<int64_t>(), 4000000000LL);
  EXPECT_EQ(Array({5.5f}, {1, 1}).item<float>(), 5.5f);  // any shape with one element
  EXPECT_EQ((Array(2.0f) + 1.0f).item<float>(), 3.0f);   // evaluates
  EXPECT_THROW(Array({1, 2}).item<int32_t>(), ValueError);
  EXPECT_THROW(zeros({0}).item<float>(), ValueError);
}

TEST(ArrayAccess, DataChecksDtypeAndLayout) {
  const Array a({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  const float* p = a.data<float>();
  EXPECT_EQ(p[4], 5.0f);
  EXPECT_THROW(a.data<double>(), DtypeError);
  EXPECT_THROW(a.data<int32_t>(), DtypeError);
  const Array t = transpose(a);
  EXPECT_THROW(t.data<float>(), ValueError);
  const float* q = contiguous(t).data<float>();
  EXPECT_EQ((std::vector<float>(q, q + 6)), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(ArrayAccess, ToVectorWorksOnViews) {
  const Array a = reshape(arange(0.0, 12.0, 1.0, float32), {3, 4});
  EXPECT_EQ(transpose(a).to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(slice(a, {0, 1}, {3, 4}, {2, 2}).to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 9, 11}));
  EXPECT_EQ(broadcast_to(Array({1, 2}), {2, 2}).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(slice(transpose(a), {1, 0}, {3, 3}).to_vector<double>(),
            (std::vector<double>{1, 5, 9, 2, 6, 10}));
}

// ---------------------------------------------------------------- printing

TEST(ArrayPrint, IntegersAndShapes) {
  EXPECT_EQ(str(Array({1, 2, 3, 4}, {2, 2})), "array([[1, 2],\n       [3, 4]], dtype=int32)");
  EXPECT_EQ(str(Array({-1, 10, 200})), "array([ -1,  10, 200], dtype=int32)");
  EXPECT_EQ(str(Array(std::vector<uint8_t>{1, 200, 3}, {3})), "array([  1, 200,   3], dtype=uint8)");
  EXPECT_EQ(str(Array(std::vector<int8_t>{-128, 5}, {2})), "array([-128,    5], dtype=int8)");
  EXPECT_EQ(str(Array(3)), "array(3, dtype=int32)");
  EXPECT_EQ(str(reshape(arange(24), {2, 3, 4})),
            "array([[[ 0,  1,  2,  3],\n"
            "        [ 4,  5,  6,  7],\n"
            "        [ 8,  9, 10, 11]],\n"
            "\n"
            "       [[12, 13, 14, 15],\n"
            "        [16, 17, 18, 19],\n"
            "        [20, 21, 22, 23]]], dtype=int32)");
}

TEST(ArrayPrint, FloatsShareOneFormat) {
  EXPECT_EQ(str(Array(3.5f)), "array(3.5, dtype=float32)");
  EXPECT_EQ(str(Array(1.0f)), "array(1., dtype=float32)");
  EXPECT_EQ(str(Array({1.5f, 2.25f, -3.0f})), "array([ 1.5 ,  2.25, -3.  ], dtype=float32)");
  EXPECT_EQ(str(Array({0.1f, 100.0f})), "array([  0.1, 100. ], dtype=float32)");
  // Shortest digits that identify the value in its own dtype, at most 8 after the point.
  EXPECT_EQ(str(Array({1.0f / 3, 2.0f / 3})), "array([0.33333334, 0.6666667 ], dtype=float32)");
  EXPECT_EQ(str(Array({1.0 / 3, 2.0 / 3})), "array([0.33333333, 0.66666667], dtype=float64)");
  EXPECT_EQ(str(Array(std::vector<float>{0.1f, 0.2f, 0.3f}, {3}, float16)),
            "array([0.1, 0.2, 0.3], dtype=float16)");
  EXPECT_EQ(str(Array(std::vector<float>{0.1f, 0.2f, 0.3f}, {3}, bfloat16)),
            "array([0.1, 0.2, 0.3], dtype=bfloat16)");
}

TEST(ArrayPrint, ScientificNotationAndNonFinite) {
  EXPECT_EQ(str(Array({1e-5, 1.5e10})), "array([1.0e-05, 1.5e+10], dtype=float64)");
  EXPECT_EQ(str(Array({-1e-5f, 1e5f, 3.0f})), "array([-1.e-05,  1.e+05,  3.e+00], dtype=float32)");
  EXPECT_EQ(str(Array({1e300, 1e-300})), "array([1.e+300, 1.e-300], dtype=float64)");
  EXPECT_EQ(str(Array(1e20)), "array(1.e+20, dtype=float64)");
  const float inf = INFINITY, nan = NAN;
  EXPECT_EQ(str(Array({nan, inf, 1.5f})), "array([nan, inf, 1.5], dtype=float32)");
  EXPECT_EQ(str(Array({nan, -inf})), "array([ nan, -inf], dtype=float32)");
}

TEST(ArrayPrint, BoolsAndEmptyArrays) {
  EXPECT_EQ(str(Array(std::vector<bool>{true, false}, {2})), "array([ True, False], dtype=bool)");
  EXPECT_EQ(str(Array(true)), "array(True, dtype=bool)");
  EXPECT_EQ(str(zeros({0, 3})), "array([], shape=(0, 3), dtype=float32)");
  EXPECT_EQ(str(zeros({0}, int64)), "array([], dtype=int64)");
  EXPECT_EQ(str(zeros({2, 0, 1}, bool_)), "array([], shape=(2, 0, 1), dtype=bool)");
}

TEST(ArrayPrint, LongRowsWrapAtSeventyFiveColumns) {
  EXPECT_EQ(str(arange(30)),
            "array([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16,\n"
            "       17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29], dtype=int32)");
  EXPECT_EQ(str(arange(0.0, 30.0, 1.0, float32)),
            "array([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12.,\n"
            "       13., 14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25.,\n"
            "       26., 27., 28., 29.], dtype=float32)");
}

TEST(ArrayPrint, LargeArraysAreSummarized) {
  EXPECT_EQ(str(arange(2000)), "array([   0,    1,    2, ..., 1997, 1998, 1999], dtype=int32)");
  EXPECT_EQ(str(reshape(arange(10000), {100, 100})),
            "array([[   0,    1,    2, ...,   97,   98,   99],\n"
            "       [ 100,  101,  102, ...,  197,  198,  199],\n"
            "       [ 200,  201,  202, ...,  297,  298,  299],\n"
            "       ...,\n"
            "       [9700, 9701, 9702, ..., 9797, 9798, 9799],\n"
            "       [9800, 9801, 9802, ..., 9897, 9898, 9899],\n"
            "       [9900, 9901, 9902, ..., 9997, 9998, 9999]], dtype=int32)");
  // Only axes longer than 6 are cut.
  EXPECT_EQ(str(reshape(arange(1004), {2, 502})),
            "array([[   0,    1,    2, ...,  499,  500,  501],\n"
            "       [ 502,  503,  504, ..., 1001, 1002, 1003]], dtype=int32)");
}

TEST(ArrayPrint, ViewsPrintTheirLogicalOrderAndLazyArraysAreEvaluated) {
  const Array a = reshape(arange(6), {2, 3});
  EXPECT_EQ(str(transpose(a)), "array([[0, 3],\n       [1, 4],\n       [2, 5]], dtype=int32)");
  EXPECT_EQ(str(slice(a, {0, 0}, {2, 3}, {1, 2})), "array([[0, 2],\n       [3, 5]], dtype=int32)");
  const Array lazy = Array({1.0f, 2.0f}) * 2.0f;
  EXPECT_FALSE(lazy.is_available());
  EXPECT_EQ(str(lazy), "array([2., 4.], dtype=float32)");
  EXPECT_TRUE(lazy.is_available());
}

TEST(ArrayPrint, DtypeMovesToItsOwnLineWhenTheLastLineIsFull) {
  const Array a(std::vector<int64_t>{1000000000000LL, 2, 3, 4, 5}, {5});
  EXPECT_EQ(str(a),
            "array([1000000000000,             2,             3,             4,\n"
            "                   5], dtype=int64)");
  const Array b(std::vector<int64_t>{1000000000000LL, 2, 3, 4}, {4});
  EXPECT_EQ(str(b),
            "array([1000000000000,             2,             3,             4],\n"
            "      dtype=int64)");
}

// ---------------------------------------------------------------- errors

TEST(ArrayErrors, DefaultConstructedArraysAreRejected) {
  const Array none;
  EXPECT_FALSE(none.valid());
  EXPECT_THROW(none.shape(), ValueError);
  EXPECT_THROW(none.dtype(), ValueError);
  EXPECT_THROW(none.eval(), ValueError);
  EXPECT_THROW(none.item<float>(), ValueError);
  EXPECT_THROW(none.to_vector<float>(), ValueError);
  EXPECT_THROW(exp(none), ValueError);
  EXPECT_THROW(add(none, 1.0f), ValueError);
  EXPECT_THROW(multiply(Array(1.0f), none), ValueError);
  EXPECT_THROW(astype(none, float64), ValueError);
  EXPECT_THROW(reshape(none, {1}), ValueError);
  EXPECT_THROW(sum(none), ValueError);
}

TEST(ArrayErrors, HierarchyCatchesAsKilnAndStandardTypes) {
  auto bad_shape = [] { Array(std::vector<float>{1, 2, 3}, {2}); };
  EXPECT_THROW(bad_shape(), ShapeError);
  EXPECT_THROW(bad_shape(), ValueError);
  EXPECT_THROW(bad_shape(), Error);
  EXPECT_THROW(bad_shape(), std::invalid_argument);
  EXPECT_THROW(bad_shape(), std::exception);
  auto bad_dtype = [] { Array(1.0f).data<double>(); };
  EXPECT_THROW(bad_dtype(), DtypeError);
  EXPECT_THROW(bad_dtype(), Error);
  EXPECT_THROW(bad_dtype(), std::invalid_argument);
  // Runtime failures are std::runtime_error as well as kiln::Error.
  auto device = [] { throw DeviceError::of("eval", "device lost", "gpu {}", 0); };
  EXPECT_THROW(device(), RuntimeError);
  EXPECT_THROW(device(), Error);
  EXPECT_THROW(device(), std::runtime_error);
  EXPECT_THROW(device(), std::exception);
  try {
    device();
  } catch (const Error& e) {  // the tag base still exposes the message
    EXPECT_STREQ(e.what(), "[eval] device lost: gpu 0");
  }
  try {
    bad_shape();
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[array] ", 0), 0u) << e.what();
  }
}

// ---------------------------------------------------------------- deep graphs

TEST(ArrayGraph, MillionOpChainEvaluatesWithoutRecursion) {
  Array x = zeros({1});
  for (int i = 0; i < 1000000; ++i) x = x + 1.0f;
  EXPECT_EQ(x.item<float>(), 1000000.0f);  // exact: below 2^24
}

TEST(ArrayGraph, MillionOpChainIsReleasedWithoutRecursion) {
  Array x = zeros({1});
  for (int i = 0; i < 1000000; ++i) x = x * 1.0f;
  EXPECT_FALSE(x.is_available());
  x = Array();  // drops the whole unevaluated chain
  EXPECT_FALSE(x.valid());
}

TEST(ArrayGraph, OutputsOfOneOpShareOneInputList) {
  // split's 40 outputs hold one list of its input, not a copy each: the input's node has two
  // owners (x and the list), whatever the number of outputs.
  const Array x = test::random_array({40, 3}, float32, 11);
  std::vector<Array> parts = split(x, 40);
  ASSERT_EQ(parts.size(), 40u);
  EXPECT_EQ(x.node_ptr().use_count(), 2);
  for (const Array& p : parts) {
    ASSERT_EQ(p.inputs().size(), 1u);
    EXPECT_EQ(p.inputs()[0].node_ptr(), x.node_ptr());
  }
  // Dropping outputs in any order keeps the list for the others. Before evaluation, outputs()
  // recreates a dropped one, with the same list; every output then evaluates to its rows.
  for (size_t i = 0; i < parts.size(); i += 2) parts[i] = Array();
  EXPECT_EQ(x.node_ptr().use_count(), 2);
  parts = parts[1].outputs();
  ASSERT_EQ(parts.size(), 40u);
  EXPECT_EQ(x.node_ptr().use_count(), 2);
  const std::vector<double> want = x.to_vector<double>();
  for (size_t i = 0; i < parts.size(); ++i)
    EXPECT_EQ(parts[i].to_vector<double>(),
              std::vector<double>(want.begin() + 3 * i, want.begin() + 3 * i + 3));
  parts.clear();
  EXPECT_EQ(x.node_ptr().use_count(), 1);
}

// ---------------------------------------------------------------- memory

TEST(ArrayMemory, DonationReusesTheBufferOfAnUnnamedTemporary) {
  // exp(exp(negative(src))): the temporary and the inner exp are referenced only by their consumer,
  // so each exp may compute in place. Live buffers stay at src plus one, not src plus two.
  // Counted where the default device keeps arrays (test::default_device_memory): src is an op's
  // result so that it lives there before `base` is taken.
  const int64_t n = 1 << 20;
  const Array src = test::random_array({n}, float32, 3) * 1.0f;
  const std::vector<double> in = src.to_vector<double>();
  clear_cache();
  const size_t base = test::default_device_memory().active_bytes;
  reset_peak_memory();
  Array y = exp(exp(negative(src)));
  y.eval();
  const size_t buffer = n * sizeof(float);
  if (test::gpu_default()) {
    // The GPU keeps every buffer of one evaluation until its submit completes (recorder.h) and
    // does not donate: the three results are live together at the peak.
    EXPECT_LE(test::default_device_memory().peak_bytes - base, 3 * buffer);
  } else {
    EXPECT_LT(test::default_device_memory().peak_bytes - base, buffer + buffer / 2);
  }
  EXPECT_EQ(test::default_device_memory().active_bytes - base, buffer);
  std::vector<double> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = std::exp(std::exp(-in[i]));
  test::expect_close(y, want, 2e-6, 0);
  EXPECT_EQ(src.to_vector<double>(), in);  // the named input was not overwritten
}

TEST(ArrayMemory, NamedIntermediatesAreNeverDonated) {
  const Array src = test::random_array({1000}, float32, 4);
  const Array x = negative(src);
  const Array y = exp(exp(x));
  y.eval();
  std::vector<double> want = src.to_vector<double>();
  for (double& v : want) v = -v;
  EXPECT_EQ(x.to_vector<double>(), want);
}

TEST(ArrayMemory, StatsAndCache) {
  clear_cache();
  EXPECT_EQ(memory_stats().cache_bytes, 0u);
  const size_t base = memory_stats().active_bytes;
  const size_t bytes = size_t{1} << 22;
  {
    const Array a = test::random_array({static_cast<int64_t>(bytes / 4)}, float32, 5);
    EXPECT_GE(memory_stats().active_bytes, base + bytes);
    EXPECT_GE(memory_stats().peak_bytes, base + bytes);
  }
  EXPECT_EQ(memory_stats().active_bytes, base);
  EXPECT_GE(memory_stats().cache_bytes, bytes);  // the freed block is kept for reuse
  {
    const Array b = test::random_array({static_cast<int64_t>(bytes / 4)}, float32, 6);
    EXPECT_EQ(memory_stats().cache_bytes, 0u);  // ... and reused by a request of the same size
  }
  clear_cache();
  EXPECT_EQ(memory_stats().cache_bytes, 0u);
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_bytes, memory_stats().active_bytes);
  const size_t old_limit = set_cache_limit(0);
  {
    const Array c = zeros({1000}, float64) + 1.0;
    c.eval();
  }
  EXPECT_EQ(memory_stats().cache_bytes, 0u);  // nothing is cached past the limit
  EXPECT_EQ(set_cache_limit(old_limit), 0u);
}

// KILN_HOST_CACHE_LIMIT sets the host cache's limit when the allocator starts, so each case runs
// this test again in a child process with the variable set (and KILN_TEST_CACHE_LIMIT saying what
// the child should see: a byte count, or "at least N" for the default an invalid value gives).
TEST(ArrayMemory, CacheLimitFromTheEnvironment) {
  if (const char* want = std::getenv("KILN_TEST_CACHE_LIMIT")) {
    const size_t limit = set_cache_limit(0);
    set_cache_limit(limit);
    const std::string w = want;
    if (w.rfind("at least ", 0) == 0)
      EXPECT_GE(limit, std::stoull(w.substr(9)));
    else
      EXPECT_EQ(limit, std::stoull(w));
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string floor = "at least " + std::to_string(size_t{4} << 30);
  const std::pair<const char*, std::string> cases[] = {{"3G", std::to_string(size_t{3} << 30)},
                                                       {"512M", std::to_string(size_t{512} << 20)},
                                                       {"64K", "65536"},
                                                       {"123456", "123456"},
                                                       {"0", "0"},  // 0: nothing is cached
                                                       {"12X", floor},
                                                       {"G", floor},
                                                       {"-1", floor},
                                                       {"99999999999G", floor},
                                                       {"99999999999999999999", floor}};
  for (const auto& [env, want] : cases) {
    const std::string cmd = fmt::format(
        "KILN_HOST_CACHE_LIMIT='{}' KILN_TEST_CACHE_LIMIT='{}' '{}' "
        "--gtest_filter=ArrayMemory.CacheLimitFromTheEnvironment "
        ">/dev/null 2>&1",
        env, want, self);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "KILN_HOST_CACHE_LIMIT=" << env << " should give " << want;
  }
}

// ---------------------------------------------------------------- threads

// The graph each thread builds: it reads the evaluated `w` and the shared lazy `h`.
Array per_thread_graph(const Array& w, const Array& h, int t) {
  const Array y = exp(multiply(h, static_cast<float>(t + 1) / 8.0f)) - w;
  return y + sum(y * w);
}

TEST(ArrayExternal, FromBufferUsesTheMemoryInPlaceAndCallsTheDeleterOnce) {
  std::atomic<int> deleted{0};
  auto* values = new float[6]{1.5f, -2, 3, 4.25f, 5, -6};
  {
    Array a = Array::from_buffer(values, {2, 3}, float32, [&](void* p) {
      delete[] static_cast<float*>(p);
      ++deleted;
    });
    EXPECT_TRUE(a.is_available());
    EXPECT_EQ(a.data<float>(), values);  // no copy
    const Array doubled = a * 2.0f;      // an op reads it (in the GPU pass, uploaded once)
    const Array row = transpose(a);      // a view keeps the memory alive after `a` is gone
    a = Array();
    EXPECT_EQ(deleted.load(), 0);
    EXPECT_EQ(doubled.to_vector<float>(), (std::vector<float>{3, -4, 6, 8.5f, 10, -12}));
    EXPECT_EQ(values[0], 1.5f) << "kiln never writes into the caller's memory (no donation)";
    EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{1.5f, 4.25f, -2, 5, 3, -6}));
  }
  EXPECT_EQ(deleted.load(), 1);
  // An unary op on a temporary external array must not donate (write into) it.
  std::vector<double> mine{1, 2, 3};
  const Array y = exp(Array::from_buffer(mine.data(), {3}, float64, nullptr));
  y.eval();
  EXPECT_EQ(mine, (std::vector<double>{1, 2, 3}));
  EXPECT_THROW(Array::from_buffer(nullptr, {2}, float32, nullptr), ValueError);
  EXPECT_THROW(Array::from_buffer(reinterpret_cast<char*>(mine.data()) + 1, {1}, float64, nullptr),
               ValueError);
  EXPECT_THROW(Array::from_buffer(mine.data(), {-1}, float64, nullptr), ShapeError);
  EXPECT_EQ(Array::from_buffer(nullptr, {0, 3}, float32, nullptr).shape(), (Shape{0, 3}));
}

TEST(ArrayIteration, VisitsTheFirstAxis) {
  const Array x = test::random_array({3, 2, 2}, float32, 5);
  int i = 0;
  for (const Array& row : x) {
    EXPECT_EQ(row.shape(), (Shape{2, 2}));
    test::expect_close(row, take(x, Array(i), 0), 0, 0);
    ++i;
  }
  EXPECT_EQ(i, 3);
  std::vector<Array> rows(x.begin(), x.end());
  EXPECT_EQ(rows.size(), 3u);
  int n = 0;
  for (const Array& r : zeros({0, 4})) n += static_cast<int>(r.size());
  EXPECT_EQ(n, 0);
  EXPECT_THROW(Array(1.0f).begin(), ValueError);
}

TEST(ArrayStreams, NewStreamsAndScopedDefaults) {
  const Stream a = new_stream(Device::cpu), b = new_stream(Device::cpu);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.device, Device::cpu);
  const Array x = test::random_array({4}, float32, 7);
  const Device before = default_device();
  {
    StreamScope scope(a);
    EXPECT_EQ(default_device(), Device::cpu);
    const Array y = x + 1.0f;  // no stream given: the scope's
    EXPECT_EQ(y.primitive()->stream(), a);
    {
      StreamScope inner(Device::cpu);
      EXPECT_EQ((x * 2.0f).primitive()->stream(), default_stream(Device::cpu));
    }
    EXPECT_EQ((x * 2.0f).primitive()->stream(), a);
    test::expect_close(y, test::values(x + 1.0f), 0, 0);
  }
  EXPECT_EQ(default_device(), before);
  // Arrays of two streams combine as any others.
  const Array p = add(x, 1.0f, a), q = multiply(x, 3.0f, b);
  test::expect_close(p + q, test::values(x * 4.0f + 1.0f), 1e-6, 1e-6);
  if (is_available(Device::gpu)) {
    const Stream g = new_stream(Device::gpu);
    StreamScope on_gpu(g);
    EXPECT_EQ(default_device(), Device::gpu);
    const Array r = x * 2.0f;
    EXPECT_EQ(r.primitive()->device(), Device::gpu);
    test::expect_close(r, test::values(x * 2.0f), 0, 0);
  }
  EXPECT_THROW(StreamScope(StreamOrDevice{}), ValueError);
}

TEST(ArrayThreads, ConcurrentGraphsSharingInputsMatchSerialResults) {
  const Shape shape{256, 512};
  const Array w = test::random_array(shape, float32, 7);
  auto shared = [&] { return tanh(w * 0.5f + 0.25f); };
  std::vector<std::vector<uint32_t>> want(8), got(8);
  auto bits = [](const Array& a) {
    std::vector<uint32_t> b;
    for (float v : a.to_vector<float>()) b.push_back(std::bit_cast<uint32_t>(v));
    return b;
  };
  {
    const Array h = shared();
    for (int t = 0; t < 8; ++t) want[t] = bits(per_thread_graph(w, h, t));
  }
  const Array h = shared();  // unevaluated: the threads race to compute it, once
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { got[t] = bits(per_thread_graph(w, h, t)); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(got[t], want[t]) << "thread " << t;
  EXPECT_TRUE(h.is_available());
}

}  // namespace
}  // namespace kiln
