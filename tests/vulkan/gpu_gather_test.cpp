// The gather family on the GPU through the ordinary API (take, gather, scatter_add and its N-d
// form, put_along_axis, concatenate, pad, slice_update), against the same ops on the CPU: every
// dtype, every axis, index dtypes and negative indices, odd sizes, strided and broadcast operands,
// empty arrays, out-of-range indices, gradients on the GPU; and the radix sort behind the
// deterministic scatter-add against std::stable_sort. Moves and the ordered scatter-add match the
// CPU bit for bit, so comparisons are exact. Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/gather_kernels.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "support/dtypes.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;

const std::vector<Dtype> kNumeric = {uint8, int8, int32, int64, uint32, float16, bfloat16, float32, float64};
const std::vector<Dtype> kIndexTypes = {int8, uint8, int32, uint32, int64};

class GpuGather : public vk::testing::VulkanTest {
 public:
  using VulkanTest::ctx;
  using VulkanTest::read_vector;
  using VulkanTest::upload_vector;

 protected:
  // fn on the GPU equals fn on the CPU exactly: same shape, dtype and values.
  static void expect_same(const std::function<Array(StreamOrDevice)>& fn, const std::string& what,
                          double tol = 0.0) {
    SCOPED_TRACE(what);
    const Array cpu = fn(Device::cpu);
    const Array gpu = fn(Device::gpu);
    ASSERT_EQ(gpu.shape(), cpu.shape());
    ASSERT_EQ(gpu.dtype(), cpu.dtype());
    test::expect_close(gpu, test::values(cpu), tol, tol);
  }
};

// Random values of any dtype (integers wide enough that int8 and uint8 sums wrap).
Array rand(const Shape& s, uint64_t seed, Dtype t = float32) {
  if (t == bool_) {
    Array b = test::random_array(s, float32, seed, -1, 1) > 0.0f;
    b.eval();
    return b;
  }
  if (is_integral(t))
    return test::random_array(s, t, seed, is_unsigned(t) ? 0 : -100, is_unsigned(t) ? 200 : 100);
  return test::random_array(s, t, seed, -2, 2);
}

// Indices in [lo, hi) (floor of uniform values), of dtype t.
Array rand_index(const Shape& s, uint64_t seed, double lo, double hi, Dtype t = int32) {
  Array i = astype(floor(test::random_array(s, float64, seed, lo, hi)), t);
  i.eval();
  return i;
}
// Indices into an axis of n: negative ones too where the dtype has them.
Array rand_index_for(const Shape& s, uint64_t seed, int64_t n, Dtype t = int32) {
  const double lo = is_unsigned(t) ? 0.0 : -static_cast<double>(n);
  return rand_index(s, seed, lo, static_cast<double>(n), t);
}

std::string name(Dtype t) { return std::string(dtype_name(t)); }

// ---------------------------------------------------------------- take and gather

TEST_F(GpuGather, TakeEveryDtypeAndAxis) {
  for (Dtype t : test::kAllDtypes) {
    const Array x = rand({5, 7, 3}, 1, t);
    for (int axis : {0, 1, 2, -1}) {
      const Array idx = rand_index_for({4, 2}, 2 + static_cast<uint64_t>(axis + 1), x.shape(axis));
      expect_same([&](StreamOrDevice s) { return take(x, idx, axis, s); },
                  name(t) + " axis " + std::to_string(axis));
    }
  }
}

TEST_F(GpuGather, TakeIndexDtypesAndShapes) {
  const Array x = rand({9, 6}, 3);
  for (Dtype it : kIndexTypes) {
    for (const Shape& is : {Shape{}, Shape{1}, Shape{11}, Shape{2, 3, 4}}) {
      const Array idx = rand_index_for(is, 4, 9, it);
      expect_same([&](StreamOrDevice s) { return take(x, idx, 0, s); },
                  name(it) + " indices of rank " + std::to_string(is.size()));
      expect_same([&](StreamOrDevice s) { return take(x, rand_index_for(is, 5, 6, it), 1, s); },
                  name(it) + " along axis 1");
    }
  }
  // The flat form: take over the flattened array.
  expect_same([&](StreamOrDevice s) { return take(x, rand_index_for({13}, 6, 54), s); }, "flat");
}

