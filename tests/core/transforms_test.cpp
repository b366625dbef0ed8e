// jvp and vmap, and their compositions with grad: per-example gradients equal a loop over
// examples, jvp(grad) gives Hessian-vector products equal to finite differences of the gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <string_view>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

Array mlp_loss(const Array& w1, const Array& w2, const Array& x, const Array& y) {
  const Array h = tanh(matmul(x, w1));
  return mean(square(matmul(h, w2) - y));
}

TEST(Jvp, MatchesFiniteDifferencesOfTheFunction) {
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{sum(exp(a[0]) * sin(a[1]), 0), a[0] * a[1]};
  };
  const Array x = random_array({3, 2}, float64, 1), y = random_array({3, 2}, float64, 2);
  const Array tx = random_array({3, 2}, float64, 3), ty = random_array({3, 2}, float64, 4);
  auto [outs, tangents] = jvp(f, {x, y}, {tx, ty});
  ASSERT_EQ(tangents.size(), 2u);
  const double eps = 1e-6;
  for (size_t j = 0; j < 2; ++j) {
    const auto plus = f({x + eps * tx, y + eps * ty})[j], minus = f({x - eps * tx, y - eps * ty})[j];
    expect_close(tangents[j], values((plus - minus) / (2 * eps)), 1e-6, 1e-8);
  }
  expect_close(outs[1], values(x * y));
}

TEST(Jvp, DotProductWithVjp) {
  // <u, J v> = <J^T u, v> ties the two modes together.
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{softmax(matmul(a[0], a[1]), -1) * log1p(square(a[0]))};
  };
  const Array a = random_array({4, 3}, float64, 5), b = random_array({3, 3}, float64, 6);
  const Array va = random_array({4, 3}, float64, 7), vb = random_array({3, 3}, float64, 8);
  const Array u = random_array({4, 3}, float64, 9);
  const Array jv = jvp(f, {a, b}, {va, vb}).second[0];
  const auto jtu = vjp(f, {a, b}, {u}).second;
  const double lhs = sum(u * jv).item<double>();
  const double rhs = sum(jtu[0] * va).item<double>() + sum(jtu[1] * vb).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
}

TEST(Jvp, HessianVectorProductOfGrad) {
  auto f = [](const Array& x) { return sum(exp(x) * sin(x) + square(x) * x); };
  auto g = grad(ScalarFn(f));
  const Array x = random_array({5}, float64, 10), v = random_array({5}, float64, 11);
  const Array hv =
      jvp([&](const std::vector<Array>& a) { return std::vector<Array>{g(a[0])}; }, {x}, {v}).second[0];
  const double eps = 1e-6;
  expect_close(hv, values((g(x + eps * v) - g(x - eps * v)) / (2 * eps)), 1e-6, 1e-7);
}

TEST(Jvp, RejectsMismatchedTangents) {
  auto f = [](const std::vector<Array>& a) { return a; };
  EXPECT_THROW(jvp(f, {ones({2})}, {}), ValueError);
  EXPECT_THROW(jvp(f, {ones({2})}, {ones({3})}), ShapeError);
}

TEST(Vmap, EqualsStackingOverExamples) {
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{matmul(a[0], a[1]) + sum(a[0]), logsumexp(a[0], 0)};
  };
  const Array xs = random_array({5, 2, 3}, float32, 1), w = random_array({3, 4}, float32, 2);
  const auto batched = vmap(f, {0, -1})({xs, w});
  for (int64_t i = 0; i < 5; ++i) {
    const auto one = f({take(xs, Array(int32_t(i)), 0), w});
    expect_close(take(batched[0], Array(int32_t(i)), 0), values(one[0]));
    expect_close(take(batched[1], Array(int32_t(i)), 0), values(one[1]));
  }
}

TEST(Vmap, InAndOutAxes) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] * a[1]}; };
  const Array x = random_array({3, 4}, float64, 3), y = random_array({4, 3}, float64, 4);
  // Batch along x's axis 1 and y's axis 0 (both size 4); put the batch last in the output.
  const Array r = vmap(f, {1, 0}, {1})({x, y})[0];
  ASSERT_EQ(r.shape(), (Shape{3, 4}));
  expect_close(r, values(x * transpose(y)));
}

