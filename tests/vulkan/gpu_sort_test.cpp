// sort, argsort and argtopk on the GPU through the ordinary API, against the same ops on the CPU,
// compared byte for byte: every dtype, inputs with many ties, NaNs (with payloads), infinities and
// signed zeros, every axis, rows of 1 to 70000 elements, strided, broadcast and negative-stride
// views, empty arrays; the multi-pass path with small tiles at the kernel level; gradients
// through sort and topk. Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/sort_kernels.h"
#include "support/dtypes.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;

// The array's bytes in row-major order.
std::vector<uint8_t> bytes_of(const Array& a) {
  const Array c = contiguous(a, Device::cpu);
  c.eval();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return {p, p + c.nbytes()};
}

// Equal shapes, dtypes and bytes; names the first element that differs.
void expect_identical(const Array& gpu, const Array& cpu) {
  ASSERT_EQ(gpu.shape(), cpu.shape());
  ASSERT_EQ(gpu.dtype(), cpu.dtype());
  const std::vector<uint8_t> g = bytes_of(gpu), c = bytes_of(cpu);
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != c[i]) {
      const size_t e = i / static_cast<size_t>(cpu.itemsize());
      ADD_FAILURE() << "element " << e << " of " << cpu.size() << " differs: gpu " << test::values(gpu)[e]
                    << ", cpu " << test::values(cpu)[e];
      return;
    }
}

// Special values of each type: ties, extremes, and for floats signed zeros, infinities,
// subnormals and NaNs of both signs and with payloads (which the CPU keeps, or for float16 and
// bfloat16 rewrites through its round trip via float).
template <class T>
std::vector<T> special_values() {
  if constexpr (std::is_same_v<T, bool>) {
    return {false, true};
  } else if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    std::vector<T> v = {L::min(), static_cast<T>(L::min() + 1), 0,       1,
                        7,        static_cast<T>(L::max() - 1), L::max()};
    if constexpr (std::is_signed_v<T>) v.insert(v.end(), {-1, -7});
    if constexpr (sizeof(T) >= 4) v.insert(v.end(), {static_cast<T>(65536), static_cast<T>(-65536)});
    if constexpr (sizeof(T) == 8)
      for (int64_t w : {int64_t{1} << 32, (int64_t{1} << 32) + 1, int64_t{0xFFFFFFFF}, -(int64_t{1} << 40),
                        -(int64_t{1} << 40) - 1, int64_t{-1} << 63})
        v.push_back(static_cast<T>(w));  // for uint64 the negative ones are past 2^63
    return v;
  } else {
    const double inf = std::numeric_limits<double>::infinity(),
                 nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<T> v;
    for (double d : {-inf, -2.5, -1.0, -0.0, 0.0, 1.0, 1.5, inf, nan, -nan}) v.push_back(static_cast<T>(d));
    if constexpr (std::is_same_v<T, float16_t>) {
      v.insert(v.end(), {float16_t::from_bits(0x7C01), float16_t::from_bits(0xFD00),
                         float16_t::from_bits(0x0001), float16_t::from_bits(0x8001)});
    } else if constexpr (std::is_same_v<T, bfloat16_t>) {
      v.insert(v.end(), {bfloat16_t::from_bits(0x7F81), bfloat16_t::from_bits(0xFFC1),
                         bfloat16_t::from_bits(0x0001), bfloat16_t::from_bits(0x8001)});
    } else if constexpr (std::is_same_v<T, float>) {
      v.insert(v.end(),
               {std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0xFFC00123u), 1e-40f, -1e-40f});
    } else {
      v.insert(v.end(),
               {std::bit_cast<double>(0x7FF0000000000001ull), std::bit_cast<double>(0xFFF8000000000123ull),
                1 + std::ldexp(1.0, -40), 1 + std::ldexp(1.0, -39), -1 - std::ldexp(1.0, -40),
                std::ldexp(1.0, 33), 5e-324, -5e-324});
    }
    return v;
  }
}

// n values: half drawn from special_values() (many ties), half random over the type's range (or
// [-4, 4) for floats), from a fixed seed.
template <class T>
Array tie_heavy(const Shape& shape, uint64_t seed) {
  const std::vector<T> special = special_values<T>();
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> pick(0, special.size() - 1);
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  std::vector<T> v(static_cast<size_t>(shape_size(shape)));
  for (size_t i = 0; i < v.size(); ++i) {  // by index: std::vector<bool> has no bool&
    if (gen() % 2 == 0) {
      v[i] = special[pick(gen)];
    } else if constexpr (std::is_same_v<T, bool>) {
      v[i] = gen() % 2 == 0;
    } else if constexpr (std::is_integral_v<T>) {
      v[i] = static_cast<T>(gen());
    } else {
      v[i] = static_cast<T>(real(gen));
    }
  }
  return Array(v, shape);
}