TEST_F(GpuGather, TakeOddSizesAndLayouts) {
  for (int64_t n : {1, 7, 1031}) {
    const Array x = rand({n, 5}, 7);
    const Array idx = rand_index_for({n + 2}, 8, n);
    expect_same([&](StreamOrDevice s) { return take(x, idx, 0, s); }, "rows " + std::to_string(n));
    expect_same([&](StreamOrDevice s) { return take(transpose(x), idx, 1, s); },
                "transposed, rows " + std::to_string(n));
  }
  const Array x = rand({8, 6, 4}, 9);
  const Array idx = rand_index_for({3, 5}, 10, 6);
  expect_same([&](StreamOrDevice s) { return take(transpose(x, {2, 0, 1}, s), idx, 2, s); }, "permuted x");
  expect_same([&](StreamOrDevice s) { return take(slice(x, {Slice{1, 8, 2}}, s), idx, 1, s); }, "sliced x");
  expect_same([&](StreamOrDevice s) { return take(x, transpose(idx), 1, s); }, "transposed indices");
  expect_same(
      [&](StreamOrDevice s) {
        return take(x, broadcast_to(Array(int32_t{-2}), {3, 4}), 1, s);
      },
      "broadcast indices");
  expect_same([&](StreamOrDevice s) { return take(x, rand_index_for({0}, 11, 6), 1, s); }, "no indices");
  expect_same(
      [&](StreamOrDevice s) {
        return take(rand({0, 6}, 12), rand_index_for({4}, 13, 6), 1, s);
      },
      "empty x");
  // float64 rows of 3 elements: 8-byte units that do not widen.
  expect_same(
      [&](StreamOrDevice s) {
        return take(rand({5, 3}, 14, float64), rand_index_for({3, 5}, 10, 5), 0, s);
      },
      "float64 rows");
  // Byte rows whose length is a multiple of 16: widened to 16-byte units.
  expect_same(
      [&](StreamOrDevice s) {
        return take(rand({5, 32}, 15, uint8), rand_index_for({7}, 16, 5), 0, s);
      },
      "wide byte rows");
}

TEST_F(GpuGather, EmbeddingLookupAndGradient) {
  for (Dtype t : {float32, float16, bfloat16}) {
    const Array table = rand({1037, 96}, 17, t);
    const Array tokens = rand_index({4, 33}, 18, 0, 40);  // a small range: many duplicates
    const Array w = rand({4, 33, 96}, 19, t);
    expect_same([&](StreamOrDevice s) { return take(table, tokens, 0, s); }, "lookup " + name(t));
    const auto run = [&](Device d) {
      return value_and_grad([&, d](const Array& e) {
        return sum(astype(multiply(take(e, tokens, 0, d), w, d), float32, d), false, d);
      })(table);
    };
    const auto [cv, cg] = run(Device::cpu);
    const auto [gv, gg] = run(Device::gpu);
    test::expect_close(gg, test::values(cg), 0.0, 0.0);
    test::expect_close(gv, test::values(cv), 1e-3, 1e-3);  // the loss's reduction order differs
  }
}

TEST_F(GpuGather, GatherOverLeadingDims) {
  for (Dtype t : {bool_, int8, float16, float32, int64, float64}) {
    const Array x = rand({6, 5, 4}, 20, t);
    const Array i0 = rand_index_for({3, 7}, 21, 6, int64), i1 = rand_index_for({1, 7}, 22, 5, uint8);
    const Array i2 = rand_index_for({3, 1}, 23, 4, int8);
    expect_same([&](StreamOrDevice s) { return gather(x, {i0}, s); }, "one array " + name(t));
    expect_same([&](StreamOrDevice s) { return gather(x, {i0, i1}, s); }, "two arrays " + name(t));
    expect_same([&](StreamOrDevice s) { return gather(x, {i0, i1, i2}, s); }, "three arrays " + name(t));
    expect_same(
        [&](StreamOrDevice s) {
          return gather(transpose(x, {1, 0, 2}), {i1, i0}, s);
        },
        "strided x " + name(t));
  }
}

