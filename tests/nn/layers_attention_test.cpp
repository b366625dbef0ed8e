// MultiHeadAttention (against a float64 loop reference and literal torch.nn.MultiheadAttention
// outputs), masks, the functional KV cache, and RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <thread>

#include "kiln/nn/layers/attention.h"
#include "kiln/nn/layers/rope.h"
#include "kiln/nn/materialized_module.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Inputs reproducible in Python: sin(a i + b) + 0.1 cos(3 i), rounded to float32, times gain.
Array wave(const Shape& shape, double a, double b, double gain = 1.0) {
  std::vector<double> v(shape_size(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = static_cast<double>(i);
    v[i] = std::sin(a * d + b) + 0.1 * std::cos(3.0 * d);
  }
  return astype(Array(v, shape, float64), float32) * static_cast<float>(gain);
}

using MaskFn = std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)>;

struct Reference {
  std::vector<double> out;      // (B, Lq, E)
  std::vector<double> weights;  // (B, H, Lq, Lk)
};

// Multi-head attention in float64 with plain loops, from the module's parameters.
Reference attention_ref(const MultiHeadAttention& m, const Array& query, const Array& key, const Array& value,
                        const MaskFn& mask = nullptr) {
  const int64_t e = m.embed_dim(), nh = m.num_heads(), d = m.head_dim(), kd = m.kdim(), vd = m.vdim();
  const int64_t nb = query.shape()[0], lq = query.shape()[1], lk = key.shape()[1];
  std::vector<double> wq, wk, wv;
  if (m.in_proj_weight.has_value()) {
    const std::vector<double> w = values(m.in_proj_weight.value());
    wq.assign(w.begin(), w.begin() + e * e);
    wk.assign(w.begin() + e * e, w.begin() + 2 * e * e);
    wv.assign(w.begin() + 2 * e * e, w.end());
  } else {
    wq = values(m.q_proj_weight.value()), wk = values(m.k_proj_weight.value()),
    wv = values(m.v_proj_weight.value());
  }
  const std::vector<double> bin =
      m.in_proj_bias.has_value() ? values(m.in_proj_bias.value()) : std::vector<double>(3 * e, 0.0);
  const std::vector<double> wo = values(m.out_proj->weight.value());
  const std::vector<double> bo =
      m.out_proj->bias.has_value() ? values(m.out_proj->bias.value()) : std::vector<double>(e, 0.0);
  const std::vector<double> q = values(query), k = values(key), v = values(value);
  auto project = [&](const std::vector<double>& x, int64_t b, int64_t len, int64_t in,
                     const std::vector<double>& w, int64_t bias_at) {
    std::vector<double> p(len * e);
    for (int64_t i = 0; i < len; ++i)
      for (int64_t o = 0; o < e; ++o) {
        double acc = bin[bias_at + o];
        for (int64_t f = 0; f < in; ++f) acc += x[(b * len + i) * in + f] * w[o * in + f];
        p[i * e + o] = acc;
      }
    return p;
  };
  Reference r{std::vector<double>(nb * lq * e), std::vector<double>(nb * nh * lq * lk)};
  for (int64_t b = 0; b < nb; ++b) {
    const auto qp = project(q, b, lq, e, wq, 0), kp = project(k, b, lk, kd, wk, e),
               vp = project(v, b, lk, vd, wv, 2 * e);
    std::vector<double> heads(lq * e, 0.0);
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        std::vector<double> s(lk);
        double top = -kInf;
        for (int64_t j = 0; j < lk; ++j) {
          double acc = 0;
          for (int64_t c = h * d; c < (h + 1) * d; ++c) acc += qp[i * e + c] * kp[j * e + c];
          s[j] = acc / std::sqrt(static_cast<double>(d)) + (mask ? mask(b, h, i, j) : 0.0);
          top = std::max(top, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < lk; ++j) z += (s[j] = std::exp(s[j] - top));
        for (int64_t j = 0; j < lk; ++j) {
          const double p = s[j] / z;
          r.weights[((b * nh + h) * lq + i) * lk + j] = p;
          for (int64_t c = h * d; c < (h + 1) * d; ++c) heads[i * e + c] += p * vp[j * e + c];
        }
      }
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t o = 0; o < e; ++o) {
        double acc = bo[o];
        for (int64_t c = 0; c < e; ++c) acc += heads[i * e + c] * wo[o * e + c];
        r.out[(b * lq + i) * e + o] = acc;
      }
  }
  return r;
}

