#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_jvp;
using test::check_second_order;
using test::check_vjp;
using test::check_vmap;
using test::expect_close;
using test::random_array;
using test::values;

enum class Kind { sum, prod, max, min, lse };

// What the reference scans start from: lowest/highest are the dtype's (-inf/+inf for floats).
double identity_of(Kind k, Dtype t) {
  const double inf = std::numeric_limits<double>::infinity();
  const auto lowest = [&] {
    switch (t) {
      case bool_:
      case uint8:
      case uint32:
        return 0.0;
      case int8:
        return -128.0;
      case int32:
        return -2147483648.0;
      case int64:
        return -9223372036854775808.0;
      default:
        return -inf;
    }
  };
  const auto highest = [&] {
    switch (t) {
      case bool_:
        return 1.0;
      case uint8:
        return 255.0;
      case int8:
        return 127.0;
      case int32:
        return 2147483647.0;
      case uint32:
        return 4294967295.0;
      case int64:
        return 9223372036854775807.0;
      default:
        return inf;
    }
  };
  switch (k) {
    case Kind::sum:
      return 0;
    case Kind::prod:
      return 1;
    case Kind::max:
      return lowest();
    case Kind::min:
      return highest();
    case Kind::lse:
      return -inf;
  }
  return 0;
}

double combine(Kind k, double a, double b) {
  switch (k) {
    case Kind::sum:
      return a + b;
    case Kind::prod:
      return a * b;
    case Kind::max:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
    case Kind::min:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
    case Kind::lse: {
      if (std::isnan(a) || std::isnan(b)) return std::nan("");
      const double m = std::max(a, b);
      if (std::isinf(m)) return m;  // -inf, -inf or an infinite term
      return m + std::log(std::exp(a - m) + std::exp(b - m));
    }
  }
  return 0;
}