TEST_F(GpuGather, GatherGradientIsAScatterAddOnTheGpu) {
  const Array x = rand({6, 5, 4}, 24);
  const Array i0 = rand_index_for({9}, 25, 6), i1 = rand_index_for({9}, 26, 5);
  const Array w = rand({9, 4}, 27);
  const auto run = [&](Device d) {
    return value_and_grad([&, d](const Array& a) {
      return sum(multiply(gather(a, {i0, i1}, d), w, d), false, d);
    })(x);
  };
  const auto [cv, cg] = run(Device::cpu);
  const auto [gv, gg] = run(Device::gpu);
  test::expect_close(gg, test::values(cg), 0.0, 0.0);
  test::expect_close(gv, test::values(cv), 1e-5, 1e-5);
}

// ---------------------------------------------------------------- scatter-add

TEST_F(GpuGather, ScatterAddEveryDtypeAndAxis) {
  for (Dtype t : kNumeric) {
    const Array x = rand({6, 5, 4}, 28, t);
    for (int axis : {0, 1, 2}) {
      const Array idx = rand_index_for({3, 4}, 29 + static_cast<uint64_t>(axis), x.shape(axis));
      Shape us = x.shape();
      us.erase(us.begin() + axis);
      us.insert(us.begin() + axis, {3, 4});
      const Array upd = rand(us, 32, t);
      expect_same([&](StreamOrDevice s) { return scatter_add(x, idx, upd, axis, s); },
                  name(t) + " axis " + std::to_string(axis));
    }
  }
}

TEST_F(GpuGather, ScatterAddManyDuplicatesAndManyRows) {
  // Thousands of updates into 3 rows (several sort tiles), and a sort over 17-bit rows (3 passes).
  const Array few = rand({3, 2}, 33);
  const Array to_few = rand_index_for({5000}, 34, 3);
  const Array upd = rand({5000, 2}, 35);
  expect_same([&](StreamOrDevice s) { return scatter_add(few, to_few, upd, 0, s); }, "into 3 rows");
  const Array many = rand({70001, 1}, 36);
  const Array to_many = rand_index_for({3000}, 37, 70001, int64);
  expect_same(
      [&](StreamOrDevice s) {
        return scatter_add(many, to_many, rand({3000, 1}, 38), 0, s);
      },
      "into 70001 rows");
  // Deterministic: two runs agree bit for bit.
  const Array a = scatter_add(few, to_few, upd, 0, Device::gpu),
              b = scatter_add(few, to_few, upd, 0, Device::gpu);
  test::expect_close(a, test::values(b), 0.0, 0.0);
}

TEST_F(GpuGather, ScatterAddStridedAndBroadcastOperands) {
  const Array x = rand({5, 4}, 39);
  const Array idx = rand_index_for({3, 2}, 40, 5);
  const Array upd = rand({2, 3, 4}, 41);
  expect_same(
      [&](StreamOrDevice s) {
        return scatter_add(transpose(transpose(x) * 1.0f, s), idx, transpose(upd, {1, 0, 2}), 0, s);
      },
      "permuted updates");
  expect_same(
      [&](StreamOrDevice s) {
        return scatter_add(broadcast_to(Array(0.5f), {5, 4}), idx, Array(1.0f), 0, s);
      },
      "broadcast x and updates");
  expect_same(
      [&](StreamOrDevice s) {
        return scatter_add(x, rand_index_for({0}, 42, 5), rand({0, 4}, 43), 0, s);
      },
      "no updates");
  expect_same([&](StreamOrDevice s) { return scatter_add(x, transpose(idx), upd, 0, s); },
              "transposed indices");
}

