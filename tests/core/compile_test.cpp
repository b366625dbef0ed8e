// compile: same results as the uncompiled function, retracing exactly when the signature changes,
// shapeless graphs, simplification, fusion, and compiled functions under the other transforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

Array gelu_like(const Array& x) {
  const Array inner = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh(inner));
}

std::vector<Array> gelu_fn(const std::vector<Array>& a) { return {gelu_like(a[0])}; }

TEST(Compile, MatchesTheUncompiledFunctionAndFuses) {
  auto f = compile(gelu_fn);
  for (Dtype t : {float32, float64, float16}) {
    const Array x = random_array({7, 33}, t, 1, -3, 3);
    const Array y = f({x})[0];
    ASSERT_TRUE(y.has_primitive());
    EXPECT_STREQ(y.primitive()->name(), "FusedElementwise");  // the whole chain is one node
    expect_close(y, values(gelu_like(x)));
  }
}

TEST(Compile, BroadcastingScalarAndStridedInputsInAFusedChain) {
  auto f =
      compile([](const std::vector<Array>& a) { return std::vector<Array>{exp(a[0] * a[1] + 1.0f) - a[1]}; });
  const Array x = transpose(random_array({5, 4}, float32, 2)), b = random_array({5}, float32, 3);
  expect_close(f({x, b})[0], values(exp(x * b + 1.0f) - b));
  const Array big = random_array({100000}, float32, 4);  // many blocks, several threads
  expect_close(f({big, Array(0.5f)})[0], values(exp(big * 0.5f + 1.0f) - 0.5f));
}

TEST(Compile, ValuesUsedSeveralTimesInsideAChainStayInIt) {
  // The second block reads h four times; every read is inside the chain, so one node remains,
  // reading x and the scalar constants.
  auto f = compile([](const std::vector<Array>& a) {
    const Array h = gelu_like(a[0]) * 1.1f - 0.2f;
    return std::vector<Array>{gelu_like(h)};
  });
  const Array x = random_array({3000}, float32, 6, -3, 3);
  const Array y = f({x})[0];
  ASSERT_TRUE(y.has_primitive());
  EXPECT_STREQ(y.primitive()->name(), "FusedElementwise");
  for (const Array& in : y.inputs()) EXPECT_TRUE(in.id() == x.id() || in.size() == 1);
  expect_close(y, values(gelu_like(gelu_like(x) * 1.1f - 0.2f)));

  // A value that is also an output is computed once, by its own node, and read by the rest.
  auto g = compile([](const std::vector<Array>& a) {
    const Array h = exp(a[0]) + 1.0f;
    return std::vector<Array>{h, sqrt(h) * 2.0f - h};
  });
  const auto out = g({x});
  ASSERT_TRUE(out[1].has_primitive());
  const auto reads = out[1].inputs();
  EXPECT_TRUE(std::any_of(reads.begin(), reads.end(), [&](const Array& r) { return r.id() == out[0].id(); }));
  expect_close(out[0], values(exp(x) + 1.0f));
  expect_close(out[1], values(sqrt(exp(x) + 1.0f) * 2.0f - (exp(x) + 1.0f)));
}

TEST(Compile, ScalarOperandsInFusedChainsOfEveryKind) {
  // Integer and float64 members take the generic block loops, with scalars broadcast in place.
  auto ints =
      compile([](const std::vector<Array>& a) { return std::vector<Array>{(3 * a[0] + 2) - a[0] * a[0]}; });
  const Array i = astype(random_array({2500}, float32, 7, -50, 50), int32);
  expect_close(ints({i})[0], values((3 * i + 2) - i * i));
  auto sel = compile([](const std::vector<Array>& a) {
    return std::vector<Array>{where(a[0] > 0.0, a[0] * 2.0, Array(0.5)) + astype(a[0] < 1.0, float64)};
  });
  const Array d = random_array({2500}, float64, 8, -2, 2);
  expect_close(sel({d})[0], values(where(d > 0.0, d * 2.0, Array(0.5)) + astype(d < 1.0, float64)));
}

TEST(Compile, RetracesExactlyWhenTheSignatureChanges) {
  auto f = compile(gelu_fn);
  f({ones({2, 3})});
  f({random_array({2, 3}, float32, 5)});
  EXPECT_EQ(f.trace_count(), 1);
  f({ones({4, 3})});  // new shape
  EXPECT_EQ(f.trace_count(), 2);
  f({ones({2, 3}, float64)});  // new dtype
  EXPECT_EQ(f.trace_count(), 3);
  f({ones({2, 3})});
  f({ones({4, 3})});
  EXPECT_EQ(f.trace_count(), 3);
  EXPECT_EQ(f.compile_count(), 3);
}

