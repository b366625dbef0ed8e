// compile: same results as the uncompiled function, retracing exactly when the signature changes,
// shapeless graphs, simplification, fusion, and compiled functions under the other transforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "kiln/nn/layers/dropout.h"
#include "support/device.h"
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
  EXPECT_EQ(f.trace_count(), 1);  // new shapes are inferred through the graph, not traced
}

// Shapeless: traced once per dtypes and ranks; a new shape is inferred through the graph.
const std::vector<Shape> kShapes = {{8, 4}, {16, 4}, {3, 7}};

TEST(CompileShapeless, AConstantMadeInsideTheFunctionServesEveryShape) {
  // Array({2.0f}) is a new array at every run of the function; the graph is traced once and keeps it.
  auto plus =
      compile([](const std::vector<Array>& a) { return std::vector<Array>{a[0] + Array({2.0f})}; }, true);
  // The first row (an integer index, a take: no size in it) plus that constant.
  auto row = compile(
      [](const std::vector<Array>& a) { return std::vector<Array>{take(a[0], Array(0), 0) + Array({2.0f})}; },
      true);
  uint64_t seed = 20;
  for (const Shape& shape : kShapes) {
    const Array x = random_array(shape, float32, seed++);
    const std::vector<double> xv = values(x);
    std::vector<double> want_plus, want_row;
    for (double v : xv) want_plus.push_back(static_cast<double>(static_cast<float>(v) + 2.0f));
    for (int64_t j = 0; j < shape[1]; ++j) want_row.push_back(want_plus[static_cast<size_t>(j)]);
    expect_close(plus({x})[0], want_plus);
    const Array r = row({x})[0];
    EXPECT_EQ(r.shape(), Shape{shape[1]});
    expect_close(r, want_row);
  }
  EXPECT_EQ(plus.trace_count(), 1);
  EXPECT_EQ(row.trace_count(), 1);
}

TEST(CompileShapeless, ReductionsMatmulsAndJoinsFollowNewShapesWithOneTrace) {
  auto fn = [](const std::vector<Array>& a) {
    const Array &x = a[0], &y = a[1];                          // (n, m), (n, k)
    const Array s = softmax(x, -1) * 2.0f - mean(x, 0, true);  // (n, m)
    return std::vector<Array>{sum(exp(x), 1), matmul(swapaxes(s, -1, -2), y), concatenate({s, x}, 0),
                              cumsum(x, 1),   astype(argmax(x, 1), float32),  where(x > 0.0f, x, y)};
  };
  auto f = compile(fn, true);
  uint64_t seed = 30;
  for (const Shape& shape : kShapes) {
    const Array x = random_array(shape, float32, seed++), y = random_array(shape, float32, seed++);
    const auto got = f({x, y}), want = fn({x, y});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
      expect_close(got[i], values(want[i]), 1e-5, 1e-6);
    }
  }
  EXPECT_EQ(f.trace_count(), 1);
  EXPECT_EQ(f.compile_count(), 1);
  f({ones({2, 3, 4}), ones({2, 3, 4})});  // a new rank is a new signature: traced again
  EXPECT_EQ(f.trace_count(), 2);
}

TEST(CompileShapeless, ShapesAlternatingCallByCallGiveTheRightValues) {
  // On the GPU the second call (a new shape) is captured: it must be captured at its own shapes.
  auto f = compile(gelu_fn, true);
  uint64_t seed = 35;
  for (const Shape& shape :
       {Shape{8, 4}, Shape{16, 4}, Shape{16, 4}, Shape{8, 4}, Shape{16, 4}, Shape{3, 7}}) {
    const Array x = random_array(shape, float32, seed++);
    const Array y = f({x})[0];
    EXPECT_EQ(y.shape(), shape);
    expect_close(y, values(gelu_like(x)));
  }
  EXPECT_EQ(f.trace_count(), 1);
}

TEST(CompileShapeless, WeightsReshapedOnTheirOwnShapesServeNewBatchSizes) {
  // b's reshape holds b's own size, which does not change: the batch of x may.
  auto fn = [](const std::vector<Array>& a) {
    return std::vector<Array>{sum(a[0] * reshape(a[1], {1, 4}) + sum(slice(a[1], {1}, {3})), 1)};
  };
  auto f = compile(fn, true);
  const Array b = random_array({4}, float32, 38);
  for (int64_t n : {8, 16, 1, 5}) {
    const Array x = random_array({n, 4}, float32, 39 + static_cast<uint64_t>(n));
    expect_close(f({x, b})[0], values(fn({x, b})[0]));
  }
  EXPECT_EQ(f.trace_count(), 1);
}

