// checkpoint, custom_vjp and custom_function: results equal the plain function's, checkpointing
// lowers the peak memory of a deep chain's gradient, user rules are used by every transform that
// reaches them (and composed: grad of grad, jvp of grad, vmap of grad, grad of vmap), a missing
// rule falls back to transforming the function, and a rule's wrong output is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "support/device.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

std::vector<Array> one(const Array& a) { return {a}; }
Array at(const Array& a, int64_t i) { return take(a, Array(static_cast<int32_t>(i)), 0); }

// ---- checkpoint ----

TEST(Checkpoint, OutputsEqualTheFunctionAndTheGraphHoldsOneNode) {
  auto f = [](const std::vector<Array>& a) {
    const Array h = tanh(matmul(a[0], a[1]));
    return std::vector<Array>{sin(h) * 2.0, sum(h, 0)};
  };
  const Array x = random_array({4, 3}, float64, 1), w = random_array({3, 5}, float64, 2);
  const auto plain = f({x, w});
  const auto ck = checkpoint(f)({x, w});
  ASSERT_EQ(ck.size(), 2u);
  EXPECT_EQ(ck[0].shape(), (Shape{4, 5}));
  EXPECT_EQ(ck[1].shape(), (Shape{5}));
  // Before eval, both outputs come from one Checkpoint node whose only inputs are x and w.
  EXPECT_STREQ(ck[0].primitive()->name(), "Checkpoint");
  const auto inputs = ck[1].inputs();
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].id(), x.id());
  EXPECT_EQ(inputs[1].id(), w.id());
  expect_close(ck[0], values(plain[0]), 0, 0);
  expect_close(ck[1], values(plain[1]), 0, 0);
}

// A node with a float and an integer output whose integer output comes first in the graph walk:
// the float output's gradient must not be lost with it.
TEST(Checkpoint, MixedDtypeOutputsKeepTheFloatGradient) {
  const CustomFunction f = custom_function([](const std::vector<Array>& xs) {
    return std::vector<Array>{sum(xs[0] * xs[0]), argmax(xs[0], 0)};
  });
  const Array x({0.5, -2.0, 3.0, 1.0});
  const Array g = grad([&](const Array& a) {
    const std::vector<Array> o = f({a});
    return sum(take(a, o[1])) + o[0];  // the argmax is used before the sum in the tape
  })(x);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{1.0, -4.0, 7.0, 2.0}));
  const Array c = grad([&](const Array& a) {
    const std::vector<Array> o = checkpoint([](const std::vector<Array>& xs) {
      return std::vector<Array>{argmax(xs[0], 0), sum(xs[0] * 3.0)};
    })({a});
    return o[1] + sum(take(a, o[0]));
  })(x);
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{3.0, 3.0, 4.0, 3.0}));
}

TEST(Checkpoint, BackwardRunsTheFunctionAgain) {
  int calls = 0;
  ArrayFn f = [&](const std::vector<Array>& a) {
    ++calls;
    return one(exp(sin(a[0])) * a[1]);
  };
  const Array x = random_array({6}, float64, 3), y = random_array({6}, float64, 4);
  auto loss = [&](const ArrayFn& g) {
    return [g](const std::vector<Array>& a) { return one(sum(g(a)[0])); };
  };
  const ArrayFn ck = checkpoint(f);
  calls = 0;
  const auto [value, g] = value_and_grad(loss(ck), {0, 1})({x, y});
  eval(value[0], g[0], g[1]);
  // Once to find the output shapes, once to evaluate the forward node, once more (traced by vjp)
  // for the backward pass.
  EXPECT_EQ(calls, 3);
  const auto [ref_value, ref] = value_and_grad(loss(f), {0, 1})({x, y});
  expect_close(value[0], values(ref_value[0]), 0, 0);
  expect_close(g[0], values(ref[0]), 0, 0);
  expect_close(g[1], values(ref[1]), 0, 0);
}