Array tie_heavy(const Shape& shape, Dtype t, uint64_t seed) {
  return detail::visit_dtype<kAllTypes>(
      t, "test", [&](auto tag) { return tie_heavy<typename decltype(tag)::type>(shape, seed); });
}

using Op = std::function<Array(StreamOrDevice)>;

class GpuSort : public detail::vk::testing::VulkanTest {
 public:
  using VulkanTest::ctx;

 protected:
  static void expect_same(const Op& fn, const std::string& what) {
    SCOPED_TRACE(what);
    const Array cpu = fn(Device::cpu);
    const Array gpu = fn(Device::gpu);
    expect_identical(gpu, cpu);
  }
  // sort, argsort and argtopk (k = 1, 3 and n) of x along `axis` on both devices.
  static void expect_all_ops(const Array& x, int axis, const std::string& what) {
    const int n = static_cast<int>(x.shape(axis));
    expect_same([&](StreamOrDevice s) { return sort(x, axis, s); }, what + " sort");
    expect_same([&](StreamOrDevice s) { return argsort(x, axis, s); }, what + " argsort");
    for (int k : {1, 3, n})
      if (k <= n)
        expect_same([&](StreamOrDevice s) { return argtopk(x, k, axis, s); },
                    what + " argtopk " + std::to_string(k));
  }
};

std::string label(Dtype t, const Shape& s, int axis) {
  return std::string(dtype_name(t)) + " " + shape_str(s) + " axis " + std::to_string(axis);
}

TEST_F(GpuSort, EveryDtypeAlongEveryAxis) {
  uint64_t seed = 1;
  for (Dtype t : test::kAllDtypes)
    for (const Shape& shape : {Shape{6, 37}, Shape{3, 4, 5}, Shape{1}, Shape{7}})
      for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
        expect_all_ops(tie_heavy(shape, t, seed++), axis, label(t, shape, axis));
}

TEST_F(GpuSort, EveryDtypeWithRowsLongerThanATile) {
  // 5000 pads to 8192: more than a 4096-element tile, so global passes and merges run.
  uint64_t seed = 100;
  for (Dtype t : test::kAllDtypes) {
    expect_all_ops(tie_heavy({2, 5000}, t, seed++), 1, label(t, {2, 5000}, 1));
    expect_all_ops(tie_heavy({1000, 3}, t, seed++), 0, label(t, {1000, 3}, 0));
  }
}

TEST_F(GpuSort, RowLengthsFromOneTo70000) {
  uint64_t seed = 200;
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 4096, 4097, 5000, 70000})
    for (Dtype t : {float32, float64, int8}) {
      const Shape shape{n > 5000 ? 1 : 3, n};
      const Array x = tie_heavy(shape, t, seed++);
      expect_all_ops(x, 1, label(t, shape, 1));
    }
  // Many short rows: one tile holds several.
  expect_all_ops(tie_heavy({4000, 5}, float32, seed++), 1, "4000 rows of 5");
}

TEST_F(GpuSort, StridedBroadcastAndNegativeStrideViews) {
  const Array x = tie_heavy({7, 9, 5}, float32, 300);
  const Array b = tie_heavy({9, 1}, int32, 301);
  for (int axis = 0; axis < 3; ++axis) {
    expect_all_ops(transpose(x, {2, 0, 1}), axis, "transposed, axis " + std::to_string(axis));
    expect_all_ops(slice(x, {Slice{1, std::nullopt, 2}, Slice{std::nullopt, std::nullopt, -1}, Slice{1, 4}}),
                   axis, "stepped and reversed slice, axis " + std::to_string(axis));
  }
  // Stride 0 along the sorted axis (every element ties) and along the rows.
  expect_all_ops(broadcast_to(b, {9, 6}), 1, "broadcast along the axis");
  expect_all_ops(broadcast_to(b, {9, 6}), 0, "broadcast across rows");
  const Array halves = tie_heavy({8, 6}, float16, 302), bytes = tie_heavy({8, 6}, uint8, 303);
  expect_all_ops(transpose(halves), 1, "transposed float16");
  expect_all_ops(slice(bytes, {Slice{}, Slice{std::nullopt, std::nullopt, -2}}), 1, "reversed uint8");
}