// `fn` traced at (8, 4) must refuse (16, 4) with a ShapeError naming `step`, and still serve (8, 4).
void expect_refused(const ArrayFn& fn, const std::string& step) {
  auto f = compile(fn, true);
  const Array x = random_array({8, 4}, float32, 40);
  const auto want = values(fn({x})[0]);
  expect_close(f({x})[0], want);
  try {
    f({random_array({16, 4}, float32, 41)});
    ADD_FAILURE() << step << " served a new shape";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[compile] a shapeless compiled function cannot serve these input shapes"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("traced with inputs ((8,4)) is called with ((16,4))"), std::string::npos) << m;
    EXPECT_NE(m.find(step), std::string::npos) << m;
  }
  expect_close(f({x})[0], want);
  EXPECT_EQ(f.trace_count(), 1);
}

TEST(CompileShapeless, StepsHoldingTracedSizesRefuseNewShapesClearly) {
  // A reshape to a size computed from the shape, and one to -1 (the step holds the size it inferred).
  expect_refused(
      [](const std::vector<Array>& a) { return std::vector<Array>{reshape(a[0], {a[0].shape(0) * 4})}; },
      "Reshape((32,))");
  expect_refused([](const std::vector<Array>& a) { return std::vector<Array>{reshape(a[0], {-1}) * 2.0f}; },
                 "Reshape((32,))");
  // A broadcast to a fixed shape, and fixed slice bounds: both would still run on (16, 4), giving
  // the traced sizes (rows 0:2 of a, a broadcast of a's first 8 rows) instead of what fn gives.
  expect_refused(
      [](const std::vector<Array>& a) {
        return std::vector<Array>{broadcast_to(a[0], {2, 8, 4})};
      },
      "Broadcast");
  expect_refused(
      [](const std::vector<Array>& a) {
        return std::vector<Array>{slice(a[0], {0, 0}, {2, 4}) + 1.0f};
      },
      "Slice");
  // A size read from one value and applied to another: sum(x) broadcast back to x's shape (as a
  // gradient rule does), and an output that does not depend on x at all (the gradient of sum(x)).
  expect_refused(
      [](const std::vector<Array>& a) { return std::vector<Array>{broadcast_to(sum(a[0]), a[0].shape())}; },
      "holds the size 8 of the traced shapes, which changed");
  expect_refused(grad([](const std::vector<Array>& a) { return std::vector<Array>{sum(a[0])}; }),
                 "its output 0 does not depend on the inputs and has the traced shape (8,4)");
  // A shape-polymorphic step whose inputs no longer broadcast: named with its own error.
  const Array w = random_array({8, 4}, float32, 42);
  expect_refused([&](const std::vector<Array>& a) { return std::vector<Array>{matmul(transpose(a[0]), w)}; },
                 "Matmul");
}

// Keys drawn from the default sequence (random::next_key(): dropout without a key) are implicit
// inputs of the compiled function: each call draws fresh ones, those the uncompiled function draws.
std::vector<Array> dropout_fn(const std::vector<Array>& a) { return {nn::dropout(a[0], 0.5) + 1.0f}; }

// Elements that differ (a dropped element is exactly 1, a kept one 2 x + 1 with x in [1, 2]).
int differing(const std::vector<double>& a, const std::vector<double>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::abs(a[i] - b[i]) > 0.5;
  return n;
}

TEST(CompileKeys, EachCallDrawsFreshKeysAsTheUncompiledFunctionDoes) {
  const Array x = random_array({6, 5}, float32, 50, 1, 2);
  random::seed(11);
  std::vector<std::vector<double>> eager, compiled;
  for (int i = 0; i < 4; ++i) eager.push_back(values(dropout_fn({x})[0]));
  const random::DefaultKeyState after = random::default_key_state();
  random::seed(11);
  auto f = compile(dropout_fn);
  for (int i = 0; i < 3; ++i) compiled.push_back(values(f({x})[0]));
  std::vector<float> into(30);
  f.call_into({x}, {into});
  compiled.emplace_back(into.begin(), into.end());
  EXPECT_EQ(random::default_key_state(), after);  // one key a call, as uncompiled
  for (int i = 0; i < 4; ++i) {
    expect_close(Array(std::vector<float>(compiled[i].begin(), compiled[i].end()), {6, 5}), eager[i]);
    for (int j = 0; j < i; ++j)
      EXPECT_GT(differing(compiled[i], compiled[j]), 0) << "calls " << j << ", " << i;
  }
  EXPECT_EQ(f.trace_count(), 1);
  // On the GPU calls from the second on replay a captured program, which takes the key as an input.
  if (test::gpu_default()) {
    EXPECT_EQ(f.capture_count(), 1);
  }
}