TEST(Checkpoint, GradientsUnchangedAndPeakMemoryDropsOnADeepChain) {
  // 50 layers of tanh(h @ W); activations 512x128 (256 KiB), weights 128x128 (64 KiB), float32.
  constexpr int kLayers = 50, kBlock = 5;
  // Op results (times 1), so that the input and weights live on the default device before measuring.
  const Array x = random_array({512, 128}, float32, 10) * 1.0f;
  std::vector<Array> ws;
  for (int i = 0; i < kLayers; ++i)
    ws.push_back(random_array({128, 128}, float32, 100 + i, -0.15, 0.15) * 1.0f);
  eval(ws);
  x.eval();
  // One block: {h, W_0..W_{k-1}} -> {h'}. The weights are inputs, so their gradients flow.
  const ArrayFn block = [](const std::vector<Array>& a) {
    Array h = a[0];
    for (size_t i = 1; i < a.size(); ++i) h = tanh(matmul(h, a[i]));
    return one(h);
  };
  auto chain = [&](const ArrayFn& blk) {
    return [&x, blk](const std::vector<Array>& w) {
      Array h = x;
      for (int b = 0; b < kLayers / kBlock; ++b) {
        std::vector<Array> in{h};
        in.insert(in.end(), w.begin() + b * kBlock, w.begin() + (b + 1) * kBlock);
        h = blk(in)[0];
      }
      return one(sum(h));
    };
  };
  std::vector<int> argnums(kLayers);
  std::iota(argnums.begin(), argnums.end(), 0);

  // Bytes allocated above what was live before, at the peak of one gradient evaluation, where the
  // default device keeps arrays.
  auto measure = [&](const ArrayFn& blk, std::vector<Array>& grads) {
    clear_cache();
    const size_t before = test::default_device_memory().active_bytes;
    reset_peak_memory();
    grads = grad(chain(blk), argnums)(ws);
    eval(grads);
    return test::default_device_memory().peak_bytes - before;
  };
  std::vector<Array> plain, ck;
  const size_t plain_peak = measure(block, plain);
  const size_t ck_peak = measure(checkpoint(block), ck);
  std::printf("peak above live: plain %zu bytes, checkpointed %zu bytes (%.3fx)\n", plain_peak, ck_peak,
              static_cast<double>(ck_peak) / static_cast<double>(plain_peak));
  // Measured: plain 13.4 MB, checkpointed 4.8 MB (0.356x), the same on every run, and the gradients
  // bit-equal. Blocks of 1 layer save nothing (tanh's vjp keeps only its output, which the
  // checkpoint keeps too); blocks of 2, 10, 25 give 0.54x, 0.43x, 0.65x. 0.6x leaves room.
  // On the GPU one evaluation is one command buffer, which holds every buffer it binds until it
  // completes, so recomputing blocks lowers no peak there (buffers are not yet reused within one
  // recording; docs/gpu.md says so). The gradients must still agree.
  if (!test::gpu_default()) {
    EXPECT_LT(static_cast<double>(ck_peak), 0.6 * static_cast<double>(plain_peak));
  }
  for (int i = 0; i < kLayers; ++i) expect_close(ck[i], values(plain[i]), 1e-6, 1e-7);
}

