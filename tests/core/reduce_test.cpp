#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "kiln/core/ops/reduce_primitives.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_second_order;
using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

using Combine = std::function<double(double, double)>;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Naive float64 reduction of row-major values `x` of `shape` over `axes` (normalized): plain loops,
// independent of kiln's kernels. The output is in row-major order of the kept axes.
std::vector<double> ref_reduce(const std::vector<double>& x, const Shape& shape, const Axes& axes,
                               double init, const Combine& combine) {
  const int nd = static_cast<int>(shape.size());
  std::vector<bool> red(nd, false);
  for (int a : axes) red[a] = true;
  int64_t n_out = 1;
  for (int d = 0; d < nd; ++d)
    if (!red[d]) n_out *= shape[d];
  std::vector<double> out(n_out, init);
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (int d = 0; d < nd; ++d)
      if (!red[d]) o = o * shape[d] + idx[d];
    out[o] = combine(out[o], x[i]);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

Shape ref_shape(const Shape& shape, const Axes& axes, bool keepdims) {
  Shape out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    const bool r = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!r)
      out.push_back(shape[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

int64_t count(const Shape& shape, const Axes& axes) {
  int64_t n = 1;
  for (int a : axes) n *= shape[a];
  return n;
}

using ReduceFn = Array (*)(const Array&, const Axes&, bool);

struct ReduceCase {
  const char* name;
  ReduceFn op;
  double init;
  double (*combine)(double, double);
  bool mean = false;
  double lo = -1, hi = 1;
};

const ReduceCase kCases[] = {
    {"sum", [](const Array& a, const Axes& ax, bool k) { return sum(a, ax, k); }, 0,
     [](double a, double b) { return a + b; }},
    {"mean", [](const Array& a, const Axes& ax, bool k) { return mean(a, ax, k); }, 0,
     [](double a, double b) { return a + b; }, true},
    {"prod", [](const Array& a, const Axes& ax, bool k) { return prod(a, ax, k); }, 1,
     [](double a, double b) { return a * b; }, false, 0.6, 1.4},
    {"max", [](const Array& a, const Axes& ax, bool k) { return max(a, ax, k); }, -kInf,
     [](double a, double b) { return std::max(a, b); }},
    {"min", [](const Array& a, const Axes& ax, bool k) { return min(a, ax, k); }, kInf,
     [](double a, double b) { return std::min(a, b); }},
};

std::vector<double> expected_for(const ReduceCase& c, const std::vector<double>& x, const Shape& shape,
                                 const Axes& axes) {
  std::vector<double> e = ref_reduce(x, shape, axes, c.init, c.combine);
  if (c.mean)
    for (double& v : e) v /= static_cast<double>(count(shape, axes));
  return e;
}

// Every non-empty axis subset of each shape, given as positive and as negative axes.
std::vector<std::pair<Axes, Axes>> axis_sets(int nd) {
  std::vector<std::pair<Axes, Axes>> out;
  for (int mask = 1; mask < (1 << nd); ++mask) {
    Axes pos, given;
    for (int d = 0; d < nd; ++d)
      if (mask & (1 << d)) {
        pos.push_back(d);
        given.push_back(mask % 2 ? d - nd : d);
      }
    std::reverse(given.begin(), given.end());  // order of the given axes does not matter
    out.emplace_back(pos, given);
  }
  return out;
}

test::Tolerance tol_for(Dtype t) {
  test::Tolerance tol = test::tolerance(t);
  if (t == float32) tol.atol = 1e-5;  // sums of up to 120 values in [-1, 1]
  return tol;
}

class ReduceTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceTest, MatchesReferenceOverEveryAxisSet) {
  const ReduceCase& c = GetParam();
  const std::vector<Shape> shapes = {{7}, {3, 4}, {2, 3, 4}, {2, 3, 2, 5}};
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    for (size_t si = 0; si < shapes.size(); ++si) {
      const Shape& shape = shapes[si];
      const Array x = random_array(shape, t, 100 + si, c.lo, c.hi);
      const std::vector<double> xv = values(x);
      for (const auto& [pos, given] : axis_sets(static_cast<int>(shape.size()))) {
        for (bool keepdims : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << c.name << " " << t << " shape " << shape_str(shape) << " axes ("
                       << fmt::format("{}", fmt::join(given, ",")) << ") keepdims " << keepdims);
          const Array y = c.op(x, given, keepdims);
          EXPECT_EQ(y.dtype(), t);
          EXPECT_EQ(y.shape(), ref_shape(shape, pos, keepdims));
          const auto tol = tol_for(t);
          expect_close(y, expected_for(c, xv, shape, pos), tol.rtol, tol.atol);
        }
      }
    }
  }
}

