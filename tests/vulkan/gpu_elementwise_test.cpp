// Every elementwise primitive on the GPU (generated kernels from each op's kGlsl) against the same
// op on the CPU, in every dtype the op takes and the device can store: random inputs with fixed
// seeds plus the values where GLSL and C differ (NaN, ±inf, ±0, integer extremes, divisors 0 and
// -1), broadcasting and strided views. The CPU results are themselves checked against float64
// references in tests/core. Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

using Unary = Array (*)(const Array&, StreamOrDevice);
using Binary = Array (*)(const Operand&, const Operand&, StreamOrDevice);

class GpuElementwise : public detail::vk::testing::VulkanTest {
 protected:
  bool device_has(Dtype t) {
    const auto& caps = ctx().caps();
    if (t == int64) return caps.int64;
    if (t == float64) return caps.float64;
    return true;
  }
};

// Values of `t` from a fixed seed in [lo, hi] with the special values of the dtype mixed in.
Array inputs_of(Dtype t, int64_t n, uint64_t seed, double lo, double hi, bool specials = true) {
  std::vector<double> v = test::random_values(n, seed, lo, hi);
  if (is_floating(t)) {
    if (specials) {
      const double inf = std::numeric_limits<double>::infinity();
      const double nan = std::numeric_limits<double>::quiet_NaN();
      const double s[] = {0.0, -0.0, inf, -inf, nan, 1.0, -1.0, 0.5, -2.5};
      for (size_t i = 0; i < std::size(s) && i * 3 < v.size(); ++i) v[i * 3] = s[i];
    }
  } else {
    for (double& x : v) x = std::round(x);
    if (specials && t != bool_) {
      const double s[] = {0.0, 1.0, -1.0, 2.0,
                          static_cast<double>(t == uint8 ? 255 : (t == int8 ? -128 : 127))};
      for (size_t i = 0; i < std::size(s) && i * 3 < v.size(); ++i) v[i * 3] = s[i];
    }
  }
  return astype(Array(v, {n}, float64), t);
}

// Elementwise equality with NaN == NaN; floats within rtol/atol, integers exactly.
void expect_same(const Array& gpu, const Array& cpu, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const std::vector<double> g = test::values(gpu), c = test::values(cpu);
  int reported = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(c[i])) || g[i] == c[i] ||
                      (std::isfinite(c[i]) && std::abs(g[i] - c[i]) <= atol + rtol * std::abs(c[i]));
    if (!same && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": gpu " << g[i] << ", cpu " << c[i];
  }
}

double rtol_of(Dtype t, bool transcendental) {
  if (t == float16) return 2e-3;
  if (t == bfloat16) return 1.6e-2;
  if (t == float64) return transcendental ? 1e-14 : 1e-12;  // fdlibm's algorithms in double
  return transcendental ? 4e-6 : 1e-6;
}
// Absolute error allowed for transcendental functions near 0 in float32 (none in float64).
double atol_of(Dtype t, bool transcendental) { return transcendental && t != float64 ? 2e-6 : 0.0; }

struct UnaryCase {
  const char* name;
  Unary op;
  DtypeSet types;
  double lo, hi;
  bool transcendental = false;
};

const UnaryCase kUnary[] = {
    {"negative", negative, kNumericTypes, -3, 3},
    {"abs", abs, kNumericTypes, -3, 3},
    {"sign", sign, kNumericTypes, -3, 3},
    {"square", square, kNumericTypes, -3, 3},
    {"floor", floor, kNumericTypes, -3, 3},
    {"ceil", ceil, kNumericTypes, -3, 3},
    {"round", round, kNumericTypes, -3, 3},
    {"sqrt", sqrt, kFloatTypes, 0, 4},
    {"rsqrt", rsqrt, kFloatTypes, 0.1, 4},
    {"logical_not", logical_not, kAllTypes, -2, 2},
    {"isnan", isnan, kAllTypes, -2, 2},
    {"isinf", isinf, kAllTypes, -2, 2},
    {"exp", exp, kFloatTypes, -5, 5, true},
    {"expm1", expm1, kFloatTypes, -2, 2, true},
    {"log", log, kFloatTypes, 0.01, 5, true},
    {"log1p", log1p, kFloatTypes, -0.9, 3, true},
    {"sin", sin, kFloatTypes, -3, 3, true},
    {"cos", cos, kFloatTypes, -3, 3, true},
    {"tan", tan, kFloatTypes, -1.2, 1.2, true},
    {"tanh", tanh, kFloatTypes, -12, 12, true},
    {"sigmoid", sigmoid, kFloatTypes, -20, 20, true},
    {"erf", erf, kFloatTypes, -3, 3, true},
    {"erfinv", erfinv, kFloatTypes, -0.99, 0.99, true},
};