TEST(Checkpoint, ComposesWithJvpVmapAndGradOfGrad) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0]) * a[1], exp(a[0] * 0.5)}; };
  const ArrayFn ck = checkpoint(f);
  const Array x = random_array({5}, float64, 5), y = random_array({5}, float64, 6);
  const Array tx = random_array({5}, float64, 7), ty = random_array({5}, float64, 8);

  const auto [outs, tangents] = jvp(ck, {x, y}, {tx, ty});
  const auto [ref_outs, ref_tangents] = jvp(f, {x, y}, {tx, ty});
  for (int j = 0; j < 2; ++j) {
    expect_close(outs[j], values(ref_outs[j]), 1e-12, 1e-14);
    expect_close(tangents[j], values(ref_tangents[j]), 1e-12, 1e-14);
  }

  const Array xs = random_array({3, 5}, float64, 9);
  const auto batched = vmap(ck, {0, -1})({xs, y});
  EXPECT_STREQ(batched[0].primitive()->name(), "Checkpoint");  // vmap of a checkpoint stays one
  for (int64_t i = 0; i < 3; ++i) {
    const auto r = f({at(xs, i), y});
    expect_close(at(batched[0], i), values(r[0]), 1e-12, 1e-14);
    expect_close(at(batched[1], i), values(r[1]), 1e-12, 1e-14);
  }

  // d2/dx2 of sum(sin(x) * y): -sin(x) * y; per-example gradients through vmap(grad).
  ScalarFn s = [&](const Array& v) { return sum(ck({v, y})[0]); };
  expect_close(grad(ScalarFn([&](const Array& v) { return sum(grad(s)(v)); }))(x), values(-sin(x) * y), 1e-12,
               1e-14);
  const Array per = vmap(grad(s))(xs);
  expect_close(per, values(cos(xs) * y), 1e-12, 1e-14);
}

TEST(Checkpoint, EquivalenceIsTheFunctionsIdentity) {
  auto f = [](const std::vector<Array>& a) { return one(a[0] * 2.0); };
  const ArrayFn c1 = checkpoint(f), c2 = checkpoint(f);
  const Array x({1.0, 2.0});
  const auto p = c1({x})[0].primitive(), q = c1({x})[0].primitive(), r = c2({x})[0].primitive();
  EXPECT_TRUE(p->is_equivalent(*q));  // two calls of one checkpointed function
  EXPECT_FALSE(p->is_equivalent(*r));
  EXPECT_THROW(checkpoint(ArrayFn()), ValueError);
  EXPECT_THROW(checkpoint([](const std::vector<Array>&) { return std::vector<Array>{}; })({x}), ValueError);
}

// ---- custom_vjp ----

Array naive_softplus(const Array& x) { return log1p(exp(x)); }

// log1p(exp(x)) with the gradient sigmoid(x), which stays finite where exp(x) overflows.
ArrayFn stable_softplus(int* calls = nullptr) {
  return custom_vjp(
      [](const std::vector<Array>& a) { return one(naive_softplus(a[0])); },
      [calls](const std::vector<Array>& p, const std::vector<Array>&, const std::vector<Array>& c) {
        if (calls) ++*calls;
        return one(c[0] * sigmoid(p[0]));
      });
}

TEST(CustomVjp, StableGradientWhereTheNaiveOneIsNaN) {
  const Array x({-3.0f, 0.0f, 2.0f, 1000.0f});
  const Array naive = grad(ScalarFn([](const Array& v) { return sum(naive_softplus(v)); }))(x);
  EXPECT_TRUE(std::isnan(values(naive)[3]));  // exp(1000) overflows: inf * 0
  int calls = 0;
  const ArrayFn sp = stable_softplus(&calls);
  const Array g = grad(ScalarFn([&](const Array& v) { return sum(sp({v})[0]); }))(x);
  EXPECT_EQ(calls, 1);
  expect_close(g, std::vector<double>{1 / (1 + std::exp(3.0)), 0.5, 1 / (1 + std::exp(-2.0)), 1.0}, 1e-6,
               1e-7);
  expect_close(sp({x})[0], values(naive_softplus(x)), 0, 0);  // the forward is fn's
}