TEST_P(ReduceTest, NonContiguousInputs) {
  const ReduceCase& c = GetParam();
  const Array base = random_array({2, 3, 4}, float32, 5, c.lo, c.hi);
  const Array wide = random_array({3, 8}, float32, 6, c.lo, c.hi);
  const Array row = random_array({1, 4}, float32, 7, c.lo, c.hi);
  const std::vector<Array> views = {
      transpose(base, {2, 0, 1}),  // a permuted dense array: some axis sets reduce in place
      transpose(base, {1, 2, 0}),
      slice(wide, {Slice{}, Slice{.start = 1, .stop = std::nullopt, .step = 2}}),  // strided: copied first
      broadcast_to(row, {3, 4}),                                                   // stride 0
  };
  for (const Array& v : views) {
    const std::vector<double> xv = values(v);
    for (const auto& [pos, given] : axis_sets(v.ndim())) {
      SCOPED_TRACE(::testing::Message() << c.name << " view " << shape_str(v.shape()) << " axes "
                                        << fmt::format("{}", fmt::join(pos, ",")));
      const Array y = c.op(v, given, false);
      expect_close(y, expected_for(c, xv, v.shape(), pos), 2e-5, 1e-5);
    }
  }
}

TEST_P(ReduceTest, GradientMatchesFiniteDifferences) {
  const ReduceCase& c = GetParam();
  const Array x = random_array({3, 4, 2}, float64, 21, c.lo, c.hi);
  for (const Axes& axes : std::vector<Axes>{{1}, {0, 2}, {-1}, {0, 1, 2}})
    for (bool keepdims : {false, true}) {
      SCOPED_TRACE(::testing::Message() << c.name << " keepdims " << keepdims);
      check_vjp([&](const std::vector<Array>& a) { return c.op(a[0], axes, keepdims); }, {x});
      // Through a transposed view, so the cotangent meets non-contiguous strides.
      check_vjp(
          [&](const std::vector<Array>& a) {
            return c.op(transpose(a[0], {2, 0, 1}), axes, keepdims);
          },
          {x});
    }
}

// <u, J v> computed with the primitive's jvp rule equals <J^T u, v> from the vjp.
TEST_P(ReduceTest, JvpRuleAgreesWithVjp) {
  const ReduceCase& c = GetParam();
  const Array x = random_array({3, 4, 2}, float64, 31, c.lo, c.hi);
  for (const Axes& axes : std::vector<Axes>{{1}, {0, 2}})
    for (bool keepdims : {false, true}) {
      const Array y = c.op(x, axes, keepdims);
      const Array v = random_array(x.shape(), float64, 32);
      const Array u = random_array(y.shape(), float64, 33);
      const std::vector<Array> primals{x}, tangents{v};
      const int argnums[] = {0};
      const Array jv = y.primitive()->jvp({primals, tangents, argnums})[0];
      ASSERT_EQ(jv.shape(), y.shape());
      auto [outs, g] =
          vjp([&](const std::vector<Array>& a) { return std::vector<Array>{c.op(a[0], axes, keepdims)}; },
              {x}, {u});
      double lhs = 0, rhs = 0;
      const auto uv = values(u), jvv = values(jv), gv = values(g[0]), vv = values(v);
      for (size_t i = 0; i < uv.size(); ++i) lhs += uv[i] * jvv[i];
      for (size_t i = 0; i < vv.size(); ++i) rhs += gv[i] * vv[i];
      EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs))) << c.name;
    }
}

