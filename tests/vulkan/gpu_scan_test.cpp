// cumsum and cumprod on the GPU through the ordinary API, against a float64 (integers: wrapping
// 64-bit) reference and the same ops on the CPU: every dtype, kind and flag, rows of many lengths
// (one tile, many tiles, the three-pass split), many short rows, scans along inner axes, strided,
// reversed, broadcast and permuted views, empty arrays, gradients, and the kernels' errors and
// 16-bit fallback through record_scan; cummax, cummin and logcumsumexp at the kernel level (their
// ordinary-API tests run in tests/core/scan_test's GPU pass). Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/scan_kernels.h"
#include "support/dtypes.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;

struct Flags {
  bool reverse, inclusive;
};
const Flags kFlags[] = {{false, true}, {true, true}, {false, false}, {true, false}};

Array scan_op(bool prod, const Array& x, int axis, Flags f, StreamOrDevice s) {
  return prod ? cumprod(x, axis, f.reverse, f.inclusive, s) : cumsum(x, axis, f.reverse, f.inclusive, s);
}

std::string label(bool prod, Dtype t, const Shape& shape, int axis, Flags f) {
  return std::string(prod ? "cumprod " : "cumsum ") + std::string(dtype_name(t)) + " " + shape_str(shape) +
         " axis " + std::to_string(axis) + (f.reverse ? " reverse" : "") + (f.inclusive ? "" : " exclusive");
}

// The naive scan of row-major values along `axis` with `combine`, starting from `identity`.
template <class T, class Combine>
std::vector<T> naive_scan(const std::vector<T>& x, const Shape& shape, int axis, Flags f, T identity,
                          Combine combine) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[static_cast<size_t>(axis)];
  std::vector<T> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      T acc = identity;
      for (int64_t k = 0; k < n; ++k) {
        const size_t at = static_cast<size_t>((o * n + (f.reverse ? n - 1 - k : k)) * inner + i);
        const T next = combine(acc, x[at]);
        y[at] = f.inclusive ? next : acc;
        acc = next;
      }
    }
  return y;
}

// Integer results, wrapped to the output's width as the CPU wraps them.
std::vector<int64_t> wrap_to(const std::vector<uint64_t>& v, Dtype out) {
  std::vector<int64_t> r;
  for (uint64_t u : v) {
    if (out == int32) r.push_back(static_cast<int32_t>(static_cast<uint32_t>(u)));
    if (out == uint32) r.push_back(static_cast<uint32_t>(u));
    if (out == int64 || out == uint64) r.push_back(static_cast<int64_t>(u));  // uint64: the same bits
  }
  EXPECT_EQ(r.size(), v.size()) << "no reference for " << out;
  return r;
}

// How close a float result must be to the float64 reference: `acc` times the scan of |x| (the
// accumulator's rounding, which a cumsum near zero cannot beat) plus `round` times the result (the
// rounding of its dtype).
struct Accuracy {
  double acc, round;
};
Accuracy accuracy(Dtype out, bool float64_acc) {
  if (out == float64) return {1e-12, 0};
  if (out == float32) return float64_acc ? Accuracy{1e-12, 1.2e-7} : Accuracy{2e-5, 0};
  if (out == float16) return {1e-5, 1e-3};
  return {1e-5, 8e-3};  // bfloat16
}