TEST_F(GpuGather, ScatterAddGradients) {
  const Array x = rand({7, 3}, 44);
  const Array idx = rand_index_for({5}, 45, 7);
  const Array upd = rand({5, 3}, 46), w = rand({7, 3}, 47);
  const auto run = [&](Device d) {
    return vjp(
        [&, d](const std::vector<Array>& in) {
          return std::vector<Array>{scatter_add(in[0], idx, in[1], 0, d)};
        },
        {x, upd}, {w});
  };
  const auto cpu = run(Device::cpu).second, gpu = run(Device::gpu).second;
  for (size_t i = 0; i < 2; ++i) test::expect_close(gpu[i], test::values(cpu[i]), 0.0, 0.0);
}

// ---------------------------------------------------------------- put_along_axis

TEST_F(GpuGather, PutAlongAxisEveryDtypeAndAxis) {
  for (Dtype t : test::kAllDtypes) {
    const Array x = rand({4, 6, 3}, 48, t);
    for (int axis : {0, 1, 2}) {
      Shape is = x.shape();
      is[static_cast<size_t>(axis)] = 5;  // duplicates: the last one wins
      const Array idx = rand_index_for(is, 49 + static_cast<uint64_t>(axis), x.shape(axis), int64);
      const Array vals = rand(is, 52, t);
      expect_same([&](StreamOrDevice s) { return put_along_axis(x, idx, vals, axis, s); },
                  name(t) + " axis " + std::to_string(axis));
    }
  }
  const Array x = rand({4, 6}, 53);
  expect_same(
      [&](StreamOrDevice s) {
        return put_along_axis(x, rand_index_for({4, 1}, 54, 6, uint8), Array(7.0f), 1, s);
      },
      "broadcast indices and value");
}

TEST_F(GpuGather, PutAlongAxisGradient) {
  const Array x = rand({5, 4}, 55), vals = rand({5, 3}, 56), w = rand({5, 4}, 57);
  const Array idx = rand_index_for({5, 3}, 58, 4);
  const auto run = [&](Device d) {
    return vjp(
        [&, d](const std::vector<Array>& in) {
          return std::vector<Array>{put_along_axis(in[0], idx, in[1], 1, d)};
        },
        {x, vals}, {w});
  };
  const auto cpu = run(Device::cpu).second, gpu = run(Device::gpu).second;
  for (size_t i = 0; i < 2; ++i) test::expect_close(gpu[i], test::values(cpu[i]), 0.0, 0.0);
}

// ---------------------------------------------------------------- joins

TEST_F(GpuGather, ConcatenateEveryDtypeAndAxis) {
  for (Dtype t : test::kAllDtypes)
    for (int axis : {0, 1, 2}) {
      Shape a = {3, 4, 5}, b = a, c = a;
      b[static_cast<size_t>(axis)] = 0;
      c[static_cast<size_t>(axis)] = 7;
      const Array x = rand(a, 59, t), y = rand(b, 60, t), z = rand(c, 61, t);
      expect_same(
          [&](StreamOrDevice s) {
            return concatenate({x, y, z, x}, axis, s);
          },
          name(t) + " axis " + std::to_string(axis));
    }
  const Array x = rand({6, 4}, 62), y = rand({4, 6}, 63);
  expect_same(
      [&](StreamOrDevice s) {
        return concatenate({x, transpose(y), slice(x, {Slice{5, 0, -2}}, s)}, 0, s);
      },
      "strided pieces");
  expect_same([&](StreamOrDevice s) { return stack({x, transpose(y)}, 1, s); }, "stack");
  expect_same(
      [&](StreamOrDevice s) {
        return concatenate({rand({1031}, 64, int8), rand({7}, 65, int8)}, 0, s);
      },
      "odd byte lengths");
}

