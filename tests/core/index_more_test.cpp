// MLX's general gather and scatters, the combining scatters, masked_scatter, accumulating slice
// updates and dynamic slices (core/ops/index_more.h): values against plain-loop references
// written here, out-of-range indices, finite-difference vjps, jvps and vmaps, and dynamic slices
// under compile and vmap.
#include "kiln/core/ops/index_more.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "support/device.h"
#include "support/op_test.h"
#include "support/reference.h"

namespace kiln {
namespace {

using test::check_jvp;
using test::check_vjp;
using test::check_vmap;
using test::expect_close;
using test::flat;
using test::for_each_index;
using test::Idx;
using test::random_array;
using test::values;
using Args = std::vector<Array>;
using V = std::vector<double>;

Array ints(const std::vector<int64_t>& v, const Shape& shape, Dtype dtype = int32) {
  return Array(v, shape, dtype);
}

// ---------------------------------------------------------------- plain-loop references

// Element i of row-major `v` of `shape`, where `shape` broadcasts (right-aligned) to i's rank.
double at(const std::vector<double>& v, const Shape& shape, const Idx& i) {
  int64_t f = 0;
  const size_t off = i.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + (shape[d] == 1 ? 0 : i[off + d]);
  return v[f];
}

// The indices of a gather or scatter: values and shapes of the index arrays, their common shape
// B, their axes and the slice sizes (one per dim of the array).
struct Spec {
  std::vector<std::vector<double>> idx;
  std::vector<Shape> idx_shapes;
  Shape batch;
  std::vector<int> axes;
  Shape sizes;
};
Spec spec_of(const Args& indices, const Shape& batch, const std::vector<int>& axes, const Shape& sizes) {
  Spec s{{}, {}, batch, axes, sizes};
  for (const Array& i : indices) {
    s.idx.push_back(values(i));
    s.idx_shapes.push_back(i.shape());
  }
  return s;
}

// Calls f(b + o, source multi-index) for every position b of B and offset o in the slice.
void for_each_slot(const Spec& sp, const Shape& as, const std::function<void(const Idx&, const Idx&)>& f) {
  for_each_index(sp.batch, [&](const Idx& b) {
    Idx start(as.size(), 0);
    for (size_t k = 0; k < sp.axes.size(); ++k) {
      const int64_t n = as[sp.axes[k]];
      const int64_t v = static_cast<int64_t>(at(sp.idx[k], sp.idx_shapes[k], b));
      start[sp.axes[k]] = v < 0 ? v + n : v;
    }
    for_each_index(sp.sizes, [&](const Idx& o) {
      Idx src(as.size()), slot = b;
      for (size_t d = 0; d < as.size(); ++d) src[d] = start[d] + o[d];
      slot.insert(slot.end(), o.begin(), o.end());
      f(slot, src);
    });
  });
}

std::vector<double> ref_gather(const std::vector<double>& a, const Shape& as, const Spec& sp) {
  std::vector<double> out;
  for_each_slot(sp, as, [&](const Idx&, const Idx& src) { out.push_back(a[flat(as, src)]); });
  return out;
}

// Updates of shape B + sizes applied in row-major order by `f(old, update)`.
std::vector<double> ref_scatter(std::vector<double> a, const Shape& as, const Spec& sp,
                                const std::vector<double>& u,
                                const std::function<double(double, double)>& f) {
  Shape us = sp.batch;
  us.insert(us.end(), sp.sizes.begin(), sp.sizes.end());
  for_each_slot(sp, as, [&](const Idx& slot, const Idx& src) {
    double& d = a[flat(as, src)];
    d = f(d, u[flat(us, slot)]);
  });
  return a;
}

double keep_last(double, double v) { return v; }
double plus(double a, double v) { return a + v; }
double times(double a, double v) { return a * v; }
double keep_max(double a, double v) { return std::isnan(a) || std::isnan(v) ? NAN : std::max(a, v); }
double keep_min(double a, double v) { return std::isnan(a) || std::isnan(v) ? NAN : std::min(a, v); }

using ScatterFn = Array (*)(const Array&, const std::vector<Array>&, const Array&, const Axes&,
                            StreamOrDevice);
struct Variant {
  const char* name;
  ScatterFn fn;
  double (*ref)(double, double);
};
const Variant kVariants[] = {{"scatter", scatter, keep_last},
                             {"scatter_add", scatter_add, plus},
                             {"scatter_max", scatter_max, keep_max},
                             {"scatter_min", scatter_min, keep_min},
                             {"scatter_prod", scatter_prod, times}};

// `r` reads or writes through an out-of-range index computed in its own graph: the CPU throws
// ValueError at eval naming `op`; the GPU cannot see it before the submit and reads 0 or drops the
// update, giving `on_gpu`.
void expect_computed_out_of_range(const Array& r, const char* op, const std::vector<double>& on_gpu) {
  if (test::gpu_default()) return expect_close(r, on_gpu, 0, 0);
  try {
    r.eval();
    ADD_FAILURE() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("[") + op + "]"), std::string::npos) << e.what();
  }
}