TEST(Vmap, NestedAndUnbatchedOutputs) {
  ScalarFn inner = [](const Array& v) { return sum(v * v); };
  const Array x = random_array({2, 3, 4}, float64, 5);
  const Array r = vmap(vmap(inner))(x);  // per (i, j) sum over the last axis
  expect_close(r, values(sum(x * x, -1)));
  // An output that ignores the batch is broadcast over it.
  auto g = [](const std::vector<Array>& a) { return std::vector<Array>{ones({2}) * 3.0f, a[0]}; };
  const auto out = vmap(g)({ones({4, 1})});
  EXPECT_EQ(out[0].shape(), (Shape{4, 2}));
}

TEST(Vmap, PerExampleGradientsEqualALoop) {
  const Array w1 = random_array({3, 8}, float64, 6), w2 = random_array({8, 1}, float64, 7);
  const Array xs = random_array({6, 1, 3}, float64, 8), ys = random_array({6, 1, 1}, float64, 9);
  auto g =
      grad([&](const std::vector<Array>& a) { return std::vector<Array>{mlp_loss(a[0], a[1], a[2], a[3])}; },
           {0, 1});
  const auto per_example = vmap(g, {-1, -1, 0, 0})({w1, w2, xs, ys});
  ASSERT_EQ(per_example[0].shape(), (Shape{6, 3, 8}));
  for (int64_t i = 0; i < 6; ++i) {
    const Array idx{static_cast<int32_t>(i)};
    const auto one = g({w1, w2, take(xs, idx, 0), take(ys, idx, 0)});
    expect_close(take(per_example[0], idx, 0), values(one[0]), 1e-9, 1e-12);
    expect_close(take(per_example[1], idx, 0), values(one[1]), 1e-9, 1e-12);
  }
}

TEST(Vmap, GradOfVmapAndVmapOfJvp) {
  const Array xs = random_array({4, 3}, float64, 10);
  ScalarFn per = [](const Array& v) { return sum(sin(v) * v); };
  // grad of (sum over the batch of vmap(per)) is the elementwise derivative.
  const Array g = grad(ScalarFn([&](const Array& x) { return sum(vmap(per)(x)); }))(xs);
  expect_close(g, values(cos(xs) * xs + sin(xs)), 1e-12, 1e-12);
  // vmap of jvp: directional derivatives per example.
  const Array ts = random_array({4, 3}, float64, 11);
  auto dir = [&](const std::vector<Array>& a) {
    return jvp([&](const std::vector<Array>& b) { return std::vector<Array>{per(b[0])}; }, {a[0]}, {a[1]})
        .second;
  };
  const Array d = vmap(dir)({xs, ts})[0];
  expect_close(d, values(sum((cos(xs) * xs + sin(xs)) * ts, -1)), 1e-12, 1e-12);
}

TEST(Vmap, RejectsBadAxesAndBatchSizes) {
  auto f = [](const std::vector<Array>& a) { return a; };
  EXPECT_THROW(vmap(f)({ones({2, 3}), ones({3, 3})}), ValueError);
  EXPECT_THROW(vmap(f, {2})({ones({2, 3})}), ValueError);
  EXPECT_THROW(vmap(f, {-1})({ones({2, 3})}), ValueError);
  EXPECT_THROW(vmap(f, {0, 0})({ones({2, 3})}), ValueError);
}

TEST(Vmap, AxesAreValidatedWithClearErrors) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] * 2.0}; };
  // -1 is "not batched", so other negative in_axes are refused when vmap is called, not later.
  EXPECT_THROW(vmap(f, {-2}), ValueError);
  try {
    vmap(f, {-2});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[vmap] in_axes"), std::string::npos) << e.what();
  }
  const Array x = random_array({4, 3}, float32, 3);
  try {
    vmap(f, {2})({x});
    ADD_FAILURE() << "in_axes past the rank";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("in_axes entry out of range"), std::string::npos) << e.what();
  }
  // out_axes count from the end when negative, as JAX's.
  const Array last = vmap(f, {0}, {-1})({x})[0];
  EXPECT_EQ(last.shape(), (Shape{3, 4}));
  expect_close(last, values(transpose(x * 2.0)), 0, 0);
  EXPECT_THROW(vmap(f, {0}, {2})({x}), ValueError);
  EXPECT_THROW(vmap(f, {0}, {-3})({x}), ValueError);
}

