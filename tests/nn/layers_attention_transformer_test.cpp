// TransformerEncoderLayer / TransformerDecoderLayer: PyTorch's keys, literal torch outputs, a
// float64 composition of the layers' own pieces, the KV cache, dropout and gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/nn/layers/transformer.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

Array wave(const Shape& shape, double a, double b, double gain = 1.0) {
  std::vector<double> v(shape_size(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = static_cast<double>(i);
    v[i] = std::sin(a * d + b) + 0.1 * std::cos(3.0 * d);
  }
  return astype(Array(v, shape, float64), float32) * static_cast<float>(gain);
}

// Parameter k (in declaration order, which is PyTorch's) = wave(shape, 0.1 + 0.05 k, 0.3 k, 0.3).
void fill(Module& m) {
  ParamTree p;
  int k = 0;
  for (const auto& [key, v] : m.parameters()) {
    p.set(key, wave(v.shape(), 0.1 + 0.05 * k, 0.3 * k, 0.3));
    ++k;
  }
  ASSERT_TRUE(m.update(p).clean());
}

void to64(Module& m) {
  m.update(m.parameters().map([](const std::string&, const Array& v) { return astype(v, float64); }),
           Verify::none);
}

const std::vector<std::string> kEncoderKeys = {"self_attn.in_proj_weight",
                                               "self_attn.in_proj_bias",
                                               "self_attn.out_proj.weight",
                                               "self_attn.out_proj.bias",
                                               "linear1.weight",
                                               "linear1.bias",
                                               "linear2.weight",
                                               "linear2.bias",
                                               "norm1.weight",
                                               "norm1.bias",
                                               "norm2.weight",
                                               "norm2.bias"};

TEST(TransformerEncoderLayer, KeysAreTorchsAndOutputsMatchLiteralTorchValues) {
  // /usr/bin/python3 (torch 1.13): list(torch.nn.TransformerEncoderLayer(8, 2, 12).state_dict()).
  TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 12});
  EXPECT_EQ(enc.parameters().keys(), kEncoderKeys);
  EXPECT_EQ(enc.linear1->weight.value().shape(), (Shape{12, 8}));
  // enc = TransformerEncoderLayer(8, 2, dim_feedforward=12, batch_first=True), parameters filled as
  // fill() does, eval; enc(wave((2, 3, 8), 0.21, 0.4), src_mask=upper triangle (True = masked)).
  fill(enc);
  enc.eval_mode();
  const Array src = wave({2, 3, 8}, 0.21, 0.4);
  const Array mask(std::vector<bool>{false, true, true, false, false, true, false, false, false}, {3, 3});
  const std::vector<double> kEnc = {
      0.0941324383,  -0.516427577, -0.303215772, -0.110805437, 0.0466128588, 0.198427394,  0.199614137,
      0.212820873,   0.130966008,  -0.448563397, -0.206205487, 0.0147129986, 0.0234233756, 0.153673619,
      0.222367361,   0.207803056,  0.106951088,  -0.382440984, -0.265535831, 0.251402944,  0.00739417784,
      -0.0172673929, 0.239774927,  0.0692605898, 0.0591676049, -0.532941699, -0.440061331, 0.127172008,
      0.0386597998,  0.0868125036, 0.2159428,    0.0562291928, 0.102974735,  -0.504824638, -0.277636111,
      -0.0594458282, 0.0389685258, 0.190127432,  0.206913128,  0.221083775,  0.143558115,  -0.394958079,
      -0.181717426,  0.0694132745, 0.0741909966, 0.0817271397, 0.231348589,  0.190193072};
  expect_close(enc(src, {.src_mask = mask}), kEnc, 1e-4, 1e-5);
  expect_close(enc(src, {.is_causal = true}), kEnc, 1e-4, 1e-5);
  // activation="gelu", norm_first=True, layer_norm_eps=1e-3; src_key_padding_mask [[F, F, T], [F, F, F]].
  TransformerEncoderLayer pre(8, 2,
                              {.dim_feedforward = 12,
                               .activation = TransformerActivation::gelu,
                               .layer_norm_eps = 1e-3,
                               .norm_first = true});
  fill(pre);
  pre.eval_mode();
  const Array kpm(std::vector<bool>{false, false, true, false, false, false}, {2, 3});
  expect_close(
      pre(src, {.src_key_padding_mask = kpm}),
      std::vector<double>{
          1.26142955,   0.998843312,  1.05240381,  0.751174986,   1.2759974,     1.0287081,    0.944953442,
          0.55399245,   1.67279077,   1.27564025,  0.851498187,   0.373444378,   0.443357646,  0.179482117,
          -0.348141223, -0.721249461, 0.127499282, -0.113920897,  -0.720669866,  -0.898189545, -0.839698195,
          -0.759079874, -1.17549372,  -1.14311564, -0.0722584724, 0.00494074821, -0.268456012, -0.127172798,
          0.169710025,  0.351579696,  0.250237972, 0.294787943,   1.46124458,    1.39038789,   1.22395992,
          0.962199509,  1.2393589,    1.00283229,  0.847838998,   0.334216297,   1.42798901,   0.83637464,
          0.532146156,  -0.117309421, 0.124471284, -0.399447858,  -0.607184887,  -1.19060731},
      1e-4, 1e-5);
}