TEST_F(GpuElementwise, UnaryOpsInEveryDtype) {
  for (const UnaryCase& c : kUnary) {
    for (Dtype t : {float32, float16, bfloat16, float64, int32, int64, uint32, uint8, int8, bool_}) {
      if (!c.types.has(t) || !device_has(t)) continue;
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(t));
      const Array x = inputs_of(t, 200, 11, c.lo, c.hi);
      // Transcendental functions on GPUs are a few ulp from the C library's: compared on the
      // finite values only where a special value's result is not part of the op's contract.
      expect_same(c.op(x, Device::gpu), c.op(x, Device::cpu), rtol_of(t, c.transcendental),
                  atol_of(t, c.transcendental), what);
    }
  }
}

struct BinaryCase {
  const char* name;
  Binary op;
  DtypeSet types;
  double lo, hi;
  bool transcendental = false;
  // Absolute error allowed for floats: remainder's a - b * trunc(a / b) (one fma) is within an ulp
  // of the operands of fmod's exact result where a device does not fuse it (lavapipe).
  double float_atol = 0.0;
};

const BinaryCase kBinary[] = {
    {"add", add, kNumericTypes, -50, 50},
    {"subtract", subtract, kNumericTypes, -50, 50},
    {"multiply", multiply, kNumericTypes, -20, 20},
    {"divide", divide, kFloatTypes, -5, 5},
    {"maximum", maximum, kAllTypes, -3, 3},
    {"minimum", minimum, kAllTypes, -3, 3},
    {"remainder", remainder, kNumericTypes, -9, 9, false, 2e-6},
    {"floor_divide", floor_divide, kNumericTypes, -9, 9},
    {"power", power, kNumericTypes, -3, 3, true},
    {"arctan2", arctan2, kFloatTypes, -2, 2, true},
    {"equal", equal, kAllTypes, -2, 2},
    {"not_equal", not_equal, kAllTypes, -2, 2},
    {"less", less, kAllTypes, -2, 2},
    {"less_equal", less_equal, kAllTypes, -2, 2},
    {"greater", greater, kAllTypes, -2, 2},
    {"greater_equal", greater_equal, kAllTypes, -2, 2},
    {"logical_and", logical_and, kAllTypes, -1, 1},
    {"logical_or", logical_or, kAllTypes, -1, 1},
};

TEST_F(GpuElementwise, BinaryOpsInEveryDtypeWithBroadcasting) {
  for (const BinaryCase& c : kBinary) {
    for (Dtype t : {float32, float16, bfloat16, float64, int32, int64, uint32, uint8, int8, bool_}) {
      if (!c.types.has(t) || !device_has(t)) continue;
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(t));
      // Every pair of the special values meets: a (n, 1) against b (1, n).
      const Array a = reshape(inputs_of(t, 40, 21, c.lo, c.hi), {40, 1});
      const Array b = reshape(inputs_of(t, 40, 22, c.lo, c.hi), {1, 40});
      const double atol = c.transcendental ? atol_of(t, true) : (is_floating(t) ? c.float_atol : 0.0);
      // power of integers: exponents in [-3, 3] keep int8 and uint8 results meaningful.
      expect_same(c.op(a, b, Device::gpu), c.op(a, b, Device::cpu), rtol_of(t, c.transcendental), atol, what);
      // A strided (transposed) operand and a scalar one.
      const Array m = reshape(inputs_of(t, 48, 23, c.lo, c.hi, false), {6, 8});
      const Array s = reshape(inputs_of(t, 1, 24, c.lo, c.hi, false), {});
      expect_same(c.op(transpose(m), s, Device::gpu), c.op(transpose(m), s, Device::cpu),
                  rtol_of(t, c.transcendental), atol, what + " strided");
    }
  }
}

