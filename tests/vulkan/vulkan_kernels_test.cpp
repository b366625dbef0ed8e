// The built-in GPU kernels (copies and casts, row sums, matmul) against float64 references on the
// CPU, through the runtime directly: upload, record with the kernels' helpers, submit, read back.
// Inputs come from fixed seeds. The elementwise kernels are tested in elementwise_kernel_test and,
// through the primitives, in gpu_elementwise_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/kernels.h"
#include "kiln/core/vulkan/runtime/profile.h"
#include "vulkan_fixture.h"

namespace kiln::detail::vk {
namespace {

using testing::random_floats;
using testing::VulkanTest;

class VulkanKernels : public VulkanTest {
 protected:
  template <class T>
  GpuView view(const std::vector<T>& values, Dtype dtype, Shape shape, Strides strides = {},
               int64_t offset = 0) {
    GpuView v = GpuView::contiguous(upload_vector(values), dtype, std::move(shape), offset);
    if (!strides.empty()) v.strides = std::move(strides);
    return v;
  }
  GpuView output(Dtype dtype, Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return GpuView::contiguous(
        ctx().allocator().allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * size_of(dtype)), dtype,
        std::move(shape));
  }
  void run(const std::function<void(Recorder&)>& record) {
    Recorder r(ctx());
    record(r);
    r.submit_and_wait();
  }
};

// Offset of a row-major linear index in a strided view.
int64_t strided_offset(int64_t i, const Shape& shape, const Strides& strides, int64_t offset) {
  for (size_t d = shape.size(); d-- > 0;) {
    offset += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return offset;
}

// IEEE binary16 by hand (an independent reference): round to nearest even, finite values within
// the half range only (the tests stay inside +-65504).
uint16_t to_half_bits(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::abs(static_cast<double>(x));
  int e = 0;
  std::frexp(a, &e);                          // a = f * 2^e with f in [0.5, 1)
  const int exponent = std::max(e - 1, -14);  // subnormals share the smallest exponent
  const double quantum = std::ldexp(1.0, exponent - 10);
  const double r = std::nearbyint(a / quantum) * quantum;  // the default rounding: to nearest even
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  std::frexp(r, &e);  // rounding may have carried into the next binade
  const double mantissa = std::ldexp(r, -(e - 1)) - 1.0;
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) | static_cast<uint16_t>(mantissa * 1024);
}
float from_half_bits(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return static_cast<float>((h & 0x8000) ? -v : v);
}

TEST_F(VulkanKernels, ContiguousCopyAndCasts) {
  const int64_t n = 3001;  // not a multiple of the workgroup
  const auto floats = random_floats(n, -1000, 1000, 11);
  std::vector<int32_t> ints(n);
  std::vector<uint16_t> halves(n);
  for (int64_t i = 0; i < n; ++i) {
    ints[i] = static_cast<int32_t>(std::lround(floats[i] * 100));  // up to 1e5: exact in float32
    halves[i] = to_half_bits(floats[i]);
  }
  const GpuView f32 = view(floats, float32, {n}), i32 = view(ints, int32, {n}),
                f16 = view(halves, float16, {n});
  // Small integers, exact in float16.
  std::vector<int32_t> small(n);
  for (int64_t i = 0; i < n; ++i) small[i] = static_cast<int32_t>(floats[i]) * 2;
  const GpuView i32_small = view(small, int32, {n});

  GpuView copy = output(float32, {n}), f32_to_i32 = output(int32, {n}), i32_to_f32 = output(float32, {n});
  GpuView f32_to_f16 = output(float16, {n}), f16_to_f32 = output(float32, {n}),
          f16_copy = output(float16, {n});
  GpuView f16_to_i32 = output(int32, {n}), i32_to_f16 = output(float16, {n});
  run([&](Recorder& r) {
    record_copy(r, f32, copy);
    record_copy(r, f32, f32_to_i32);
    record_copy(r, i32, i32_to_f32);
    record_copy(r, f32, f32_to_f16);
    record_copy(r, f16, f16_to_f32);
    record_copy(r, f16, f16_copy);
    record_copy(r, f16, f16_to_i32);
    record_copy(r, i32_small, i32_to_f16);
  });
  EXPECT_EQ(read_vector<float>(copy.buffer, n), floats);
  const auto got_i32 = read_vector<int32_t>(f32_to_i32.buffer, n);
  const auto got_f32 = read_vector<float>(i32_to_f32.buffer, n);
  const auto got_f16 = read_vector<uint16_t>(f32_to_f16.buffer, n);
  const auto got_f16_f32 = read_vector<float>(f16_to_f32.buffer, n);
  const auto got_f16_i32 = read_vector<int32_t>(f16_to_i32.buffer, n);
  const auto got_i32_f16 = read_vector<uint16_t>(i32_to_f16.buffer, n);
  EXPECT_EQ(read_vector<uint16_t>(f16_copy.buffer, n), halves);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got_i32[i], static_cast<int32_t>(std::trunc(static_cast<double>(floats[i])))) << i;
    ASSERT_EQ(got_f32[i], static_cast<float>(static_cast<double>(ints[i]))) << i;
    // Vulkan leaves float16 rounding to the implementation: within one unit in the last place.
    ASSERT_LE(std::abs(int{got_f16[i]} - int{halves[i]}), 1) << i << ": " << floats[i];
    ASSERT_EQ(got_f16_f32[i], from_half_bits(halves[i])) << i;
    ASSERT_EQ(got_f16_i32[i],
              static_cast<int32_t>(std::trunc(static_cast<double>(from_half_bits(halves[i])))))
        << i;
    ASSERT_EQ(from_half_bits(got_i32_f16[i]), static_cast<float>(small[i])) << i;
  }
}