template <class F>
void expect_value_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no throw";
  } catch (const ValueError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- gather

TEST(GatherSlices, MatchesTheLoopReference) {
  const Shape as{4, 5, 6};
  const Array a = random_array(as, float32, 1);
  const auto av = values(a);
  // Axes out of order, broadcasting index arrays, windows on an indexed axis (size 2 on axis 2)
  // and on a dim that is not indexed (3 of axis 1's 5), negative indices.
  const Array i2 = ints({0, 4, -2}, {3}), i0 = ints({3, -4}, {2, 1});
  const Spec sp = spec_of({i2, i0}, {2, 3}, {2, 0}, {1, 3, 2});
  const Array r = gather(a, {i2, i0}, {2, 0}, {1, 3, 2});
  ASSERT_EQ(r.shape(), (Shape{2, 3, 1, 3, 2}));
  expect_close(r, ref_gather(av, as, sp), 0, 0);
  // Only a middle axis indexed: axis 0 whole, the trailing dims cut to 4.
  const Array i1 = ints({4, 0, 2, 1}, {2, 2});
  const Spec sp1 = spec_of({i1}, {2, 2}, {1}, {4, 1, 4});
  expect_close(gather(a, {i1}, {-2}, {4, 1, 4}), ref_gather(av, as, sp1), 0, 0);
  // A 0-d index: one slice, shape slice_sizes; no index arrays: the slice at the origin.
  const Array one = gather(a, {Array(-3)}, {1}, {2, 3, 6});
  EXPECT_EQ(one.shape(), (Shape{2, 3, 6}));
  expect_close(one, ref_gather(av, as, spec_of({Array(-3)}, {}, {1}, {2, 3, 6})), 0, 0);
  expect_close(gather(a, {}, {}, {2, 2, 2}), values(slice(a, {{0, 2}, {0, 2}, {0, 2}})), 0, 0);
  // Other dtypes and index dtypes, a strided input.
  for (Dtype dt : {int64, bool_, float16, uint8}) {
    const Array b = transpose(random_array({6, 5, 4}, dt, 2, 0, 3));
    const Array j = ints({1, 3, 0}, {3}, dt == uint8 ? uint8 : int64);
    expect_close(gather(b, {j}, {1}, {2, 2, 6}), ref_gather(values(b), as, spec_of({j}, {3}, {1}, {2, 2, 6})),
                 0, 0);
  }
  EXPECT_EQ(gather(a, {ints({}, {0})}, {0}, {1, 5, 6}).shape(), (Shape{0, 1, 5, 6}));
  EXPECT_EQ(gather(a, {i1}, {1}, {4, 0, 6}).shape(), (Shape{2, 2, 4, 0, 6}));
}

TEST(GatherSlices, RejectsBadArguments) {
  const Array a = random_array({4, 5}, float32, 3);
  const Array i = ints({1, 2}, {2});
  EXPECT_THROW(gather(a, {i}, {0, 1}, {1, 5}), ValueError);                        // one index per axis
  EXPECT_THROW(gather(a, {i, i}, {1, -1}, {1, 1}), ValueError);                    // repeated axis
  EXPECT_THROW(gather(a, {i}, {0}, {1}), ShapeError);                              // one size per dim
  EXPECT_THROW(gather(a, {i}, {0}, {1, 6}), ShapeError);                           // size past the dim
  EXPECT_THROW(gather(a, {i}, {2}, {1, 5}), ShapeError);                           // axis out of range
  EXPECT_THROW(gather(a, {Array({0.5f})}, {0}, {1, 5}), DtypeError);               // float indices
  EXPECT_THROW(gather(a, {i, ints({0, 1, 2}, {3})}, {0, 1}, {1, 1}), ShapeError);  // no broadcast
  EXPECT_THROW(gather(Array(1.0f), {}, {}, {}), ShapeError);
}

TEST(GatherSlices, OutOfRangeIndices) {
  const Array a = random_array({4, 5}, float32, 4);
  // Known indices: at the call, naming the op, the index and the slice size.
  expect_value_error(
      [&] {
        gather(a, {ints({0, 4}, {2})}, {0}, {1, 5});
      },
      {"[gather]", "index 4", "axis 0 with size 4"});
  expect_value_error([&] { gather(a, {ints({-5}, {1})}, {0}, {1, 5}); }, {"index -5"});
  expect_value_error(
      [&] {
        gather(a, {ints({3}, {1})}, {1}, {4, 3});
      },
      {"index 3 with slice size 3", "axis 1 with size 5"});
  EXPECT_NO_THROW(gather(a, {ints({2, -3}, {2})}, {1}, {4, 3}));
  // Computed: at eval (the window 4, 5 of axis 1 leaves it; on the GPU its element 5 reads 0).
  const Array r = gather(a, {add(ints({1}, {1}), 3)}, {1}, {1, 2});
  const auto av = values(a);
  expect_computed_out_of_range(r, "gather", {av[4], 0});
  expect_computed_out_of_range(gather(a, {subtract(ints({0}, {1}), 9)}, {1}, {4, 1}), "gather", {0, 0, 0, 0});
}

// ---------------------------------------------------------------- scatters

TEST(Scatters, MatchTheLoopReference) {
  const Shape as{4, 5, 3};
  const Array a = random_array(as, float32, 5, 0.5, 2);
  const auto av = values(a);
  // Repeated indices (row 1 twice, row 3 twice: windows of 2 along axis 1 overlap), a window on a
  // dim that is not indexed (axis 0: 2 of 4) and a cut trailing dim (2 of 3).
  const Array i1 = ints({1, 2, 1, 3, 3, 0}, {2, 3});
  const Shape us{2, 3, 2, 2, 2};
  const Array u = random_array(us, float32, 6, 0.5, 2);
  const Spec sp = spec_of({i1}, {2, 3}, {1}, {2, 2, 2});
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Array r = v.fn(a, {i1}, u, {1}, {});
    ASSERT_EQ(r.shape(), as);
    expect_close(r, ref_scatter(av, as, sp, values(u), v.ref));
  }
  // Two index arrays broadcasting, axes out of order, updates broadcasting over B.
  const Array j2 = ints({2, 0, -1}, {3}), j0 = ints({3, 0}, {2, 1});
  const Array u2 = random_array({1, 3, 1, 5, 1}, float32, 7, 0.5, 2);
  const Spec sp2 = spec_of({j2, j0}, {2, 3}, {2, 0}, {1, 5, 1});
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    expect_close(v.fn(a, {j2, j0}, u2, {2, 0}, {}),
                 ref_scatter(av, as, sp2, values(broadcast_to(u2, {2, 3, 1, 5, 1})), v.ref));
  }
}

