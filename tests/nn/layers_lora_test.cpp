// LoRALinear: the forward formula, merge/unmerge, that only the adapter trains, dropout, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/nn/layers/dropout.h"
#include "kiln/nn/layers/lora.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

// y = x W^T + b + scale * (x A^T) B^T with plain loops in float64.
std::vector<double> lora_ref(const LoRALinear& l, const Array& x) {
  const int64_t in = l.in_features(), out = l.out_features(), r = l.rank(), rows = x.size() / in;
  const std::vector<double> xv = values(x), w = values(l.weight.value()), a = values(l.lora_a.value()),
                            b = values(l.lora_b.value());
  const std::vector<double> bias =
      l.bias.has_value() ? values(l.bias.value()) : std::vector<double>(out, 0.0);
  std::vector<double> y(rows * out);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> xa(r, 0.0);
    for (int64_t k = 0; k < r; ++k)
      for (int64_t f = 0; f < in; ++f) xa[k] += xv[i * in + f] * a[k * in + f];
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias[o], low = 0;
      for (int64_t f = 0; f < in; ++f) acc += xv[i * in + f] * w[o * in + f];
      for (int64_t k = 0; k < r; ++k) low += xa[k] * b[o * r + k];
      y[i * out + o] = acc + l.scale() * low;
    }
  }
  return y;
}