TEST_F(VulkanKernels, StridedCopyWithOffsetsAndNegativeStrides) {
  const Shape shape = {3, 4, 5, 2};
  const auto src_values = random_floats(200, -10, 10, 12);
  const GpuView src = view(src_values, float32, shape, {60, -3, 12, 1}, 20);  // reaches 11..189
  // The destination is the transposed layout: its last dim varies slowest.
  GpuView dst = output(float32, {120});
  dst.shape = shape;
  dst.strides = {1, 3, 12, 60};
  run([&](Recorder& r) { record_copy(r, src, dst); });
  const auto got = read_vector<float>(dst.buffer, 120);
  for (int64_t i = 0; i < 120; ++i)
    ASSERT_EQ(got[strided_offset(i, shape, dst.strides, 0)],
              src_values[strided_offset(i, shape, src.strides, 20)])
        << i;

  // A strided cast to int32, broadcasting one row (stride 0) over 6.
  const GpuView row = view(src_values, float32, {6, 7}, {0, 2}, 5);
  GpuView ints = output(int32, {6, 7});
  run([&](Recorder& r) { record_copy(r, row, ints); });
  const auto got_ints = read_vector<int32_t>(ints.buffer, 42);
  for (int64_t i = 0; i < 42; ++i)
    ASSERT_EQ(got_ints[i], static_cast<int32_t>(std::trunc(static_cast<double>(src_values[5 + (i % 7) * 2]))))
        << i;
}

// Profiling on for `record`'s dispatches, off and cleared again however they end.
struct ProfilingOn {
  ProfilingOn() {
    profile_clear();
    set_profiling(true);
  }
  ~ProfilingOn() {
    set_profiling(false);
    profile_clear();
  }
};

