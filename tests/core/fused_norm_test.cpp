// The fused normalizations (core/ops/fused_norm.h) on the CPU: softmax and log_softmax along the
// last axis, layer_norm and rms_norm, against float64 references for every dtype and row length,
// on strided and broadcast views, with special values; their gradients, second derivatives, jvp
// and vmap against finite differences and loops; errors; and compile around them.
#include "kiln/core/ops/fused_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "support/norm_reference.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_second_order;
using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

using Kind = test::RowNorm;
using test::is_norm;
constexpr auto& kKinds = test::kRowNorms;
std::string kind_name(Kind k) { return test::row_norm_name(k); }

// The op under test; w and b are ignored by softmax, b by rms_norm.
Array apply(Kind k, const Array& x, const Array& w = Array(), const Array& b = Array(), double eps = 1e-5,
            StreamOrDevice s = {}) {
  switch (k) {
    case Kind::softmax:
      return softmax(x, -1, s);
    case Kind::log_softmax:
      return log_softmax(x, -1, s);
    case Kind::layer_norm:
      return layer_norm(x, w, b, eps, s);
    case Kind::rms_norm:
      return rms_norm(x, w, eps, s);
  }
  return Array();
}

std::vector<double> reference(Kind k, const std::vector<double>& x, int64_t n, const std::vector<double>& w,
                              const std::vector<double>& b, double eps) {
  return test::row_norm_reference(k, x, n, w, b, eps);
}

// Tolerances of the fused result of dtype t: its rounding, and float32 accumulation.
test::Tolerance tolerance_of(Dtype t) {
  switch (t) {
    case float64:
      return {1e-12, 1e-12};
    case float32:
      return {1e-5, 2e-6};
    case float16:
      return {2e-3, 2e-3};
    default:
      return {1.6e-2, 1.6e-2};
  }
}

// op(x, w, b) must match the reference of the values it was given.
void expect_reference(Kind k, const Array& x, const Array& w, const Array& b, double eps = 1e-5) {
  SCOPED_TRACE(kind_name(k) + " " + std::string(dtype_name(x.dtype())) + " " + shape_str(x.shape()));
  const Array y = apply(k, x, w, b, eps);
  EXPECT_EQ(y.dtype(), x.dtype());
  EXPECT_EQ(y.shape(), x.shape());
  const std::vector<double> wv = w.valid() && is_norm(k) ? values(w) : std::vector<double>{};
  const std::vector<double> bv = b.valid() && k == Kind::layer_norm ? values(b) : std::vector<double>{};
  const auto tol = tolerance_of(x.dtype());
  expect_close(y, reference(k, values(x), x.shape(-1), wv, bv, eps), tol.rtol, tol.atol);
}

TEST(FusedNorm, MatchesTheFloat64ReferenceForEveryDtypeAndRowLength) {
  for (Dtype t : {float64, float32, float16, bfloat16})
    for (int64_t n : {1, 7, 64, 1000, 4099}) {
      const Array x = random_array({3, n}, t, 1 + static_cast<uint64_t>(n), -3, 4);
      const Array w = random_array({n}, t, 2, 0.5, 1.5), b = random_array({n}, t, 3);
      for (Kind k : kKinds) {
        expect_reference(k, x, Array(), Array());
        if (is_norm(k)) {
          expect_reference(k, x, w, Array(), 1e-3);
          expect_reference(k, x, w, b);
          expect_reference(k, x, Array(), b);
        }
      }
    }
  // Many rows (the CPU pool splits them), higher ranks, one row.
  for (Kind k : kKinds) {
    expect_reference(k, random_array({2000, 33}, float32, 4), random_array({33}, float32, 5),
                     random_array({33}, float32, 6));
    expect_reference(k, random_array({2, 3, 4, 5}, float64, 7), random_array({5}, float64, 8),
                     random_array({5}, float64, 9));
    expect_reference(k, random_array({9}, float32, 10), Array(), Array());
  }
}

TEST(FusedNorm, WeightsOfAnotherDtypeApplyInTheComputePrecision) {
  // float16 input with float32 weights (mixed precision): float16 out, weights unrounded.
  const Array x = random_array({4, 50}, float16, 11, -2, 2);
  const Array w = random_array({50}, float32, 12, 0.5, 1.5), b = random_array({50}, float32, 13);
  const Array y = layer_norm(x, w, b);
  EXPECT_EQ(y.dtype(), float16);
  expect_close(y, reference(Kind::layer_norm, values(x), 50, values(w), values(b), 1e-5), 2e-3, 2e-3);
  // float32 input, float64 weights: the result stays float32.
  EXPECT_EQ(rms_norm(random_array({2, 3}, float32, 14), random_array({3}, float64, 15)).dtype(), float32);
}