TEST_F(GpuGather, PadEveryDtype) {
  for (Dtype t : test::kAllDtypes) {
    const Array x = rand({3, 5, 2}, 66, t);
    expect_same(
        [&](StreamOrDevice s) {
          return pad(x, {{1, 2}, {0, 3}, {2, 0}}, astype(Array(1.0), t), s);
        },
        "pad " + name(t));
  }
  const Array x = rand({4, 7}, 67);
  expect_same([&](StreamOrDevice s) { return pad(transpose(x), {{1, 1}}, -3.0f, s); }, "transposed x");
  expect_same([&](StreamOrDevice s) { return pad(rand({0, 3}, 68), {{2, 1}, {0, 0}}, 5.0f, s); }, "empty x");
}

TEST_F(GpuGather, SliceUpdateEveryDtype) {
  for (Dtype t : test::kAllDtypes) {
    const Array x = rand({6, 5, 4}, 69, t);
    const Array u = rand({3, 5, 2}, 70, t);
    expect_same(
        [&](StreamOrDevice s) {
          return slice_update(x, u, {Slice{0, 6, 2}, Slice{}, Slice{3, 0, -2}}, s);
        },
        "negative step " + name(t));
  }
  const Array x = rand({9, 8}, 71);
  expect_same(
      [&](StreamOrDevice s) {
        return slice_update(x, rand({8}, 72), {Slice{2, 5}}, s);
      },
      "broadcast update");
  expect_same(
      [&](StreamOrDevice s) {
        return slice_update(transpose(x), transpose(rand({4, 3}, 73)), {Slice{1, 4}, Slice{0, 8, 2}}, s);
      },
      "strided both");
}

TEST_F(GpuGather, JoinGradientsOnTheGpu) {
  const Array x = rand({4, 5}, 74), y = rand({4, 3}, 75), u = rand({2, 5}, 76), v = Array(0.25f);
  const auto f = [&](Device d) {
    return [&, d](const std::vector<Array>& in) {
      const Array joined = concatenate({in[0], in[1]}, 1, d);                               // [4, 8]
      const Array padded = pad(joined, {{1, 0}, {2, 1}}, in[3], d);                         // [5, 11]
      const Array updated = slice_update(padded, in[2], {Slice{0, 4, 2}, Slice{3, 8}}, d);  // [5, 11]
      return std::vector<Array>{multiply(updated, updated, d)};
    };
  };
  const Array w = rand({5, 11}, 77);
  const auto cpu = vjp(f(Device::cpu), {x, y, u, v}, {w}).second;
  const auto gpu = vjp(f(Device::gpu), {x, y, u, v}, {w}).second;
  for (size_t i = 0; i < cpu.size(); ++i) test::expect_close(gpu[i], test::values(cpu[i]), 1e-5, 1e-6);
}

// ---------------------------------------------------------------- bad indices