TEST(Scatters, IntegerAndHalfDtypes) {
  const Shape as{5, 2};
  const Array i = ints({4, 0, 4, 4, 2}, {5});  // row 4 three times
  const Spec sp = spec_of({i}, {5}, {0}, {1, 2});
  for (Dtype dt : {int32, int64, uint32, int8, uint8, float16, bfloat16, float64}) {
    const bool small = dt == int8 || dt == uint8 || dt == float16 || dt == bfloat16;
    const double lo = dt == uint8 || dt == uint32 ? 0 : small ? -5 : -40, hi = small ? 5 : 40;
    const Array a = random_array(as, dt, 8, lo, hi);
    const Array u = random_array({5, 1, 2}, dt, 9, lo, hi);
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(std::string(v.name) + " " + std::string(dtype_name(dt)));
      std::vector<double> ref = ref_scatter(values(a), as, sp, values(u), v.ref);
      for (double& x : ref) {  // products of four factors wrap to 8 bits
        if (dt == int8) x = static_cast<int8_t>(static_cast<int64_t>(x));
        if (dt == uint8) x = static_cast<uint8_t>(static_cast<int64_t>(x));
      }
      const auto tol = test::tolerance(dt);
      expect_close(v.fn(a, {i}, u, {0}, {}), ref, tol.rtol * 4, tol.atol * 4);
    }
  }
  // int32 and int64 products wrap as unsigned words do, on both devices.
  const Array r = scatter_prod(full({1}, 1048577, int32), {ints({0, 0}, {2})}, full({2, 1}, 129, int32), {0});
  EXPECT_EQ(r.to_vector<int32_t>(), std::vector<int32_t>{static_cast<int32_t>(1048577u * 129u * 129u)});
  const int64_t big = (int64_t{1} << 40) + 3;
  const Array r64 = scatter_prod(full({1}, big, int64), {ints({0, 0}, {2})}, full({2, 1}, big, int64), {0});
  const uint64_t ub = static_cast<uint64_t>(big);
  EXPECT_EQ(r64.to_vector<int64_t>(), std::vector<int64_t>{static_cast<int64_t>(ub * ub * ub)});
  // Plain scatter moves any dtype, bool too; the last duplicate wins.
  const Array b = scatter(zeros({3}, bool_), {ints({1, 1, 2}, {3})},
                          Array(std::vector<bool>{true, false, true}, {3, 1}), {0});
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{false, false, true}));
}

