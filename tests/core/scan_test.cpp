#include <gtest/gtest.h>

#include <cmath>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_second_order;
using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

// Naive float64 scan of row-major `x` along `axis`.
std::vector<double> ref_scan(const std::vector<double>& x, const Shape& shape, int axis, bool prod,
                             bool reverse, bool inclusive) {
  const int nd = static_cast<int>(shape.size());
  if (axis < 0) axis += nd;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < nd; ++d) inner *= shape[d];
  const int64_t n = shape[axis];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = prod ? 1 : 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t r = reverse ? n - 1 - k : k;
        const int64_t at = (o * n + r) * inner + i;
        const double next = prod ? acc * x[at] : acc + x[at];
        y[at] = inclusive ? next : acc;
        acc = next;
      }
    }
  return y;
}

using ScanFn = Array (*)(const Array&, int, bool, bool, StreamOrDevice);

struct Flags {
  bool reverse, inclusive;
};
const Flags kFlags[] = {{false, true}, {true, true}, {false, false}, {true, false}};

TEST(Scan, MatchesReferenceForEveryAxisAndFlag) {
  for (bool is_prod : {false, true}) {
    const ScanFn op = is_prod ? cumprod : cumsum;
    for (const Shape& shape : std::vector<Shape>{{6}, {3, 5}, {2, 3, 4}, {2, 1, 3, 300}}) {
      for (Dtype t : {float64, float32, float16, bfloat16}) {
        const Array x = random_array(shape, t, 1, is_prod ? 0.7 : -1, is_prod ? 1.3 : 1);
        const auto xv = values(x);
        for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis)
          for (const Flags& f : kFlags) {
            SCOPED_TRACE(::testing::Message()
                         << (is_prod ? "cumprod " : "cumsum ") << t << " shape " << shape_str(shape)
                         << " axis " << axis << " reverse " << f.reverse << " inclusive " << f.inclusive);
            const Array y = op(x, axis, f.reverse, f.inclusive, {});
            EXPECT_EQ(y.dtype(), t);
            EXPECT_EQ(y.shape(), shape);
            auto tol = test::tolerance(t);
            if (t == float16 || t == bfloat16) tol.atol *= 4;  // sums of up to 300 values
            expect_close(y, ref_scan(xv, shape, axis, is_prod, f.reverse, f.inclusive), tol.rtol, tol.atol);
          }
      }
    }
  }
}

TEST(Scan, NonContiguousInputs) {
  const Array base = random_array({3, 4, 5}, float32, 2, 0.5, 1.5);
  const std::vector<Array> views = {
      transpose(base, {2, 0, 1}), slice(base, {Slice{}, Slice{.start = 0, .stop = std::nullopt, .step = 2}}),
      broadcast_to(random_array({1, 5}, float32, 3), {4, 5})};
  for (const Array& v : views)
    for (int axis = 0; axis < v.ndim(); ++axis)
      for (const Flags& f : kFlags) {
        expect_close(cumsum(v, axis, f.reverse, f.inclusive),
                     ref_scan(values(v), v.shape(), axis, false, f.reverse, f.inclusive));
        expect_close(cumprod(v, axis, f.reverse, f.inclusive),
                     ref_scan(values(v), v.shape(), axis, true, f.reverse, f.inclusive));
      }
}