TEST(FusedNorm, StatisticsAreExactFarFromZeroAndHalvesAccumulateInFloat32) {
  // A large mean with a small spread: one-pass sums of squares would cancel.
  const Array x = astype(random_array({3, 500}, float64, 16, -1, 1) + 1e4, float32);
  expect_reference(Kind::layer_norm, x, Array(), Array());
  // float16 rows whose sum of squares overflows float16 (4096 * 100^2 > 65504).
  const Array h = random_array({2, 4096}, float16, 17, 90, 110);
  expect_reference(Kind::rms_norm, h, Array(), Array());
  expect_reference(Kind::layer_norm, h, Array(), Array());
  expect_reference(Kind::softmax, h, Array(), Array());
  // Large logits stay finite.
  expect_close(softmax(Array({1000.0f, 1001.0f, 1002.0f})),
               reference(Kind::softmax, {1000, 1001, 1002}, 3, {}, {}, 0));
}

TEST(FusedNorm, StridedAndBroadcastViews) {
  const Array base = random_array({12, 40}, float32, 18, -2, 2);
  const Array w = random_array({80}, float32, 19, 0.5, 1.5);
  const Array strided_w = slice(w, {0}, {80}, {2});  // (40), stride 2
  const std::vector<Array> views = {
      transpose(random_array({40, 12}, float32, 20)),  // columns strided
      slice(base, {1, 3}, {12, 40}, {2, 3}),           // both strided
      slice(base, {Slice{}, Slice{.start = std::nullopt, .stop = std::nullopt, .step = -1}}),  // reversed
      broadcast_to(slice(base, {0, 0}, {1, 40}), {5, 40}),                               // rows stride 0
      transpose(reshape(random_array({4, 3, 40}, float32, 21), {4, 3, 40}), {1, 0, 2}),  // rows do not merge
  };
  for (size_t v = 0; v < views.size(); ++v) {
    SCOPED_TRACE("view " + std::to_string(v));
    const int64_t n = views[v].shape(-1);
    const Array wv = n == 40 ? strided_w : random_array({n}, float32, 22);
    for (Kind k : kKinds) expect_reference(k, views[v], is_norm(k) ? wv : Array(), Array());
  }
}

TEST(FusedNorm, SpecialValuesAsTheComposite) {
  // softmax over axes {0, 2} of (1, rows, n) is the composite path over the same rows.
  const std::vector<std::vector<double>> rows = {
      {-kInf, 0.0, 1.0}, {-kInf, -kInf, -kInf}, {kInf, 1.0, 2.0}, {std::nan(""), 1.0, 2.0}, {3.0, 3.0, 3.0}};
  for (const auto& row : rows) {
    const Array x(row, {1, 3});
    const Array xs = reshape(x, {1, 1, 3});
    for (bool log : {false, true}) {
      const Array fused = log ? log_softmax(x) : softmax(x);
      const Array composite = reshape(log ? log_softmax(xs, Axes{0, 2}) : softmax(xs, Axes{0, 2}), {1, 3});
      const std::vector<double> f = values(fused), c = values(composite);
      for (size_t i = 0; i < f.size(); ++i) {
        SCOPED_TRACE("row {" + std::to_string(row[0]) + ", ...} log " + std::to_string(log));
        if (std::isnan(c[i]))
          EXPECT_TRUE(std::isnan(f[i])) << f[i];
        else if (std::isinf(c[i]))
          EXPECT_EQ(f[i], c[i]);
        else
          EXPECT_NEAR(f[i], c[i], 1e-14 * (1 + std::fabs(c[i])));
      }
    }
  }
  expect_close(log_softmax(Array({-kInf, 0.0})), {-kInf, 0.0});
  expect_close(softmax(Array({-kInf, 0.0, 0.0})), {0.0, 0.5, 0.5});
  // A constant row normalizes to 0 (variance 0, eps keeps it finite).
  expect_close(layer_norm(full({2, 6}, 3.0f)), std::vector<double>(12, 0.0));
}

TEST(FusedNorm, EmptyArrays) {
  for (const Shape& s : std::vector<Shape>{{0, 5}, {3, 0}, {2, 0, 4}})
    for (Kind k : kKinds) {
      const Array x = zeros(s, float32);
      const Array w = is_norm(k) ? ones({s.back()}) : Array();
      const Array y = apply(k, x, w);
      y.eval();
      EXPECT_EQ(y.shape(), s);
      const Array g = grad([&](const Array& a) { return sum(apply(k, a, w)); })(x);
      EXPECT_EQ(g.shape(), s);
    }
}