TEST_F(GpuSort, EmptyArrays) {
  for (const Shape& shape : {Shape{0, 5}, Shape{4, 0}, Shape{0}})
    for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis) {
      const Array x = zeros(shape, float32);
      expect_same([&](StreamOrDevice s) { return sort(x, axis, s); }, label(float32, shape, axis) + " sort");
      expect_same([&](StreamOrDevice s) { return argsort(x, axis, s); },
                  label(float32, shape, axis) + " argsort");
    }
  const Array x = zeros({0, 5}, int64);
  expect_same([&](StreamOrDevice s) { return argtopk(x, 2, 1, s); }, "argtopk of no rows");
}

TEST_F(GpuSort, TopKValues) {
  const Array x = tie_heavy({5, 300}, float32, 400);
  for (int k : {1, 10, 300})
    expect_same([&](StreamOrDevice s) { return topk(x, k, 1, s); }, "topk " + std::to_string(k));
  const Array i = tie_heavy({300, 4}, int32, 401);
  expect_same([&](StreamOrDevice s) { return topk(i, 7, 0, s); }, "int32 topk along axis 0");
}

TEST_F(GpuSort, SortFeedsOtherKernelsInOneEval) {
  // The GPU's indices feed take_along_axis on the device; the result is the sorted array.
  const Array x = tie_heavy({6, 50}, float32, 500);
  expect_same([&](StreamOrDevice s) { return take_along_axis(x, argsort(x, 1, s), 1, s); },
              "gather by argsort");
  const Array g = take_along_axis(x, argsort(x, 1, Device::gpu), 1, Device::gpu);
  expect_identical(g, sort(x, 1, Device::cpu));
}

TEST_F(GpuSort, VmapOfArgsort) {
  const Array x = tie_heavy({4, 3, 20}, float32, 510);
  const auto fn = [](StreamOrDevice s) {
    return [s](const std::vector<Array>& in) { return std::vector<Array>{argsort(in[0], 0, s)}; };
  };
  expect_same([&](StreamOrDevice s) { return vmap(fn(s), {2})({x})[0]; }, "vmap over the last axis");
}

TEST_F(GpuSort, TopKGradientMatchesTheCpu) {
  const Array x = test::random_array({6, 40}, float32, 600, -2, 2);
  const Array w = test::random_array({6, 5}, float32, 601, -1, 1);
  const auto run = [&](Device d) {
    return value_and_grad([&, d](const Array& a) { return sum(multiply(topk(a, 5, 1, d), w, d), false, d); })(
        x);
  };
  const auto [cv, cg] = run(Device::cpu);
  const auto [gv, gg] = run(Device::gpu);
  test::expect_close(gv, test::values(cv), 1e-6, 1e-6);
  expect_identical(gg, cg);  // each gradient element is one weight or zero
}

TEST_F(GpuSort, SortJvpMatchesTheCpu) {
  const Array x = tie_heavy({5, 33}, float32, 700);
  const Array t = test::random_array({5, 33}, float32, 701, -1, 1);
  const auto run = [&](Device d) {
    return jvp([d](const std::vector<Array>& in) { return std::vector<Array>{sort(in[0], 1, d)}; }, {x}, {t});
  };
  const auto [cp, ct] = run(Device::cpu);
  const auto [gp, gt] = run(Device::gpu);
  expect_identical(gp[0], cp[0]);
  expect_identical(gt[0], ct[0]);
}

TEST_F(GpuSort, SortVjpMatchesTheCpu) {
  const Array x = tie_heavy({5, 33}, float32, 800);
  const Array u = test::random_array({5, 33}, float32, 801, -1, 1);
  const auto run = [&](Device d) {
    return vjp([d](const std::vector<Array>& in) { return std::vector<Array>{sort(in[0], 1, d)}; }, {x}, {u});
  };
  const auto [cv, cg] = run(Device::cpu);
  std::pair<std::vector<Array>, std::vector<Array>> gpu;
  try {
    gpu = run(Device::gpu);
    eval(gpu.second);
  } catch (const NotImplemented& e) {
    // Sort's vjp scatters through put_along_axis, which has no GPU kernel yet (index family).
    if (std::string(e.what()).find("PutAlongAxis") == std::string::npos) throw;
    GTEST_SKIP() << "put_along_axis has no GPU kernel yet: " << e.what();
  }
  expect_identical(gpu.first[0], cv[0]);
  expect_identical(gpu.second[0], cg[0]);
}