TEST(Vmap, FullOfABatchedValue) {
  const Array v({1.0f, 2.0f, 3.0f});
  const Array r = vmap([](const Array& a) { return full({2}, a); })(v);
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  test::check_vmap(
      [](const std::vector<Array>& a) {
        return full({2, 2}, sum(a[0]));
      },
      {random_array({3}, float32, 5)});
}

// One call of each primitive family's ops (elementwise ops have their own tables in unary_test,
// binary_test and ternary_test, linalg's in linalg_decomp_test).
struct FamilyCase {
  const char* name;
  test::Fn fn;
  std::vector<Array> inputs;
};
std::vector<FamilyCase> family_cases() {
  const Array m = random_array({3, 4}, float32, 1), v = random_array({4}, float32, 2);
  const Array idx({2, 0, 1}, {3}), idx2({1, 0, 3, 2, 1, 0}, {3, 2});
  const Array img = random_array({1, 2, 5, 5}, float32, 3), ker = random_array({3, 2, 3, 3}, float32, 4);
  return {
      {"full",
       [](const auto& a) {
         return full({2, 3}, sum(a[0]));
       },
       {v}},
      {"astype", [](const auto& a) { return astype(a[0], float64); }, {m}},
      {"contiguous", [](const auto& a) { return contiguous(transpose(a[0])); }, {m}},
      {"stop_gradient", [](const auto& a) { return stop_gradient(a[0]); }, {m}},
      {"reshape",
       [](const auto& a) {
         return reshape(a[0], {2, 6});
       },
       {m}},
      {"transpose", [](const auto& a) { return transpose(a[0]); }, {m}},
      {"broadcast_to",
       [](const auto& a) {
         return broadcast_to(a[0], {2, 4});
       },
       {v}},
      {"slice",
       [](const auto& a) {
         return slice(a[0], {{1, 3}, {0, 4, 2}});
       },
       {m}},
      {"slice_update",
       [](const auto& a) {
         return slice_update(a[0], a[1], {{0, 1}});
       },
       {m, reshape(v, {1, 4})}},
      {"concatenate",
       [](const auto& a) {
         return concatenate({a[0], a[1]}, 0);
       },
       {m, m * 2.0f}},
      {"pad",
       [](const auto& a) {
         return pad(a[0], {{1, 0}, {0, 2}}, 0.5);
       },
       {m}},
      {"take", [](const auto& a) { return take(a[0], a[1], 1); }, {m, idx}},
      {"take_along_axis", [](const auto& a) { return take_along_axis(a[0], a[1], 1); }, {m, idx2}},
      {"put_along_axis",
       [](const auto& a) { return put_along_axis(a[0], a[1], a[2], 1); },
       {m, idx2, random_array({3, 2}, float32, 5)}},
      {"scatter_add",
       [](const auto& a) { return scatter_add(a[0], a[1], a[2], 0); },
       {m, idx, random_array({3, 4}, float32, 6)}},
      {"gather", [](const auto& a) { return gather(a[0], {a[1]}); }, {m, idx}},
      {"sum", [](const auto& a) { return sum(a[0], 1); }, {m}},
      {"prod", [](const auto& a) { return prod(a[0], 0); }, {m}},
      {"max", [](const auto& a) { return max(a[0], 1); }, {m}},
      {"argmax", [](const auto& a) { return argmax(a[0], 0); }, {m}},
      {"logsumexp", [](const auto& a) { return logsumexp(a[0], 1); }, {m}},
      {"cumsum", [](const auto& a) { return cumsum(a[0], 1); }, {m}},
      {"cumprod", [](const auto& a) { return cumprod(a[0], 0, true); }, {m}},
      {"sort", [](const auto& a) { return sort(a[0], 0); }, {m}},
      {"argsort", [](const auto& a) { return argsort(a[0], 1); }, {m}},
      {"topk", [](const auto& a) { return topk(a[0], 2, 1); }, {m}},
      {"matmul", [](const auto& a) { return matmul(a[0], a[1]); }, {m, transpose(m)}},
      {"addmm",
       [](const auto& a) { return addmm(a[0], a[1], a[2], 0.5, 2.0); },
       {v, m, random_array({4, 4}, float32, 7)}},
      {"linear",
       [](const auto& a) { return linear(a[0], a[1], a[2]); },
       {m, random_array({2, 4}, float32, 8), random_array({2}, float32, 9)}},
      {"conv2d",
       [](const auto& a) {
         return conv2d(a[0], a[1], {1, 1}, {1, 1});
       },
       {img, ker}},
      {"max_pool2d",
       [](const auto& a) {
         return max_pool2d(a[0], {2, 2}, {2, 2});
       },
       {img}},
      {"softmax", [](const auto& a) { return softmax(a[0], -1); }, {m}},
      {"layer_norm", [](const auto& a) { return layer_norm(a[0], a[1], a[2]); }, {m, v, v * 0.5f}},
      {"rms_norm", [](const auto& a) { return rms_norm(a[0], a[1]); }, {m, v}},
      {"attention",
       [](const auto& a) { return scaled_dot_product_attention(a[0], a[1], a[2], 0.5, true); },
       {random_array({3, 4}, float32, 10), random_array({3, 4}, float32, 11),
        random_array({3, 4}, float32, 12)}},
  };
}