TEST(FusedNorm, OneFusedNodeForwardAndBackward) {
  const Array x = random_array({4, 9}, float32, 23);
  const Array w = random_array({9}, float32, 24), b = random_array({9}, float32, 25);
  EXPECT_STREQ(softmax(x).primitive()->name(), "Softmax");
  EXPECT_STREQ(log_softmax(x, 1).primitive()->name(), "LogSoftmax");
  EXPECT_STREQ(softmax(x, Axes{-1}).primitive()->name(), "Softmax");
  EXPECT_STRNE(softmax(x, 0).primitive()->name(), "Softmax");  // other axes: the composite
  EXPECT_STREQ(layer_norm(x, w, b).primitive()->name(), "LayerNorm");
  EXPECT_STREQ(rms_norm(x, w).primitive()->name(), "RmsNorm");
  for (Kind k : kKinds) {
    const auto fn = [&](const std::vector<Array>& a) { return std::vector<Array>{apply(k, a[0], w, b)}; };
    const auto [out, cot] = vjp(fn, {x}, {ones_like(x)});
    ASSERT_TRUE(cot[0].has_primitive());
    const std::string vjp_name = cot[0].primitive()->name();
    EXPECT_NE(vjp_name.find("Vjp"), std::string::npos) << kind_name(k) << ": " << vjp_name;
  }
}

// ---- gradients

using Fn = test::Fn;

TEST(FusedNorm, GradientsMatchFiniteDifferences) {
  const Array x = random_array({3, 7}, float64, 26, -2, 2);
  const Array x3 = random_array({2, 3, 5}, float64, 27, -2, 2);
  const Array w = random_array({7}, float64, 28, 0.5, 1.5), b = random_array({7}, float64, 29);
  for (Kind k : kKinds) {
    SCOPED_TRACE(kind_name(k));
    check_vjp([&](const std::vector<Array>& a) { return apply(k, a[0]); }, {x});
    check_vjp([&](const std::vector<Array>& a) { return apply(k, a[0]); }, {x3});
    check_vjp([&](const std::vector<Array>& a) { return apply(k, transpose(a[0])); }, {transpose(x)});
    if (!is_norm(k)) continue;
    check_vjp([&](const std::vector<Array>& a) { return apply(k, a[0], a[1]); }, {x, w});
    check_vjp([&](const std::vector<Array>& a) { return apply(k, a[0], a[1], a[2], 0.1); }, {x, w, b});
    check_vjp([&](const std::vector<Array>& a) { return apply(k, a[0], Array(), a[1]); }, {x, b});
    // Only the parameters differentiated; a row of one element.
    check_vjp([&](const std::vector<Array>& a) { return apply(k, x, a[0], a[1]); }, {w, b});
    check_vjp(
        [&](const std::vector<Array>& a) { return apply(k, a[0], a[1], a[2]); },
        {random_array({4, 1}, float64, 30), random_array({1}, float64, 31), random_array({1}, float64, 32)});
  }
}

TEST(FusedNorm, HalfPrecisionGradientsMatchFloat64) {
  for (Dtype t : {float16, bfloat16, float32})
    for (Kind k : kKinds) {
      SCOPED_TRACE(kind_name(k) + " " + std::string(dtype_name(t)));
      const Array x = random_array({5, 37}, t, 33, -2, 2);
      const Array w = random_array({37}, float32, 34, 0.5, 1.5), g = random_array({5, 37}, t, 35);
      const auto grads = [&](const Array& xi, const Array& gi, const Array& wi) {
        const auto fn = [&](const std::vector<Array>& a) { return std::vector<Array>{apply(k, a[0], a[1])}; };
        return vjp(fn, {xi, wi}, {gi}).second;
      };
      const auto got = grads(x, g, w);
      const auto want = grads(astype(x, float64), astype(g, float64), astype(w, float64));
      EXPECT_EQ(got[0].dtype(), t);
      EXPECT_EQ(got[1].dtype(), float32);
      const double tol = t == float32 ? 1e-5 : t == float16 ? 1e-2 : 6e-2;
      expect_close(got[0], values(want[0]), tol, tol);
      if (is_norm(k)) expect_close(got[1], values(want[1]), tol, tol * 10);
    }
}