// Weights averaged over heads: (B, H, Lq, Lk) -> (B, Lq, Lk).
std::vector<double> head_average(const std::vector<double>& w, int64_t nb, int64_t nh, int64_t lq,
                                 int64_t lk) {
  std::vector<double> avg(nb * lq * lk, 0.0);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < lq * lk; ++t) avg[b * lq * lk + t] += w[(b * nh + h) * lq * lk + t] / nh;
  return avg;
}

// ---- MultiHeadAttention

TEST(MultiHeadAttention, ParametersHavePyTorchsNamesShapesAndInit) {
  // /usr/bin/python3: list(torch.nn.MultiheadAttention(6, 2).state_dict()) and with kdim/vdim, bias=False.
  MultiHeadAttention m(6, 2, {.key = random::key(1)});
  EXPECT_EQ(m.parameters().keys(),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m.in_proj_weight.value().shape(), (Shape{18, 6}));
  expect_close(m.in_proj_bias.value(), std::vector<double>(18, 0.0));
  expect_close(m.out_proj->bias.value(), std::vector<double>(6, 0.0));
  const double xavier = std::sqrt(6.0 / (18 + 6));
  for (double w : values(m.in_proj_weight.value())) EXPECT_LE(std::abs(w), xavier);
  for (double w : values(m.out_proj->weight.value())) EXPECT_LE(std::abs(w), 1.0 / std::sqrt(6.0));
  MultiHeadAttention kv(4, 2, {.kdim = 3, .vdim = 5});
  EXPECT_EQ(kv.parameters().keys(),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                      "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(kv.k_proj_weight.value().shape(), (Shape{4, 3}));
  EXPECT_EQ(kv.v_proj_weight.value().shape(), (Shape{4, 5}));
  MultiHeadAttention nb(4, 2, {.bias = false});
  EXPECT_EQ(nb.parameters().keys(), (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
  // Same key, same weights.
  MultiHeadAttention again(6, 2, {.key = random::key(1)});
  expect_close(again.in_proj_weight.value(), values(m.in_proj_weight.value()), 0, 0);
  expect_close(again.out_proj->weight.value(), values(m.out_proj->weight.value()), 0, 0);
}

TEST(MultiHeadAttention, MatchesLiteralTorchOutputs) {
  // /usr/bin/python3 (torch 1.13): m = torch.nn.MultiheadAttention(6, 2, batch_first=True) with
  // in_proj_weight = wave((18, 6), 0.31, 0.2, 0.4), in_proj_bias = wave((18,), 0.7, 0.5, 0.1),
  // out_proj.weight = wave((6, 6), 0.23, 1.3, 0.4), out_proj.bias = wave((6,), 0.9, 0.1, 0.1); eval;
  // m(q, k, v, attn_mask=mask, key_padding_mask=kpm, need_weights=True).
  MultiHeadAttention m(6, 2);
  m.update({{"in_proj_weight", wave({18, 6}, 0.31, 0.2, 0.4)},
            {"in_proj_bias", wave({18}, 0.7, 0.5, 0.1)},
            {"out_proj.weight", wave({6, 6}, 0.23, 1.3, 0.4)},
            {"out_proj.bias", wave({6}, 0.9, 0.1, 0.1)}});
  m.eval_mode();
  const Array q = wave({2, 3, 6}, 0.17, 0.3), k = wave({2, 4, 6}, 0.29, 0.8), v = wave({2, 4, 6}, 0.43, 1.7);
  const Array mask = Array(
      std::vector<bool>{false, true, false, false, false, false, false, true, true, false, false, false},
      {3, 4});
  const Array kpm = Array(std::vector<bool>{false, false, false, false, false, false, true, false}, {2, 4});
  const AttentionOutput out =
      m.forward(q, k, v, {.mask = mask, .key_padding_mask = kpm, .need_weights = true});
  expect_close(out.output,
               std::vector<double>{
                   -0.19933638,  0.107353926,   0.344685733, 0.0965148807, -0.247685909,    -0.257026196,
                   -0.271308511, -0.0661031678, 0.346059918, 0.274683148,  -0.171141803,    -0.396694243,
                   0.0317399353, 0.287943929,   0.181854099, -0.17005001,  -0.217687815,    0.00322800875,
                   -0.217692673, -0.192068338,  0.228062958, 0.359014064,  -0.000434603542, -0.392028719,
                   -0.170505151, 0.0311495923,  0.282526791, 0.143338889,  -0.171008229,    -0.273243129,
                   -0.244624034, 0.0995065942,  0.388064355, 0.120182328,  -0.283990592,    -0.296343535},
               1e-5, 1e-6);
  expect_close(out.weights,
               std::vector<double>{0.175926775, 0, 0.422248662, 0.401824594, 0.409598887, 0.135020703,
                                   0.45538035,  0, 0,           0.222372264, 0.242631465, 0.534996271,
                                   0.6296345,   0, 0,           0.37036553,  0.419001848, 0.580998063,
                                   0,           0, 0,           0.766833425, 0,           0.233166575},
               1e-5, 1e-6);
  // kdim = 3, vdim = 5, a float mask, per-head weights:
  // m2(q, k, v, attn_mask=wave((2, 3), 0.5, 0.5, 0.7), need_weights=True, average_attn_weights=False).
  MultiHeadAttention m2(4, 2, {.kdim = 3, .vdim = 5});
  m2.update({{"q_proj_weight", wave({4, 4}, 0.31, 0.2, 0.5)},
             {"k_proj_weight", wave({4, 3}, 0.37, 0.4, 0.5)},
             {"v_proj_weight", wave({4, 5}, 0.41, 0.6, 0.5)},
             {"in_proj_bias", wave({12}, 0.7, 0.5, 0.1)},
             {"out_proj.weight", wave({4, 4}, 0.23, 1.3, 0.4)},
             {"out_proj.bias", wave({4}, 0.9, 0.1, 0.1)}});
  const AttentionOutput out2 =
      m2.forward(wave({1, 2, 4}, 0.17, 0.3), wave({1, 3, 3}, 0.29, 0.8), wave({1, 3, 5}, 0.43, 1.7),
                 {.mask = wave({2, 3}, 0.5, 0.5, 0.7), .need_weights = true, .average_attn_weights = false});
  expect_close(out2.output,
               std::vector<double>{0.076819174, 0.0813025609, 0.0514424667, -0.0485983938, 0.0238132719,
                                   0.0651022568, 0.0815739855, 0.00220773183},
               1e-5, 1e-6);
  expect_close(
      out2.weights,
      std::vector<double>{0.373062074, 0.403143406, 0.22379455, 0.50130564, 0.431199849, 0.0674945191,
                          0.338332862, 0.363580078, 0.29808709, 0.47793746, 0.40389505, 0.118167512},
      1e-5, 1e-6);
  EXPECT_EQ(out2.weights.shape(), (Shape{1, 2, 2, 3}));
}

TEST(MultiHeadAttention, MatchesTheLoopReferenceWithEveryKindOfMask) {
  MultiHeadAttention m(8, 4, {.dtype = float64, .key = random::key(2)});
  m.in_proj_bias = random_array({24}, float64, 3, -0.5, 0.5);
  m.out_proj->bias = random_array({8}, float64, 4, -0.5, 0.5);
  const Array q = random_array({2, 3, 8}, float64, 5), k = random_array({2, 5, 8}, float64, 6),
              v = random_array({2, 5, 8}, float64, 7);
  const double tol = 1e-12;
  // No mask; weights averaged and per head.
  Reference r = attention_ref(m, q, k, v);
  AttentionOutput out = m.forward(q, k, v, {.need_weights = true});
  expect_close(out.output, r.out, tol, tol);
  expect_close(out.weights, head_average(r.weights, 2, 4, 3, 5), tol, tol);
  expect_close(m.forward(q, k, v, {.need_weights = true, .average_attn_weights = false}).weights, r.weights,
               tol, tol);
  EXPECT_FALSE(m.forward(q, k, v).weights.valid());
  expect_close(m(q, k, v), r.out, tol, tol);

  // A float mask per batch and head (B, H, Lq, Lk), plus a bool key padding mask.
  const Array fmask = random_array({2, 4, 3, 5}, float64, 8, -2.0, 1.0);
  const std::vector<double> fm = values(fmask);
  const Array kpm =
      Array(std::vector<bool>{false, true, false, false, false, false, false, false, true, true}, {2, 5});
  const std::vector<bool> pad = {false, true, false, false, false, false, false, false, true, true};
  r = attention_ref(m, q, k, v, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return fm[((b * 4 + h) * 3 + i) * 5 + j] + (pad[b * 5 + j] ? -kInf : 0.0);
  });
  out = m.forward(
      q, k, v, {.mask = fmask, .key_padding_mask = kpm, .need_weights = true, .average_attn_weights = false});
  expect_close(out.output, r.out, tol, tol);
  expect_close(out.weights, r.weights, tol, tol);
  // A float key padding mask is added; a (H, 1, Lk) bool mask broadcasts.
  const Array kpf = random_array({2, 5}, float64, 9);
  const std::vector<double> kp = values(kpf);
  const Array hmask =
      Array(std::vector<bool>{true,  false, false, false, false, false, false, false, false, true,
                              false, false, true,  false, false, false, false, false, false, false},
            {4, 1, 5});
  r = attention_ref(m, q, k, v, [&](int64_t b, int64_t h, int64_t, int64_t j) {
    return kp[b * 5 + j] + ((h == 0 && j == 0) || (h == 1 && j == 4) || (h == 2 && j == 2) ? -kInf : 0.0);
  });
  expect_close(m(q, k, v, {.mask = hmask, .key_padding_mask = kpf}), r.out, tol, tol);
}

TEST(MultiHeadAttention, CausalFlagEqualsAnExplicitMask) {
  MultiHeadAttention m(8, 2, {.dtype = float64, .key = random::key(10)});
  const Array x = random_array({2, 5, 8}, float64, 11);
  std::vector<bool> upper(25);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) upper[i * 5 + j] = j > i;
  const Array mask(upper, {5, 5});
  expect_close(m(x, x, x, {.causal = true}), values(m(x, x, x, {.mask = mask})), 1e-12, 1e-12);
  // Lq < Lk: the queries are the last positions (bottom-right alignment).
  const Array q = random_array({2, 2, 8}, float64, 12);
  const Reference r = attention_ref(
      m, q, x, x, [](int64_t, int64_t, int64_t i, int64_t j) { return j > i + 3 ? -kInf : 0.0; });
  expect_close(m(q, x, x, {.causal = true}), r.out, 1e-12, 1e-12);
  // Combined with a mask: both apply.
  const Array first = Array(std::vector<bool>{true, false, false, false, false}, {1, 5});
  const Reference both = attention_ref(m, x, x, x, [](int64_t, int64_t, int64_t i, int64_t j) {
    return j > i || (j == 0 && i > 0) ? -kInf : 0.0;
  });
  // Row 0 would be fully masked by both (NaN, as PyTorch): compare rows 1.. only.
  const std::vector<double> got = values(m(x, x, x, {.mask = first, .causal = true}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 1; i < 5; ++i)
      for (int64_t c = 0; c < 8; ++c) {
        const int64_t at = (b * 5 + i) * 8 + c;
        EXPECT_NEAR(got[at], both.out[at], 1e-12) << b << "," << i << "," << c;
      }
  for (int64_t c = 0; c < 8; ++c) EXPECT_TRUE(std::isnan(got[c]));
}

TEST(MultiHeadAttention, IncrementalDecodingWithTheCacheMatchesTheFullCausalPass) {
  MultiHeadAttention m(8, 2, {.key = random::key(13)});
  const Array x = random_array({2, 6, 8}, float32, 14);
  const std::vector<double> full = values(m(x, x, x, {.causal = true}));
  KVCache cache;
  EXPECT_EQ(cache.length(), 0);
  std::vector<Array> pieces;
  int64_t at = 0;
  for (int64_t len : {3, 1, 2}) {  // a prefix of 3, then one step, then two at once
    const Array step = slice(x, {0, at, 0}, {2, at + len, 8});
    const CachedAttentionOutput out = m.forward(step, step, step, cache, 1, {.causal = true});
    EXPECT_EQ(cache.length(1), at);  // the cache passed in is unchanged
    cache = out.cache;
    at += len;
    EXPECT_EQ(cache.length(1), at);
    pieces.push_back(out.output);
  }
  EXPECT_EQ(cache.layers.size(), 2u);
  EXPECT_EQ(cache.length(0), 0);  // layer 1 only
  EXPECT_EQ(cache.layers[1].keys.shape(), (Shape{2, 2, 6, 4}));
  expect_close(concatenate(pieces, 1), full, 1e-5, 1e-6);
  // A cache from another configuration is refused.
  MultiHeadAttention other(8, 4);
  const Array one = slice(x, {0, 0, 0}, {2, 1, 8});
  EXPECT_THROW(other.forward(one, one, one, cache, 1), ShapeError);
  EXPECT_NO_THROW(other.forward(one, one, one, cache, 0));
}

TEST(MultiHeadAttention, ConstForwardServesThreadsEachWithItsOwnCache) {
  auto model = std::make_unique<MultiHeadAttention>(8, 2, MultiHeadAttentionOptions{.key = random::key(15)});
  const Array x = random_array({1, 4, 8}, float32, 16);
  const std::vector<double> full = values((*model)(x, x, x, {.causal = true}));
  const MaterializedModule<MultiHeadAttention> shared(std::move(model));
  std::vector<std::vector<double>> results(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      Exclusive<KVCache> cache;
      std::vector<Array> outs;
      for (int64_t i = 0; i < 4; ++i) {
        const Array step = slice(x, {0, i, 0}, {1, i + 1, 8});
        cache.with([&](KVCache& c) {
          CachedAttentionOutput out = shared->forward(step, step, step, c);
          c = std::move(out.cache);
          outs.push_back(out.output);
        });
      }
      results[t] = values(concatenate(outs, 1));
    });
  for (auto& th : threads) th.join();
  for (const auto& r : results) {
    ASSERT_EQ(r.size(), full.size());
    for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(r[i], full[i], 1e-5);
  }
}

TEST(MultiHeadAttention, SelfAttentionUnbatchedInputsAndDropout) {
  MultiHeadAttention m(6, 3, {.dropout = 0.4, .key = random::key(17)});
  const Array x = random_array({2, 4, 6}, float32, 18);
  const Array copy = x * 1.0f;  // another array: the separate-projection path
  m.eval_mode();
  const std::vector<double> self = values(m(x, x, x));
  expect_close(m(x, copy, copy), self, 1e-5, 1e-6);
  // Unbatched (L, E) input is batch 1 without the batch axis.
  const Array x0 = slice(x, {0, 0, 0}, {1, 4, 6});
  const AttentionOutput u = m.forward(reshape(x0, {4, 6}), reshape(x0, {4, 6}), reshape(x0, {4, 6}),
                                      {.key_padding_mask = zeros({4}, bool_), .need_weights = true});
  EXPECT_EQ(u.output.shape(), (Shape{4, 6}));
  EXPECT_EQ(u.weights.shape(), (Shape{4, 4}));
  expect_close(u.output, std::vector<double>(self.begin(), self.begin() + 24), 1e-5, 1e-6);
  // Training: dropout on the weights, reproducible by key; eval ignores it.
  m.train();
  const Array key = random::key(19);
  const std::vector<double> a = values(m(x, x, x, {.dropout_key = key}));
  EXPECT_EQ(values(m(x, x, x, {.dropout_key = key})), a);
  EXPECT_NE(a, self);
  const AttentionOutput w =
      m.forward(x, x, x, {.need_weights = true, .average_attn_weights = false, .dropout_key = key});
  int zeros_seen = 0;
  for (double p : values(w.weights)) zeros_seen += p == 0;
  EXPECT_GT(zeros_seen, 0);
  MultiHeadAttention no_drop(6, 3, {.key = random::key(17)});
  expect_close(no_drop(x, x, x), self, 1e-6, 1e-6);  // p = 0 in training is the eval output
}

TEST(MultiHeadAttention, GradientsMatchFiniteDifferences) {
  MultiHeadAttention m(4, 2, {.kdim = 3, .dtype = float64, .key = random::key(20)});
  const Array q = random_array({1, 2, 4}, float64, 21), k = random_array({1, 3, 3}, float64, 22),
              v = random_array({1, 3, 4}, float64, 23);
  const Array mask = random_array({2, 3}, float64, 24);
  check_vjp([&](const std::vector<Array>& a) { return m(a[0], a[1], a[2], {.mask = mask}); }, {q, k, v});
  MultiHeadAttention s(4, 2, {.dtype = float64, .key = random::key(25)});
  check_vjp(
      [&](const std::vector<Array>& a) {
        s.in_proj_weight.reset(a[1]);
        s.out_proj->weight.reset(a[2]);
        return s(a[0], a[0], a[0], {.causal = true});
      },
      {random_array({2, 3, 4}, float64, 26), s.in_proj_weight.value(), s.out_proj->weight.value()});
}

TEST(MultiHeadAttention, ErrorsNameTheProblem) {
  EXPECT_THROW(MultiHeadAttention(6, 4), ValueError);
  EXPECT_THROW(MultiHeadAttention(0, 1), ValueError);
  EXPECT_THROW(MultiHeadAttention(4, 2, {.dropout = 1.0}), ValueError);
  EXPECT_THROW(MultiHeadAttention(4, 2, {.kdim = 0}), ValueError);
  MultiHeadAttention m(4, 2);
  const Array x = ones({2, 3, 4});
  EXPECT_THROW(m(ones({2, 3, 5}), x, x), ShapeError);
  EXPECT_THROW(m(x, ones({2, 2, 4}), x), ShapeError);                // key and value lengths differ
  EXPECT_THROW(m(x, ones({1, 3, 4}), ones({1, 3, 4})), ShapeError);  // batch differs
  EXPECT_THROW(m(ones({3, 4}), x, x), ShapeError);                   // ranks differ
  EXPECT_THROW(m(ones({2, 3, 4}, int32), x, x), DtypeError);
  try {
    m(x, x, x, {.mask = zeros({4, 3}, bool_)});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("MultiHeadAttention"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m(x, x, x, {.mask = zeros({3, 3}, int32)}), DtypeError);
  EXPECT_THROW(m(x, x, x, {.key_padding_mask = zeros({3, 2}, bool_)}), ShapeError);
}

// ---- RoPE

// Rotates features of (rows, seq, features) by the loop formula.
std::vector<double> rope_ref(const std::vector<double>& x, int64_t rows, int64_t seq, int64_t features,
                             int64_t dims, bool traditional, double base, double scale, int64_t offset) {
  std::vector<double> y = x;
  const int64_t half = dims / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t row = (r * seq + t) * features;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(offset + t) * scale *
                             std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dims));
        const int64_t a = traditional ? 2 * i : i, b = traditional ? 2 * i + 1 : i + half;
        y[row + a] = x[row + a] * std::cos(theta) - x[row + b] * std::sin(theta);
        y[row + b] = x[row + a] * std::sin(theta) + x[row + b] * std::cos(theta);
      }
    }
  return y;
}