TEST(Compile, ShapelessServesEveryShapeWithOneGraph) {
  auto f = compile(gelu_fn, /*shapeless=*/true);
  for (int64_t n : {3, 17, 256}) {
    const Array x = random_array({n, 2}, float32, 6);
    expect_close(f({x})[0], values(gelu_like(x)));
    f({x});
  }
  EXPECT_EQ(f.compile_count(), 1);
  EXPECT_EQ(f.trace_count(), 3);  // one trace per new shape, each checked against the graph
}

TEST(Compile, ShapelessRejectsShapeDependentFunctions) {
  auto scaled = compile(
      [](const std::vector<Array>& a) {
        return std::vector<Array>{a[0] * static_cast<float>(a[0].shape(0))};  // a size baked in
      },
      true);
  scaled({ones({2})});
  EXPECT_THROW(scaled({ones({5})}), ShapeError);
  auto reshaped = compile(
      [](const std::vector<Array>& a) {
        return std::vector<Array>{reshape(a[0], {a[0].shape(0) * a[0].shape(1)})};
      },
      true);
  reshaped({ones({2, 3})});
  EXPECT_THROW(reshaped({ones({4, 3})}), ShapeError);
}

TEST(Compile, ReadingValuesWhileTracingIsAnError) {
  auto f = compile([](const std::vector<Array>& a) {
    if (a[0].item<float>() > 0) return std::vector<Array>{a[0]};
    return std::vector<Array>{-a[0]};
  });
  EXPECT_THROW(f({Array(1.0f)}), ValueError);
}

// Counts its evaluations, to see common subexpressions computed once.
class CountingSquare final : public PrimitiveWithParams<CountingSquare> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "CountingSquare"; }
  auto params() const { return std::tuple<>(); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    ++count;
    const Array x = contiguous(in[0]);
    x.eval();
    out[0].allocate();
    for (int64_t i = 0; i < x.size(); ++i)
      out[0].strided_data<float>()[i] = x.data<float>()[i] * x.data<float>()[i];
  }
  static inline int count = 0;
};

// It has no eval_gpu, so it runs on the CPU whatever the default device is (the gpu. pass too).
Array counting_square(const Array& x) {
  return Array::make(x.shape(), x.dtype(), std::make_shared<CountingSquare>(to_stream(Device::cpu)), {x});
}

TEST(Compile, CommonSubexpressionsAreComputedOnce) {
  auto f = compile([](const std::vector<Array>& a) {
    return std::vector<Array>{counting_square(a[0]) + counting_square(a[0]) * 2.0f};
  });
  const Array x({1.0f, 2.0f});
  CountingSquare::count = 0;
  expect_close(f({x})[0], {3.0, 12.0});
  EXPECT_EQ(CountingSquare::count, 1);
}

TEST(Compile, CapturedConstantsAndConstantOutputs) {
  const Array w = random_array({3}, float32, 7);
  auto f = compile([&](const std::vector<Array>& a) { return std::vector<Array>{a[0] * w, w + 1.0f, a[0]}; });
  const Array x = random_array({3}, float32, 8);
  const auto out = f({x});
  expect_close(out[0], values(x * w));
  expect_close(out[1], values(w + 1.0f));
  EXPECT_EQ(out[2].id(), x.id());
}

TEST(Compile, WorksUnderGradVjpJvpAndVmap) {
  auto f =
      compile([](const std::vector<Array>& a) { return std::vector<Array>{sum(gelu_like(a[0]) * a[1])}; });
  auto plain = [](const std::vector<Array>& a) { return std::vector<Array>{sum(gelu_like(a[0]) * a[1])}; };
  const Array x = random_array({4, 5}, float64, 9), y = random_array({4, 5}, float64, 10);
  const auto gc = grad(f, {0, 1})({x, y}), gp = grad(plain, {0, 1})({x, y});
  expect_close(gc[0], values(gp[0]));
  expect_close(gc[1], values(gp[1]));
  const Array tx = random_array({4, 5}, float64, 11), ty = random_array({4, 5}, float64, 12);
  expect_close(jvp(f, {x, y}, {tx, ty}).second[0], values(jvp(plain, {x, y}, {tx, ty}).second[0]));
  expect_close(vmap(f)({x, y})[0], values(vmap(plain)({x, y})[0]));
  // Compiled gradient, and second derivatives through the fused primitive.
  auto cg = compile(grad(plain, {0}));
  expect_close(cg({x, y})[0], values(gp[0]));
  test::check_second_order([&](const std::vector<Array>& a) { return f({a[0], a[1]})[0]; }, {x, y});
}

TEST(Compile, ManyThreadsShareOneCompiledFunction) {
  auto f = compile(gelu_fn);
  const Array x = random_array({64, 64}, float32, 13);
  const auto expected = values(f({x})[0]);
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      bool same = true;
      for (int i = 0; i < 20; ++i) same = same && values(f({x})[0]) == expected;
      ok[t] = same;
    });
  for (auto& t : threads) t.join();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
  EXPECT_EQ(f.trace_count(), 1);
}

}  // namespace
}  // namespace kiln