TEST(Scatters, LastDuplicateWinsAndNanPropagates) {
  const Array a = Array({1.0f, 2.0f, 3.0f});
  const Array i = ints({0, 2, 0, 0, 2}, {5});
  const Array u = Array({10.0f, 20.0f, 11.0f, 12.0f, -1.0f}, {5, 1});
  expect_close(scatter(a, {i}, u, {0}), V{12, 2, -1}, 0, 0);
  expect_close(scatter_add(a, std::vector<Array>{i}, u, Axes{0}), V{34, 2, 22}, 0, 0);
  expect_close(scatter_max(a, {i}, u, {0}), V{12, 2, 20}, 0, 0);
  expect_close(scatter_min(a, {i}, u, {0}), V{1, 2, -1}, 0, 0);
  expect_close(scatter_prod(a, {i}, u, {0}), V{1320, 2, -60}, 0, 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Array un = Array({nan, 20.0f, 11.0f, 12.0f, -1.0f}, {5, 1});
  expect_close(scatter_max(a, {i}, un, {0}), V{NAN, 2, 20}, 0, 0);
  expect_close(scatter_min(a, {i}, un, {0}), V{NAN, 2, -1}, 0, 0);
  expect_close(scatter_max(Array({nan, 1.0f}), {ints({0}, {1})}, Array({5.0f}, {1, 1}), {0}), V{NAN, 1}, 0,
               0);
  // A larger scatter over many duplicates: the GPU's sorted segments against the loop.
  const Array big = random_array({40, 3}, float32, 10);
  const Array bi = astype(random_array({300}, float32, 11, 0, 40), int32);
  const Array bu = random_array({300, 1, 3}, float32, 12);
  const Spec sp = spec_of({bi}, {300}, {0}, {1, 3});
  for (const Variant& v : kVariants) {
    if (std::string(v.name) == "scatter_prod") continue;  // 300 factors underflow
    SCOPED_TRACE(v.name);
    expect_close(v.fn(big, {bi}, bu, {0}, {}), ref_scatter(values(big), {40, 3}, sp, values(bu), v.ref), 1e-5,
                 1e-5);
  }
}

TEST(Scatters, DevicesAgreeBitForBit) {
  // Both devices walk each element's updates in index order and round alike: no tolerance.
  if (!test::gpu_default()) GTEST_SKIP() << "compares the GPU with the CPU";
  const Array bi = astype(random_array({200}, float32, 15, 0, 10), int32);
  for (Dtype dt : {float32, float16, bfloat16}) {
    const Array a = random_array({10, 4}, dt, 16, 0.9, 1.1), u = random_array({200, 1, 4}, dt, 17, 0.9, 1.1);
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(std::string(v.name) + " " + std::string(dtype_name(dt)));
      expect_close(v.fn(a, {bi}, u, {0}, Device::gpu), v.fn(a, {bi}, u, {0}, Device::cpu), 0, 0);
    }
  }
}

TEST(Scatters, RejectBadArguments) {
  const Array a = random_array({4, 5}, float32, 13);
  const Array i = ints({1, 2}, {2});
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    EXPECT_THROW(v.fn(a, {i}, zeros({5}), {0}, {}), ShapeError);           // updates lack the slice dims
    EXPECT_THROW(v.fn(a, {i}, zeros({3, 1, 5}), {0}, {}), ShapeError);     // B does not match
    EXPECT_THROW(v.fn(a, {i}, zeros({2, 1, 6}), {0}, {}), ShapeError);     // slice past the dim
    EXPECT_THROW(v.fn(a, {i}, zeros({2, 1, 5}), {0, 1}, {}), ValueError);  // one index per axis
    EXPECT_THROW(v.fn(a, {Array({1.0f})}, zeros({1, 1, 5}), {0}, {}), DtypeError);
    expect_value_error(
        [&] {
          v.fn(a, {ints({1, 4}, {2})}, zeros({2, 1, 5}), {0}, {});
        },
        {std::string("[") + v.name + "]", "index 4"});
    expect_value_error([&] { v.fn(a, {ints({3}, {1})}, zeros({1, 2, 5}), {0}, {}); }, {"slice size 2"});
    if (std::string(v.name) != "scatter") {
      EXPECT_THROW(v.fn(zeros({3}, bool_), {ints({1}, {1})}, zeros({1, 1}, bool_), {0}, {}), DtypeError);
    }
  }
}

