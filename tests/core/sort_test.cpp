// sort, argsort, topk and argtopk against std::stable_sort references, plus gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool less_nan_last(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

// For every line along `axis` of a row-major array of `shape`: the stable order of its indices,
// ascending (NaNs last) or descending (NaNs first, ties by lower index).
std::vector<std::vector<int64_t>> ref_orders(const std::vector<double>& v, const Shape& shape, int axis,
                                             bool descending) {
  const int64_t len = shape[axis];
  int64_t inner = 1, outer = 1;
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  std::vector<std::vector<int64_t>> lines;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> idx(len);
      std::iota(idx.begin(), idx.end(), 0);
      auto at = [&](int64_t j) { return v[(o * len + j) * inner + i]; };
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t p, int64_t q) {
        return descending ? less_nan_last(at(q), at(p)) : less_nan_last(at(p), at(q));
      });
      lines.push_back(idx);
    }
  return lines;
}

// Scatters per-line results back into a row-major array whose `axis` has length `k`.
std::vector<double> assemble(const std::vector<std::vector<double>>& lines, const Shape& shape, int axis,
                             int64_t k) {
  int64_t inner = 1;
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> out(lines.size() * k);
  for (size_t l = 0; l < lines.size(); ++l) {
    const int64_t o = static_cast<int64_t>(l) / inner, i = static_cast<int64_t>(l) % inner;
    for (int64_t j = 0; j < k; ++j) out[(o * k + j) * inner + i] = lines[l][j];
  }
  return out;
}

struct Expected {
  std::vector<double> values, indices;
};
Expected reference(const Array& a, int axis, bool descending, int64_t k = -1) {
  const Shape& shape = a.shape();
  const int ax = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
  const std::vector<double> v = values(a);
  if (k < 0) k = shape[ax];
  int64_t inner = 1;
  for (size_t d = ax + 1; d < shape.size(); ++d) inner *= shape[d];
  const auto orders = ref_orders(v, shape, ax, descending);
  std::vector<std::vector<double>> vals, idxs;
  for (size_t l = 0; l < orders.size(); ++l) {
    const int64_t o = static_cast<int64_t>(l) / inner, i = static_cast<int64_t>(l) % inner;
    std::vector<double> lv, li;
    for (int64_t j = 0; j < k; ++j) {
      li.push_back(static_cast<double>(orders[l][j]));
      lv.push_back(v[(o * shape[ax] + orders[l][j]) * inner + i]);
    }
    vals.push_back(lv);
    idxs.push_back(li);
  }
  return {assemble(vals, shape, ax, k), assemble(idxs, shape, ax, k)};
}

TEST(Sort, MatchesReferenceAlongEveryAxis) {
  uint64_t seed = 1;
  for (const Shape& shape : {Shape{17}, Shape{4, 9}, Shape{3, 5, 6}, Shape{2, 3, 4, 5}})
    for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis)
      for (Dtype t : {float32, float64, int32, float16, bfloat16, uint8, int64}) {
        const Array a =
            t == uint8 ? random_array(shape, t, seed++, 0, 200) : random_array(shape, t, seed++, -50, 50);
        const Expected e = reference(a, axis, false);
        const Array s = sort(a, axis), i = argsort(a, axis);
        EXPECT_EQ(s.dtype(), t);
        EXPECT_EQ(i.dtype(), int32);
        expect_close(s, e.values, 0, 0);
        expect_close(i, e.indices, 0, 0);
      }
}

TEST(Sort, TiesAreStable) {
  // Few distinct values: the stable order keeps equal elements in index order.
  const Array a = random_array({6, 40}, float32, 7, 0, 4);
  const Array r = floor(a);
  for (int axis : {0, 1}) {
    const Expected e = reference(r, axis, false);
    expect_close(argsort(r, axis), e.indices, 0, 0);
    const Expected d = reference(r, axis, true, 5);
    expect_close(argtopk(r, 5, axis), d.indices, 0, 0);
  }
  const Array b(std::vector<bool>{true, false, true, false, false, true}, {6});
  expect_close(argsort(b), std::vector<double>{1, 3, 4, 0, 2, 5}, 0, 0);
  expect_close(sort(b), std::vector<double>{0, 0, 0, 1, 1, 1}, 0, 0);
}