// Batching over axis b equals applying the op to each example and stacking.
TEST_P(ReduceTest, VmapRuleMatchesStackedExamples) {
  const ReduceCase& c = GetParam();
  std::vector<Array> examples;
  for (int k = 0; k < 3; ++k) examples.push_back(random_array({4, 5}, float64, 40 + k, c.lo, c.hi));
  for (int b : {0, 1, 2})
    for (const Axes& axes : std::vector<Axes>{{0}, {1}, {0, 1}})
      for (bool keepdims : {false, true}) {
        const Array y0 = c.op(examples[0], axes, keepdims);
        const Array batched = stack(examples, b);
        const std::vector<Array> in{batched};
        const int in_axes[] = {b};
        const VmapResult r = y0.primitive()->vmap({in, in_axes});
        std::vector<Array> per;
        for (const Array& e : examples) per.push_back(c.op(e, axes, keepdims));
        const Array expected = stack(per, r.axes[0]);
        expect_close(r.outputs[0], expected, 1e-12, 1e-12);
      }
}

INSTANTIATE_TEST_SUITE_P(Reduce, ReduceTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Reduce, AllAxesOverloadsAndScalars) {
  const Array x = random_array({2, 3}, float64, 1);
  const auto xv = values(x);
  const double s = std::accumulate(xv.begin(), xv.end(), 0.0);
  expect_close(sum(x), {s});
  EXPECT_EQ(sum(x).ndim(), 0);
  EXPECT_EQ(sum(x, true).shape(), (Shape{1, 1}));
  expect_close(mean(x), {s / 6});
  expect_close(max(x), {*std::max_element(xv.begin(), xv.end())});
  expect_close(min(x, 1),
               ref_reduce(xv, {2, 3}, {1}, kInf, [](double a, double b) { return std::min(a, b); }));
  // A 0-d array reduces to itself; an empty axis list reduces nothing (NumPy's axis=()).
  expect_close(sum(Array(2.5)), {2.5});
  expect_close(max(Array(2.5)), {2.5});
  expect_close(sum(x, Axes{}), xv);
}