TEST(Scatters, ComputedOutOfRangeIndices) {
  const Array a = random_array({3, 2}, float32, 14);
  const auto av = values(a);
  // 2, 3: row 3 is out of range (a new graph each time: an evaluated one is checked at the call).
  auto lazy = [] { return add(ints({0, 1}, {2}), 2); };
  const Array u = full({2, 1, 2}, 5.0f);
  // The GPU drops the bad row's update and applies the rest.
  std::vector<double> set = av, add_ = av;
  set[4] = set[5] = 5;
  for (int k : {4, 5}) add_[k] = static_cast<float>(add_[k]) + 5.0f;  // as float32 adds
  expect_computed_out_of_range(scatter(a, {lazy()}, u, {0}), "scatter", set);
  expect_computed_out_of_range(scatter_max(a, {lazy()}, u, {0}), "scatter_max", set);
  expect_computed_out_of_range(scatter_add(a, std::vector<Array>{lazy()}, u, Axes{0}), "gather", add_);
}

// ---------------------------------------------------------------- masked_scatter

std::vector<double> ref_masked(std::vector<double> a, const Shape& as, const std::vector<double>& mask,
                               const Shape& ms, const std::vector<double>& v) {
  size_t next = 0;
  for_each_index(as, [&](const Idx& i) {
    if (at(mask, ms, i) != 0) a[flat(as, i)] = v[next++];
  });
  return a;
}

TEST(MaskedScatter, FillsTruePositionsInOrder) {
  const Array a = random_array({3, 4}, float32, 15);
  const Array mask =
      Array(std::vector<bool>{true, false, true, true, false, false, true, false, false, true, true, false},
            {3, 4});
  const Array v = random_array({2, 5}, float32, 16);  // 10 values for 6 true positions
  expect_close(masked_scatter(a, mask, v), ref_masked(values(a), {3, 4}, values(mask), {3, 4}, values(v)), 0,
               0);
  const Array row = Array(std::vector<bool>{false, true, true, false}, {4});  // broadcast mask
  expect_close(masked_scatter(a, row, v), ref_masked(values(a), {3, 4}, values(row), {4}, values(v)), 0, 0);
  const Array ia = astype(random_array({3, 4}, float32, 17, -50, 50), int32);
  expect_close(
      masked_scatter(ia, mask, astype(v, float64) * 100.0),
      ref_masked(values(ia), {3, 4}, values(mask), {3, 4}, values(astype(astype(v, float64) * 100.0, int32))),
      0, 0);
  expect_close(masked_scatter(a, zeros({3, 4}, bool_), zeros({0})), values(a), 0, 0);  // no values needed
  EXPECT_THROW(masked_scatter(a, zeros({3, 4}), v), DtypeError);
  EXPECT_THROW(masked_scatter(a, zeros({2, 4}, bool_), v), ShapeError);
  expect_value_error([&] { masked_scatter(a, mask, zeros({5})); }, {"[masked_scatter]", "6 true positions"});
  expect_value_error([&] { masked_scatter(a, row, zeros({5})); }, {"6 true positions"});
  // A computed mask with too few values: take's out-of-range index at eval; the GPU reads 0.
  const Array lazy_mask = greater(ints({1, 0, 1, 1}, {4}), 0);
  const Array av = Array({1.0f, 2.0f, 3.0f, 4.0f});
  expect_computed_out_of_range(masked_scatter(av, lazy_mask, Array({7.0f, 8.0f})), "take", {7, 2, 8, 0});
}

// ---------------------------------------------------------------- accumulating slice updates

using SliceFn = Array (*)(const Array&, const Array&, const std::vector<Slice>&, StreamOrDevice);

