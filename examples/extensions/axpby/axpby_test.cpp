// The axpby example primitive: forward on both CPU paths (cblas_saxpby, strided fallback) against
// a plain-loop float64 reference, promotion and errors, vjp by finite differences (and grad of
// grad), jvp and vmap through kiln's transforms and their compositions, compile, params.
#include "axpby.h"

#include <gtest/gtest.h>

#include <sstream>

#include "support/op_test.h"

namespace axpby_ext {
namespace {

using namespace kiln;
using test::random_array;
using test::values;

// alpha * x + beta * y with NumPy broadcasting, in double, by plain index arithmetic.
std::vector<double> reference(const Array& x, const Array& y, double alpha, double beta) {
  const Shape shape = broadcast_shapes("reference", x.shape(), y.shape());
  const std::vector<double> xv = values(x), yv = values(y);
  // Row-major offset of the output index `idx` in an operand of shape `s` broadcast to `shape`.
  auto offset = [&](const Shape& s, const Shape& idx) {
    int64_t off = 0;
    const size_t lead = shape.size() - s.size();
    for (size_t d = 0; d < s.size(); ++d) off = off * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
    return off;
  };
  std::vector<double> out(shape_size(shape));
  Shape idx(shape.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = alpha * xv[offset(x.shape(), idx)] + beta * yv[offset(y.shape(), idx)];
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
  return out;
}

std::vector<Array> fn(const std::vector<Array>& a) { return {axpby(a[0], a[1], 1.5, -0.75)}; }

TEST(Axpby, ContiguousFloat32UsesBlasPathAndMatchesReference) {
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{1000}, Shape{37, 129}, Shape{4, 5, 6}}) {
    const Array x = random_array(shape, float32, 1), y = random_array(shape, float32, 2);
    const Array z = axpby(x, y, 2.5, -0.5);
    EXPECT_EQ(z.dtype(), float32);
    EXPECT_EQ(z.shape(), shape);
    test::expect_close(z, reference(x, y, 2.5, -0.5));
  }
}

TEST(Axpby, BlasPathLeavesAnInputTheCallerHoldsUntouched) {
  // saxpby writes into its y argument: only a y nobody else can see may be reused as the output.
  const Array x = random_array({64}, float32, 3), y = random_array({64}, float32, 4);
  const std::vector<double> y_before = values(y);
  const Array z = axpby(x, y, 1.0, 3.0);
  test::expect_close(z, reference(x, y, 1.0, 3.0));
  EXPECT_EQ(values(y), y_before);
  // y * 1 is an intermediate only axpby reads: its buffer is donated, and the result is the same.
  test::expect_close(axpby(x, y * 1.0, 1.0, 3.0), reference(x, y, 1.0, 3.0));
  // The same array as both operands (no donation either).
  test::expect_close(axpby(y, y, 2.0, -1.0), values(y));
}

TEST(Axpby, StridedAndBroadcastInputsUseTheFallback) {
  const Array a = random_array({5, 7}, float32, 5);
  const Array at = transpose(a);  // (7, 5), strides (1, 7)
  const Array b = random_array({7, 5}, float32, 6);
  eval(at, b);
  EXPECT_FALSE(at.row_contiguous());
  test::expect_close(axpby(at, b, 0.5, 2.0), reference(at, b, 0.5, 2.0));
  test::expect_close(axpby(b, at, 0.5, 2.0), reference(b, at, 0.5, 2.0));
  // Broadcasting: a row, a column, a scalar array, higher rank, both operands broadcast.
  const Array row = random_array({5}, float32, 7), col = random_array({7, 1}, float32, 8);
  const Array scalar = random_array({}, float32, 9), cube = random_array({3, 1, 5}, float32, 10);
  test::expect_close(axpby(at, row, -1.0, 4.0), reference(at, row, -1.0, 4.0));
  test::expect_close(axpby(col, b, 3.0, 1.0), reference(col, b, 3.0, 1.0));
  test::expect_close(axpby(b, scalar, 1.0, 1.0), reference(b, scalar, 1.0, 1.0));
  test::expect_close(axpby(col, row, 2.0, -3.0), reference(col, row, 2.0, -3.0));
  test::expect_close(axpby(cube, at, 2.0, -3.0), reference(cube, at, 2.0, -3.0));
  // A sliced view with an offset and a step (through take on a transposed view).
  const Array sliced = take(at, Array({0, 2, 4}), 1);
  test::expect_close(axpby(sliced, col, 1.0, 1.0), reference(sliced, col, 1.0, 1.0));
  // Zero-size outputs.
  for (const auto& [xs, ys] : {std::pair{Shape{0, 3}, Shape{3}}, std::pair{Shape{0}, Shape{0}}}) {
    const Array e = axpby(zeros(xs), zeros(ys), 1.0, 1.0);
    e.eval();
    EXPECT_EQ(e.size(), 0);
  }
}

TEST(Axpby, OtherFloatDtypes) {
  for (Dtype t : {float64, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(t));
    const Array x = random_array({6, 9}, t, 11), y = random_array({9}, t, 12);
    const Array z = axpby(x, y, 0.75, -1.25);
    EXPECT_EQ(z.dtype(), t);
    // The inputs are already rounded to t, so the reference sees the kernel's exact inputs and only
    // the final rounding (or, for float64, nothing) differs.
    test::expect_close(z, reference(x, y, 0.75, -1.25));
    const Array zt = axpby(transpose(random_array({9, 6}, t, 13)), x, 2.0, 1.0);
    test::expect_close(zt, reference(transpose(random_array({9, 6}, t, 13)), x, 2.0, 1.0));
    // Contiguous, same shape: not float32, so not BLAS either.
    test::expect_close(axpby(x, x * 2.0, 1.0, 1.0), reference(x, x * 2.0, 1.0, 1.0));
  }
}

TEST(Axpby, PromotesLikeBuiltInOps) {
  const Array h = ones({3}, float16), f = ones({3}, float32), d = ones({3}, float64), i = ones({3}, int32);
  EXPECT_EQ(axpby(h, f, 1, 1).dtype(), float32);
  EXPECT_EQ(axpby(f, d, 1, 1).dtype(), float64);
  EXPECT_EQ(axpby(h, 2.0, 1, 1).dtype(), float16);  // a weak scalar keeps the array's dtype
  EXPECT_EQ(axpby(i, i, 1, 1).dtype(), float32);    // integers are computed in float32
  test::expect_close(axpby(i, 2, 0.5, 0.25), {1.0, 1.0, 1.0});
  EXPECT_EQ(axpby(bfloat16_t(1.0f), Array(1.0, bfloat16), 1, 1).dtype(), bfloat16);
}

TEST(Axpby, BadInputIsRejectedBeforeTheNodeExists) {
  EXPECT_THROW(axpby(ones({2, 3}), ones({4}), 1, 1), ShapeError);
  EXPECT_THROW(axpby(Array(), ones({4}), 1, 1), ValueError);
  try {
    axpby(ones({2, 3}), ones({4}), 1, 1);
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[axpby]"), std::string::npos) << e.what();
  }
}

TEST(Axpby, VjpMatchesFiniteDifferences) {
  const Array x = random_array({3, 4}, float64, 14);
  test::check_vjp([](const std::vector<Array>& a) { return axpby(a[0], a[1], 1.5, -0.75); },
                  {x, random_array({3, 4}, float64, 15)});
  test::check_vjp([](const std::vector<Array>& a) { return axpby(a[0], a[1], 2.0, 3.0); },
                  {x, random_array({4}, float64, 16)});
  test::check_vjp([](const std::vector<Array>& a) { return axpby(a[0], a[1], -1.0, 0.5); },
                  {random_array({3, 1}, float64, 17), random_array({1, 4}, float64, 18)});
  // Inside a nonlinear function, and its second order (the rule is built from kiln ops).
  auto nonlinear = [](const std::vector<Array>& a) { return sin(axpby(a[0] * a[0], a[1], 0.5, 2.0)); };
  test::check_vjp(nonlinear, {x, random_array({4}, float64, 19)});
  test::check_second_order(nonlinear, {x, random_array({4}, float64, 19)});
}

TEST(Axpby, VjpOfFloat32KeepsDtypesAndShapes) {
  const Array x = random_array({3, 4}, float32, 20), y = random_array({4}, float32, 21);
  const auto g =
      grad([](const std::vector<Array>& a) { return std::vector<Array>{sum(axpby(a[0], a[1], 2.0, 0.5))}; },
           {0, 1})({x, y});
  EXPECT_EQ(g[0].dtype(), float32);
  EXPECT_EQ(g[1].shape(), Shape{4});
  test::expect_close(g[0], std::vector<double>(12, 2.0));
  test::expect_close(g[1], std::vector<double>(4, 1.5));  // 0.5 summed over 3 rows
}

TEST(Axpby, JvpIsTheAnalyticTangent) {
  const Array x = random_array({3, 4}, float64, 22), y = random_array({4}, float64, 23);
  const Array tx = random_array({3, 4}, float64, 24), ty = random_array({4}, float64, 25);
  const auto [outs, tangents] = jvp(fn, {x, y}, {tx, ty});
  test::expect_close(outs[0], reference(x, y, 1.5, -0.75));
  test::expect_close(tangents[0], reference(tx, ty, 1.5, -0.75));
  // Forward over reverse: a Hessian-vector product through a nonlinear use of axpby.
  auto g = grad(ScalarFn([](const Array& v) { return sum(square(axpby(v, v * v, 2.0, 1.0))); }));
  const Array hv =
      jvp([&](const std::vector<Array>& a) { return std::vector<Array>{g(a[0])}; }, {tx}, {ones_like(tx)})
          .second[0];
  // f = sum((2v + v^2)^2): f'' = 2 (2 + 2v)^2 + 2 (2v + v^2) * 2 per element (diagonal Hessian).
  std::vector<double> expected;
  for (double v : values(tx)) expected.push_back(2 * (2 + 2 * v) * (2 + 2 * v) + 4 * (2 * v + v * v));
  test::expect_close(hv, expected, 1e-9, 1e-9);
}

TEST(Axpby, JvpRuleWithOneTangent) {
  // The transform passes every tangent; the rule itself also accepts a subset of argnums.
  const Array x = random_array({3, 4}, float64, 26), y = random_array({4}, float64, 27);
  const Array z = axpby(x, y, 2.0, -3.0);
  const Array ty = random_array({4}, float64, 28);
  const int argnums[] = {1};
  const Array tangent[] = {ty};
  const Array primals[] = {z.inputs()[0], z.inputs()[1]};
  const auto t = z.primitive()->jvp({.primals = primals, .tangents = tangent, .argnums = argnums});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].shape(), (Shape{3, 4}));
  test::expect_close(t[0], reference(zeros({3, 4}, float64), ty, 2.0, -3.0));
}