TEST_F(GpuGather, IndicesOutOfRange) {
  const Array x = rand({3, 4}, 78);
  const Array bad = Array(std::vector<int32_t>{0, 1, 4, -5}, {4});
  // Indices held on the host are checked at eval as on the CPU. They are made lazily here, since
  // the op functions check indices that are already evaluated.
  const auto lazy = [&] {
    return subtract(add(bad, Array(int32_t{1}), Device::cpu), Array(int32_t{1}), Device::cpu);
  };
  for (Device d : {Device::cpu, Device::gpu}) {
    EXPECT_THROW(eval(take(x, lazy(), 1, d)), ValueError);
    EXPECT_THROW(eval(gather(x, {zeros({4}, int32), lazy()}, d)), ValueError);
    EXPECT_THROW(eval(scatter_add(x, lazy(), ones({3, 4}), 1, d)), ValueError);
    EXPECT_THROW(eval(put_along_axis(x, reshape(lazy(), {1, 4}), ones({1, 4}), 1, d)), ValueError);
  }
  // Indices computed on the device are not seen before the submit: bad ones read 0 and their
  // updates are dropped.
  const auto on_device = [] {
    return astype(Array(std::vector<float>{0, 1, 4, -5}, {4}), int32, Device::gpu);
  };
  const std::vector<double> xv = test::values(x);
  using V = std::vector<double>;
  test::expect_close(take(x, on_device(), 1, Device::gpu),
                     V{xv[0], xv[1], 0, 0, xv[4], xv[5], 0, 0, xv[8], xv[9], 0, 0}, 0.0, 0.0);
  test::expect_close(gather(x, {on_device()}, Device::gpu),
                     V{xv[0], xv[1], xv[2], xv[3], xv[4], xv[5], xv[6], xv[7], 0, 0, 0, 0, 0, 0, 0, 0}, 0.0,
                     0.0);
  test::expect_close(scatter_add(zeros({3, 4}), on_device(), ones({3, 4}), 1, Device::gpu),
                     V{1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0}, 0.0, 0.0);
  test::expect_close(
      put_along_axis(zeros({1, 4}), reshape(on_device(), {1, 4}), full({1, 4}, 2.0f), 1, Device::gpu),
      V{2, 2, 0, 0}, 0.0, 0.0);
}

// ---------------------------------------------------------------- kernels

// The radix sort against std::stable_sort: `count` rows in [0, n] (n marks a bad row).
void check_sort(GpuGather& t, int64_t count, int64_t n, uint32_t seed) {
  SCOPED_TRACE("count " + std::to_string(count) + " n " + std::to_string(n));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> row(0, n);
  std::vector<uint32_t> rows(static_cast<size_t>(count));
  for (uint32_t& r : rows) r = static_cast<uint32_t>(row(gen));
  std::vector<uint32_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return rows[a] < rows[b]; });
  std::vector<uint32_t> sorted_rows(rows);
  std::sort(sorted_rows.begin(), sorted_rows.end());
  std::vector<uint32_t> offsets(static_cast<size_t>(n) + 1);
  for (int64_t r = 0; r <= n; ++r)
    offsets[static_cast<size_t>(r)] = static_cast<uint32_t>(
        std::lower_bound(sorted_rows.begin(), sorted_rows.end(), static_cast<uint32_t>(r)) -
        sorted_rows.begin());
  vk::Recorder rec(t.ctx());
  const vk::SortedRows sorted = vk::record_sort_rows(rec, t.upload_vector(rows), count, n);
  rec.submit_and_wait();
  EXPECT_EQ(t.read_vector<uint32_t>(sorted.order, rows.size()), order);
  EXPECT_EQ(t.read_vector<uint32_t>(sorted.offsets, offsets.size()), offsets);
}

TEST_F(GpuGather, RadixSortIsStable) {
  check_sort(*this, 1, 1, 1);
  check_sort(*this, 7, 3, 2);
  check_sort(*this, 2049, 255, 3);
  check_sort(*this, 5000, 256, 4);
  check_sort(*this, 20000, 70000, 5);
  check_sort(*this, 3000, (int64_t{1} << 24) + 5, 6);
  check_sort(*this, 300000, 50257, 7);  // 16 keys per invocation
}

TEST_F(GpuGather, UnsupportedDtypesThrow) {
  vk::Recorder rec(ctx());
  const vk::BufferPtr b = ctx().allocator().allocate(64);
  const vk::GpuView flags = vk::GpuView::contiguous(b, bool_, {1, 2, 2});
  const vk::SortedRows sorted{b, b, 2, 2};
  EXPECT_THROW(vk::record_scatter_add_rows(rec, flags, sorted, flags, flags), NotImplemented);
  const vk::GpuView floats = vk::GpuView::contiguous(b, float32, {4});
  const int64_t n = 4;
  EXPECT_THROW(vk::record_index_rows(rec, {&floats, 1}, {&n, 1}), DtypeError);
}

}  // namespace
}  // namespace kiln
