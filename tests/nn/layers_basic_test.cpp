// Bilinear, Embedding, Sequential and Lambda: forward against float64 loop references, PyTorch's
// parameter keys and shapes, initialization, gradients by finite differences, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "kiln/nn/activations.h"
#include "kiln/nn/layers/bilinear.h"
#include "kiln/nn/layers/conv.h"
#include "kiln/nn/layers/embedding.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/pooling.h"
#include "kiln/nn/layers/sequential.h"
#include "kiln/nn/materialized_module.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::expect_close;
using test::random_array;
using test::values;
using Vec = std::vector<double>;

template <class E, class F>
void expect_error(F&& fn, const std::string& who) {
  try {
    fn();
    ADD_FAILURE() << "expected an error naming " << who;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find("[" + who + "]"), std::string::npos) << e.what();
  }
}

std::vector<std::string> keys(const Module& m) { return m.parameters().keys(); }

// Puts a[first..] into m's parameters (in parameters() order).
void put_params(Module& m, const std::vector<Array>& a, size_t first) {
  const auto k = m.parameters().keys();
  ParamTree p;
  for (size_t i = 0; i < k.size(); ++i) p.set(k[i], a[first + i]);
  m.update(p);
}

// ---------------------------------------------------------------- Bilinear

Vec bilinear_ref(const Vec& x1, const Vec& x2, const Vec& w, const Vec& b, int64_t rows, int64_t in1,
                 int64_t in2, int64_t out) {
  Vec y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in1; ++i)
        for (int64_t j = 0; j < in2; ++j)
          acc += x1[r * in1 + i] * w[(o * in1 + i) * in2 + j] * x2[r * in2 + j];
      y[r * out + o] = acc;
    }
  return y;
}