TEST(Reduce, IntegerAndBoolDtypes) {
  const Array i8(std::vector<int8_t>{100, 100, 100, -5}, {2, 2});
  EXPECT_EQ(sum(i8).dtype(), int32);
  EXPECT_EQ(sum(i8).item<int32_t>(), 295);  // no int8 wraparound: accumulates in int32
  EXPECT_EQ(sum(i8, 0).to_vector<int32_t>(), (std::vector<int32_t>{200, 95}));
  const Array u8(std::vector<uint8_t>{200, 200, 7}, {3});
  EXPECT_EQ(sum(u8).dtype(), uint32);
  EXPECT_EQ(sum(u8).item<uint32_t>(), 407u);
  const Array b(std::vector<bool>{true, false, true, true}, {2, 2});
  EXPECT_EQ(sum(b).dtype(), int32);
  EXPECT_EQ(sum(b).item<int32_t>(), 3);
  EXPECT_EQ(sum(b, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  const Array i32(std::vector<int32_t>{3, -4, 5, 6, -7, 8}, {2, 3});
  EXPECT_EQ(sum(i32, 1).dtype(), int32);
  EXPECT_EQ(sum(i32, 1).to_vector<int32_t>(), (std::vector<int32_t>{4, 7}));
  EXPECT_EQ(prod(i32, 0).to_vector<int32_t>(), (std::vector<int32_t>{18, 28, 40}));
  EXPECT_EQ(max(i32, 1).to_vector<int32_t>(), (std::vector<int32_t>{5, 8}));
  EXPECT_EQ(min(i32).item<int32_t>(), -7);
  EXPECT_EQ(max(i32).dtype(), int32);
  const Array i64(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}, {2});
  EXPECT_EQ(sum(i64).item<int64_t>(), int64_t{1} << 41);
  const Array u32(std::vector<uint32_t>{4000000000u, 5u}, {2});
  EXPECT_EQ(max(u32).item<uint32_t>(), 4000000000u);
  EXPECT_EQ(prod(u8).dtype(), uint32);
  // mean of integers is float32
  EXPECT_EQ(mean(i32).dtype(), float32);
  expect_close(mean(i32, 0), {4.5, -5.5, 6.5});
}

TEST(Reduce, AllAndAny) {
  const Array b(std::vector<bool>{true, false, true, true, true, true}, {2, 3});
  EXPECT_EQ(all(b).dtype(), bool_);
  EXPECT_FALSE(all(b).item<bool>());
  EXPECT_TRUE(any(b).item<bool>());
  EXPECT_EQ(all(b, Axes{1}).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(any(b, Axes{0}).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(all(b, Axes{0}, true).shape(), (Shape{1, 3}));
  // Any dtype: nonzero is true.
  const Array f(std::vector<float>{0.f, 0.5f, 0.f, 0.f}, {2, 2});
  EXPECT_EQ(any(f, Axes{1}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(all(f, Axes{0}).to_vector<bool>(), (std::vector<bool>{false, false}));
  EXPECT_EQ(all(transpose(b), Axes{0}).to_vector<bool>(), (std::vector<bool>{false, true}));
  const Array i(std::vector<int32_t>{1, 2, 0}, {3});
  EXPECT_FALSE(all(i).item<bool>());
  EXPECT_TRUE(any(i).item<bool>());
}

TEST(Reduce, EmptyInputs) {
  const Array e = zeros({0, 3});
  expect_close(sum(e, 0), {0, 0, 0});
  expect_close(prod(e, 0), {1, 1, 1});
  EXPECT_EQ(sum(e, 1).shape(), (Shape{0}));
  EXPECT_EQ(max(e, 1).shape(), (Shape{0}));  // nothing to reduce into: fine
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  EXPECT_TRUE(all(e).item<bool>());
  EXPECT_FALSE(any(e).item<bool>());
  EXPECT_THROW(max(e, 0), ValueError);
  EXPECT_THROW(min(e), ValueError);
  EXPECT_THROW(argmax(e, 0), ValueError);
  EXPECT_THROW(argmin(e), ValueError);
}

TEST(Reduce, NanPropagates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Dtype t : {float32, float64, float16}) {
    const Array x(std::vector<double>{1, nan, 3, 4, 5, 6}, {2, 3}, t);
    const auto mx = values(max(x, 1)), mn = values(min(x, 1));
    EXPECT_TRUE(std::isnan(mx[0]));
    EXPECT_EQ(mx[1], 6);
    EXPECT_TRUE(std::isnan(mn[0]));
    EXPECT_EQ(mn[1], 4);
    EXPECT_TRUE(std::isnan(values(max(x, 0))[1]));
    EXPECT_EQ(argmax(x, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(argmin(x, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  }
}

// Naive argmax/argmin along one axis: first extreme wins.
std::vector<int32_t> ref_arg(const std::vector<double>& x, const Shape& shape, int axis, bool is_max) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[axis];
  std::vector<int32_t> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int32_t best = 0;
      for (int64_t r = 1; r < n; ++r) {
        const double v = x[(o * n + r) * inner + i], b = x[(o * n + best) * inner + i];
        if (is_max ? v > b : v < b) best = static_cast<int32_t>(r);
      }
      out.push_back(best);
    }
  return out;
}

TEST(Reduce, ArgmaxArgmin) {
  for (const Shape& shape : std::vector<Shape>{{9}, {4, 5}, {3, 4, 5}}) {
    for (Dtype t : {float32, float64, int32, bfloat16}) {
      // Few distinct values so that ties occur and "first occurrence" is exercised.
      Array x = astype(random_array(shape, float64, 3, -4, 4), t);
      if (t == float32) x = floor(x);
      const auto xv = values(x);
      for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis) {
        const int ax = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
        for (bool is_max : {true, false}) {
          const Array r = is_max ? argmax(x, axis) : argmin(x, axis);
          EXPECT_EQ(r.dtype(), int32);
          EXPECT_EQ(r.shape(), ref_shape(shape, {ax}, false));
          EXPECT_EQ(r.to_vector<int32_t>(), ref_arg(xv, shape, ax, is_max))
              << shape_str(shape) << " axis " << axis;
          const Array rk = is_max ? argmax(x, axis, true) : argmin(x, axis, true);
          EXPECT_EQ(rk.shape(), ref_shape(shape, {ax}, true));
        }
      }
      // Flattened.
      EXPECT_EQ(argmax(x).item<int32_t>(), ref_arg(xv, {x.size()}, 0, true)[0]);
      EXPECT_EQ(argmin(x, true).shape(), Shape(shape.size(), 1));
    }
  }
  // Transposed (non-contiguous) input.
  const Array x = random_array({3, 4, 5}, float32, 8);
  const Array xt = transpose(x, {2, 0, 1});
  for (int axis = 0; axis < 3; ++axis)
    EXPECT_EQ(argmax(xt, axis).to_vector<int32_t>(), ref_arg(values(xt), xt.shape(), axis, true));
  // Not differentiable: zero gradient.
  const Array g = grad([](const Array& a) { return sum(astype(argmax(a, 1), float64)); })(
      random_array({3, 4}, float64, 2));
  expect_close(g, std::vector<double>(12, 0.0), 0, 0);
}

TEST(Reduce, LargeReductionsUseEveryPathAccurately) {
  // Full sum of 3M values: split across threads and summed pairwise, so float32 stays accurate.
  const int64_t n = 3'000'000;
  const Array x = random_array({n}, float32, 9, 0, 1);
  const auto xv = values(x);
  const double ref = std::accumulate(xv.begin(), xv.end(), 0.0);
  EXPECT_NEAR(sum(x).item<double>(), ref, 1e-6 * ref);
  EXPECT_NEAR(mean(astype(x, float16)).item<double>(), ref / n, 2e-3);  // no float16 overflow
  // Column sums of a tall (batch, features) array: the bias-gradient case.
  const Array m = random_array({20000, 300}, float32, 10, -1, 1);
  const auto mv = values(m);
  const auto add = [](double a, double b) { return a + b; };
  expect_close(sum(m, 0), ref_reduce(mv, {20000, 300}, {0}, 0, add), 1e-5, 1e-4);
  expect_close(sum(m, 1), ref_reduce(mv, {20000, 300}, {1}, 0, add), 1e-5, 1e-5);
  expect_close(sum(transpose(m), 1), ref_reduce(mv, {20000, 300}, {0}, 0, add), 1e-5, 1e-4);
  const Array narrow = reshape(m, {1'500'000, 4});
  expect_close(sum(narrow, 0), ref_reduce(mv, {1'500'000, 4}, {0}, 0, add), 1e-5, 1e-3);
  // Max and argmax over a large array, with the extreme placed late and tied.
  std::vector<float> big(2'000'000, 1.0f);
  big[1'234'567] = 7.0f;
  big[1'900'000] = 7.0f;
  const Array b(big, {static_cast<int64_t>(big.size())});
  EXPECT_EQ(max(b).item<float>(), 7.0f);
  EXPECT_EQ(argmax(b).item<int32_t>(), 1'234'567);
  EXPECT_EQ(argmin(b).item<int32_t>(), 0);
  const Array b2 = reshape(b, {1000, 2000});
  EXPECT_EQ(argmax(b2, 0).to_vector<int32_t>()[567], 617);
  // Integer full sum.
  const Array ones_i = ones({2'000'000}, int32);
  EXPECT_EQ(sum(ones_i).item<int32_t>(), 2'000'000);
}

TEST(Reduce, MaxGradientSplitsAmongTies) {
  const Array x({1.0, 3.0, 3.0, 2.0});
  expect_close(grad([](const Array& a) { return max(a); })(x), {0, 0.5, 0.5, 0});
  expect_close(grad([](const Array& a) { return min(a); })(x), {1, 0, 0, 0});
  const Array m(std::vector<double>{5, 5, 1, 2, 7, 7}, {3, 2});
  expect_close(grad([](const Array& a) { return sum(max(a, 1)); })(m), {0.5, 0.5, 0, 1, 0.5, 0.5});
}

TEST(Reduce, ProdGradientWithZeros) {
  // d prod / dx_i is the product of the others: exact with one zero, 0 with two.
  const Array one_zero({2.0, 0.0, 3.0, 4.0});
  expect_close(grad([](const Array& a) { return prod(a); })(one_zero), {0, 24, 0, 0});
  const Array two_zeros({2.0, 0.0, 3.0, 0.0});
  expect_close(grad([](const Array& a) { return prod(a); })(two_zeros), {0, 0, 0, 0});
  const Array m(std::vector<double>{1.5, 0.0, -2.0, 0.5, 0.0, 0.0, 3.0, -1.0, 0.7}, {3, 3});
  check_vjp([](const std::vector<Array>& a) { return prod(a[0], 1); }, {m});
  check_vjp([](const std::vector<Array>& a) { return prod(a[0], 0); }, {m});
}

TEST(Reduce, SecondOrder) {
  const Array x = random_array({3, 4}, float64, 12, 0.5, 1.5);
  check_second_order([](const std::vector<Array>& a) { return prod(a[0], 1); }, {x});
  check_second_order([](const std::vector<Array>& a) { return sum(a[0] * a[0], 0); }, {x});
  check_second_order([](const std::vector<Array>& a) { return max(a[0] * a[0], 1); }, {x});
  // prod's gradient is built from exclusive cumprods: its second derivative is exact with zeros.
  const Array z(std::vector<double>{1.5, 0.0, 2.0, 0.7, 0.0, 1.2, 0.0, 0.9, 1.1, 1.3, -0.6, 0.8}, {3, 4});
  check_second_order([](const std::vector<Array>& a) { return prod(a[0], 1); }, {z});
  check_second_order([](const std::vector<Array>& a) { return prod(a[0], Axes{0, 1}); }, {z});
  check_second_order([](const std::vector<Array>& a) { return prod(transpose(a[0]), Axes{0}); }, {z});
}

TEST(Reduce, SumToShape) {
  const Array x = random_array({2, 3, 4}, float64, 13);
  const auto xv = values(x);
  const auto add = [](double a, double b) { return a + b; };
  EXPECT_EQ(sum_to_shape(x, {2, 3, 4}).id(), x.id());  // same shape: the array itself, no node
  Array r = sum_to_shape(x, {3, 4});
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  expect_close(r, ref_reduce(xv, {2, 3, 4}, {0}, 0, add));
  r = sum_to_shape(x, {3, 1});
  EXPECT_EQ(r.shape(), (Shape{3, 1}));
  expect_close(r, ref_reduce(xv, {2, 3, 4}, {0, 2}, 0, add));
  r = sum_to_shape(x, {1, 3, 1});
  expect_close(r, ref_reduce(xv, {2, 3, 4}, {0, 2}, 0, add));
  r = sum_to_shape(x, {});
  EXPECT_EQ(r.ndim(), 0);
  expect_close(r, ref_reduce(xv, {2, 3, 4}, {0, 1, 2}, 0, add));
  const Array y = random_array({1, 3}, float64, 14);
  expect_close(sum_to_shape(y, {3}), values(y));  // only size-1 axes dropped
  const Array i(std::vector<int8_t>{1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(sum_to_shape(i, {2}).dtype(), int8);  // keeps the dtype (used for gradients)
  EXPECT_THROW(sum_to_shape(x, {2, 2, 3, 4}), ShapeError);
  EXPECT_THROW(sum_to_shape(x, {2, 4}), ShapeError);
}

TEST(Reduce, Errors) {
  const Array x = zeros({2, 3});
  EXPECT_THROW(sum(x, 2), ShapeError);
  EXPECT_THROW(sum(x, -3), ShapeError);
  EXPECT_THROW(max(x, Axes{0, -2}), ShapeError);  // repeated axis
  EXPECT_THROW(mean(x, Axes{1, 1}), ShapeError);
  EXPECT_THROW(argmax(x, 2), ShapeError);
  EXPECT_THROW(var(x, Axes{5}), ShapeError);
  EXPECT_THROW(softmax(x, 3), ShapeError);
  EXPECT_THROW(logsumexp(x, Axes{0, 0}), ShapeError);
  EXPECT_THROW(sum(Array()), ValueError);
  EXPECT_THROW(softmax(Array()), ValueError);
  try {
    sum(x, 4);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[sum]"), std::string::npos) << e.what();
  }
}

TEST(Reduce, PrimitiveParamsAndPrinting) {
  const Array x = zeros({2, 3});
  const Array a = sum(x, 1), b = sum(x, 1), c = max(x, 1), d = sum(x, 0);
  EXPECT_TRUE(a.primitive()->is_equivalent(*b.primitive()));
  EXPECT_FALSE(a.primitive()->is_equivalent(*c.primitive()));
  EXPECT_FALSE(a.primitive()->is_equivalent(*d.primitive()));
  std::ostringstream os;
  a.primitive()->print(os);
  EXPECT_EQ(os.str(), "Sum(sum, [1], 0)");
}

}  // namespace
}  // namespace kiln