TEST(CustomVjp, GradOfGradDifferentiatesTheRule) {
  const Array x({-2.0, 0.5, 3.0, 1000.0});
  const ArrayFn sp = stable_softplus();
  ScalarFn first = [&](const Array& v) { return sum(sp({v})[0]); };
  const Array second = grad(ScalarFn([&](const Array& v) { return sum(grad(first)(v)); }))(x);
  std::vector<double> expected;
  for (double v : values(x)) {
    const double s = 1 / (1 + std::exp(-v));
    expected.push_back(s * (1 - s));
  }
  expect_close(second, expected, 1e-12, 1e-14);

  // A rule that reads the outputs: exp with d exp = exp; grad of grad is exp again.
  const ArrayFn my_exp = custom_vjp([](const std::vector<Array>& a) { return one(exp(a[0])); },
                                    [](const std::vector<Array>&, const std::vector<Array>& o,
                                       const std::vector<Array>& c) { return one(c[0] * o[0]); });
  ScalarFn e = [&](const Array& v) { return sum(my_exp({v})[0]); };
  const Array y = random_array({4}, float64, 11);
  expect_close(grad(ScalarFn([&](const Array& v) { return sum(grad(e)(v)); }))(y), values(exp(y)), 1e-12,
               1e-14);
  test::check_second_order([&](const std::vector<Array>& a) { return my_exp({a[0] * a[1]})[0]; },
                           {random_array({3}, float64, 12), random_array({3}, float64, 13)});
}

TEST(CustomVjp, SeveralInputsAndOutputs) {
  // f(x, y) = (x * y, x + y) with a hand-written rule; an empty cotangent means zero.
  const ArrayFn f = custom_vjp(
      [](const std::vector<Array>& a) {
        return std::vector<Array>{a[0] * a[1], a[0] + a[1]};
      },
      [](const std::vector<Array>& p, const std::vector<Array>&, const std::vector<Array>& c) {
        return std::vector<Array>{c[0] * p[1] + c[1], c[0] * p[0] + c[1]};
      });
  const Array x = random_array({2, 3}, float64, 14), y = random_array({2, 3}, float64, 15);
  test::check_vjp([&](const std::vector<Array>& a) { return f(a)[0] * 2.0 + square(f(a)[1]); }, {x, y});
  // Only y differentiated: the rule still sees every primal and both cotangents.
  const Array gy = grad([&](const std::vector<Array>& a) { return one(sum(f(a)[0])); }, {1})({x, y})[0];
  expect_close(gy, values(x), 0, 0);
  const ArrayFn zero_for_y =
      custom_vjp([](const std::vector<Array>& a) { return one(a[0] * a[1]); },
                 [](const std::vector<Array>&, const std::vector<Array>&, const std::vector<Array>& c) {
                   return std::vector<Array>{c[0], Array()};
                 });
  const auto g =
      grad([&](const std::vector<Array>& a) { return one(sum(zero_for_y(a)[0])); }, {0, 1})({x, y});
  expect_close(g[1], std::vector<double>(6, 0.0), 0, 0);
}

TEST(CustomVjp, PerExampleGradientsAndGradOfVmapUseTheRule) {
  int calls = 0;
  const ArrayFn sp = stable_softplus(&calls);
  const Array xs({-1.0f, 0.0f, 1000.0f, 2.0f, 5.0f, 1000.0f}, {3, 2});
  ScalarFn loss = [&](const Array& v) { return sum(sp({v})[0]); };
  const Array per = vmap(grad(loss))(xs);
  expect_close(per, values(sigmoid(xs)), 1e-6, 1e-7);
  // grad of vmap: the batched node keeps the rule (vmapped), so the gradient is finite too.
  calls = 0;
  const Array g = grad(ScalarFn([&](const Array& v) {
    return sum(vmap(ScalarFn([&](const Array& e) { return sp({e})[0]; }))(v));
  }))(xs);
  EXPECT_GE(calls, 1);
  expect_close(g, values(sigmoid(xs)), 1e-6, 1e-7);
}