TEST(SliceUpdateAccumulate, MatchesTheLoopReference) {
  const Array a = random_array({5, 6}, float32, 18, 0.5, 2);
  const Array u = random_array({3, 2}, float32, 19, 0.5, 2);
  const std::vector<Slice> sl{{0, 5, 2}, {-1, 0, -3}};  // rows 0, 2, 4; columns 5, 2
  const std::pair<SliceFn, double (*)(double, double)> ops[] = {{slice_update_add, plus},
                                                                {slice_update_prod, times},
                                                                {slice_update_max, keep_max},
                                                                {slice_update_min, keep_min}};
  for (const auto& [fn, ref] : ops) {
    std::vector<double> want = values(a);
    const auto uv = values(u);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 2; ++c) {
        double& d = want[(2 * r) * 6 + (5 - 3 * c)];
        d = ref(d, uv[r * 2 + c]);
      }
    expect_close(fn(a, u, sl, {}), want);
    // A broadcast update (one column value per row of the slice), cast from float64.
    std::vector<double> want_b = values(a);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 2; ++c)
        want_b[(2 * r) * 6 + (5 - 3 * c)] = ref(want_b[(2 * r) * 6 + (5 - 3 * c)], 1.5);
    expect_close(fn(a, full({1}, 1.5, float64), sl, {}), want_b);
    EXPECT_THROW(fn(a, zeros({3, 3}), sl, {}), ShapeError);
    EXPECT_THROW(fn(zeros({2}, bool_), zeros({1}, bool_), {}, {}), DtypeError);
  }
  EXPECT_EQ(slice_update_add(a, zeros({0, 6}), {{2, 2}}).shape(), a.shape());
}

// ---------------------------------------------------------------- dynamic slices

TEST(DynamicSlice, MatchesStaticSlices) {
  const Array a = random_array({5, 6, 3}, float32, 20);
  const Array r = dynamic_slice(a, ints({-2, 1}, {2}), {2, 0}, {2, 3});
  ASSERT_EQ(r.shape(), (Shape{3, 6, 2}));
  expect_close(r, values(slice(a, {{1, 4}, {}, {1, 3}})), 0, 0);
  const Array u = random_array({2, 6, 1}, float32, 21);
  expect_close(dynamic_slice_update(a, u, ints({3, 2}, {2}, int64), {0, 2}),
               values(slice_update(a, u, {{3, 5}, {}, {2, 3}})), 0, 0);
  // An update smaller than a along an axis not listed is written from 0 there.
  const Array v = random_array({1, 2, 3}, float32, 22);
  expect_close(dynamic_slice_update(a, v, ints({4}, {1}), {0}), values(slice_update(a, v, {{4, 5}, {0, 2}})),
               0, 0);
  EXPECT_THROW(dynamic_slice(a, ints({1}, {1}), {0, 1}, {1, 1}), ShapeError);  // start shape
  EXPECT_THROW(dynamic_slice(a, ints({1, 1}, {1, 2}), {0, 1}, {1, 1}), ShapeError);
  EXPECT_THROW(dynamic_slice(a, ints({1}, {1}), {0}, {1, 1}), ShapeError);  // sizes
  EXPECT_THROW(dynamic_slice(a, ints({1}, {1}), {0}, {6}), ShapeError);
  EXPECT_THROW(dynamic_slice(a, Array({1.0f}), {0}, {1}), DtypeError);
  EXPECT_THROW(dynamic_slice(a, ints({1, 1}, {2}), {0, 0}, {1, 1}), ValueError);  // repeated axis
  expect_value_error([&] { dynamic_slice(a, ints({4}, {1}), {0}, {2}); },
                     {"[dynamic_slice]", "index 4 with slice size 2", "axis 0 with size 5"});
  expect_value_error(
      [&] {
        dynamic_slice_update(a, u, ints({4, 0}, {2}), {0, 2});
      },
      {"[dynamic_slice_update]"});
  EXPECT_THROW(dynamic_slice_update(a, zeros({2, 6}), ints({0}, {1}), {0}), ShapeError);  // rank
  EXPECT_THROW(dynamic_slice_update(a, zeros({6, 6, 3}), ints({0}, {1}), {0}), ShapeError);
  // A computed start whose slice leaves the axis: at eval (the GPU reads 0 past the end).
  const Array lazy = add(ints({3}, {1}), 1);
  const auto av = values(a);
  std::vector<double> past(2 * 6 * 3, 0.0);
  for (int k = 0; k < 18; ++k) past[k] = av[4 * 18 + k];
  expect_computed_out_of_range(dynamic_slice(a, lazy, {0}, {2}), "gather", past);
}