TEST(Bilinear, MatchesTheLoopReferenceWithPyTorchKeysAndInit) {
  Bilinear bl(4, 3, 5, {.dtype = float64, .key = random::key(1)});
  EXPECT_EQ(keys(bl), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(bl.weight.value().shape(), (Shape{5, 4, 3}));
  EXPECT_EQ(bl.bias.value().shape(), (Shape{5}));
  const Array x1 = random_array({2, 3, 4}, float64, 2), x2 = random_array({2, 3, 3}, float64, 3);
  const Vec ref =
      bilinear_ref(values(x1), values(x2), values(bl.weight.value()), values(bl.bias.value()), 6, 4, 3, 5);
  const Array y = bl(x1, x2);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  expect_close(y, ref, 1e-12, 1e-12);
  // One example without a batch axis.
  const Array y1 =
      bl(reshape(slice(x1, {0, 0, 0}, {1, 1, 4}), {4}), reshape(slice(x2, {0, 0, 0}, {1, 1, 3}), {3}));
  EXPECT_EQ(y1.shape(), (Shape{5}));
  expect_close(y1, Vec(ref.begin(), ref.begin() + 5), 1e-12, 1e-12);

  // Init: uniform on +-1/sqrt(in1) for weight and bias, as PyTorch; float32 by default.
  Bilinear big(16, 8, 4, {.key = random::key(4)});
  EXPECT_EQ(big.weight.value().dtype(), float32);
  double wmax = 0.0;
  for (double v : values(big.weight.value())) wmax = std::max(wmax, std::abs(v));
  EXPECT_LE(wmax, 0.25);
  EXPECT_GT(wmax, 0.2);
  for (double v : values(big.bias.value())) EXPECT_LE(std::abs(v), 0.25);
  Bilinear nb(2, 2, 2, {.bias = false, .key = random::key(5)});
  EXPECT_EQ(keys(nb), (std::vector<std::string>{"weight"}));
  const Array z = random_array({3, 2}, float32, 6);
  expect_close(nb(z, z), bilinear_ref(values(z), values(z), values(nb.weight.value()), {}, 3, 2, 2, 2));
}

TEST(Bilinear, GradientsAndErrors) {
  Bilinear bl(3, 2, 2, {.dtype = float64, .key = random::key(7)});
  test::check_vjp(
      [&](const std::vector<Array>& a) {
        put_params(bl, a, 2);
        return bl(a[0], a[1]);
      },
      {random_array({4, 3}, float64, 8), random_array({4, 2}, float64, 9), bl.weight.value(),
       bl.bias.value()});
  expect_error<ValueError>([] { Bilinear(0, 2, 2); }, "Bilinear");
  expect_error<ValueError>([] { Bilinear(2, 2, 0); }, "Bilinear");
  expect_error<ShapeError>([&] { bl(ones({4, 2}), ones({4, 2})); }, "Bilinear");     // in1 is 3
  expect_error<ShapeError>([&] { bl(ones({4, 3}), ones({4, 3})); }, "Bilinear");     // in2 is 2
  expect_error<ShapeError>([&] { bl(ones({4, 3}), ones({5, 2})); }, "Bilinear");     // batches differ
  expect_error<ShapeError>([&] { bl(ones({2, 2, 3}), ones({4, 2})); }, "Bilinear");  // ranks differ
  expect_error<ValueError>([&] { bl(Array(), ones({4, 2})); }, "Bilinear");
}

// ---------------------------------------------------------------- Embedding

TEST(Embedding, LooksUpRowsForIndicesOfAnyShapeAndDtype) {
  Embedding e(10, 4, {.key = random::key(10)});
  EXPECT_EQ(keys(e), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(e.weight.value().shape(), (Shape{10, 4}));
  EXPECT_EQ(e.weight.value().dtype(), float32);
  const Vec w = values(e.weight.value());
  const std::vector<int> idx = {3, 0, 9, 3, 7, 1};
  Vec ref;
  for (int i : idx) ref.insert(ref.end(), w.begin() + i * 4, w.begin() + i * 4 + 4);
  for (Dtype t : {int32, int64, uint8, uint32, int8}) {
    const Array ix = astype(Array(idx, {2, 3}), t);
    const Array y = e(ix);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 4})) << dtype_name(t);
    expect_close(y, ref, 0, 0);
  }
  EXPECT_EQ(e(Array(std::vector<int>{5}, {1})).shape(), (Shape{1, 4}));
  EXPECT_EQ(e(Array(5)).shape(), (Shape{4}));                        // a scalar index
  EXPECT_EQ(e(Array(idx, {1, 2, 3})).shape(), (Shape{1, 2, 3, 4}));  // any rank
  // Lazy indices give the same rows.
  expect_close(e(Array(idx, {2, 3}) + 0), ref, 0, 0);
}

TEST(Embedding, InitIsStandardNormalWithThePaddingRowZeroed) {
  Embedding big(2000, 16, {.dtype = float64, .key = random::key(11)});
  const Vec w = values(big.weight.value());
  double mean = 0.0, sq = 0.0;
  for (double v : w) mean += v;
  mean /= static_cast<double>(w.size());
  for (double v : w) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), 1.0, 0.02);

  Embedding pad(6, 3, {.padding_idx = 2, .key = random::key(12)});
  EXPECT_EQ(pad.padding_idx(), 2);
  const Vec pw = values(pad.weight.value());
  for (int j = 0; j < 3; ++j) EXPECT_EQ(pw[2 * 3 + j], 0.0);
  for (int j = 0; j < 3; ++j) EXPECT_NE(pw[1 * 3 + j], 0.0);
  Embedding neg(6, 3, {.padding_idx = -1, .key = random::key(13)});
  EXPECT_EQ(neg.padding_idx(), 5);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(values(neg.weight.value())[5 * 3 + j], 0.0);
}