TEST(LoRALinear, KeysInitAndOnlyTheAdapterIsTrainable) {
  LoRALinear l(6, 4, {.r = 2, .alpha = 8, .key = random::key(1)});
  EXPECT_EQ(l.parameters().keys(), (std::vector<std::string>{"weight", "bias", "lora_a", "lora_b"}));
  EXPECT_EQ(l.trainable_parameters().keys(), (std::vector<std::string>{"lora_a", "lora_b"}));
  EXPECT_EQ(l.lora_a.value().shape(), (Shape{2, 6}));
  EXPECT_EQ(l.lora_b.value().shape(), (Shape{4, 2}));
  EXPECT_DOUBLE_EQ(l.scale(), 4.0);
  expect_close(l.lora_b.value(), std::vector<double>(8, 0.0));
  for (double a : values(l.lora_a.value())) EXPECT_LE(std::abs(a), 1.0 / std::sqrt(6.0));
  for (double w : values(l.weight.value())) EXPECT_LE(std::abs(w), 1.0 / std::sqrt(6.0));
  // Zero B: the layer starts as its base.
  const Array x = random_array({3, 6}, float32, 2);
  Linear base(6, 4, {.key = random::key(3)});
  LoRALinear wrapped(base, {.r = 3});
  EXPECT_EQ(wrapped.weight.value().id(), base.weight.value().id());
  expect_close(wrapped(x), values(base(x)), 1e-6, 1e-6);
  LoRALinear nb(Linear(6, 4, {.bias = false}), {.r = 1});
  EXPECT_EQ(nb.parameters().keys(), (std::vector<std::string>{"weight", "lora_a", "lora_b"}));
  // A checkpoint of the plain Linear loads into the LoRA layer by its keys.
  LoRALinear fresh(6, 4, {.r = 3});
  const UpdateReport report = fresh.update(base.parameters(), Verify::all & ~Verify::missing);
  EXPECT_EQ(report.applied, (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(fresh.weight.frozen());
}

TEST(LoRALinear, ForwardMatchesTheFormula) {
  LoRALinear l(5, 3, {.r = 2, .alpha = 3, .key = random::key(4)});
  l.lora_b = random_array({3, 2}, float32, 5);
  const Array x = random_array({2, 4, 5}, float32, 6);
  expect_close(l(x), lora_ref(l, x), 1e-5, 1e-6);
  LoRALinear d(5, 3, {.r = 2, .dtype = float64, .key = random::key(7)});
  d.lora_b = random_array({3, 2}, float64, 8);
  const Array xd = random_array({4, 5}, float64, 9);
  expect_close(d(xd), lora_ref(d, xd), 1e-12, 1e-12);
  check_vjp(
      [&](const std::vector<Array>& a) {
        d.lora_a.reset(a[1]);
        d.lora_b.reset(a[2]);
        return d(a[0]);
      },
      {xd, d.lora_a.value(), d.lora_b.value()});
}

TEST(LoRALinear, MergeFoldsTheAdapterAndUnmergeRestoresTheBase) {
  LoRALinear l(8, 6, {.r = 4, .alpha = 2, .key = random::key(10)});
  l.lora_b = random_array({6, 4}, float32, 11);
  const Array x = random_array({5, 8}, float32, 12);
  const std::vector<double> before = values(l(x)), w0 = values(l.weight.value());
  const std::vector<double> a = values(l.lora_a.value()), b = values(l.lora_b.value());
  l.merge();
  EXPECT_TRUE(l.merged());
  std::vector<double> merged_w(w0);
  for (int64_t o = 0; o < 6; ++o)
    for (int64_t f = 0; f < 8; ++f)
      for (int64_t k = 0; k < 4; ++k) merged_w[o * 8 + f] += 0.5 * b[o * 4 + k] * a[k * 8 + f];
  expect_close(l.weight.value(), merged_w, 1e-6, 1e-6);
  expect_close(l(x), before, 1e-5, 1e-5);
  l.merge();  // no-op
  expect_close(l.weight.value(), merged_w, 1e-6, 1e-6);
  EXPECT_TRUE(l.weight.frozen());
  l.unmerge();
  EXPECT_FALSE(l.merged());
  expect_close(l.weight.value(), w0, 1e-6, 1e-6);
  expect_close(l(x), before, 1e-5, 1e-5);
  l.unmerge();  // no-op
  expect_close(l.weight.value(), w0, 1e-6, 1e-6);
}

TEST(LoRALinear, ValueAndGradGivesExactlyTheAdapterGradients) {
  struct Net : Module {
    ModuleInfo<LoRALinear> q{this, "q", 4, 3, LoRAOptions{.r = 2, .key = random::key(13)}};
    ModuleInfo<LoRALinear> v{this, "v", 3, 2, LoRAOptions{.r = 1, .bias = false, .key = random::key(14)}};
    Array operator()(const Array& x) const { return v(tanh(q(x))); }
  } net;
  net.q->lora_b = random_array({3, 2}, float32, 15);
  const Array x = random_array({6, 4}, float32, 16), y = random_array({6, 2}, float32, 17);
  auto step = value_and_grad(
      net, [&](const Array& in, const Array& target) { return mean(square(net(in) - target)); });
  auto [loss, grads] = step(x, y);
  EXPECT_EQ(grads.keys(), (std::vector<std::string>{"q.lora_a", "q.lora_b", "v.lora_a", "v.lora_b"}));
  EXPECT_GT(sum(abs(grads.at("q.lora_b"))).item<double>(), 0.0);
  // B starts at zero, so A's gradient is zero where B is zero (v), and nonzero where it is not (q).
  expect_close(grads.at("v.lora_a"), std::vector<double>(3, 0.0));
  EXPECT_GT(sum(abs(grads.at("q.lora_a"))).item<double>(), 0.0);
}

TEST(LoRALinear, DropoutOnlyOnTheAdapterInTraining) {
  LoRALinear l(6, 4, {.r = 2, .dropout = 0.5, .key = random::key(18)});
  const Array x = random_array({3, 6}, float32, 19);
  const std::vector<double> base = values(matmul(x, transpose(l.weight.value())) + l.bias.value());
  expect_close(l(x), base, 1e-6, 1e-6);  // B = 0: dropout cannot show
  l.lora_b = random_array({4, 2}, float32, 20);
  const Array key = random::key(21);
  const std::vector<double> a = values(l(x, key));
  EXPECT_EQ(values(l(x, key)), a);
  l.eval_mode();
  expect_close(l(x), lora_ref(l, x), 1e-5, 1e-6);
  EXPECT_NE(values(l(x)), a);
  // With a known mask the training output is the formula on the dropped input.
  l.train();
  const Array dropped = dropout(x, 0.5, key);
  const std::vector<double> low =
      values(matmul(matmul(dropped, transpose(l.lora_a.value())), transpose(l.lora_b.value())));
  std::vector<double> expected(base);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += l.scale() * low[i];
  expect_close(Array(a, {3, 4}), expected, 1e-5, 1e-6);
}

TEST(LoRALinear, Errors) {
  EXPECT_THROW(LoRALinear(4, 3, {.r = 0}), ValueError);
  EXPECT_THROW(LoRALinear(0, 3), ValueError);
  EXPECT_THROW(LoRALinear(4, 3, {.dropout = 1.0}), ValueError);
  EXPECT_THROW(LoRALinear(Linear(4, 3), {.r = -1}), ValueError);
  LoRALinear l(4, 3);
  EXPECT_THROW(l(ones({2, 5})), ShapeError);
  EXPECT_THROW(l(Array()), ShapeError);
}

}  // namespace
}  // namespace kiln::nn