// gpu, computed by the GPU, must match the reference of x and (when given) the CPU's result:
// integers exactly, floats within `a`.
void expect_scan(const Array& gpu, const Array& x, bool prod, int axis, Flags f, Accuracy a,
                 const Array* cpu = nullptr) {
  const Dtype out = vk::scan_out_dtype(x.dtype());
  ASSERT_EQ(gpu.dtype(), out);
  ASSERT_EQ(gpu.shape(), x.shape());
  const int ax = axis < 0 ? axis + x.ndim() : axis;
  if (!is_floating(out)) {
    std::vector<uint64_t> xs;
    for (int64_t v : x.to_vector<int64_t>()) xs.push_back(static_cast<uint64_t>(v));
    const auto ref = naive_scan<uint64_t>(xs, x.shape(), ax, f, prod ? 1 : 0,
                                          [&](uint64_t a, uint64_t b) { return prod ? a * b : a + b; });
    const std::vector<int64_t> got = gpu.to_vector<int64_t>(), want = wrap_to(ref, out);
    ASSERT_EQ(got.size(), want.size());
    int failures = 0;
    for (size_t i = 0; i < got.size() && failures < 8; ++i)
      if (got[i] != want[i]) {
        ADD_FAILURE() << "at " << i << ": gpu " << got[i] << ", reference " << want[i];
        ++failures;
      }
    if (cpu) {
      EXPECT_EQ(got, cpu->to_vector<int64_t>());
    }
    return;
  }
  const std::vector<double> xs = test::values(x);
  const auto combine = [&](double a, double b) { return prod ? a * b : a + b; };
  const auto ref = naive_scan<double>(xs, x.shape(), ax, f, prod ? 1.0 : 0.0, combine);
  std::vector<double> abs_x;
  for (double v : xs) abs_x.push_back(std::fabs(v));
  const auto magnitude = naive_scan<double>(abs_x, x.shape(), ax, f, prod ? 1.0 : 0.0, combine);
  const double tiny = out == float64 ? 1e-300 : 1e-30;  // products that underflow
  const auto check = [&](const std::vector<double>& got, const char* what) {
    int failures = 0;
    for (size_t i = 0; i < got.size() && failures < 8; ++i) {
      const double tol = a.acc * magnitude[i] + a.round * std::fabs(ref[i]) + tiny;
      if (!(std::fabs(got[i] - ref[i]) <= tol)) {
        ADD_FAILURE() << what << " at " << i << ": " << got[i] << ", reference " << ref[i] << ", tolerance "
                      << tol;
        ++failures;
      }
    }
  };
  check(test::values(gpu), "gpu");
  if (cpu) check(test::values(*cpu), "cpu");
}

// Random values for a scan of `t`: products get factors within `spread` of 1 (or small integers,
// which wrap).
Array scan_input(const Shape& s, Dtype t, uint64_t seed, bool prod, double spread = 0.25) {
  if (t == bool_) {
    Array b = test::random_array(s, float32, seed) > (prod ? -0.9 : 0.0);
    b.eval();
    return b;
  }
  if (!is_floating(t)) {
    if (prod) return test::random_array(s, t, seed, t == uint8 ? 0 : -4, 5);
    return test::random_array(s, t, seed, t == uint8 ? 0 : -120, 120);
  }
  return prod ? test::random_array(s, t, seed, 1 - spread, 1 + spread)
              : test::random_array(s, t, seed, -1, 1);
}

class GpuScan : public vk::testing::VulkanTest {
 protected:
  // op(x) on the GPU against the reference and the CPU.
  void expect_same(const Array& x, bool prod, int axis, Flags f, const std::string& what = "") {
    SCOPED_TRACE(label(prod, x.dtype(), x.shape(), axis, f) + " " + what);
    const Array gpu = scan_op(prod, x, axis, f, Device::gpu);
    const Array cpu = scan_op(prod, x, axis, f, Device::cpu);
    expect_scan(gpu, x, prod, axis, f, accuracy(vk::scan_out_dtype(x.dtype()), ctx().caps().float64), &cpu);
  }
};

TEST_F(GpuScan, EveryDtypeKindAndFlag) {
  for (Dtype t : test::kAllDtypes)
    for (bool prod : {false, true}) {
      const Array x = scan_input({3, 26, 4}, t, 1 + static_cast<uint64_t>(t), prod);
      for (int axis : {0, 1, 2, -1})
        for (const Flags& f : kFlags) expect_same(x, prod, axis, f);
      for (const Flags& f : kFlags) expect_same(scan_input({7}, t, 40, prod), prod, 0, f);
    }
}

TEST_F(GpuScan, IntegerSumsAndProductsWrapAsOnTheCpu) {
  // 70 factors of up to 9 overflow every width; sums of large int32 and int64 values overflow too.
  for (Dtype t : {int8, uint8, int32, uint32, int64}) {
    expect_same(test::random_array({5, 70}, t, 2, t == uint8 ? 2 : -9, 10), true, 1, {false, true});
    expect_same(test::random_array({2, 3000}, t, 3, t == uint8 ? 2 : -9, 10), true, 1, {true, true});
  }
  expect_same(test::random_array({4, 5000}, int32, 4, 1.5e9, 2.1e9), false, 1, {false, true});
  expect_same(test::random_array({4, 5000}, int64, 5, 4e18, 9e18), false, 1, {false, false});
}