TEST(Embedding, GradientsAccumulatePerIndexAndSkipThePaddingRow) {
  // Finite differences see the padding row's value in the output, so they check a table without one.
  Embedding e(5, 3, {.dtype = float64, .key = random::key(14)});
  const Array idx(std::vector<int>{1, 4, 1, 0, 4, 3}, {2, 3});
  test::check_vjp(
      [&](const std::vector<Array>& a) {
        put_params(e, a, 0);
        return e(idx);
      },
      {e.weight.value()});
  // d sum(e(idx)) / d weight counts each row's uses; the padding row (used twice) gets nothing.
  Embedding f(5, 3, {.padding_idx = 4, .dtype = float64, .key = random::key(15)});
  auto step = value_and_grad(f, [&](const Array& i) { return sum(f(i)); });
  auto [loss, grads] = step(idx);
  expect_close(grads.at("weight"), Vec{1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1, 0, 0, 0}, 0, 0);
  // The padding row still reads its (possibly updated) value in the forward pass.
  f.weight = ones({5, 3}, float64);
  expect_close(f(Array(4)), Vec{1, 1, 1}, 0, 0);
}

TEST(Embedding, RejectsBadIndicesAndOptions) {
  Embedding e(5, 2, {.key = random::key(16)});
  // Evaluated indices: checked at the call.
  expect_error<ValueError>([&] { e(Array(std::vector<int>{0, 5}, {2})); }, "Embedding");
  expect_error<ValueError>([&] { e(Array(std::vector<int64_t>{-1}, {1})); }, "Embedding");  // never wraps
  // Lazy indices: the call succeeds and the error surfaces at eval, from take.
  Array late;
  EXPECT_NO_THROW(late = e(Array(std::vector<int>{1, 2}, {2}) + 5));
  EXPECT_THROW(late.eval(), ValueError);
  Array negative;
  EXPECT_NO_THROW(negative = e(Array(std::vector<int>{1, 2}, {2}) - 3));
  EXPECT_THROW(negative.eval(), ValueError);
  Array negative8;
  EXPECT_NO_THROW(negative8 = e(astype(Array(std::vector<int>{1, 2}, {2}), int8) - 3));
  EXPECT_THROW(negative8.eval(), ValueError);
  expect_error<DtypeError>([&] { e(Array(std::vector<float>{1.0f}, {1})); }, "Embedding");
  expect_error<DtypeError>([&] { e(Array(true)); }, "Embedding");
  expect_error<ValueError>([&] { e(Array()); }, "Embedding");
  expect_error<ValueError>([] { Embedding(0, 2); }, "Embedding");
  expect_error<ValueError>([] { Embedding(3, 0); }, "Embedding");
  expect_error<ValueError>([] { Embedding(3, 2, {.padding_idx = 3}); }, "Embedding");
  expect_error<ValueError>([] { Embedding(3, 2, {.padding_idx = -4}); }, "Embedding");
}

// ---------------------------------------------------------------- Sequential

Array plus_one(const Array& x) { return x + 1.0; }