TEST(FusedNorm, SecondOrder) {
  const Array x = random_array({3, 6}, float64, 36, -2, 2);
  const Array w = random_array({6}, float64, 37, 0.5, 1.5), b = random_array({6}, float64, 38);
  for (Kind k : kKinds) {
    SCOPED_TRACE(kind_name(k));
    check_second_order([&](const std::vector<Array>& a) { return apply(k, a[0]); }, {x});
    if (!is_norm(k)) continue;
    check_second_order([&](const std::vector<Array>& a) { return apply(k, a[0], a[1], a[2]); }, {x, w, b});
    // The weight's gradient differentiated again (its terms come from the backward kernel).
    check_vjp(
        [&](const std::vector<Array>& a) {
          const Fn f = [&](const std::vector<Array>& c) { return sum(apply(k, c[0], c[1], b) * c[0]); };
          return grad([&](const std::vector<Array>& c) { return std::vector<Array>{f(c)}; }, {1})(a)[0];
        },
        {x, w}, 1e-5, 1e-5);
  }
}

TEST(FusedNorm, JvpMatchesFiniteDifferences) {
  const Array x = random_array({3, 8}, float64, 39, -2, 2);
  const Array w = random_array({8}, float64, 40, 0.5, 1.5), b = random_array({8}, float64, 41);
  const std::vector<Array> t = {random_array({3, 8}, float64, 42), random_array({8}, float64, 43),
                                random_array({8}, float64, 44)};
  for (Kind k : kKinds) {
    SCOPED_TRACE(kind_name(k));
    const ArrayFn f = [&](const std::vector<Array>& a) {
      return std::vector<Array>{apply(k, a[0], a[1], a[2])};
    };
    const auto [out, tangent] = jvp(f, {x, w, b}, t);
    const double h = 1e-6;
    std::vector<Array> plus, minus;
    for (size_t i = 0; i < 3; ++i) {
      plus.push_back(std::vector<Array>{x, w, b}[i] + t[i] * h);
      minus.push_back(std::vector<Array>{x, w, b}[i] - t[i] * h);
    }
    expect_close(tangent[0], values((f(plus)[0] - f(minus)[0]) / (2 * h)), 1e-6, 1e-6);
    // Only x has a tangent; and jvp of the gradient (a Hessian-vector product).
    const auto [o1, t1] = jvp(f, {x, w, b}, {t[0], zeros_like(w), zeros_like(b)});
    const auto [o2, t2] = jvp(
        [&](const std::vector<Array>& a) { return std::vector<Array>{apply(k, a[0], w, b)}; }, {x}, {t[0]});
    expect_close(t2[0], values(t1[0]), 1e-12, 1e-12);
    const ArrayFn g = [&](const std::vector<Array>& a) {
      return grad(
          [&](const std::vector<Array>& c) { return std::vector<Array>{sum(square(apply(k, c[0], w, b)))}; },
          {0})(a);
    };
    const auto [go, hv] = jvp(g, {x}, {t[0]});
    expect_close(hv[0], values((g({x + t[0] * h})[0] - g({x - t[0] * h})[0]) / (2 * h)), 1e-5, 1e-5);
  }
}

TEST(FusedNorm, VmapMatchesALoop) {
  const int64_t batch = 3;
  const Array xs = random_array({batch, 4, 6}, float32, 45, -2, 2);
  const Array ws = random_array({batch, 6}, float32, 46, 0.5, 1.5),
              bs = random_array({batch, 6}, float32, 47);
  const Array w = random_array({6}, float32, 48), b = random_array({6}, float32, 49);
  const auto example = [&](const Array& a, int64_t i, int axis) {
    return take(a, Array(static_cast<int32_t>(i)), axis);
  };
  for (Kind k : kKinds) {
    SCOPED_TRACE(kind_name(k));
    const ArrayFn f = [&](const std::vector<Array>& a) {
      return std::vector<Array>{apply(k, a[0], a[1], a[2])};
    };
    // Batch axis first, in the middle, and last (the normalized axis must stay last).
    for (int axis : {0, 1, 2}) {
      const Array xb = moveaxis(xs, 0, axis);
      const Array y = vmap(f, {axis, -1, -1}, {0})({xb, w, b})[0];
      for (int64_t i = 0; i < batch; ++i)
        expect_close(example(y, i, 0), values(apply(k, example(xb, i, axis), w, b)), 1e-6, 1e-6);
    }
    if (!is_norm(k)) continue;
    // Per-example weights and biases, with x shared or batched.
    for (bool x_batched : {true, false}) {
      const Array x0 = example(xs, 0, 0);
      const Array y = vmap(f, {x_batched ? 0 : -1, 0, 0})({x_batched ? xs : x0, ws, bs})[0];
      for (int64_t i = 0; i < batch; ++i)
        expect_close(
            example(y, i, 0),
            values(apply(k, x_batched ? example(xs, i, 0) : x0, example(ws, i, 0), example(bs, i, 0))), 1e-5,
            1e-5);
    }
    // Per-example gradients: vmap of grad, the backward primitive batched.
    const ArrayFn loss = [&](const std::vector<Array>& a) {
      return std::vector<Array>{sum(square(apply(k, a[0], a[1], b)))};
    };
    for (int w_axis : {-1, 0}) {
      const std::vector<Array> per = vmap(grad(loss, {0, 1}), {0, w_axis})({xs, w_axis < 0 ? w : ws});
      for (int64_t i = 0; i < batch; ++i) {
        const std::vector<Array> one =
            grad(loss, {0, 1})({example(xs, i, 0), w_axis < 0 ? w : example(ws, i, 0)});
        expect_close(example(per[0], i, 0), values(one[0]), 1e-5, 1e-5);
        expect_close(example(per[1], i, 0), values(one[1]), 1e-5, 1e-5);
      }
    }
  }
}