// vmap(fn, in_axes)({x, y}) against fn applied per example and stacked along out axis 0.
void expect_vmap_equals_stacking(const Array& x, const Array& y, std::vector<int> in_axes) {
  const Array batched = vmap(fn, in_axes)({x, y})[0];
  const int64_t batch = in_axes[0] >= 0 ? x.shape(in_axes[0]) : y.shape(in_axes[1]);
  std::vector<Array> per_example;
  for (int64_t b = 0; b < batch; ++b) {
    const Array xb = in_axes[0] >= 0 ? take(x, Array(static_cast<int32_t>(b)), in_axes[0]) : x;
    const Array yb = in_axes[1] >= 0 ? take(y, Array(static_cast<int32_t>(b)), in_axes[1]) : y;
    per_example.push_back(fn({xb, yb})[0]);
  }
  const Array expected = stack(per_example);
  ASSERT_EQ(batched.shape(), expected.shape());
  test::expect_close(batched, values(expected));
}

TEST(Axpby, VmapEqualsStackingOverExamples) {
  const Array xs = random_array({5, 3, 4}, float32, 29), ys = random_array({5, 4}, float32, 30);
  expect_vmap_equals_stacking(xs, ys, {0, 0});  // per-example ranks differ: (3,4) and (4)
  expect_vmap_equals_stacking(xs, random_array({4}, float32, 31), {0, -1});
  expect_vmap_equals_stacking(random_array({3, 4}, float32, 32), ys, {-1, 0});
  expect_vmap_equals_stacking(random_array({3, 5, 4}, float32, 33), ys, {1, 0});
  expect_vmap_equals_stacking(random_array({3, 4, 5}, float64, 34), random_array({1, 5}, float64, 35),
                              {2, 1});
  // Nested: over pairs (i, j) of a (2, 5, 4) x against a shared row.
  const Array x2 = random_array({2, 5, 4}, float32, 36), row = random_array({4}, float32, 37);
  const Array nested = vmap(vmap(fn, {0, -1}), {0, -1})({x2, row})[0];
  test::expect_close(nested, reference(x2, row, 1.5, -0.75));
}