TEST_F(GpuScan, RowsOfEveryLength) {
  // One element, partial tiles, whole tiles (2048 per workgroup of 256), and past them.
  for (int64_t n : {1, 2, 7, 8, 9, 255, 256, 257, 2047, 2048, 2049, 4097, 20000})
    for (bool prod : {false, true})
      for (const Flags& f : kFlags) {
        // Factors whose product over the row stays well inside float32's range.
        const double spread = std::min(0.25, 2 / std::sqrt(static_cast<double>(n)));
        const Array x = scan_input({3, n}, float32, 6 + static_cast<uint64_t>(n), prod, spread);
        expect_same(x, prod, 1, f);
      }
  for (int64_t n : {1, 255, 4097})
    expect_same(test::random_array({2, n}, int32, 7, -1000, 1000), false, 1, {true, false});
}

TEST_F(GpuScan, LongRowsAreSplitIntoThreePasses) {
  // Fewer rows than fill the device, each long: totals, a scan of the totals, carried scans.
  for (const Flags& f : kFlags) {
    expect_same(scan_input({1, 100000}, float32, 8, false), false, 1, f);
    expect_same(test::random_array({3, 100003}, int32, 9, -1e6, 1e6), false, 1, f);
  }
  expect_same(test::random_array({2, 30001}, float32, 10, 0.9999, 1.0001), true, 1, {false, true});
  expect_same(test::random_array({2, 30001}, int32, 11, -3, 4), true, 1, {true, false});
  expect_same(test::random_array({1, 50000}, float16, 12, -1, 1), false, 1, {false, true});
  expect_same(test::random_array({1, 50000}, bfloat16, 13, 0, 1), false, 1, {true, true});
  expect_same(test::random_array({1, 40000}, float64, 14, -1, 1), false, 1, {false, false});
  expect_same(test::random_array({1, 40000}, int64, 15, -1e12, 1e12), false, 1, {true, true});
  expect_same(scan_input({40000}, bool_, 16, false), false, 0, {false, true});
  expect_same(scan_input({40000}, int8, 17, false), false, 0, {true, false});
}

TEST_F(GpuScan, ManyShortRows) {
  for (const Shape& s : std::vector<Shape>{{5000, 3}, {777, 1}, {1001, 7}, {300, 33}, {64, 255}, {2100, 16}})
    for (const Flags& f : kFlags) {
      expect_same(scan_input(s, float32, 18, false), false, 1, f);
      expect_same(scan_input(s, int32, 19, true), true, 1, f);
    }
  expect_same(scan_input({999, 5}, float16, 20, false), false, 1, {false, true});
  expect_same(scan_input({999, 5}, uint8, 21, false), false, 1, {true, false});
}

TEST_F(GpuScan, ScansAlongInnerAxes) {
  // Columns scanned one per invocation; long columns with few of them are split.
  for (const Shape& s : std::vector<Shape>{{5, 7}, {1000, 3}, {20000, 2}, {129, 1}, {300, 64}})
    for (const Flags& f : kFlags) {
      expect_same(scan_input(s, float32, 22, false), false, 0, f);
      expect_same(scan_input(s, int32, 23, true), true, 0, f);
    }
  for (const Flags& f : kFlags) {
    expect_same(scan_input({4, 300, 5}, float32, 24, false), false, 1, f);
    expect_same(scan_input({4, 300, 5}, float16, 25, false), false, 1, f);
    expect_same(scan_input({6, 2, 3, 130}, int64, 26, false), false, 0, f);
    expect_same(scan_input({6, 2, 3, 130}, float64, 27, true), true, 1, f);
  }
}