TEST(FusedNorm, CompileFusesTheElementwiseOpsAroundIt) {
  const ArrayFn f = [](const std::vector<Array>& a) {
    const Array h = layer_norm(a[0] * 2.0f + 1.0f, a[1], a[2]);
    return std::vector<Array>{exp(softmax(h * 0.5f) + rms_norm(h, a[1])) - 1.0f, log_softmax(a[0])};
  };
  const Array x = random_array({5, 19}, float32, 50, -2, 2);
  const Array w = random_array({19}, float32, 51, 0.5, 1.5), b = random_array({19}, float32, 52);
  const auto compiled = compile(f);
  for (int call = 0; call < 2; ++call) {
    const std::vector<Array> got = compiled({x, w, b}), want = f({x, w, b});
    expect_close(got[0], values(want[0]), 1e-5, 1e-6);
    expect_close(got[1], values(want[1]), 1e-5, 1e-6);
  }
  // Shapeless: one graph for any row count (the rules need no shapes of their own).
  const auto shapeless = compile(f, true);
  for (int64_t rows : {2, 7}) {
    const Array xr = random_array({rows, 19}, float32, 53);
    expect_close(shapeless({xr, w, b})[0], values(f({xr, w, b})[0]), 1e-5, 1e-6);
  }
  const auto g =
      compile(grad([&](const std::vector<Array>& a) { return std::vector<Array>{sum(f(a)[0])}; }, {0, 1, 2}));
  const std::vector<Array> got = g({x, w, b});
  const std::vector<Array> want = grad(
      [&](const std::vector<Array>& a) { return std::vector<Array>{sum(f(a)[0])}; }, {0, 1, 2})({x, w, b});
  for (size_t i = 0; i < 3; ++i) expect_close(got[i], values(want[i]), 1e-4, 1e-5);
}

TEST(FusedNorm, ErrorsAreClear) {
  const Array x = random_array({2, 5}, float32, 54);
  EXPECT_THROW(layer_norm(Array()), ValueError);
  EXPECT_THROW(rms_norm(Array()), ValueError);
  EXPECT_THROW(layer_norm(ones({2, 5}, int32)), DtypeError);
  EXPECT_THROW(rms_norm(ones({2, 5}, bool_)), DtypeError);
  EXPECT_THROW(layer_norm(Array(1.0f)), ShapeError);
  EXPECT_THROW(layer_norm(x, ones({4})), ShapeError);
  EXPECT_THROW(layer_norm(x, ones({5}), ones({1, 5})), ShapeError);
  EXPECT_THROW(rms_norm(x, ones({2, 5})), ShapeError);
  EXPECT_THROW(layer_norm(x, ones({5}, int32)), DtypeError);
  EXPECT_THROW(layer_norm(x, Array(), ones({5}, uint8)), DtypeError);
  EXPECT_THROW(layer_norm(x, Array(), Array(), -1e-5), ValueError);
  EXPECT_THROW(rms_norm(x, Array(), std::nan("")), ValueError);
  EXPECT_THROW(rms_norm(x, Array(), kInf), ValueError);
  EXPECT_THROW(softmax(Array(2.0f)), ShapeError);
  EXPECT_THROW(log_softmax(x, 2), ShapeError);
  try {
    layer_norm(x, ones({4}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("layer_norm"), std::string::npos) << e.what();
  }
  // Integer input to softmax is computed in float32, as the composite does.
  EXPECT_EQ(softmax(Array({1, 2, 3})).dtype(), float32);
  expect_close(softmax(Array({1, 2, 3})), reference(Kind::softmax, {1, 2, 3}, 3, {}, {}, 0), 1e-6, 1e-7);
}

}  // namespace
}  // namespace kiln