TEST(TransformerEncoderLayer, EqualsAFloat64CompositionOfItsPieces) {
  for (bool norm_first : {false, true}) {
    TransformerEncoderLayer enc(8, 4,
                                {.dim_feedforward = 16, .norm_first = norm_first, .key = random::key(1)});
    fill(enc);
    to64(enc);
    enc.eval_mode();
    const Array x = random_array({2, 5, 8}, float64, 2);
    const Array kpm(std::vector<bool>{false, false, false, true, true, false, false, false, false, false},
                    {2, 5});
    auto attn = [&](const Array& h) {
      return enc.self_attn(h, h, h, AttentionArgs{.key_padding_mask = kpm});
    };
    auto ff = [&](const Array& h) { return enc.linear2(maximum(enc.linear1(h), 0.0)); };
    Array ref;
    if (norm_first) {
      const Array h = x + attn(enc.norm1(x));
      ref = h + ff(enc.norm2(h));
    } else {
      const Array h = enc.norm1(x + attn(x));
      ref = enc.norm2(h + ff(h));
    }
    const Array y = enc(x, {.src_key_padding_mask = kpm});
    EXPECT_EQ(y.dtype(), float64);
    expect_close(y, values(ref), 1e-12, 1e-12);
  }
}

TEST(TransformerEncoderLayer, CachedDecodingMatchesTheCausalPass) {
  TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .key = random::key(3)});
  enc.eval_mode();
  const Array x = random_array({2, 5, 8}, float32, 4);
  const std::vector<double> full = values(enc(x, {.is_causal = true}));
  KVCache cache;
  std::vector<Array> outs;
  int64_t at = 0;
  for (int64_t len : {2, 1, 1, 1}) {
    const CachedLayerOutput out =
        enc.forward(slice(x, {0, at, 0}, {2, at + len, 8}), cache, 0, {.is_causal = true});
    cache = out.cache;
    outs.push_back(out.output);
    at += len;
  }
  EXPECT_EQ(cache.length(), 5);
  expect_close(concatenate(outs, 1), full, 1e-5, 1e-6);
}

TEST(TransformerEncoderLayer, DropoutInTrainingGradientsAndCustomActivation) {
  TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.3, .key = random::key(5)});
  const Array x = random_array({2, 3, 8}, float32, 6);
  EXPECT_TRUE(enc.dropout1->is_training());
  const Array key = random::key(7);
  const std::vector<double> a = values(enc(x, {.dropout_key = key}));
  EXPECT_EQ(values(enc(x, {.dropout_key = key})), a);
  EXPECT_NE(values(enc(x, {.dropout_key = random::key(8)})), a);
  enc.eval_mode();
  EXPECT_FALSE(enc.dropout->is_training());
  EXPECT_FALSE(enc.self_attn->is_training());
  const std::vector<double> e = values(enc(x));
  EXPECT_NE(a, e);
  EXPECT_EQ(values(enc(x)), e);  // eval is deterministic

  // A custom activation replaces relu.
  TransformerEncoderLayer tanh_layer(8, 2,
                                     {.dim_feedforward = 16,
                                      .dropout = 0.0,
                                      .custom_activation = [](const Array& h) { return tanh(h); },
                                      .key = random::key(5)});
  const Array h = tanh_layer.norm1(x + tanh_layer.self_attn(x, x, x));
  expect_close(tanh_layer(x), values(tanh_layer.norm2(h + tanh_layer.linear2(tanh(tanh_layer.linear1(h))))),
               1e-5, 1e-6);

  TransformerEncoderLayer small(
      4, 2, {.dim_feedforward = 6, .dropout = 0.0, .dtype = float64, .key = random::key(9)});
  check_vjp([&](const std::vector<Array>& in) { return small(in[0], {.is_causal = true}); },
            {random_array({1, 3, 4}, float64, 10)});
  EXPECT_THROW(TransformerEncoderLayer(6, 4), ValueError);
  EXPECT_THROW(TransformerEncoderLayer(8, 2, {.dropout = 1.0}), ValueError);
  EXPECT_THROW(enc(ones({2, 3, 5})), ShapeError);
}