// Heads merged back into rows, as attention's output is: [B, T, H, D] read from a [B, H, T, D]
// layout at an offset. Contiguous rows move in whole units (16 bytes for D = 64, 8 for D = 6,
// single elements for odd D); every element lands where the strided reference says.
TEST_F(VulkanKernels, StridedCopyOfContiguousRowsMovesWholeUnits) {
  // Runs `record` and expects `shader` among its dispatches (where the device has timestamps).
  auto expect_shader = [&](const char* shader, const std::function<void(Recorder&)>& record) {
    ProfilingOn on;
    run(record);
    if (ctx().caps().timestamp_period != 0) {
      EXPECT_NE(profile_report().find(shader), std::string::npos) << shader << "\n" << profile_report();
    }
  };
  struct Case {
    Dtype dtype;
    int64_t d, offset;
    const char* shader;
  };
  for (const Case c : {Case{float32, 64, 8, "move_units_u128"}, Case{float32, 6, 2, "move_units_u64"},
                       Case{float32, 5, 3, "move_units_u32"}, Case{float16, 8, 16, "move_units_u128"}}) {
    const int64_t b = 2, t = 7, h = 3, n = b * t * h * c.d;
    const Shape shape = {b, t, h, c.d};
    const Strides from = {h * t * c.d, c.d, t * c.d, 1};
    const auto floats = random_floats(static_cast<size_t>(n + c.offset), -4, 4, 31);
    std::vector<uint32_t> words(floats.size());
    std::vector<uint16_t> halves(floats.size());
    for (size_t i = 0; i < floats.size(); ++i) {
      std::memcpy(&words[i], &floats[i], 4);
      halves[i] = to_half_bits(floats[i]);
    }
    const GpuView src = c.dtype == float32 ? view(words, float32, shape, from, c.offset)
                                           : view(halves, float16, shape, from, c.offset);
    const GpuView dst = output(c.dtype, shape);
    expect_shader(c.shader, [&](Recorder& r) { record_copy(r, src, dst); });
    auto expect_moved = [&](const auto& got, const auto& want) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[strided_offset(i, shape, from, c.offset)]) << i;
    };
    if (c.dtype == float32) {
      expect_moved(read_vector<uint32_t>(dst.buffer, n), words);
    } else {
      expect_moved(read_vector<uint16_t>(dst.buffer, n), halves);
    }
  }

  // Rows walked backwards and one broadcast over the middle dim (strides -8 and 0), into a
  // destination whose rows sit 8 floats apart at an offset of 2 floats: 8-byte units.
  const auto values = random_floats(64, -4, 4, 32);
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * 4);
  const Shape shape = {4, 3, 6};
  const Strides from = {-8, 0, 1}, to = {24, 8, 1};
  const GpuView src = view(bits, float32, shape, from, 40);
  GpuView dst = output(float32, {4 * 24});
  dst.shape = shape;
  dst.strides = to;
  dst.offset = 2;
  expect_shader("move_units_u64", [&](Recorder& r) { record_copy(r, src, dst); });
  const auto got = read_vector<uint32_t>(dst.buffer, 4 * 24);
  for (int64_t i = 0; i < 72; ++i)
    ASSERT_EQ(got[strided_offset(i, shape, to, 2)], bits[strided_offset(i, shape, from, 40)]) << i;
}

TEST_F(VulkanKernels, CopyRankLimitAndViewChecks) {
  const auto values = random_floats(512, -1, 1, 13);
  const Shape nine(9, 2);
  // Contiguous rank 9 merges into one dimension.
  GpuView src = view(values, float32, nine);
  GpuView dst = output(float32, nine);
  run([&](Recorder& r) { record_copy(r, src, dst); });
  EXPECT_EQ(read_vector<float>(dst.buffer, 512), values);
  // Rank 9 that cannot merge (the transposed layout: no two dims adjacent in memory) is refused.
  GpuView spread = src;
  spread.strides = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  Recorder r(ctx());
  EXPECT_THROW(record_copy(r, spread, dst), NotImplemented);
  GpuView outside = src;
  outside.offset = 1;  // the last element would be one past the buffer's 512 floats
  EXPECT_THROW(record_copy(r, outside, dst), ValueError);
  GpuView wrong = output(float32, {3});
  EXPECT_THROW(record_copy(r, src, wrong), ShapeError);
  EXPECT_THROW(record_copy(r, view(values, float64, {4}), output(float32, {4})), NotImplemented);
}

TEST_F(VulkanKernels, SumOverTheLastAxis) {
  struct Case {
    int64_t rows, cols, row_stride;
  };
  // Short and long rows, a padded row stride, and more rows than one grid dimension holds.
  const Case cases[] = {{7, 1000, 1000}, {300, 3, 3}, {5, 33, 40}, {2, 20000, 20000}, {66000, 2, 2}};
  uint32_t seed = 40;
  for (const Case& c : cases) {
    const auto values = random_floats(c.rows * c.row_stride, -2, 2, seed++);
    const GpuView x = view(values, float32, {c.rows, c.cols}, {c.row_stride, 1});
    GpuView y = output(float32, {c.rows});
    run([&](Recorder& r) { record_sum_last_axis(r, x, y); });
    const auto got = read_vector<float>(y.buffer, c.rows);
    for (int64_t row = 0; row < c.rows; ++row) {
      double want = 0, magnitude = 0;
      for (int64_t col = 0; col < c.cols; ++col) {
        want += values[row * c.row_stride + col];
        magnitude += std::abs(values[row * c.row_stride + col]);
      }
      ASSERT_NEAR(got[row], want, 1e-6 * magnitude + 1e-6) << c.rows << "x" << c.cols << " row " << row;
    }
  }
  Recorder r(ctx());
  const auto values = random_floats(12, -1, 1, 49);
  EXPECT_THROW(record_sum_last_axis(r, view(values, float32, {3, 4}, {1, 3}), output(float32, {3})),
               NotImplemented);
  EXPECT_THROW(record_sum_last_axis(r, view(values, float32, {3, 4}), output(float32, {4})), ShapeError);
}