TEST_F(GpuScan, StridedReversedBroadcastAndPermutedViews) {
  const Array x = scan_input({6, 40, 5}, float32, 28, false);
  const Array i = scan_input({6, 40, 5}, int32, 29, false);
  const Array h = scan_input({6, 40, 5}, float16, 30, false);
  const Array b = scan_input({6, 40, 5}, bool_, 31, false);
  const std::vector<std::function<Array(const Array&)>> views = {
      [](const Array& a) {
        return transpose(a, {2, 0, 1});
      },
      [](const Array& a) {
        return transpose(a, {1, 2, 0});
      },
      [](const Array& a) {
        return slice(a, {1, 0, 1}, {6, 40, 5}, {2, 3, 2});
      },
      [](const Array& a) {
        return slice(a, {Slice{}, Slice{.start = std::nullopt, .stop = std::nullopt, .step = -1}});
      },
      [](const Array& a) {
        return broadcast_to(slice(a, {0, 0, 0}, {1, 40, 5}), {3, 40, 5});
      },
      // A permutation whose axes around the scanned one do not merge: copied first.
      [](const Array& a) {
        return transpose(reshape(a, {6, 4, 10, 5}), {1, 3, 0, 2});
      },
  };
  for (size_t v = 0; v < views.size(); ++v)
    for (const Array* a : {&x, &i, &h, &b}) {
      const Array view = views[v](*a);
      for (int axis = 0; axis < view.ndim(); ++axis)
        for (const Flags& f : kFlags) expect_same(view, false, axis, f, "view " + std::to_string(v));
    }
}

TEST_F(GpuScan, EmptyArrays) {
  for (const Shape& s : std::vector<Shape>{{0}, {3, 0}, {0, 4}, {2, 0, 3}})
    for (Dtype t : {float32, int8, float16})
      for (int axis = 0; axis < static_cast<int>(s.size()); ++axis) {
        const Array y = cumsum(zeros(s, t), axis, false, true, Device::gpu);
        y.eval();
        EXPECT_EQ(y.shape(), s);
        EXPECT_EQ(y.dtype(), vk::scan_out_dtype(t));
        EXPECT_EQ(y.size(), 0);
      }
}

// The vjp of `prod ? cumprod : cumsum` against the CPU's, for each flag: sum(op(x) * w).
TEST_F(GpuScan, GradientsComputeOnTheGpuAndMatchTheCpu) {
  for (bool prod : {false, true}) {
    Array x = scan_input({4, 37}, float32, 32, prod);
    if (prod) {
      // Zeros exercise cumprod's zero-safe rule: one in a row, two in another.
      std::vector<float> v = x.to_vector<float>();
      v[5] = 0.0f;
      v[37 + 3] = v[37 + 20] = 0.0f;
      x = Array(v, x.shape());
    }
    const Array w = test::random_array({4, 37}, float32, 33);
    for (int axis : {0, 1})
      for (const Flags& f : kFlags) {
        SCOPED_TRACE(label(prod, float32, x.shape(), axis, f) + " gradient");
        const auto loss = [&](Device d) {
          return value_and_grad([&, d](const Array& a) {
            return sum(multiply(scan_op(prod, a, axis, f, d), w, d), false, d);
          })(x);
        };
        const auto [gv, gg] = loss(Device::gpu);
        const auto [cv, cg] = loss(Device::cpu);
        test::expect_close(gv, test::values(cv), 1e-5, 1e-5);
        test::expect_close(gg, test::values(cg), 1e-5, 1e-5);
      }
  }
  // A long row: the gradient's reverse cumsum takes the split path too.
  const Array long_x = scan_input({1, 20000}, float32, 34, false);
  const auto loss = [&](Device d) {
    return value_and_grad(
        [d](const Array& a) { return sum(square(cumsum(a, 1, false, true, d), d), false, d); })(long_x);
  };
  const auto [gv, gg] = loss(Device::gpu);
  const auto [cv, cg] = loss(Device::cpu);
  test::expect_close(gv, test::values(cv), 1e-4, 1e-2);
  test::expect_close(gg, test::values(cg), 1e-4, 1e-1);
}

// The bits of a float16 or bfloat16 array, and back.
std::vector<uint16_t> half_bits(const Array& a) {
  std::vector<uint16_t> bits;
  if (a.dtype() == float16)
    for (float16_t h : a.to_vector<float16_t>()) bits.push_back(h.bits);
  else
    for (bfloat16_t h : a.to_vector<bfloat16_t>()) bits.push_back(h.bits);
  return bits;
}
Array from_half_bits(const std::vector<uint16_t>& bits, const Shape& s, Dtype t) {
  if (t == float16) {
    std::vector<float16_t> v;
    for (uint16_t b : bits) v.push_back(float16_t::from_bits(b));
    return Array(v, s);
  }
  std::vector<bfloat16_t> v;
  for (uint16_t b : bits) v.push_back(bfloat16_t::from_bits(b));
  return Array(v, s);
}