TEST(TransformerDecoderLayer, KeysAreTorchsAndOutputsMatchLiteralTorchValues) {
  // /usr/bin/python3: list(torch.nn.TransformerDecoderLayer(8, 2, 12).state_dict()).
  TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 12});
  std::vector<std::string> keys = {"self_attn.in_proj_weight",
                                   "self_attn.in_proj_bias",
                                   "self_attn.out_proj.weight",
                                   "self_attn.out_proj.bias",
                                   "multihead_attn.in_proj_weight",
                                   "multihead_attn.in_proj_bias",
                                   "multihead_attn.out_proj.weight",
                                   "multihead_attn.out_proj.bias",
                                   "linear1.weight",
                                   "linear1.bias",
                                   "linear2.weight",
                                   "linear2.bias",
                                   "norm1.weight",
                                   "norm1.bias",
                                   "norm2.weight",
                                   "norm2.bias",
                                   "norm3.weight",
                                   "norm3.bias"};
  EXPECT_EQ(dec.parameters().keys(), keys);
  // dec filled as fill() does, eval; dec(wave((2, 3, 8), 0.33, 0.9), wave((2, 4, 8), 0.27, 1.4),
  // tgt_mask=upper triangle).
  fill(dec);
  dec.eval_mode();
  const Array tgt = wave({2, 3, 8}, 0.33, 0.9), memory = wave({2, 4, 8}, 0.27, 1.4);
  const std::vector<double> kDec = {
      0.0678051859, -0.0569658801,  0.0714240447,  -0.00696648005, 0.355763018,  -0.128570408,
      -0.492794037, -0.463124305,   -0.147047535,  0.183228463,    0.111993797,  0.0613571815,
      0.468304604,  -0.141810656,   -0.586725473,  -0.415663451,   0.0615750477, -0.0682647303,
      0.0794568956, -0.00619461527, 0.256175816,   -0.126276299,   -0.510500014, -0.448270589,
      0.0423275568, -0.0504621193,  0.063307032,   0.00750372699,  0.584473431,  -0.138138428,
      -0.474882483, -0.427903384,   -0.0511627756, 0.104798764,    0.124247208,  0.0206773318,
      0.232230574,  -0.135300457,   -0.630785286,  -0.470097631,   0.0594273545, -0.0523380823,
      0.0620005801, -0.00163141871, 0.491512001,   -0.133118823,   -0.468291253, -0.465741128};
  expect_close(dec(tgt, memory, {.tgt_is_causal = true}), kDec, 1e-4, 1e-5);
}

TEST(TransformerDecoderLayer, CompositionCacheAndDropout) {
  for (bool norm_first : {false, true}) {
    TransformerDecoderLayer dec(8, 2,
                                {.dim_feedforward = 16,
                                 .activation = TransformerActivation::gelu,
                                 .norm_first = norm_first,
                                 .dtype = float64,
                                 .key = random::key(11)});
    dec.eval_mode();
    const Array x = random_array({2, 4, 8}, float64, 12), mem = random_array({2, 3, 8}, float64, 13);
    const Array mpm(std::vector<bool>{false, true, false, false, false, false}, {2, 3});
    auto sa = [&](const Array& h) { return dec.self_attn(h, h, h, AttentionArgs{.causal = true}); };
    auto ca = [&](const Array& h) {
      return dec.multihead_attn(h, mem, mem, AttentionArgs{.key_padding_mask = mpm});
    };
    auto ff = [&](const Array& h) {
      const Array u = dec.linear1(h);
      return dec.linear2(u * (1.0 + erf(u / std::sqrt(2.0))) * 0.5);
    };
    Array ref;
    if (norm_first) {
      Array h = x + sa(dec.norm1(x));
      h = h + ca(dec.norm2(h));
      ref = h + ff(dec.norm3(h));
    } else {
      Array h = dec.norm1(x + sa(x));
      h = dec.norm2(h + ca(h));
      ref = dec.norm3(h + ff(h));
    }
    const DecoderLayerArgs args{.memory_key_padding_mask = mpm, .tgt_is_causal = true};
    const std::vector<double> full = values(dec(x, mem, args));
    expect_close(Array(full, {2, 4, 8}), values(ref), 1e-12, 1e-12);
    // Incremental decoding, one position at a time.
    KVCache cache;
    std::vector<Array> outs;
    for (int64_t t = 0; t < 4; ++t) {
      CachedLayerOutput out = dec.forward(slice(x, {0, t, 0}, {2, t + 1, 8}), mem, cache, 2, args);
      cache = std::move(out.cache);
      outs.push_back(out.output);
    }
    EXPECT_EQ(cache.length(2), 4);
    expect_close(concatenate(outs, 1), full, 1e-12, 1e-12);
  }
  TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16, .dropout = 0.5, .key = random::key(14)});
  const Array x = random_array({1, 3, 8}, float32, 15), mem = random_array({1, 2, 8}, float32, 16);
  const std::vector<double> a = values(dec(x, mem, {.dropout_key = random::key(17)}));
  EXPECT_EQ(values(dec(x, mem, {.dropout_key = random::key(17)})), a);
  dec.train(false);
  EXPECT_FALSE(dec.dropout3->is_training());
  EXPECT_NE(values(dec(x, mem)), a);
  EXPECT_THROW(dec(x, ones({1, 2, 6})), ShapeError);
}

}  // namespace
}  // namespace kiln::nn