TEST(Sequential, RegistersElementsByIndexAsPyTorch) {
  Sequential mlp;
  EXPECT_TRUE(mlp.empty());
  Linear& fc1 = mlp.emplace_back<Linear>(4, 8, LinearOptions{.key = random::key(20)});
  Lambda& act = mlp.append(relu);
  mlp.emplace_back<Linear>(8, 2, LinearOptions{.bias = false, .key = random::key(21)});
  EXPECT_EQ(mlp.size(), 3u);
  EXPECT_EQ(keys(mlp), (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  std::vector<std::string> kids;
  for (auto& [k, m] : mlp.children()) kids.push_back(k);
  EXPECT_EQ(kids, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(&mlp[0], &fc1);
  EXPECT_EQ(&mlp[1], &act);
  EXPECT_EQ(&mlp.at<Linear>(0), &fc1);
  EXPECT_EQ(mlp.at<Linear>(2).out_features(), 2);
  const Sequential& cm = mlp;
  EXPECT_EQ(&cm.at<Lambda>(1), &act);
  expect_error<ValueError>([&] { mlp.at<Linear>(1); }, "Sequential");
  expect_error<KeyError>([&] { mlp[3]; }, "Sequential");
  expect_error<KeyError>([&] { cm.at<Linear>(7); }, "Sequential");

  // Forward applies the elements in order.
  const Array x = random_array({3, 4}, float32, 22);
  expect_close(mlp(x), values(mlp.at<Linear>(2)(relu(fc1(x)))), 1e-6, 1e-6);

  // Nested: keys carry both indices, as PyTorch.
  Sequential outer;
  outer.append(plus_one);
  Sequential& inner = outer.emplace_back<Sequential>();
  inner.emplace_back<Linear>(4, 3, LinearOptions{.key = random::key(23)});
  inner.append([](const Array& v) { return tanh(v); });
  outer.emplace_back<Linear>(3, 1, LinearOptions{.key = random::key(24)});
  EXPECT_EQ(keys(outer), (std::vector<std::string>{"1.0.weight", "1.0.bias", "2.weight", "2.bias"}));
  std::vector<std::string> mods;
  for (auto& [k, m] : outer.named_modules()) mods.push_back(k);
  EXPECT_EQ(mods, (std::vector<std::string>{"", "0", "1", "1.0", "1.1", "2"}));
  expect_close(outer(x), values(outer.at<Linear>(2)(tanh(inner.at<Linear>(0)(x + 1.0)))), 1e-6, 1e-6);

  // Empty: the identity, as PyTorch.
  Sequential none;
  expect_close(none(x), values(x), 0, 0);
  expect_error<ValueError>([] { Lambda(Lambda::Fn{}); }, "Lambda");
  expect_error<ValueError>([&] { none.append(Lambda::Fn{}); }, "Lambda");
  EXPECT_TRUE(none.empty());  // a failed append leaves nothing behind
}

TEST(Sequential, TrainsLoadsAndMaterializesLikeAnyModule) {
  // A small CNN: conv, relu, pool, flatten, linear.
  Sequential net;
  net.emplace_back<Conv2d>(1, 2, 3, Conv2dOptions{.padding = 1, .dtype = float64, .key = random::key(30)});
  net.append(relu);
  net.emplace_back<MaxPool2d>(2);
  net.append([](const Array& v) { return flatten(v, 1); });
  net.emplace_back<Linear>(8, 3, LinearOptions{.dtype = float64, .key = random::key(31)});
  EXPECT_EQ(keys(net), (std::vector<std::string>{"0.weight", "0.bias", "4.weight", "4.bias"}));
  const Array x = random_array({2, 1, 4, 4}, float64, 32);
  EXPECT_EQ(net(x).shape(), (Shape{2, 3}));
  test::check_vjp(
      [&](const std::vector<Array>& a) {
        put_params(net, a, 1);
        return net(a[0]);
      },
      {x, net.parameters().at("0.weight"), net.parameters().at("0.bias"), net.parameters().at("4.weight"),
       net.parameters().at("4.bias")});
  auto step = value_and_grad(net, [&](const Array& in) { return sum(square(net(in))); });
  auto [loss, grads] = step(x);
  EXPECT_EQ(grads.keys(), keys(net));

  // update by PyTorch-style keys; freeze by element key.
  net.update(ParamTree{{"4.bias", zeros({3}, float64)}}, Verify::shapes | Verify::dtypes | Verify::unknown);
  expect_close(net.parameters().at("4.bias"), Vec{0, 0, 0}, 0, 0);
  net.freeze({"0"});
  EXPECT_EQ(net.trainable_parameters().keys(), (std::vector<std::string>{"4.weight", "4.bias"}));
  expect_error<KeyError>([&] { net.update(ParamTree{{"9.weight", ones({1})}}); }, "Module::update");

  // A materialized Sequential serves const calls.
  auto model = std::make_unique<Sequential>();
  model->emplace_back<Linear>(4, 2, LinearOptions{.key = random::key(33)});
  model->append(relu);
  const Array xin = random_array({2, 4}, float32, 34);
  const Vec expected = values((*model)(xin));
  MaterializedModule<Sequential> frozen(std::move(model));
  expect_close(frozen(xin), expected, 0, 0);
}

static_assert(!std::is_copy_constructible_v<Sequential> && !std::is_move_constructible_v<Sequential>);

}  // namespace
}  // namespace kiln::nn