TEST(CompileKeys, ExplicitKeysAndFunctionsWithoutDrawsLeaveTheSequenceAlone) {
  random::seed(12);
  const random::DefaultKeyState start = random::default_key_state();
  auto plain = compile(gelu_fn);
  auto keyed =
      compile([](const std::vector<Array>& a) { return std::vector<Array>{nn::dropout(a[0], 0.5, a[1])}; });
  const Array x = random_array({6, 5}, float32, 51, 1, 2), k = random::key(3);
  plain({x});
  const auto first = values(keyed({x, k})[0]);
  EXPECT_EQ(values(keyed({x, k})[0]), first);  // the same key gives the same mask
  EXPECT_EQ(random::default_key_state(), start);
}

TEST(CompileKeys, NestedCompiledFunctionsAndGradientsDrawTheKeysOfTheUncompiledOnes) {
  // The inner function's draw becomes, while the outer one traces, an input of the outer graph.
  auto inner = compile(dropout_fn);
  auto loss = [](const std::vector<Array>& a, auto&& drop) {
    const Array first = drop({a[0] * 3.0f})[0];  // drawn first, then the second mask
    const Array second = dropout_fn({a[0]})[0];
    return std::vector<Array>{sum(first * a[0] + second)};
  };
  auto outer = compile([&](const std::vector<Array>& a) { return loss(a, inner); });
  auto plain = [&](const std::vector<Array>& a) { return loss(a, dropout_fn); };
  const Array x = random_array({6, 5}, float64, 52, 1, 2);
  random::seed(13);
  std::vector<std::vector<double>> eager, compiled;
  for (int i = 0; i < 2; ++i) {
    eager.push_back(values(plain({x})[0]));
    eager.push_back(values(grad(plain, {0})({x})[0]));
  }
  random::seed(13);
  for (int i = 0; i < 2; ++i) {
    compiled.push_back(values(outer({x})[0]));
    compiled.push_back(values(grad(outer, {0})({x})[0]));
  }
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(compiled[i].size(), eager[i].size());
    for (size_t j = 0; j < eager[i].size(); ++j)
      EXPECT_NEAR(compiled[i][j], eager[i][j], 1e-9) << i << ", " << j;
  }
  EXPECT_NE(compiled[0], compiled[2]);
  EXPECT_EQ(outer.trace_count(), 1);
}

TEST(CompileKeys, AShapelessDrawHoldsItsSampleShape) {
  // The mask has the traced shape: a new batch size reaches its consumer with other shapes.
  auto f = compile(dropout_fn, true);
  f({random_array({4, 5}, float32, 53, 1, 2)});
  EXPECT_THROW(f({random_array({6, 5}, float32, 54, 1, 2)}), ShapeError);
  // Traced with a size-1 batch, the mask would broadcast silently: one mask for every row.
  auto g = compile(dropout_fn, true);
  g({random_array({1, 5}, float32, 55, 1, 2)});
  EXPECT_THROW(g({random_array({16, 5}, float32, 56, 1, 2)}), ShapeError);
}

TEST(CompileShapeless, EmptyAxesAreRefusedAsTheOpsRefuseThem) {
  for (bool arg : {false, true}) {
    auto f = compile(
        [arg](const std::vector<Array>& a) {
          return std::vector<Array>{arg ? argmax(a[0], 0) : max(a[0], 0)};
        },
        true);
    f({random_array({4, 3}, float32, 57)});
    EXPECT_THROW(f({zeros({0, 3})}), ValueError) << (arg ? "argmax" : "max");
  }
}

TEST(Compile, TheDefaultDeviceIsPartOfTheSignature) {
  // Traced for the CPU, a function called inside a scope that moves ops elsewhere traces again.
  auto f = compile([](const std::vector<Array>& a) { return std::vector<Array>{a[0] * 2.0f}; });
  const Array x = random_array({3}, float32, 58);
  {
    StreamScope cpu(Device::cpu);
    f({x});
  }
  const Stream other = new_stream(Device::cpu);
  {
    StreamScope scope(other);
    const Array y = f({x})[0];
    EXPECT_EQ(f.trace_count(), 2);
    test::expect_close(y, test::values(x * 2.0f), 0, 0);
  }
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