// Kernel-level: record_scan's checks, NotImplemented for int64/float64 on devices without them,
// and the float32 path of 16-bit results on devices without 16-bit stores.
TEST_F(GpuScan, RecordScanChecksAndFeatureFallbacks) {
  vk::Recorder r(ctx());
  const Array x = scan_input({2, 9, 3}, float32, 35, false);
  const vk::GpuView in = vk::GpuView::contiguous(upload_vector(x.to_vector<float>()), float32, {2, 9, 3});
  const vk::GpuView out = vk::GpuView::contiguous(ctx().allocator().allocate(54 * 4), float32, {2, 9, 3});
  EXPECT_THROW(vk::record_scan(r, {}, in, vk::GpuView::contiguous(out.buffer, int32, {2, 9, 3})), ValueError);
  EXPECT_THROW(vk::record_scan(r, {}, vk::GpuView::contiguous(in.buffer, float32, {54}),
                               vk::GpuView::contiguous(out.buffer, float32, {54})),
               ShapeError);
  EXPECT_THROW(vk::record_scan(r, {}, in, vk::GpuView::contiguous(out.buffer, float32, {2, 3, 9})),
               ShapeError);
  for (Dtype t : {int64, float64}) {
    const vk::GpuView wide = vk::GpuView::contiguous(ctx().allocator().allocate(54 * 8), t, {2, 9, 3});
    try {
      vk::record_scan(r, {}, wide, wide, vk::ScanFeatures{});
      ADD_FAILURE() << "expected NotImplemented for " << dtype_name(t);
    } catch (const NotImplemented& e) {
      EXPECT_NE(std::string(e.what()).find(dtype_name(t)), std::string::npos) << e.what();
    }
  }
  const vk::DeviceCaps& caps = ctx().caps();
  if (!caps.storage16 || !caps.int64 || !caps.float64) {  // features the device lacks cannot be asked for
    EXPECT_THROW(vk::record_scan(r, {}, in, out, vk::ScanFeatures{true, true, true}), ValueError);
  }
  EXPECT_EQ(r.pending(), 0u);

  // float16 and bfloat16 results through a float32 scan and a conversion kernel, as on the CPU;
  // long enough along the middle axis to split.
  for (Dtype t : {float16, bfloat16})
    for (const Flags& f : kFlags) {
      SCOPED_TRACE(label(false, t, {3, 5000, 2}, 1, f) + " without 16-bit stores");
      const Array h = scan_input({3, 5000, 2}, t, 36, false);
      const std::vector<uint16_t> bits = half_bits(h);
      const vk::GpuView hv = vk::GpuView::contiguous(upload_vector(bits), t, h.shape());
      const vk::GpuView hout =
          vk::GpuView::contiguous(ctx().allocator().allocate(bits.size() * 2), t, h.shape());
      vk::record_scan(r, {vk::ScanOp::sum, f.reverse, f.inclusive}, hv, hout,
                      vk::ScanFeatures{false, caps.int64, caps.float64});
      r.submit_and_wait();
      expect_scan(from_half_bits(read_vector<uint16_t>(hout.buffer, bits.size()), h.shape(), t), h, false, 1,
                  f, accuracy(t, false));
    }
}

// float32 on a device without float64 accumulates in float32: less accurate, still within
// float32's rounding of the terms (rows and columns, split and not).
TEST_F(GpuScan, Float32WithoutFloat64AccumulatesInFloat32) {
  const vk::DeviceCaps& caps = ctx().caps();
  const vk::ScanFeatures no_f64{caps.storage16, caps.int64, false};
  vk::Recorder r(ctx());
  for (const Shape& s : std::vector<Shape>{{3, 20000, 1}, {1, 300, 1}, {1, 5000, 3}, {40, 7, 5}})
    for (bool prod : {false, true})
      for (const Flags& f : kFlags) {
        SCOPED_TRACE(label(prod, float32, s, 1, f) + " without float64");
        const Array x = scan_input(s, float32, 37, prod, 0.01);
        const vk::GpuView in = vk::GpuView::contiguous(upload_vector(x.to_vector<float>()), float32, s);
        const vk::GpuView out = vk::GpuView::contiguous(
            ctx().allocator().allocate(static_cast<size_t>(x.size()) * 4), float32, s);
        vk::record_scan(r, {prod ? vk::ScanOp::prod : vk::ScanOp::sum, f.reverse, f.inclusive}, in, out,
                        no_f64);
        r.submit_and_wait();
        Accuracy a = accuracy(float32, false);
        if (prod) a.acc = 1e-7 * static_cast<double>(s[1]);  // products of factors near 1 drift with length
        expect_scan(Array(read_vector<float>(out.buffer, static_cast<size_t>(x.size())), s), x, prod, 1, f,
                    a);
      }
}

