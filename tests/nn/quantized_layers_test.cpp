// Quantized Linear and Embedding layers and nn::quantize (nn/layers/quantized.h): the forward
// against the dequantized float64 layer, keys and freezing, saving and loading, QLoRA (LoRA over a
// frozen quantized base), merging, serving from many threads, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/ops/quantized.h"
#include "kiln/nn/layers/lora.h"
#include "kiln/nn/layers/quantized.h"
#include "kiln/nn/losses.h"
#include "kiln/nn/materialized_module.h"
#include "kiln/nn/value_and_grad.h"
#include "kiln/optim/optim.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

// y = x W^T + b in float64 with W the layer's dequantized weight.
std::vector<double> linear_ref(const Linear& l, const Array& x) {
  const std::vector<double> w = values(l.dequantized_weight()), xv = values(x);
  const std::vector<double> b =
      l.bias.has_value() ? values(l.bias.value()) : std::vector<double>(l.out_features());
  const int64_t in = l.in_features(), out = l.out_features(), rows = x.size() / in;
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i) acc += xv[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

TEST(QuantizedLinear, KeysFrozenAndForward) {
  for (const QuantizeOptions q : {QuantizeOptions{4, 64}, QuantizeOptions{8, 32}, QuantizeOptions{2, 128}}) {
    QuantizedLinear l(128, 24, q, {.key = random::key(1)});
    EXPECT_TRUE(l.is_quantized());
    EXPECT_EQ(*l.quantization(), q);
    EXPECT_EQ(l.parameters().keys(), (std::vector<std::string>{"weight", "bias", "scales", "biases"}));
    EXPECT_TRUE(l.trainable_parameters().empty());
    EXPECT_EQ(l.weight.value().dtype(), uint32);
    EXPECT_EQ(l.weight.value().shape(), (Shape{24, 128 * q.bits / 32}));
    EXPECT_EQ(l.scales.value().shape(), (Shape{24, 128 / q.group_size}));
    EXPECT_EQ(l.compute_dtype(), float32);
    for (const Shape& xs : {Shape{1, 128}, Shape{3, 5, 128}}) {
      const Array x = random_array(xs, float32, 2);
      expect_close(l(x), linear_ref(l, x), 1e-5, 1e-5);
    }
  }
}

// A Linear quantized in place: within half a scale per weight of the float layer.
TEST(QuantizedLinear, QuantizeInPlaceStaysCloseToTheFloatLayer) {
  Linear l(256, 32, {.key = random::key(3)});
  const Array x = random_array({4, 256}, float32, 4);
  const std::vector<double> before = values(l(x));
  l.quantize({8, 64});
  const std::vector<double> after = values(l(x));
  double err = 0, norm = 0;
  for (size_t i = 0; i < before.size(); ++i)
    err += (after[i] - before[i]) * (after[i] - before[i]), norm += before[i] * before[i];
  EXPECT_LT(std::sqrt(err / norm), 0.01);  // 8 bits: about 1/255 of each group's range
  EXPECT_THROW(l.quantize(), ValueError);  // already quantized
}

struct Net : Module {
  ModuleInfo<Embedding> embed{this, "embed", 50, 64, EmbeddingOptions{.key = random::key(10)}};
  ModuleInfo<Linear> fc1{this, "fc1", 64, 96, LinearOptions{.key = random::key(11)}};
  ModuleInfo<Linear> fc2{this, "fc2", 96, 64, LinearOptions{.key = random::key(12)}};
  ModuleInfo<Linear> odd{this, "odd", 64, 40, LinearOptions{.key = random::key(13)}};    // quantized: in 64
  ModuleInfo<Linear> head{this, "head", 40, 50, LinearOptions{.key = random::key(14)}};  // in 40: stays float
  Array operator()(const Array& tokens) const {
    const Array h = embed(tokens);
    return head(odd(fc2(tanh(fc1(h))) + h)) + embed->as_linear(h) * 0.1;
  }
};

TEST(NnQuantize, QuantizesWhatItCanAndSkipsByName) {
  Net net;
  const std::vector<std::string> done = quantize(net, {.bits = 4, .group_size = 32, .skip = {"fc2"}});
  EXPECT_EQ(done, (std::vector<std::string>{"embed", "fc1", "odd"}));
  EXPECT_TRUE(net.embed->is_quantized());
  EXPECT_FALSE(net.fc2->is_quantized());
  EXPECT_FALSE(net.head->is_quantized());  // 40 is no multiple of 32
  EXPECT_TRUE(net.parameters().contains("fc1.scales"));
  EXPECT_TRUE(net.parameters().contains("embed.biases"));
  // Frozen: what stays trainable is the float layers.
  EXPECT_EQ(net.trainable_parameters().keys(),
            (std::vector<std::string>{"fc2.weight", "fc2.bias", "head.weight", "head.bias"}));
  const std::vector<std::string> again = quantize(net, {.bits = 4, .group_size = 32});
  EXPECT_EQ(again, (std::vector<std::string>{"fc2"}));  // the rest already quantized
  EXPECT_THROW(quantize(net, {.bits = 3}), ValueError);
  EXPECT_THROW(quantize(net, {.group_size = 16}), ValueError);
}

// The embedding dequantizes the rows it looks up, and its tied output layer is quantized_matmul.
TEST(NnQuantize, EmbeddingLookupsAndTiedHead) {
  QuantizedEmbedding e(30, 64, {4, 32}, {.key = random::key(20)});
  const Array table = dequantize(e.weight.value(), e.scales.value(), e.biases.value(), 32, 4);
  const Array ids(std::vector<int32_t>{3, 0, 29, 3}, {2, 2});
  const std::vector<double> t = values(table), got = values(e(ids));
  ASSERT_EQ(got.size(), 4u * 64);
  const int rows[] = {3, 0, 29, 3};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 64; ++c) EXPECT_DOUBLE_EQ(got[r * 64 + c], t[rows[r] * 64 + c]);
  const Array x = random_array({2, 64}, float32, 21);
  expect_close(e.as_linear(x), values(matmul(x, transpose(table))), 1e-5, 1e-5);
  EXPECT_THROW(e(Array(std::vector<int32_t>{30}, {1})), ValueError);  // out of range, as before
  EXPECT_THROW(e.as_linear(random_array({2, 63}, float32, 22)), ShapeError);
  EXPECT_THROW(e.quantize(), ValueError);
  Embedding narrow(10, 48);
  EXPECT_THROW(narrow.quantize({4, 32}), ValueError);
}