TEST(DynamicSlice, OneCompiledTraceServesEveryStart) {
  const Array a = random_array({6, 4}, float32, 23);
  auto f = compile([](const Args& x) {
    return Args{dynamic_slice(x[0], x[1], {0}, {2}), dynamic_slice_update(x[0], x[2], x[1], {0})};
  });
  const Array u = random_array({2, 4}, float32, 24);
  for (int64_t st : {0, 3, -2, 1}) {
    const auto out = f({a, ints({st}, {1}), u});
    const int64_t s0 = st < 0 ? st + 6 : st;
    expect_close(out[0], values(slice(a, {{s0, s0 + 2}})), 0, 0);
    expect_close(out[1], values(slice_update(a, u, {{s0, s0 + 2}})), 0, 0);
  }
  EXPECT_EQ(f.trace_count(), 1);
}

TEST(DynamicSlice, VmapOverABatchOfStarts) {
  const Array a = random_array({5, 4}, float32, 25);
  const Array starts = ints({0, 1, 3, 2, -2, 0}, {3, 2});  // (row, column) per example
  auto f = [](const Args& x) { return Args{dynamic_slice(x[0], x[1], {0, 1}, {2, 2})}; };
  const Array r = vmap(f, {-1, 0})({a, starts})[0];
  ASSERT_EQ(r.shape(), (Shape{3, 2, 2}));
  const std::vector<std::pair<int64_t, int64_t>> at{{0, 1}, {3, 2}, {3, 0}};
  Args want;
  for (const auto& [r0, c0] : at) want.push_back(slice(a, {{r0, r0 + 2}, {c0, c0 + 2}}));
  expect_close(r, values(stack(want)), 0, 0);
  auto g = [](const Args& x) { return Args{dynamic_slice_update(x[0], x[1], x[2], {0, 1})}; };
  const Array u = random_array({3, 2, 2}, float32, 26);
  const Array ru = vmap(g, {-1, 0, 0})({a, u, starts})[0];
  Args want_u;
  for (int b = 0; b < 3; ++b) {
    const auto [r0, c0] = at[b];
    want_u.push_back(slice_update(a, take(u, Array(b), 0), {{r0, r0 + 2}, {c0, c0 + 2}}));
  }
  expect_close(ru, values(stack(want_u)), 0, 0);
}

// ---------------------------------------------------------------- rules

TEST(IndexMoreRules, Vjp) {
  const Array x = random_array({4, 5}, float64, 30, 0.5, 2);
  const Array i = ints({1, 3, -2, 1}, {2, 2});
  check_vjp([&](const Args& a) { return gather(a[0], {i}, {1}, {3, 2}); }, {x});
  check_vjp([&](const Args& a) { return gather(a[0], {i, ints({0, 2}, {2})}, {1, 0}, {2, 1}); }, {x});
  check_jvp([&](const Args& a) { return gather(a[0], {i}, {1}, {3, 2}); }, {x});
  const Array u = random_array({2, 2, 2, 2}, float64, 31, 0.5, 2);
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    check_vjp([&](const Args& a) { return v.fn(a[0], {i}, a[1], {1}, {}); }, {x, u});
    check_jvp([&](const Args& a) { return v.fn(a[0], {i}, a[1], {1}, {}); }, {x, u});
  }
  // Zero factors: the product of the others, exact at zero.
  const Array xz = Array(V{0.0, 2.0, 3.0, 1.5}, {4}, float64);
  const Array uz = Array(V{0.0, 4.0, 0.5, 0.0, -1.0}, {5, 1}, float64);
  const Array iz = ints({0, 0, 1, 1, 2}, {5});
  check_vjp([&](const Args& a) { return scatter_prod(a[0], {iz}, a[1], {0}); }, {xz, uz});
  check_jvp([&](const Args& a) { return scatter_prod(a[0], {iz}, a[1], {0}); }, {xz, uz});
  check_vjp(
      [&](const Args& a) {
        return masked_scatter(a[0], Array(std::vector<bool>{true, false, true, true}, {4}), a[1]);
      },
      {xz, random_array({2, 2}, float64, 32)});
  check_jvp(
      [&](const Args& a) {
        return masked_scatter(a[0], Array(std::vector<bool>{false, true, true, false}, {4}), a[1]);
      },
      {xz, random_array({3}, float64, 33)});
  for (SliceFn fn : {slice_update_add, slice_update_prod, slice_update_max, slice_update_min}) {
    check_vjp(
        [&](const Args& a) {
          return fn(a[0], a[1], {{1, 4, 2}, {-1, 0, -2}}, {});
        },
        {x, random_array({2, 2}, float64, 34, 0.5, 2)});
    check_jvp(
        [&](const Args& a) {
          return fn(a[0], a[1], {{0, 2}}, {});
        },
        {x, random_array({5}, float64, 35)});
  }
  check_vjp([&](const Args& a) { return dynamic_slice(a[0], ints({2, 1}, {2}), {1, 0}, {3, 2}); }, {x});
  check_vjp([&](const Args& a) { return dynamic_slice_update(a[0], a[1], ints({1}, {1}), {1}); },
            {x, random_array({4, 3}, float64, 36)});
  check_jvp([&](const Args& a) { return dynamic_slice_update(a[0], a[1], ints({-3}, {1}), {1}); },
            {x, random_array({4, 3}, float64, 37)});
  // Second order: exact away from zero factors.
  test::check_second_order(
      [&](const Args& a) { return scatter_prod(a[0], {iz}, a[1], {0}); },
      {random_array({4}, float64, 38, 0.5, 2), random_array({5, 1}, float64, 39, 0.5, 2)});
  test::check_second_order([&](const Args& a) { return scatter_max(square(a[0]), {i}, a[1], {1}); }, {x, u});
}