TEST(CustomVjp, WrongCotangentCountOrShapeIsAClearError) {
  const Array x({1.0, 2.0});
  auto make = [](int count, Shape shape, Dtype dtype = float64) {
    return custom_vjp([](const std::vector<Array>& a) { return one(a[0] * 3.0); },
                      [=](const std::vector<Array>&, const std::vector<Array>&, const std::vector<Array>&) {
                        return std::vector<Array>(count, zeros(shape, dtype));
                      });
  };
  auto grad_of = [&](const ArrayFn& f) {
    return grad(ScalarFn([f](const Array& v) { return sum(f({v})[0]); }))(x);
  };
  try {
    grad_of(make(2, {2}));
    FAIL() << "two cotangents for one input were accepted";
  } catch (const ValueError& e) {
    EXPECT_STREQ(
        e.what(),
        "[custom_function] the vjp rule must return one cotangent per input: 2 cotangents for 1 inputs");
  }
  try {
    grad_of(make(1, {3}));
    FAIL() << "a cotangent of the wrong shape was accepted";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(),
                 "[custom_function] a rule returned an array of the wrong shape: cotangent of input 0: (3,), "
                 "expected (2,)");
  }
  // A float32 cotangent for a float64 input is converted.
  EXPECT_EQ(grad_of(make(1, {2}, float32)).dtype(), float64);
  EXPECT_THROW(custom_vjp([](const std::vector<Array>& a) { return a; }, CustomVjpFn()), ValueError);
  EXPECT_THROW(custom_function(ArrayFn()), ValueError);
  EXPECT_THROW(custom_function([](const std::vector<Array>& a) { return a; })({Array()}), ValueError);
}

// ---- custom_function: jvp and vmap rules ----

TEST(CustomFunction, JvpRuleUsedByJvpAndByJvpOfGrad) {
  int calls = 0;
  const CustomFunction sp = custom_function([](const std::vector<Array>& a) {
                              return one(naive_softplus(a[0]));
                            }).jvp([&](const std::vector<Array>& p, const std::vector<Array>& t) {
    ++calls;
    return one(t[0] * sigmoid(p[0]));
  });
  const Array x({-2.0, 0.5, 1000.0}), v({1.0, -3.0, 2.0});
  // jvp: finite at 1000, where jvp of fn is NaN.
  EXPECT_TRUE(std::isnan(values(
      jvp([](const std::vector<Array>& a) { return one(naive_softplus(a[0])); }, {x}, {v}).second[0])[2]));
  const Array t = jvp(sp, {x}, {v}).second[0];
  EXPECT_EQ(calls, 1);
  expect_close(t, values(v * sigmoid(x)), 1e-12, 1e-14);

  // grad uses the jvp rule, transposed (there is no vjp rule); jvp of grad is a Hessian-vector
  // product: sigmoid'(x) * v.
  calls = 0;
  ScalarFn loss = [&](const Array& a) { return sum(sp({a})[0]); };
  expect_close(grad(loss)(x), values(sigmoid(x)), 1e-12, 1e-14);
  EXPECT_EQ(calls, 1);
  calls = 0;
  const Array hv =
      jvp([&](const std::vector<Array>& a) { return one(grad(loss)(a[0])); }, {x}, {v}).second[0];
  EXPECT_GE(calls, 1);
  expect_close(hv, values(sigmoid(x) * (1.0 - sigmoid(x)) * v), 1e-12, 1e-14);
}

TEST(CustomFunction, JvpRuleWithSeveralInputsAndAWrongRule) {
  // f(x, y) = x * y; the rule gets zeros for the tangent of an input that is not differentiated.
  const CustomFunction f = custom_function([](const std::vector<Array>& a) {
                             return one(a[0] * a[1]);
                           }).jvp([](const std::vector<Array>& p, const std::vector<Array>& t) {
    return one(t[0] * p[1] + p[0] * t[1]);
  });
  const Array x = random_array({3}, float64, 20), y = random_array({3}, float64, 21);
  const Array gy = grad([&](const std::vector<Array>& a) { return one(sum(f(a)[0])); }, {1})({x, y})[0];
  expect_close(gy, values(x), 0, 0);
  test::check_vjp([&](const std::vector<Array>& a) { return f(a)[0]; }, {x, y});

  const CustomFunction bad = custom_function([](const std::vector<Array>& a) {
                               return one(a[0]);
                             }).jvp([](const std::vector<Array>&, const std::vector<Array>&) {
    return std::vector<Array>{ones({4}, float64), ones({3}, float64)};
  });
  EXPECT_THROW(jvp(bad, {x}, {y}), ValueError);
  const CustomFunction bad_shape =
      custom_function([](const std::vector<Array>& a) {
        return one(a[0]);
      }).jvp([](const std::vector<Array>&, const std::vector<Array>&) { return one(ones({4}, float64)); });
  EXPECT_THROW(jvp(bad_shape, {x}, {y}), ShapeError);
}