TEST(NnQuantize, SavedModelLoadsIntoAFreshQuantizedModel) {
  Net net;
  quantize(net, {.bits = 8, .group_size = 64});
  const Array tokens(std::vector<int32_t>{1, 7, 49, 0, 12, 33}, {2, 3});
  const std::vector<double> want = values(net(tokens));
  const auto path = std::filesystem::temp_directory_path() / "kiln_quantized_layers_test.safetensors";
  net.save_weights(path);
  Net fresh;  // the same architecture from other weights, quantized the same way
  fresh.embed->weight = random_array({50, 64}, float32, 30);
  quantize(fresh, {.bits = 8, .group_size = 64});
  EXPECT_NE(values(fresh(tokens)), want);
  fresh.load_weights(path);
  EXPECT_EQ(values(fresh(tokens)), want);
  // Into a float model the packed words do not fit: the keys say what differs.
  Net plain;
  EXPECT_THROW(plain.load_weights(path), Error);
  std::filesystem::remove(path);
}

// QLoRA: adapters on the frozen quantized base train; the base does not change.
TEST(NnQuantize, LoRAOverAQuantizedBaseTrainsOnlyTheAdapters) {
  Net net;
  quantize(net, {.bits = 4, .group_size = 32});
  add_lora(net, {.r = 4, .alpha = 8, .target_modules = {"fc1", "odd"}, .key = random::key(40)});
  EXPECT_EQ(net.trainable_parameters().keys(),
            (std::vector<std::string>{"fc1.lora_A.weight", "fc1.lora_B.weight", "odd.lora_A.weight",
                                      "odd.lora_B.weight"}));
  EXPECT_EQ(net.fc1->lora_A->weight.value().dtype(), float32);  // the scales' dtype, not uint32
  const ParamTree base = net.parameters();
  const Array tokens = random::randint({8, 6}, random::key(41), 0, 50);
  const Array targets = random::randint({8, 6}, random::key(42), 0, 50);
  auto step = value_and_grad(net, [&](const Array& t, const Array& y) {
    return cross_entropy(reshape(net(t), {-1, 50}), reshape(y, {-1}));
  });
  optim::AdamW opt({.lr = 0.02});
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    auto [loss, grads] = step(tokens, targets);
    EXPECT_EQ(grads.keys(), net.trainable_parameters().keys());
    opt.update(net, grads);
    const ParamTree params = net.parameters();
    nn::eval({&params, &opt.state()});
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.8);
  for (const auto& [key, value] : net.parameters())
    if (key.find("lora_") == std::string::npos) {
      EXPECT_EQ(value.id(), base.at(key).id()) << key;
    }
  // Merging folds the adapter into a requantized weight: within half a (new) scale of W + s B A.
  const Linear& fc1 = *net.fc1;
  const std::vector<double> want =
      values(fc1.dequantized_weight() +
             matmul(fc1.lora_B->weight.value(), fc1.lora_A->weight.value()) * fc1.lora_scale());
  merge_lora(net);
  EXPECT_TRUE(fc1.is_quantized());
  EXPECT_FALSE(fc1.has_lora());
  const std::vector<double> merged = values(fc1.dequantized_weight()), scales = values(fc1.scales.value());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::abs(merged[i] - want[i]), scales[i / 32] / 2 + 1e-6) << i;
}

TEST(NnQuantize, AMaterializedQuantizedModelServesManyThreads) {
  auto model = std::make_unique<Net>();
  quantize(*model, {.bits = 4, .group_size = 64});
  const Array tokens = random::randint({4, 5}, random::key(50), 0, 50);
  const std::vector<double> want = values((*model)(tokens));
  const MaterializedModule<Net> served(std::move(model));
  std::vector<std::vector<double>> got(6);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) got[t] = values(served(tokens));
    });
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace kiln::nn