// c = a @ b in float64, a and b read through their strides.
std::vector<double> matmul_reference(const std::vector<float>& a, const GpuView& av,
                                     const std::vector<float>& b, const GpuView& bv,
                                     std::vector<double>& magnitude) {
  const size_t rank = av.shape.size();
  const int64_t batch = rank == 3 ? av.shape[0] : 1, m = av.shape[rank - 2], k = av.shape[rank - 1],
                n = bv.shape[rank - 1];
  std::vector<double> c(batch * m * n, 0.0);
  magnitude.assign(c.size(), 0.0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t q = 0; q < k; ++q) {
          const int64_t ia = av.offset + (rank == 3 ? p * av.strides[0] : 0) + i * av.strides[rank - 2] +
                             q * av.strides[rank - 1];
          const int64_t ib = bv.offset + (rank == 3 ? p * bv.strides[0] : 0) + q * bv.strides[rank - 2] +
                             j * bv.strides[rank - 1];
          acc += double{a[ia]} * b[ib];
          mag += std::abs(double{a[ia]} * b[ib]);
        }
        c[(p * m + i) * n + j] = acc;
        magnitude[(p * m + i) * n + j] = mag;
      }
  return c;
}

TEST_F(VulkanKernels, MatmulTiledFloat32) {
  struct Case {
    const char* name;
    int64_t batch, m, k, n;
    bool transpose_b, broadcast_a;
  };
  const Case cases[] = {
      {"small", 0, 37, 29, 53, false, false},
      {"batched, b transposed", 3, 70, 45, 66, true, false},
      {"a broadcast over the batch", 2, 65, 17, 129, false, true},
      {"one row, one column", 0, 1, 300, 1, false, false},
      {"128 tiles, ragged edges", 0, 520, 33, 515, false, false},
  };
  uint32_t seed = 50;
  for (const Case& c : cases) {
    const bool batched = c.batch > 0;
    const int64_t batch = batched ? c.batch : 1;
    const auto a_values = random_floats((c.broadcast_a ? 1 : batch) * c.m * c.k, -1, 1, seed++);
    const auto b_values = random_floats(batch * c.k * c.n, -1, 1, seed++);
    GpuView a = view(a_values, float32, batched ? Shape{batch, c.m, c.k} : Shape{c.m, c.k});
    if (c.broadcast_a) a.strides[0] = 0;
    GpuView b = view(b_values, float32, batched ? Shape{batch, c.k, c.n} : Shape{c.k, c.n});
    if (c.transpose_b) {  // stored as [batch, n, k]
      b.strides = {c.k * c.n, 1, c.k};
    }
    GpuView out = output(float32, batched ? Shape{batch, c.m, c.n} : Shape{c.m, c.n});
    run([&](Recorder& r) { record_matmul(r, a, b, out); });
    const auto got = read_vector<float>(out.buffer, batch * c.m * c.n);
    std::vector<double> magnitude;
    const auto want = matmul_reference(a_values, a, b_values, b, magnitude);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * magnitude[i] + 1e-6) << c.name << " at " << i;
  }
  Recorder r(ctx());
  const auto values = random_floats(64, -1, 1, 59);
  EXPECT_THROW(
      record_matmul(r, view(values, float32, {4, 8}), view(values, float32, {4, 8}), output(float32, {4, 8})),
      ShapeError);
}

// Sources for record_copies and what each destination's buffer holds: a view of `n` elements at
// `offset` in a buffer of offset + n + 4, its last 4 elements a sentinel that must survive.
struct CopyPair {
  GpuView src, dst;
  int64_t offset, n;
};