TEST(IndexMoreRules, ScatterMaxTiesShareTheGradient) {
  // Element 0: the old 3 ties with two updates of 3 (a third each); element 1: two updates of 5
  // tie (a half each), the old 1 loses; element 2 keeps its old value.
  const Array x = Array(V{3.0, 1.0, 7.0}, {3}, float64);
  const Array u = Array(V{3.0, 5.0, 3.0, 5.0, 2.0}, {5, 1}, float64);
  const Array i = ints({0, 1, 0, 1, 0}, {5});
  auto [outs, g] = vjp([&](const Args& a) { return Args{scatter_max(a[0], {i}, a[1], {0})}; }, {x, u},
                       {Array(V{1.0, 10.0, 100.0}, {3}, float64)});
  expect_close(outs[0], V{3, 5, 7}, 0, 0);
  expect_close(g[0], V{1.0 / 3, 0, 100}, 1e-12, 1e-12);
  expect_close(g[1], V{1.0 / 3, 5, 1.0 / 3, 5, 0}, 1e-12, 1e-12);
  // Plain scatter: only the winning duplicate gets its cotangent.
  auto [o2, g2] = vjp([&](const Args& a) { return Args{scatter(a[0], {i}, a[1], {0})}; }, {x, u},
                      {Array(V{1.0, 10.0, 100.0}, {3}, float64)});
  expect_close(o2[0], V{2, 5, 7}, 0, 0);
  expect_close(g2[0], V{0, 0, 100}, 0, 0);
  expect_close(g2[1], V{0, 0, 0, 10, 1}, 0, 0);
}

TEST(IndexMoreRules, Vmap) {
  const Array x = random_array({4, 5}, float32, 40, 0.5, 2);
  const Array i = ints({1, 3, 2, 0}, {2, 2});  // every permutation stays in range for windows of 2
  check_vmap([&](const Args& a) { return gather(a[0], {a[1]}, {1}, {3, 2}); }, {x, i});
  check_vmap([&](const Args& a) { return gather(a[0], {a[1], ints({0, 2}, {2})}, {1, 0}, {2, 1}); }, {x, i});
  const Array u = random_array({2, 2, 2, 2}, float32, 41, 0.5, 2);
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    check_vmap([&](const Args& a) { return v.fn(a[0], {a[1]}, a[2], {1}, {}); }, {x, i, u}, 0.5, 2);
  }
  check_vmap(
      [&](const Args& a) { return masked_scatter(a[0], a[1], a[2]); },
      {x, Array(std::vector<bool>{true, false, false, true, true}, {5}), random_array({12}, float32, 42)});
  check_vmap(
      [&](const Args& a) {
        return slice_update_max(a[0], a[1], {{1, 3}}, {});
      },
      {x, random_array({2, 5}, float32, 43)});
  check_vmap(
      [&](const Args& a) {
        return dynamic_slice(a[0], a[1], {1, 0}, {2, 2});
      },
      {x, ints({1, 2}, {2})});
  check_vmap(
      [&](const Args& a) {
        return dynamic_slice_update(a[0], a[1], a[2], {0, 1});
      },
      {x, random_array({2, 3}, float32, 44), ints({2, 1}, {2})});
}

}  // namespace
}  // namespace kiln