// The kernels directly with tiles of 2 to 16 elements: rows of up to 100 elements then take up
// to six merges of global passes, which the API reaches only with rows of more than 4096.
TEST_F(GpuSort, MultiPassWithSmallTiles) {
  vk::Context& c = ctx();
  uint64_t seed = 900;
  for (uint32_t tile : {2u, 4u, 16u})
    for (Dtype t : {float32, float64, uint8, bfloat16})
      for (const auto& [shape, axis] : {std::pair{Shape{5, 37}, 1}, std::pair{Shape{100, 3}, 0}})
        for (int mode = 0; mode < 3; ++mode) {
          SCOPED_TRACE(label(t, shape, axis) + " tile " + std::to_string(tile) + " mode " +
                       std::to_string(mode));
          const Array x = tie_heavy(shape, t, seed++);
          const int k = static_cast<int>(shape[static_cast<size_t>(axis)]) / 2;
          const Array cpu = mode == 0   ? sort(x, axis, Device::cpu)
                            : mode == 1 ? argsort(x, axis, Device::cpu)
                                        : argtopk(x, k, axis, Device::cpu);
          const std::vector<uint8_t> in = bytes_of(x);
          const vk::BufferPtr xb = upload_vector(in);
          const vk::BufferPtr ob = c.allocator().allocate(static_cast<size_t>(cpu.nbytes()));
          vk::Recorder r(c);
          vk::record_sort_along_axis(r, vk::GpuView::contiguous(xb, t, shape), axis, mode == 2,
                                     mode == 0 ? vk::SortOutput::values : vk::SortOutput::indices,
                                     vk::GpuView::contiguous(ob, cpu.dtype(), cpu.shape()), tile);
          r.submit_and_wait();
          EXPECT_EQ(read_vector<uint8_t>(ob, static_cast<size_t>(cpu.nbytes())), bytes_of(cpu));
        }
}

TEST_F(GpuSort, PlanOfTilesAndPasses) {
  // 32 KiB of shared memory: 4096 four-byte keys with their columns, 2048 eight-byte ones.
  const vk::SortPlan long_rows = vk::plan_sort(32768, 256, 3, 70000, 1);
  EXPECT_EQ(long_rows.len, 131072);
  EXPECT_EQ(long_rows.tile, 4096u);
  EXPECT_EQ(long_rows.merges, 5);          // blocks of 8192 .. 131072
  EXPECT_EQ(long_rows.global_passes, 15);  // 1 + 2 + 3 + 4 + 5
  EXPECT_EQ(long_rows.workgroup, 256u);
  const vk::SortPlan wide_keys = vk::plan_sort(32768, 256, 3, 70000, 2);
  EXPECT_EQ(wide_keys.tile, 2048u);
  EXPECT_EQ(wide_keys.merges, 6);
  // Short rows share a tile no larger than the input needs.
  const vk::SortPlan short_rows = vk::plan_sort(32768, 256, 3, 3, 1);
  EXPECT_EQ(short_rows.len, 4);
  EXPECT_EQ(short_rows.tile, 16u);
  EXPECT_EQ(short_rows.workgroup, 256u);
  EXPECT_EQ(short_rows.merges, 0);
  EXPECT_EQ(vk::plan_sort(32768, 256, 1, 1, 1).tile, 1u);
  EXPECT_EQ(vk::plan_sort(16384, 256, 1000, 5000, 2).tile, 1024u);  // 16 KiB: 1365 fit, a power of two
  EXPECT_EQ(vk::plan_sort(32768, 256, 2, 100, 1, 8).tile, 8u);      // tile_limit
  EXPECT_THROW(vk::plan_sort(32768, 256, 1 << 20, 5000, 1), NotImplemented);
  EXPECT_THROW(vk::plan_sort(8, 256, 1, 5000, 1), NotImplemented);
}

TEST_F(GpuSort, BadViewsAreErrors) {
  vk::Context& c = ctx();
  const vk::BufferPtr b = c.allocator().allocate(64 * 4);
  const vk::GpuView x = vk::GpuView::contiguous(b, float32, {4, 16});
  vk::Recorder r(c);
  // Wrong output dtype, a longer output axis, an axis out of range, a non-contiguous output.
  EXPECT_THROW(vk::record_sort_along_axis(r, x, 1, false, vk::SortOutput::indices,
                                          vk::GpuView::contiguous(b, float32, {4, 16})),
               ValueError);
  EXPECT_THROW(
      vk::record_sort_along_axis(r, vk::GpuView::contiguous(b, float32, {4, 8}), 1, false,
                                 vk::SortOutput::values, vk::GpuView::contiguous(b, float32, {4, 9})),
      ShapeError);
  EXPECT_THROW(vk::record_sort_along_axis(r, x, 2, false, vk::SortOutput::values, x), ShapeError);
  EXPECT_THROW(vk::record_sort_along_axis(r, vk::GpuView::contiguous(b, float32, {4, 8}), 0, false,
                                          vk::SortOutput::values, vk::GpuView{b, float32, {4, 8}, {1, 4}, 0}),
               ValueError);
  EXPECT_EQ(r.pending(), 0u);
}

}  // namespace
}  // namespace kiln