TEST(CustomFunction, RulesSurviveVmap) {
  // vmap without a batching rule gives a batched custom node whose jvp and vjp rules are the
  // user's, vmapped: jvp of vmap and grad of vmap stay finite at 1000.
  int calls = 0;
  const CustomFunction sp = custom_function([](const std::vector<Array>& a) {
                              return one(naive_softplus(a[0]));
                            }).jvp([&](const std::vector<Array>& p, const std::vector<Array>& t) {
    ++calls;
    return one(t[0] * sigmoid(p[0]));
  });
  const Array xs({-1.0, 1000.0, 0.5, 2.0}, {2, 2}), vs({0.5, 2.0, -1.0, 3.0}, {2, 2});
  const ArrayFn batched = vmap(ArrayFn(sp));
  expect_close(jvp(batched, {xs}, {vs}).second[0], values(vs * sigmoid(xs)), 1e-12, 1e-14);
  EXPECT_GE(calls, 1);
  calls = 0;
  const Array g = grad([&](const std::vector<Array>& a) { return one(sum(batched(a)[0])); })({xs})[0];
  EXPECT_GE(calls, 1);
  expect_close(g, values(sigmoid(xs)), 1e-12, 1e-14);

  // An input shared by every example gets the sum of the per-example cotangents.
  const ArrayFn scale =
      custom_vjp([](const std::vector<Array>& a) { return one(a[0] * a[1]); },
                 [](const std::vector<Array>& p, const std::vector<Array>&, const std::vector<Array>& c) {
                   return std::vector<Array>{c[0] * p[1], sum(c[0] * p[0])};
                 });
  const Array ys = random_array({3, 4}, float64, 31), w = random_array({}, float64, 32);
  const auto gw = grad(
      [&](const std::vector<Array>& a) {
        return one(sum(vmap(scale, {0, -1})(a)[0]));
      },
      {0, 1})({ys, w});
  expect_close(gw[0], values(broadcast_to(w, {3, 4})), 1e-12, 1e-14);
  expect_close(gw[1], values(sum(ys)), 1e-12, 1e-14);
}

TEST(CustomFunction, VmapRuleIsUsed) {
  int calls = 0;
  // Per example: the sum of a vector; the rule sums the batch axis away directly.
  const CustomFunction total = custom_function([](const std::vector<Array>& a) {
                                 return one(sum(a[0]));
                               }).vmap([&](const std::vector<Array>& in, const std::vector<int>& axes) {
    ++calls;
    const int other = axes[0] == 0 ? 1 : 0;
    return std::pair<std::vector<Array>, std::vector<int>>{{sum(in[0], other)}, {0}};
  });
  const Array xs = random_array({4, 3}, float64, 30);
  const Array r = vmap(total)({xs})[0];
  EXPECT_EQ(calls, 1);
  expect_close(r, values(sum(xs, 1)), 1e-12, 1e-14);
  const Array r1 = vmap(total, {1})({transpose(xs)})[0];
  EXPECT_EQ(calls, 2);
  expect_close(r1, values(sum(xs, 1)), 1e-12, 1e-14);

  // A rule whose output has the wrong shape, or too few outputs, is reported.
  const CustomFunction bad = custom_function([](const std::vector<Array>& a) {
                               return one(sum(a[0]));
                             }).vmap([](const std::vector<Array>& in, const std::vector<int>&) {
    return std::pair<std::vector<Array>, std::vector<int>>{{in[0]}, {0}};
  });
  EXPECT_THROW(vmap(bad)({xs}), ShapeError);
  const CustomFunction none = custom_function([](const std::vector<Array>& a) {
                                return one(sum(a[0]));
                              }).vmap([](const std::vector<Array>&, const std::vector<int>&) {
    return std::pair<std::vector<Array>, std::vector<int>>{{}, {}};
  });
  EXPECT_THROW(vmap(none)({xs}), ValueError);
}