TEST(RoPE, MatchesTheLoopReferenceInBothLayouts) {
  const Array x = random_array({2, 3, 5, 10}, float64, 27);
  for (bool traditional : {false, true}) {
    RoPE full(10, {.traditional = traditional});
    expect_close(full(x), rope_ref(values(x), 6, 5, 10, 10, traditional, 10000, 1, 0), 1e-12, 1e-12);
    RoPE part(6, {.traditional = traditional, .base = 500.0, .scale = 0.5});
    expect_close(part(x, 7), rope_ref(values(x), 6, 5, 10, 6, traditional, 500, 0.5, 7), 1e-12, 1e-12);
  }
  const Array xf = astype(x, float32);
  expect_close(RoPE(8)(xf, 3), rope_ref(values(xf), 6, 5, 10, 8, false, 10000, 1, 3), 1e-5, 1e-6);
  EXPECT_EQ(RoPE(8)(astype(x, bfloat16)).dtype(), bfloat16);
  EXPECT_TRUE(RoPE(8).parameters().empty());
}

TEST(RoPE, OffsetMatchesSlicingALongerSequence) {
  RoPE rope(8);
  const Array x = random_array({2, 9, 8}, float32, 28);
  const std::vector<double> all = values(rope(x));
  const Array tail = slice(x, {0, 4, 0}, {2, 9, 8});
  expect_close(rope(tail, 4), values(slice(rope(x), {0, 4, 0}, {2, 9, 8})), 1e-6, 1e-6);
  EXPECT_EQ(all.size(), 144u);
  RoPE trad(8, {.traditional = true});
  expect_close(trad(tail, 4), values(slice(trad(x), {0, 4, 0}, {2, 9, 8})), 1e-6, 1e-6);
  check_vjp([&](const std::vector<Array>& a) { return rope(a[0], 2); },
            {random_array({1, 3, 8}, float64, 29)});
}

TEST(RoPE, Errors) {
  EXPECT_THROW(RoPE(5), ValueError);
  EXPECT_THROW(RoPE(0), ValueError);
  EXPECT_THROW(RoPE(4, {.base = -1}), ValueError);
  RoPE r(8);
  EXPECT_THROW(r(ones({3, 6})), ShapeError);
  EXPECT_THROW(r(ones({8})), ShapeError);
  EXPECT_THROW(r(ones({2, 8}, int32)), DtypeError);
  EXPECT_THROW(r(ones({2, 8}), -1), ValueError);
}

}  // namespace
}  // namespace kiln::nn