TEST_F(GpuElementwise, WhereFullAndCastsInEveryDtype) {
  const Array cond = greater(test::random_array({5, 7}, float32, 31), 0.0);
  for (Dtype t : {float32, float16, bfloat16, float64, int32, int64, uint32, uint8, int8, bool_}) {
    if (!device_has(t)) continue;
    const std::string what(dtype_name(t));
    const Array x = reshape(inputs_of(t, 35, 32, -9, 9), {5, 7});
    const Array y = reshape(inputs_of(t, 7, 33, -9, 9), {7});
    expect_same(where(cond, x, y, Device::gpu), where(cond, x, y, Device::cpu), 0, 0, "where " + what);
    expect_same(full({3, 4}, 2.5, t, Device::gpu), full({3, 4}, 2.5, t, Device::cpu), 0, 0, "full " + what);
    // Casts of values every target holds (C++ leaves a float out of an integer's range undefined).
    const Array in_range = reshape(inputs_of(t, 35, 34, 0, 9, false), {5, 7});
    for (Dtype to : {float32, float16, bfloat16, float64, int32, int64, uint32, uint8, int8, bool_}) {
      if (!device_has(to)) continue;
      expect_same(astype(transpose(in_range), to, Device::gpu), astype(transpose(in_range), to, Device::cpu),
                  0, 0, "astype " + what + " to " + std::string(dtype_name(to)));
    }
  }
}

// The contiguous 32-bit case (16-byte vector loads and stores on the GPU) in each 32-bit dtype, at
// sizes with 1 to 3 elements past the last whole vector and past 2^20 elements, and on slice views
// whose offsets are not multiples of 4 elements (the element-wise fallback).
TEST_F(GpuElementwise, ContiguousWordDtypesAtOddSizesAndSliceOffsets) {
  uint64_t seed = 60;
  for (Dtype t : {float32, int32, uint32}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{1027}, (int64_t{1} << 20) + 6}) {
      const std::string what = fmt::format("{} n {}", dtype_name(t), n);
      const Array a = inputs_of(t, n + 5, seed++, -50, 50, false),
                  b = inputs_of(t, n + 5, seed++, -50, 50, false);
      const Array a0 = slice(a, {0}, {n}), b0 = slice(b, {0}, {n});
      expect_same(add(a0, b0, Device::gpu), add(a0, b0, Device::cpu), 0, 0, what + " add");
      expect_same(multiply(a0, b0, Device::gpu), multiply(a0, b0, Device::cpu), 0, 0, what + " multiply");
      for (int64_t shift : {1, 2, 3, 4, 5}) {
        const Array as = slice(a, {shift}, {shift + n}), bs = slice(b, {0}, {n});
        expect_same(subtract(as, bs, Device::gpu), subtract(as, bs, Device::cpu), 0, 0,
                    fmt::format("{} subtract at offset {}", what, shift));
      }
      expect_same(maximum(a0, 3.0, Device::gpu), maximum(a0, 3.0, Device::cpu), 0, 0, what + " maximum");
    }
  }
}

// A chain of GPU ops stays on the device and its gradient runs there too (the vjps are built from
// the same elementwise primitives).
TEST_F(GpuElementwise, GradientsOfElementwiseChains) {
  const Array x = test::random_array({4, 6}, float32, 41, 0.2, 2.0);
  auto f = [](const Array& a, StreamOrDevice s) {
    return sum(multiply(sigmoid(a, s), log1p(square(a, s), s), s), Axes{0, 1}, false, s);
  };
  const Array g_gpu = grad([&](const Array& a) { return f(a, Device::gpu); })(x);
  const Array g_cpu = grad([&](const Array& a) { return f(a, Device::cpu); })(x);
  expect_same(g_gpu, g_cpu, 1e-5, 1e-6, "grad");
}

}  // namespace
}  // namespace kiln