TEST(Sort, NaNsGoLast) {
  const Array a(std::vector<double>{3, kNaN, -1, 2, kNaN, -5, 0}, {7});
  expect_close(sort(a), std::vector<double>{-5, -1, 0, 2, 3, kNaN, kNaN}, 0, 0);
  expect_close(argsort(a), std::vector<double>{5, 2, 6, 3, 0, 1, 4}, 0, 0);
  expect_close(sort(astype(a, float16)), std::vector<double>{-5, -1, 0, 2, 3, kNaN, kNaN}, 0, 0);
  // topk treats NaN as the largest value, as the descending mirror of sort.
  expect_close(argtopk(a, 3), std::vector<double>{1, 4, 0}, 0, 0);
  expect_close(topk(a, 4), std::vector<double>{kNaN, kNaN, 3, 2}, 0, 0);
}

TEST(Sort, NonContiguousInput) {
  const Array base = random_array({7, 5}, float32, 21);
  const Array t = transpose(base);  // (5, 7), column-major view
  for (int axis : {0, 1}) {
    const Expected e = reference(t, axis, false);
    expect_close(sort(t, axis), e.values, 0, 0);
    expect_close(argsort(t, axis), e.indices, 0, 0);
  }
  const Array s =
      slice(random_array({8, 9}, float64, 22), {Slice{0, 8, 3}, Slice{std::nullopt, std::nullopt, -2}});
  expect_close(sort(s, 1), reference(s, 1, false).values, 0, 0);
  expect_close(topk(s, 2, 0), reference(s, 0, true, 2).values, 0, 0);
}

TEST(Sort, EmptyAndSingleton) {
  EXPECT_EQ(sort(zeros({3, 0})).shape(), (Shape{3, 0}));
  EXPECT_EQ(argsort(zeros({0, 4}), 1).shape(), (Shape{0, 4}));
  expect_close(sort(Array(std::vector<float>{2.5f}, {1})), std::vector<double>{2.5}, 0, 0);
}

TEST(TopK, MatchesReference) {
  uint64_t seed = 50;
  for (const Shape& shape : {Shape{12}, Shape{5, 8}, Shape{3, 6, 4}})
    for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis)
      for (Dtype t : {float32, float64, int32, bfloat16}) {
        const Array a = random_array(shape, t, seed++, -20, 20);
        const int ax = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
        for (int64_t k : {int64_t{1}, shape[ax] / 2 + 1, shape[ax]}) {
          const Expected e = reference(a, axis, true, k);
          const Array v = topk(a, static_cast<int>(k), axis), i = argtopk(a, static_cast<int>(k), axis);
          Shape expected_shape = shape;
          expected_shape[ax] = k;
          EXPECT_EQ(v.shape(), expected_shape);
          EXPECT_EQ(v.dtype(), t);
          EXPECT_EQ(i.dtype(), int32);
          expect_close(v, e.values, 0, 0);
          expect_close(i, e.indices, 0, 0);
        }
      }
}

TEST(Sort, Errors) {
  EXPECT_THROW(sort(Array(1.0f)), ShapeError);
  EXPECT_THROW(sort(ones({2, 3}), 2), ShapeError);
  EXPECT_THROW(argsort(ones({2, 3}), -3), ShapeError);
  EXPECT_THROW(topk(ones({2, 3}), 0), ValueError);
  EXPECT_THROW(topk(ones({2, 3}), 4), ValueError);
  EXPECT_THROW(argtopk(ones({2, 3}), 3, 0), ValueError);
  EXPECT_NO_THROW(argtopk(ones({2, 3}), 2, 0));
  EXPECT_THROW(sort(Array()), ValueError);
}