TEST(Scan, IntegerAndBoolDtypes) {
  const Array i8(std::vector<int8_t>{100, 100, 100, -7}, {4});
  EXPECT_EQ(cumsum(i8, 0).dtype(), int32);
  EXPECT_EQ(cumsum(i8, 0).to_vector<int32_t>(), (std::vector<int32_t>{100, 200, 300, 293}));
  const Array u8(std::vector<uint8_t>{200, 100, 3}, {3});
  EXPECT_EQ(cumsum(u8, 0).dtype(), uint32);
  EXPECT_EQ(cumsum(u8, 0, true).to_vector<uint32_t>(), (std::vector<uint32_t>{303, 103, 3}));
  const Array b(std::vector<bool>{true, false, true, true}, {2, 2});
  EXPECT_EQ(cumsum(b, 1).dtype(), int32);
  EXPECT_EQ(cumsum(b, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1, 2}));
  const Array i32(std::vector<int32_t>{2, -3, 4, 1, 5, -1}, {2, 3});
  EXPECT_EQ(cumprod(i32, 1).to_vector<int32_t>(), (std::vector<int32_t>{2, -6, -24, 1, 5, -5}));
  EXPECT_EQ(cumprod(i32, 0, false, false).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1, 2, -3, 4}));
  const Array i64(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}, {2});
  EXPECT_EQ(cumsum(i64, 0).to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 41}));
}

TEST(Scan, LongScansStayAccurate) {
  const int64_t n = 1'000'000;
  const Array x = random_array({n}, float32, 4, 0, 1);
  const auto xv = values(x);
  const auto ref = ref_scan(xv, {n}, 0, false, false, true);
  const auto got = values(cumsum(x, 0));
  for (int64_t i : {int64_t{0}, n / 3, n - 1}) EXPECT_NEAR(got[i], ref[i], 1e-6 * ref[i] + 1e-6);
  // A wide scan along axis 0 (tiles over the inner columns, in parallel).
  const Array m = random_array({100, 5000}, float32, 5);
  expect_close(cumsum(m, 0, true), ref_scan(values(m), {100, 5000}, 0, false, true, true), 1e-5, 1e-5);
}