TEST(CustomFunction, MissingRulesFallBackToTheFunction) {
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{sin(a[0]) * a[1], a[0] * a[0]}; };
  const CustomFunction plain = custom_function(f);
  const Array x = random_array({3, 2}, float64, 40), y = random_array({2}, float64, 41);
  EXPECT_STREQ(plain({x, y})[0].primitive()->name(), "Custom");
  expect_close(plain({x, y})[0], values(f({x, y})[0]), 0, 0);
  test::check_vjp([&](const std::vector<Array>& a) { return plain(a)[0] + plain(a)[1]; }, {x, y});
  const Array tx = random_array({3, 2}, float64, 42), ty = random_array({2}, float64, 43);
  const auto t = jvp(plain, {x, y}, {tx, ty}).second;
  const auto ref = jvp(f, {x, y}, {tx, ty}).second;
  expect_close(t[0], values(ref[0]), 1e-12, 1e-14);
  expect_close(t[1], values(ref[1]), 1e-12, 1e-14);
  // vmap without a rule: vmap of fn, with an unbatched input, nested.
  const auto b = vmap(plain, {0, -1})({x, y});
  for (int64_t i = 0; i < 3; ++i) {
    const auto r = f({at(x, i), y});
    expect_close(at(b[0], i), values(r[0]), 1e-12, 1e-14);
    expect_close(at(b[1], i), values(r[1]), 1e-12, 1e-14);
  }
  const Array nested = vmap(vmap(ScalarFn([&](const Array& v) {
    return plain({v, y})[1];
  })))(random_array({2, 3, 2}, float64, 44));
  EXPECT_EQ(nested.shape(), (Shape{2, 3, 2}));
  // A vjp rule and a jvp rule side by side: each transform takes its own.
  int vjp_calls = 0, jvp_calls = 0;
  const CustomFunction both =
      custom_function([](const std::vector<Array>& a) { return one(exp(a[0])); })
          .vjp([&](const std::vector<Array>&, const std::vector<Array>& o, const std::vector<Array>& c) {
            ++vjp_calls;
            return one(c[0] * o[0]);
          })
          .jvp([&](const std::vector<Array>& p, const std::vector<Array>& tt) {
            ++jvp_calls;
            return one(tt[0] * exp(p[0]));
          });
  expect_close(grad(ScalarFn([&](const Array& v) { return sum(both({v})[0]); }))(y), values(exp(y)), 1e-12,
               1e-14);
  expect_close(jvp(both, {y}, {ty}).second[0], values(ty * exp(y)), 1e-12, 1e-14);
  EXPECT_EQ(vjp_calls, 1);
  EXPECT_EQ(jvp_calls, 1);
}

TEST(CustomFunction, CopiesShareTheirRulesAndBuildersDoNotMutate) {
  auto f = [](const std::vector<Array>& a) { return one(a[0] + 1.0); };
  const CustomFunction base = custom_function(f);
  const CustomFunction with = base.vjp([](const std::vector<Array>&, const std::vector<Array>&,
                                          const std::vector<Array>& c) { return one(c[0] * 7.0); });
  const Array x({1.0, 2.0});
  const ArrayFn as_fn = with;  // usable wherever an ArrayFn is
  ScalarFn s0 = [&](const Array& v) { return sum(base({v})[0]); };
  ScalarFn s1 = [&](const Array& v) { return sum(as_fn({v})[0]); };
  expect_close(grad(s0)(x), std::vector<double>{1.0, 1.0}, 0, 0);
  expect_close(grad(s1)(x), std::vector<double>{7.0, 7.0}, 0, 0);
  const CustomFunction copy = with;
  EXPECT_TRUE(with({x})[0].primitive()->is_equivalent(*copy({x})[0].primitive()));
  EXPECT_FALSE(with({x})[0].primitive()->is_equivalent(*base({x})[0].primitive()));
}

}  // namespace
}  // namespace kiln