// Every primitive with an input has a batching rule: each input batched in turn on its first and
// last axis, against a loop over the batch.
TEST(Vmap, EveryPrimitiveFamilyHasABatchingRule) {
  for (const FamilyCase& c : family_cases()) {
    SCOPED_TRACE(c.name);
    test::check_vmap(c.fn, c.inputs);
  }
}

// And a jvp rule: against finite differences and the vjp, in float64 (stop_gradient's is zero by
// design, which its own tests check).
TEST(Jvp, EveryPrimitiveFamilyHasAJvpRule) {
  for (const FamilyCase& c : family_cases()) {
    if (std::string_view(c.name) == "stop_gradient") continue;
    SCOPED_TRACE(c.name);
    test::check_jvp(c.fn, c.inputs, 1e-6, 1e-5);
  }
}

TEST(Transforms, IntegerOutputsHaveZeroTangentsInEveryTransform) {
  // astype to an integer is flat (JAX's float0): jvp, vjp and grad agree on zero.
  const Array x({1.5, 2.5, -3.5});
  auto to_int = [](const std::vector<Array>& a) { return std::vector<Array>{astype(a[0], int32)}; };
  auto [outs, tangents] = jvp(to_int, {x}, {Array({2.0, 2.0, 2.0})});
  EXPECT_EQ(tangents[0].dtype(), int32);
  EXPECT_EQ(tangents[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
  auto [vouts, cots] = vjp(to_int, {x}, {Array({1, 1, 1})});
  EXPECT_EQ(values(cots[0]), (std::vector<double>{0, 0, 0}));
  // Through an integer round trip, the float result is flat too.
  auto round_trip = [](const std::vector<Array>& a) {
    return std::vector<Array>{astype(astype(a[0], int32), float64)};
  };
  EXPECT_EQ(values(jvp(round_trip, {x}, {Array({1.0, 1.0, 1.0})}).second[0]), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(vjp(round_trip, {x}, {Array({1.0, 1.0, 1.0})}).second[0]), (std::vector<double>{0, 0, 0}));
  // An integer primal's tangent is zero whatever is passed for it.
  auto scale = [](const std::vector<Array>& a) { return std::vector<Array>{astype(a[0], float32) * 3.0f}; };
  EXPECT_EQ(jvp(scale, {Array({1, 2})}, {Array({5, 5})}).second[0].to_vector<float>(),
            (std::vector<float>{0, 0}));
  EXPECT_EQ(vjp(scale, {Array({1, 2})}, {Array({1.0f, 1.0f})}).second[0].to_vector<int32_t>(),
            (std::vector<int32_t>{0, 0}));
}

TEST(Transforms, GradOfGradOfGradThroughVmap) {
  ScalarFn f = [](const Array& x) { return sum(x * x * x * x); };
  const Array xs = random_array({3}, float64, 12);
  const Array third = vmap(grad(grad(grad(ScalarFn([&](const Array& x) { return f(x); })))))(xs);
  expect_close(third, values(24.0 * xs), 1e-12, 1e-12);
}

}  // namespace
}  // namespace kiln