TEST(Axpby, VmapOfGradGivesPerExampleGradients) {
  const Array xs = random_array({6, 4}, float64, 38), w = random_array({4}, float64, 39);
  auto per = [](const std::vector<Array>& a) {
    return std::vector<Array>{sum(square(axpby(a[0], a[1], 2.0, -1.0)))};
  };
  const auto batched = vmap(grad(per, {1}), {0, -1})({xs, w})[0];
  std::vector<double> expected;
  for (int64_t b = 0; b < 6; ++b) {
    const Array g = grad(per, {1})({take(xs, Array(static_cast<int32_t>(b)), 0), w})[0];
    for (double v : values(g)) expected.push_back(v);
  }
  test::expect_close(batched, expected);
}

TEST(Axpby, CompiledMatchesEager) {
  const Array x = random_array({8, 16}, float32, 40), y = random_array({16}, float32, 41);
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{exp(axpby(a[0], a[1], 0.5, 2.0)) * 2.0};
  };
  const auto compiled = compile(f);
  test::expect_close(compiled({x, y})[0], values(f({x, y})[0]));
  test::expect_close(compiled({x, y})[0], values(f({x, y})[0]));
  EXPECT_EQ(compiled.trace_count(), 1);
}

TEST(Axpby, EquivalenceAndPrintComeFromParams) {
  const Stream s = to_stream({});
  const Axpby a(s, 2.0, 3.0), b(s, 2.0, 3.0), c(s, 2.0, 4.0);
  EXPECT_TRUE(a.is_equivalent(b));
  EXPECT_FALSE(a.is_equivalent(c));
  EXPECT_FALSE(a.is_equivalent(*(ones({2}) + ones({2})).primitive()));
  std::ostringstream os;
  a.print(os);
  EXPECT_EQ(os.str(), "Axpby(2, 3)");
  const Array z = axpby(ones({2, 3}), ones({3}), 2, 3);
  EXPECT_EQ(z.primitive()->output_shapes(z.inputs()), std::vector<Shape>{(Shape{2, 3})});
}

}  // namespace
}  // namespace axpby_ext