// Naive float64 scan of row-major `x` along `axis`.
std::vector<double> ref_scan(const std::vector<double>& x, const Shape& shape, int axis, Kind kind,
                             bool reverse, bool inclusive, double init) {
  const int nd = static_cast<int>(shape.size());
  if (axis < 0) axis += nd;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < nd; ++d) inner *= shape[d];
  const int64_t n = shape[axis];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = init;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t r = reverse ? n - 1 - k : k;
        const int64_t at = (o * n + r) * inner + i;
        const double next = combine(kind, acc, x[at]);
        y[at] = inclusive ? next : acc;
        acc = next;
      }
    }
  return y;
}
std::vector<double> ref_scan(const std::vector<double>& x, const Shape& shape, int axis, bool prod,
                             bool reverse, bool inclusive) {
  return ref_scan(x, shape, axis, prod ? Kind::prod : Kind::sum, reverse, inclusive, prod ? 1 : 0);
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
  expect_close(grad([](const Array& a) { return sum(cumprod(a, 0)); })(v), std::vector<double>{1, 8, 0});
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

// ---------------------------------------------------------------- cummax, cummin, logcumsumexp

// x of dtype t with values in [lo, hi): integers rounded down, bools from the sign.
Array numeric_array(const Shape& shape, Dtype t, uint64_t seed, double lo = -1, double hi = 1) {
  const Array v = random_array(shape, float64, seed, lo, hi);
  if (t == bool_) return greater(v, 0.0);
  if (is_floating(t)) return astype(v, t);
  return astype(floor(v), t);
}

TEST(ScanExtremes, MatchReferenceForEveryDtypeAxisAndFlag) {
  for (bool is_max : {true, false}) {
    const ScanFn op = is_max ? cummax : cummin;
    const Kind kind = is_max ? Kind::max : Kind::min;
    for (const Shape& shape : std::vector<Shape>{{7}, {3, 5}, {2, 3, 4}})
      for (Dtype t : {float64, float32, float16, bfloat16, int64, int32, uint32, int8, uint8, bool_}) {
        const bool is_unsigned = t == uint32 || t == uint8;
        const Array x = numeric_array(shape, t, 30, is_unsigned ? 0 : -100, 100);
        const auto xv = values(x);
        for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
          for (const Flags& f : kFlags) {
            SCOPED_TRACE(::testing::Message()
                         << (is_max ? "cummax " : "cummin ") << t << " shape " << shape_str(shape) << " axis "
                         << axis << " reverse " << f.reverse << " inclusive " << f.inclusive);
            const Array y = op(x, axis, f.reverse, f.inclusive, {});
            EXPECT_EQ(y.dtype(), t);
            EXPECT_EQ(y.shape(), shape);
            // Exact: every output is one of the inputs (or the identity).
            expect_close(y, ref_scan(xv, shape, axis, kind, f.reverse, f.inclusive, identity_of(kind, t)), 0,
                         0);
          }
      }
  }
}

TEST(ScanExtremes, NanPropagatesAndSignedIntegersCompareSigned) {
  const double nan = std::nan("");
  const Array x(std::vector<double>{1, nan, 3, 0, -2, 5}, {6});
  expect_close(cummax(x, 0), std::vector<double>{1, nan, nan, nan, nan, nan}, 0, 0);
  expect_close(cummin(x, 0, true), std::vector<double>{nan, nan, -2, -2, -2, 5}, 0, 0);
  expect_close(cummax(astype(x, float16), 0, false, false),
               std::vector<double>{-INFINITY, 1, nan, nan, nan, nan}, 0, 0);
  const Array i8(std::vector<int8_t>{-5, 100, -128, 127}, {4});
  EXPECT_EQ(cummin(i8, 0).to_vector<int8_t>(), (std::vector<int8_t>{-5, -5, -128, -128}));
  EXPECT_EQ(cummax(i8, 0, false, false).to_vector<int8_t>(), (std::vector<int8_t>{-128, -5, 100, 100}));
  const Array i64(std::vector<int64_t>{-(int64_t{1} << 40), int64_t{1} << 41, -3}, {3});
  EXPECT_EQ(cummax(i64, 0, true).to_vector<int64_t>(),
            (std::vector<int64_t>{int64_t{1} << 41, int64_t{1} << 41, -3}));
  const Array u32(std::vector<uint32_t>{3000000000u, 5, 4000000000u}, {3});
  EXPECT_EQ(cummin(u32, 0).to_vector<uint32_t>(), (std::vector<uint32_t>{3000000000u, 5, 5}));
  const Array b(std::vector<bool>{false, true, false}, {3});
  EXPECT_EQ(cummax(b, 0).dtype(), bool_);
  EXPECT_EQ(cummax(b, 0).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(cummin(b, 0, false, false).to_vector<bool>(), (std::vector<bool>{true, false, false}));
}

// Ties: each output's gradient goes to the first element in scan order that reached its value.
TEST(ScanExtremes, GradientGoesToTheFirstExtreme) {
  const auto g = [](ScanFn op, const Array& v, bool reverse, bool inclusive) {
    return grad([=](const Array& a) { return sum(op(a, 0, reverse, inclusive, {})); })(v);
  };
  const Array x({1.0, 3.0, 3.0, 2.0, 5.0, 5.0});
  expect_close(g(cummax, x, false, true), std::vector<double>{1, 3, 0, 0, 2, 0}, 0, 0);
  expect_close(g(cummax, x, true, true), std::vector<double>{0, 0, 0, 0, 0, 6}, 0, 0);
  expect_close(g(cummax, x, false, false), std::vector<double>{1, 3, 0, 0, 1, 0}, 0, 0);
  expect_close(g(cummax, x, true, false), std::vector<double>{0, 0, 0, 0, 0, 5}, 0, 0);
  expect_close(g(cummin, x, false, true), std::vector<double>{6, 0, 0, 0, 0, 0}, 0, 0);
  expect_close(g(cummin, x, true, true), std::vector<double>{1, 0, 0, 3, 0, 2}, 0, 0);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  // A leading run of -inf takes from the first element; a NaN takes everything after it.
  expect_close(g(cummax, Array({-inf, -inf, 2.0}), false, true), std::vector<double>{2, 0, 1}, 0, 0);
  expect_close(g(cummax, Array({1.0, nan, 5.0, nan}), false, true), std::vector<double>{1, 3, 0, 0}, 0, 0);
  expect_close(g(cummin, Array({1.0, nan, -5.0}), false, true), std::vector<double>{1, 2, 0}, 0, 0);
  // jvp: the tangent of each output is the tangent of its source.
  const auto [y, ty] = jvp([](const std::vector<Array>& a) { return std::vector<Array>{cummax(a[0], 0)}; },
                           {x}, {Array({10.0, 20.0, 30.0, 40.0, 50.0, 60.0})});
  expect_close(ty[0], std::vector<double>{10, 20, 20, 20, 50, 50}, 0, 0);
}

TEST(ScanExtremes, IntegerGradientsAreZero) {
  const Array x(std::vector<int32_t>{3, 1, 4}, {3});
  const Array y = cummax(x, 0);
  const std::vector<Array> primals{x}, cot{ones({3}, int32)};
  const int argnums[] = {0};
  const auto dx = y.primitive()->vjp({primals, cot, argnums, {&y, 1}});
  EXPECT_EQ(dx[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
  const auto ty = y.primitive()->jvp({primals, cot, argnums});
  EXPECT_EQ(ty[0].dtype(), int32);
  EXPECT_EQ(ty[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
}

TEST(LogCumSumExp, MatchesReferenceForEveryAxisAndFlag) {
  for (const Shape& shape : std::vector<Shape>{{6}, {3, 5}, {2, 3, 4}, {2, 1, 3, 40}})
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      const Array x = random_array(shape, t, 40, -3, 3);
      const auto xv = values(x);
      for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis)
        for (const Flags& f : kFlags) {
          SCOPED_TRACE(::testing::Message() << t << " shape " << shape_str(shape) << " axis " << axis
                                            << " reverse " << f.reverse << " inclusive " << f.inclusive);
          const Array y = logcumsumexp(x, axis, f.reverse, f.inclusive);
          EXPECT_EQ(y.dtype(), t);
          const auto tol = test::tolerance(t);
          expect_close(y, ref_scan(xv, shape, axis, Kind::lse, f.reverse, f.inclusive, -INFINITY), tol.rtol,
                       tol.atol);
        }
    }
}

TEST(LogCumSumExp, StableForLargeSpreadsAndLongRows) {
  // exp overflows float32 past 88 and float64 past 709: a running logaddexp never exponentiates
  // more than the gap between two terms.
  const Array x({1000.0f, -1000.0f, 0.0f, 1000.0f, 999.0f});
  expect_close(
      logcumsumexp(x, 0),
      std::vector<double>{1000, 1000, 1000, 1000 + std::log(2.0), 1000 + std::log(2 + std::exp(-1.0))}, 1e-6,
      0);
  expect_close(logcumsumexp(x, 0, true, false),
               std::vector<double>{1000 + std::log(1 + std::exp(-1.0)), 1000 + std::log(1 + std::exp(-1.0)),
                                   1000 + std::log(1 + std::exp(-1.0)), 999, -INFINITY},
               1e-6, 0);
  // Long rows with a spread of 600 (a shift by the row's max would underflow most of each row to
  // 0, then log(0)); 10^4 elements also take the GPU's split of long rows into pieces.
  const Shape shape{2, 10000};
  const Array wide = random_array(shape, float32, 41, -300, 300);
  const auto ref = ref_scan(values(wide), shape, 1, Kind::lse, false, true, -INFINITY);
  expect_close(logcumsumexp(wide, 1), ref, 1e-5, 1e-4);
  const Array early = slice(wide, {0, 0}, {2, 50});
  expect_close(
      logcumsumexp(astype(early, float64) - 1000.0, 1),
      ref_scan(values(astype(early, float64) - 1000.0), {2, 50}, 1, Kind::lse, false, true, -INFINITY), 1e-12,
      0);
  expect_close(cummax(wide, 1, true), ref_scan(values(wide), shape, 1, Kind::max, true, true, -INFINITY), 0,
               0);
  const Array iw = astype(floor(wide), int32);
  expect_close(cummin(iw, 1), ref_scan(values(iw), shape, 1, Kind::min, false, true, 2147483647.0), 0, 0);
  // Axis 0 of a wide block (columns scanned, split along the axis on the GPU).
  const Array tall = random_array({3000, 3}, float64, 42, -50, 50);
  expect_close(logcumsumexp(tall, 0, true),
               ref_scan(values(tall), {3000, 3}, 0, Kind::lse, true, true, -INFINITY), 1e-11, 0);
}

TEST(LogCumSumExp, InfinitiesNanAndDtypes) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  expect_close(logcumsumexp(Array({-inf, -inf, 0.0, inf, 1.0}), 0),
               std::vector<double>{-inf, -inf, 0, inf, inf}, 0, 0);
  expect_close(logcumsumexp(Array(std::vector<double>{1.0, nan, 2.0}, {3}, float32), 0),
               std::vector<double>{1, nan, nan}, 0, 0);
  const Array i(std::vector<int32_t>{0, 1, 2}, {3});
  const Array y = logcumsumexp(i, 0);
  EXPECT_EQ(y.dtype(), float32);
  expect_close(
      y, std::vector<double>{0, std::log(1 + std::exp(1.0)), std::log(1 + std::exp(1.0) + std::exp(2.0))});
  EXPECT_EQ(logcumsumexp(Array(std::vector<bool>{true, false}, {2}), 0).dtype(), float32);
}

TEST(ScanMore, NonContiguousInputs) {
  const Array base = random_array({3, 4, 5}, float32, 43, -2, 2);
  const std::vector<Array> views = {
      transpose(base, {2, 0, 1}), slice(base, {Slice{}, Slice{.start = 0, .stop = std::nullopt, .step = 2}}),
      broadcast_to(random_array({1, 5}, float32, 44), {4, 5})};
  for (const Array& v : views)
    for (int axis = 0; axis < v.ndim(); ++axis)
      for (const Flags& f : kFlags) {
        const auto vv = values(v);
        expect_close(cummax(v, axis, f.reverse, f.inclusive),
                     ref_scan(vv, v.shape(), axis, Kind::max, f.reverse, f.inclusive, -INFINITY), 0, 0);
        expect_close(cummin(v, axis, f.reverse, f.inclusive),
                     ref_scan(vv, v.shape(), axis, Kind::min, f.reverse, f.inclusive, INFINITY), 0, 0);
        expect_close(logcumsumexp(v, axis, f.reverse, f.inclusive),
                     ref_scan(vv, v.shape(), axis, Kind::lse, f.reverse, f.inclusive, -INFINITY), 1e-6, 1e-6);
      }
}

TEST(ScanMore, EmptyAndErrors) {
  EXPECT_EQ(cummax(zeros({0, 3}), 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(logcumsumexp(zeros({2, 0}), 1).shape(), (Shape{2, 0}));
  for (ScanFn op : {cummax, cummin, logcumsumexp}) {
    EXPECT_THROW(op(zeros({2, 3}), 2, false, true, {}), ShapeError);
    EXPECT_THROW(op(zeros({2, 3}), -3, false, true, {}), ShapeError);
    EXPECT_THROW(op(Array(1.0f), 0, false, true, {}), ShapeError);
    EXPECT_THROW(op(Array(), 0, false, true, {}), ValueError);
  }
  try {
    cummax(zeros({2, 3}), 5);
    ADD_FAILURE() << "no throw";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[cummax]"), std::string::npos) << e.what();
  }
}

TEST(ScanMore, GradientsJvpAndVmap) {
  const Array x = random_array({3, 4, 2}, float64, 45, -2, 2);
  for (ScanFn op : {cummax, cummin, logcumsumexp})
    for (int axis : {0, 1, -1})
      for (const Flags& f : kFlags) {
        SCOPED_TRACE(::testing::Message()
                     << (op == cummax   ? "cummax"
                         : op == cummin ? "cummin"
                                        : "logcumsumexp")
                     << " axis " << axis << " reverse " << f.reverse << " inclusive " << f.inclusive);
        const auto fn = [&](const std::vector<Array>& a) {
          const Array y = op(a[0], axis, f.reverse, f.inclusive, {});
          if (f.inclusive) return y;
          // An exclusive scan's first output is the constant identity (+-inf), whose finite
          // differences are NaN: it is left out.
          const int ax = axis < 0 ? axis + y.ndim() : axis;
          Shape start(y.ndim(), 0), stop = y.shape();
          if (f.reverse)
            stop[ax] -= 1;
          else
            start[ax] = 1;
          return slice(y, start, stop);
        };
        check_vjp(fn, {x});
        check_jvp(fn, {x});
        if (axis != -1) check_vmap(fn, {x}, -2, 2);
      }
  // Through a transposed view, and float32 vmap.
  check_vjp(
      [](const std::vector<Array>& a) {
        return logcumsumexp(transpose(a[0], {2, 0, 1}), 2, true);
      },
      {x});
  check_vmap([](const std::vector<Array>& a) { return cummin(a[0], 1, true, false); },
             {random_array({3, 4}, float32, 46)});
  check_vmap([](const std::vector<Array>& a) { return logcumsumexp(a[0], 0); },
             {random_array({3, 4}, float32, 47)});
}

TEST(ScanMore, SecondOrder) {
  const Array x = random_array({3, 4}, float64, 48, -2, 2);
  check_second_order([](const std::vector<Array>& a) { return logcumsumexp(a[0], 1); }, {x});
  check_second_order([](const std::vector<Array>& a) { return logcumsumexp(a[0], 0, true, false); }, {x});
  check_second_order([](const std::vector<Array>& a) { return cummax(a[0] * a[0], 1, true); }, {x});
  check_second_order([](const std::vector<Array>& a) { return cummin(a[0] * a[0], 0, false, false); }, {x});
}

// The gradient of logcumsumexp with large spreads (terms of exp(x_j - y_i) near 0 and 1) stays
// finite and matches a float64 reference.
TEST(LogCumSumExp, GradientIsStable) {
  const Array x({500.0, -500.0, 0.0, 600.0});
  const Array g = grad([](const Array& a) {
    return sum(logcumsumexp(a, 0) * Array({1.0, -2.0, 0.5, 3.0}));
  })(x);
  // dx_j = sum over i >= j of u_i exp(x_j - y_i).
  const std::vector<double> xv{500, -500, 0, 600}, u{1, -2, 0.5, 3};
  std::vector<double> y(4), ref(4, 0.0);
  double acc = -INFINITY;
  for (int i = 0; i < 4; ++i) y[i] = acc = combine(Kind::lse, acc, xv[i]);
  for (int j = 0; j < 4; ++j)
    for (int i = j; i < 4; ++i) ref[j] += u[i] * std::exp(xv[j] - y[i]);
  expect_close(g, ref, 1e-9, 1e-300);
  const Array gf = grad([](const Array& a) { return sum(logcumsumexp(a, 0)); })(astype(x, float16));
  EXPECT_EQ(gf.dtype(), float16);
  for (double v : values(gf)) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace kiln