TEST_F(VulkanKernels, CopiesInOneDispatch) {
  std::vector<CopyPair> pairs;
  uint64_t seed = 40;
  auto add = [&](Dtype dtype, int64_t n, int64_t offset) {
    const int64_t item = size_of(dtype);
    const auto values = random_floats(offset + n, -100, 100, ++seed);
    std::vector<uint8_t> bytes(static_cast<size_t>((offset + n) * item));
    std::memcpy(bytes.data(), values.data(), std::min(bytes.size(), values.size() * sizeof(float)));
    std::vector<uint8_t> dst_bytes(static_cast<size_t>((offset + n + 4) * item), 0xA5);
    const GpuView src = GpuView::contiguous(upload_vector(bytes), dtype, {n}, offset);
    const GpuView dst = GpuView::contiguous(upload_vector(dst_bytes), dtype, {n}, offset);
    pairs.push_back({src, dst, offset, n});
  };
  add(float32, 3001, 0);     // 16-byte moves, then a tail of words
  add(float32, 4096, 1);     // 4-byte aligned only: words
  add(int32, 8, 3);          // tiny
  add(float32, 1 << 20, 0);  // more 16-byte words than the grid has invocations: they stride
  add(float16, 1001, 0);     // an odd number of halves: not whole words, copied on its own
  add(float16, 1000, 1);     // whole words at a 2-byte address: on its own
  std::vector<GpuView> src, dst;
  for (const CopyPair& p : pairs) {
    src.push_back(p.src);
    dst.push_back(p.dst);
  }
  // A transposed view is copied on its own too.
  const auto grid = random_floats(12, -1, 1, 50);
  GpuView transposed = GpuView::contiguous(upload_vector(grid), float32, {4, 3});
  transposed.strides = {1, 4};
  const GpuView transposed_out = output(float32, {4, 3});
  src.push_back(transposed);
  dst.push_back(transposed_out);

  Recorder r(ctx());
  record_copies(r, src, dst);
  // One dispatch for the four batchable pairs where the device has buffer device addresses.
  const size_t alone = 3;
  EXPECT_EQ(r.pending(), ctx().caps().buffer_device_address ? 1 + alone : pairs.size() + 1);
  r.submit_and_wait();

  for (size_t i = 0; i < pairs.size(); ++i) {
    const CopyPair& p = pairs[i];
    const auto item = static_cast<size_t>(size_of(p.src.dtype));
    const auto want = read_vector<uint8_t>(p.src.buffer, static_cast<size_t>(p.offset + p.n) * item);
    const auto got = read_vector<uint8_t>(p.dst.buffer, static_cast<size_t>(p.offset + p.n + 4) * item);
    for (size_t b = 0; b < got.size(); ++b) {
      const size_t at = b / item;
      const bool copied = at >= static_cast<size_t>(p.offset) && at < static_cast<size_t>(p.offset + p.n);
      ASSERT_EQ(got[b], copied ? want[b] : uint8_t{0xA5}) << "pair " << i << " byte " << b;
    }
  }
  const auto t = read_vector<float>(transposed_out.buffer, 12);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      ASSERT_EQ(t[static_cast<size_t>(i * 3 + j)], grid[static_cast<size_t>(j * 4 + i)]);
}

// Buffers reached through device addresses are ordered like bound ones: a copy_many reading what
// the dispatch before it wrote, and one writing what the dispatch before it read, see a barrier.
TEST_F(VulkanKernels, CopiesAreOrderedAfterEarlierWork) {
  if (!ctx().caps().buffer_device_address) GTEST_SKIP() << "no buffer device addresses: plain copies";
  const int64_t n = 5000;
  const auto values = random_floats(n, -5, 5, 60);
  const GpuView a = view(values, float32, {n});
  const GpuView b = output(float32, {n}), c = output(float32, {n});
  Recorder r(ctx());
  record_copy(r, a, b);  // writes b
  const std::vector<GpuView> from{b}, to{c};
  const size_t before = r.barriers();
  record_copies(r, from, to);  // reads b
  EXPECT_EQ(r.barriers(), before + 1);
  record_copy(r, a, b);  // writes b after the copy_many read it
  EXPECT_EQ(r.barriers(), before + 2);
  r.submit_and_wait();
  EXPECT_EQ(read_vector<float>(c.buffer, n), values);
}

TEST_F(VulkanKernels, CopiesRejectMismatchedLists) {
  const GpuView a = output(float32, {4}), b = output(float32, {5});
  Recorder r(ctx());
  const std::vector<GpuView> one{a}, none{};
  EXPECT_THROW(record_copies(r, one, none), ValueError);
  const std::vector<GpuView> other{b};
  EXPECT_THROW(record_copies(r, one, other), ShapeError);
  EXPECT_EQ(r.pending(), 0u);
}

}  // namespace
}  // namespace kiln::detail::vk