// cummax, cummin and logcumsumexp at the kernel level: logaddexp in float32 on a device without
// float64 and float16 maxima without 16-bit stores (rows and columns, split and not), against the
// CPU; their dtype checks.
TEST_F(GpuScan, ExtremesAndLogaddexpWithoutOptionalFeatures) {
  const vk::DeviceCaps& caps = ctx().caps();
  vk::Recorder r(ctx());
  for (const Shape& s : std::vector<Shape>{{3, 20000, 1}, {1, 300, 1}, {1, 5000, 3}, {40, 7, 5}})
    for (const Flags& f : kFlags) {
      SCOPED_TRACE(shape_str(s) + (f.reverse ? " reverse" : "") + (f.inclusive ? "" : " exclusive"));
      const Array x = test::random_array(s, float32, 38, -20, 20);
      const vk::GpuView in = vk::GpuView::contiguous(upload_vector(x.to_vector<float>()), float32, s);
      const vk::GpuView out =
          vk::GpuView::contiguous(ctx().allocator().allocate(static_cast<size_t>(x.size()) * 4), float32, s);
      vk::record_scan(r, {vk::ScanOp::logaddexp, f.reverse, f.inclusive}, in, out,
                      vk::ScanFeatures{caps.storage16, caps.int64, false});
      r.submit_and_wait();
      const Array want = logcumsumexp(astype(x, float64), 1, f.reverse, f.inclusive, Device::cpu);
      // float32 logaddexps of terms up to |20|: each step rounds by ~1e-7 of the running value.
      test::expect_close(Array(read_vector<float>(out.buffer, static_cast<size_t>(x.size())), s), want,
                         1e-7 * static_cast<double>(s[1]), 1e-5);

      const Array h = test::random_array(s, float16, 39, -100, 100);
      const std::vector<uint16_t> bits = half_bits(h);
      const vk::GpuView hv = vk::GpuView::contiguous(upload_vector(bits), float16, s);
      const vk::GpuView hout =
          vk::GpuView::contiguous(ctx().allocator().allocate(bits.size() * 2), float16, s);
      vk::record_scan(r, {vk::ScanOp::max, f.reverse, f.inclusive}, hv, hout,
                      vk::ScanFeatures{false, caps.int64, caps.float64});
      r.submit_and_wait();
      test::expect_close(from_half_bits(read_vector<uint16_t>(hout.buffer, bits.size()), s, float16),
                         cummax(h, 1, f.reverse, f.inclusive, Device::cpu), 0, 0);
    }
  const vk::GpuView i8 = vk::GpuView::contiguous(ctx().allocator().allocate(64), int8, {1, 8, 1});
  const vk::GpuView i32 = vk::GpuView::contiguous(ctx().allocator().allocate(64), int32, {1, 8, 1});
  EXPECT_THROW(vk::record_scan(r, {vk::ScanOp::max}, i8, i32), ValueError);  // max keeps int8
  EXPECT_NO_THROW(vk::record_scan(r, {vk::ScanOp::sum}, i8, i32));
  r.submit_and_wait();
  EXPECT_THROW(vk::record_scan(r, {vk::ScanOp::logaddexp}, i32, i32), ValueError);  // floats only
  EXPECT_EQ(vk::scan_out_dtype(vk::ScanOp::min, uint8), uint8);
  EXPECT_EQ(vk::scan_out_dtype(vk::ScanOp::prod, uint8), uint32);
}

}  // namespace
}  // namespace kiln