TEST(Scan, EmptyAndErrors) {
  EXPECT_EQ(cumsum(zeros({0, 3}), 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(cumprod(zeros({2, 0}), 1).shape(), (Shape{2, 0}));
  EXPECT_THROW(cumsum(zeros({2, 3}), 2), ShapeError);
  EXPECT_THROW(cumprod(zeros({2, 3}), -3), ShapeError);
  EXPECT_THROW(cumsum(Array(1.0f), 0), ShapeError);
  EXPECT_THROW(cumsum(Array(), 0), ValueError);
}

TEST(Scan, GradientsMatchFiniteDifferences) {
  const Array x = random_array({3, 4, 2}, float64, 6, 0.5, 1.5);
  for (int axis : {0, 1, -1})
    for (const Flags& f : kFlags) {
      SCOPED_TRACE(::testing::Message()
                   << "axis " << axis << " reverse " << f.reverse << " inclusive " << f.inclusive);
      check_vjp([&](const std::vector<Array>& a) { return cumsum(a[0], axis, f.reverse, f.inclusive); }, {x});
      check_vjp([&](const std::vector<Array>& a) { return cumprod(a[0], axis, f.reverse, f.inclusive); },
                {x});
      check_vjp(
          [&](const std::vector<Array>& a) {
            return cumprod(transpose(a[0], {2, 0, 1}), axis, f.reverse, f.inclusive);
          },
          {x});
    }
}

TEST(Scan, CumprodGradientWithZeros) {
  // Rows with no zero, one zero (first, middle, last) and two zeros; gradients are exact there
  // (cumprod is a polynomial, so finite differences are too).
  const Array x(std::vector<double>{1.5, -0.5, 2.0,  0.8, 1.2,   //
                                    0.0, 1.5,  -2.0, 0.5, 3.0,   //
                                    1.1, 2.0,  0.0,  1.5, -0.7,  //
                                    0.9, 1.3,  0.6,  1.4, 0.0,   //
                                    2.0, 0.0,  1.5,  0.0, 1.2},
                {5, 5});
  for (const Flags& f : kFlags) {
    SCOPED_TRACE(::testing::Message() << "reverse " << f.reverse << " inclusive " << f.inclusive);
    check_vjp([&](const std::vector<Array>& a) { return cumprod(a[0], 1, f.reverse, f.inclusive); }, {x});
    check_vjp([&](const std::vector<Array>& a) { return cumprod(a[0], 0, f.reverse, f.inclusive); }, {x});
  }
  // Hand-checked: y = [2, 0, 0], dy/dx with all-ones cotangent = [1 + 0 + 0, 2 + 2*3, 0].
  const Array v({2.0, 0.0, 3.0});
  expect_close(grad([](const Array& a) { return sum(cumprod(a, 0)); })(v), {1, 8, 0});
}

TEST(Scan, SecondOrder) {
  const Array x = random_array({3, 4}, float64, 7, 0.5, 1.5);
  check_second_order([](const std::vector<Array>& a) { return cumprod(a[0], 1); }, {x});
  check_second_order([](const std::vector<Array>& a) { return cumprod(a[0], 0, true, false); }, {x});
  check_second_order([](const std::vector<Array>& a) { return cumsum(a[0] * a[0], 1, true); }, {x});
  // At an exact zero cumprod's second derivative is not exact (documented); away from zeros it is,
  // also when a slice holds values of both signs.
  const Array mixed(std::vector<double>{1.5, -0.4, 2.0, 0.7, -1.3, 1.2}, {2, 3});
  check_second_order([](const std::vector<Array>& a) { return cumprod(a[0], 1, true); }, {mixed});
}

// <u, J v> from the jvp rule equals <J^T u, v> from the vjp.
TEST(Scan, JvpRuleAgreesWithVjp) {
  const Array base = random_array({4, 5}, float64, 8, 0.5, 1.5);
  const Array with_zeros(std::vector<double>{1.5, 0.0, 2.0, 0.7, 1.1, 0.0, 1.2, 0.9, 0.0, 1.3,
                                             0.8, 0.0, 1.4, 0.6, 2.0, 1.0, 0.5, 0.0, 1.7, 1.1},
                         {4, 5});
  for (const Array& x : {base, with_zeros})
    for (bool is_prod : {false, true})
      for (int axis : {0, 1})
        for (const Flags& f : kFlags) {
          const ScanFn op = is_prod ? cumprod : cumsum;
          const Array y = op(x, axis, f.reverse, f.inclusive, {});
          const Array v = random_array(x.shape(), float64, 9);
          const Array u = random_array(y.shape(), float64, 10);
          const std::vector<Array> primals{x}, tangents{v};
          const int argnums[] = {0};
          const Array jv = y.primitive()->jvp({primals, tangents, argnums})[0];
          auto [outs, g] = vjp(
              [&](const std::vector<Array>& a) {
                return std::vector<Array>{op(a[0], axis, f.reverse, f.inclusive, {})};
              },
              {x}, {u});
          double lhs = 0, rhs = 0;
          const auto uv = values(u), jvv = values(jv), gv = values(g[0]), vv = values(v);
          for (size_t i = 0; i < uv.size(); ++i) lhs += uv[i] * jvv[i];
          for (size_t i = 0; i < vv.size(); ++i) rhs += gv[i] * vv[i];
          EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)))
              << (is_prod ? "cumprod" : "cumsum") << " axis " << axis << " reverse " << f.reverse
              << " inclusive " << f.inclusive;
        }
}

TEST(Scan, VmapRuleMatchesStackedExamples) {
  std::vector<Array> examples;
  for (int k = 0; k < 3; ++k) examples.push_back(random_array({4, 5}, float64, 20 + k));
  for (int b : {0, 1, 2})
    for (int axis : {0, 1}) {
      const Array y0 = cumsum(examples[0], axis, true);
      const std::vector<Array> in{stack(examples, b)};
      const int in_axes[] = {b};
      const VmapResult r = y0.primitive()->vmap({in, in_axes});
      std::vector<Array> per;
      for (const Array& e : examples) per.push_back(cumsum(e, axis, true));
      expect_close(r.outputs[0], stack(per, r.axes[0]), 1e-12, 1e-12);
    }
}

}  // namespace
}  // namespace kiln