TEST(Sort, Gradients) {
  // Distinct values (random doubles), so the sort is differentiable at the probe points.
  test::check_vjp([](const std::vector<Array>& x) { return sort(x[0], 0); },
                  {random_array({6, 4}, float64, 81)});
  test::check_vjp([](const std::vector<Array>& x) { return sort(x[0], -1); },
                  {random_array({3, 7}, float64, 82)});
  test::check_vjp([](const std::vector<Array>& x) { return sort(transpose(x[0]), 1); },
                  {random_array({5, 3}, float64, 83)});
  test::check_vjp([](const std::vector<Array>& x) { return topk(x[0], 3, 1); },
                  {random_array({4, 6}, float64, 84)});
  test::check_vjp([](const std::vector<Array>& x) { return topk(x[0], 2, 0); },
                  {random_array({5, 2, 3}, float64, 85)});
  test::check_second_order(
      [](const std::vector<Array>& x) { return sort(x[0] * x[0] * x[1], 1); },
      {random_array({3, 5}, float64, 86, 0.5, 2), random_array({3, 5}, float64, 87, 0.5, 2)});
  test::check_second_order([](const std::vector<Array>& x) { return topk(x[0] * x[0], 2, 1); },
                           {random_array({3, 5}, float64, 88, 0.5, 2)});
}

TEST(Sort, IndicesHaveZeroGradient) {
  auto f = [](const std::vector<Array>& x) {
    return std::vector<Array>{sum(astype(argsort(x[0]), float64) * x[0]) +
                              sum(astype(argtopk(x[0], 2), float64))};
  };
  const Array x = random_array({5}, float64, 91);
  const Array g = grad(f, {0})({x})[0];
  // Only the explicit factor x contributes: d/dx sum(idx * x) = idx.
  expect_close(g, values(astype(argsort(x), float64)), 0, 0);
}

// ---- jvp and vmap rules, called on the primitives directly

Array example(const Array& x, int axis, int i) { return axis >= 0 ? take(x, Array(i), axis) : x; }

TEST(Sort, JvpRule) {
  const Array x = random_array({3, 6}, float64, 95), t = random_array({3, 6}, float64, 96);
  const Array y = sort(x, 1);
  const std::vector<Array> primals{x}, tangents{t};
  const std::vector<int> first{0};
  const auto jt = y.primitive()->jvp({primals, tangents, first});
  // The tangent follows its element: permuted by the sorting order.
  const Expected e = reference(x, 1, false);
  const std::vector<double> tv = values(t);
  std::vector<double> expected(tv.size());
  for (size_t i = 0; i < tv.size(); ++i) expected[i] = tv[(i / 6) * 6 + static_cast<size_t>(e.indices[i])];
  expect_close(jt[0], expected, 0, 0);
}

TEST(Sort, VmapRules) {
  const int kB = 3;
  for (int bax : {0, 1, 2}) {
    Shape shape{4, 5};
    shape.insert(shape.begin() + bax, kB);
    const Array x = random_array(shape, float32, 100 + bax);
    for (int axis : {0, 1, -1}) {
      const Array ex = example(x, bax, 0);
      const std::vector<Array> nodes{sort(ex, axis), argsort(ex, axis), argtopk(ex, 2, axis)};
      const std::vector<Array> in{x};
      const std::vector<int> axes{bax};
      for (const Array& node : nodes) {
        const VmapResult r = node.primitive()->vmap({in, axes});
        for (int i = 0; i < kB; ++i) {
          const Array xi = example(x, bax, i);
          const Array want = node.primitive()->name() == std::string("Sort")      ? sort(xi, axis)
                             : node.primitive()->name() == std::string("ArgSort") ? argsort(xi, axis)
                                                                                  : argtopk(xi, 2, axis);
          SCOPED_TRACE(testing::Message()
                       << node.primitive()->name() << " batch axis " << bax << " axis " << axis);
          expect_close(example(r.outputs[0], r.axes[0], i), want, 0, 0);
        }
      }
    }
  }
}
}  // namespace
}  // namespace kiln
