// The fused scaled dot-product attention (core/ops/attention.h) on the CPU: against a float64 loop
// reference for every dtype, causal with Lk > Lq and Lk < Lq, bool and float masks, NaN rows,
// transposed views; gradients against finite differences, grad of grad, jvp against the vjp, vmap
// against a loop; and errors.
#include "kiln/core/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/transforms.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_second_order;
using test::check_vjp;
using test::expect_close;
using test::random_array;
using test::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax(scale q k^T + mask) v by plain float64 loops: q (n, lq, d), k (n, lk, d), v (n, lk, dv),
// mask (additive) n * lq * lk values or empty.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& mask, int64_t n,
                              int64_t lq, int64_t lk, int64_t d, int64_t dv, double scale, bool causal) {
  std::vector<double> out(static_cast<size_t>(n * lq * dv));
  std::vector<double> s(static_cast<size_t>(lk));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < lq; ++i) {
      double m = -kInf;
      for (int64_t j = 0; j < lk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += q[(b * lq + i) * d + c] * k[(b * lk + j) * d + c];
        s[j] = scale * dot + (mask.empty() ? 0.0 : mask[(b * lq + i) * lk + j]);
        if (causal && j > i + lk - lq) s[j] = -kInf;
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < lk; ++j) sum += (s[j] = std::exp(s[j] - m));
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < lk; ++j) acc += s[j] / sum * v[(b * lk + j) * dv + c];
        out[(b * lq + i) * dv + c] = acc;
      }
    }
  return out;
}

// The unfused graph the fused op replaces (nn::MultiHeadAttention's composite path).
Array composite(const Array& q, const Array& k, const Array& v, double scale, bool causal,
                const Array& mask = Array()) {
  Array scores = matmul(q * scale, swapaxes(k, -1, -2));
  if (mask.valid()) scores = mask.dtype() == bool_ ? where(mask, -kInf, scores) : scores + mask;
  if (causal) {
    const int64_t lq = q.shape(-2), lk = k.shape(-2);
    const Array qpos =
        reshape(arange(0, static_cast<double>(lq), 1, int32), {lq, 1}) + static_cast<int>(lk - lq);
    const Array kpos = reshape(arange(0, static_cast<double>(lk), 1, int32), {1, lk});
    scores = where(kpos > qpos, -kInf, scores);
  }
  return matmul(softmax(scores, -1), v);
}

struct Case {
  Shape lead;
  int64_t lq, lk, d, dv;
  bool causal;
};

const Case kCases[] = {
    {{2, 3}, 5, 5, 8, 8, false},   {{2, 3}, 7, 7, 16, 4, true}, {{1}, 3, 9, 4, 6, true},
    {{3}, 130, 130, 16, 16, true}, {{}, 1, 1, 3, 2, false},     {{2}, 70, 65, 64, 64, false},
};

// Example i of a batch-first array.
Array at(const Array& a, int64_t i) { return squeeze(slice(a, {Slice{i, i + 1}}), Axes{0}); }

int64_t prod(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}
Shape with(Shape lead, int64_t a, int64_t b) {
  lead.push_back(a);
  lead.push_back(b);
  return lead;
}

TEST(Attention, MatchesFloat64ReferenceForEveryDtype) {
  for (Dtype t : {float32, float64, float16, bfloat16})
    for (const Case& c : kCases) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " lq " << c.lq << " lk " << c.lk << " d " << c.d);
      const Array q = random_array(with(c.lead, c.lq, c.d), t, 1);
      const Array k = random_array(with(c.lead, c.lk, c.d), t, 2);
      const Array v = random_array(with(c.lead, c.lk, c.dv), t, 3);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      const Array out = scaled_dot_product_attention(q, k, v, scale, c.causal);
      ASSERT_EQ(out.shape(), with(c.lead, c.lq, c.dv));
      ASSERT_EQ(out.dtype(), t);
      const auto ref = reference(values(q), values(k), values(v), {}, prod(c.lead), c.lq, c.lk, c.d, c.dv,
                                 scale, c.causal);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 2e-6 : t == float16 ? 2e-3 : 1.6e-2;
      expect_close(out, ref, tol, tol);
    }
}

TEST(Attention, MasksBoolAndFloatBroadcast) {
  const Shape lead{2, 3};
  const int64_t lq = 6, lk = 9, d = 8;
  const Array q = random_array(with(lead, lq, d), float64, 4),
              k = random_array(with(lead, lk, d), float64, 5);
  const Array v = random_array(with(lead, lk, d), float64, 6);
  // Bool (lq, lk), broadcast over batch and heads; every row keeps at least one key.
  const Array bool_mask =
      greater(random_array({lq, lk}, float64, 7), 0.3) &&
      logical_not(equal(reshape(arange(0, static_cast<double>(lk), 1, int32), {1, lk}), 0));
  const Array float_mask = random_array({3, 1, lk}, float64, 8, -2, 2);
  for (const Array& mask : {bool_mask, float_mask})
    for (bool causal : {false, true}) {
      const Array out = scaled_dot_product_attention(q, k, v, 0.5, causal, mask);
      const Array additive = mask.dtype() == bool_ ? where(mask, -kInf, zeros({}, float64)) : mask;
      const auto ref =
          reference(values(q), values(k), values(v), values(broadcast_to(additive, with(lead, lq, lk))),
                    prod(lead), lq, lk, d, d, 0.5, causal);
      expect_close(out, ref, 1e-12, 1e-12);
      expect_close(out, composite(q, k, v, 0.5, causal, mask), 1e-12, 1e-12);
    }
}

TEST(Attention, RowsThatSeeNoKeyAreNanAsTheComposite) {
  const Array q = random_array({2, 4, 8}, float32, 9), k = random_array({2, 3, 8}, float32, 10);
  const Array v = random_array({2, 3, 5}, float32, 11);
  // Causal with Lk < Lq: query 0 sees keys j <= 0 + 3 - 4 = -1, none.
  const Array out = scaled_dot_product_attention(q, k, v, 1.0, true);
  const Array ref = composite(q, k, v, 1.0, true);
  expect_close(out, ref, 1e-5, 1e-6);
  const auto got = values(out);
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_FALSE(std::isnan(got[5]));
  // A bool mask that masks a whole row.
  Array mask = zeros({4, 3}, bool_);
  mask = where(reshape(arange(0, 4, 1, int32), {4, 1}) == 2, true, mask);
  const Array masked = scaled_dot_product_attention(q, k, v, 1.0, false, mask);
  expect_close(masked, composite(q, k, v, 1.0, false, mask), 1e-5, 1e-6);
  EXPECT_TRUE(std::isnan(values(masked)[2 * 5]));
}

TEST(Attention, TransposedHeadViewsAsTheGptMakesThem) {
  // (B, T, H, D) -> (B, H, T, D) views: strided leading dims.
  const int64_t b = 2, t = 11, h = 3, d = 16;
  auto heads = [&](uint64_t seed) {
    return transpose(random_array({b, t, h, d}, float32, seed), {0, 2, 1, 3});
  };
  const Array q = heads(12), k = heads(13), v = heads(14);
  const Array out = scaled_dot_product_attention(q, k, v, 0.25, true);
  expect_close(out, composite(q, k, v, 0.25, true), 1e-5, 1e-6);
}

TEST(Attention, PromotesMixedDtypes) {
  const Array q = random_array({2, 3, 4}, float16, 15), k = random_array({2, 5, 4}, float32, 16);
  const Array v = random_array({2, 5, 4}, float32, 17);
  const Array out = scaled_dot_product_attention(q, k, v, 0.5);
  EXPECT_EQ(out.dtype(), float32);
  expect_close(out, composite(astype(q, float32), k, v, 0.5, false), 1e-5, 1e-6);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  const Array q = random_array({2, 5, 4}, float64, 18), k = random_array({2, 7, 4}, float64, 19);
  const Array v = random_array({2, 7, 3}, float64, 20);
  const Array fmask = random_array({5, 7}, float64, 21);
  for (bool causal : {false, true}) {
    check_vjp(
        [&](const std::vector<Array>& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], 0.7, causal);
        },
        {q, k, v});
    check_vjp(
        [&](const std::vector<Array>& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], 0.7, causal, x[3]);
        },
        {q, k, v, fmask});
  }
  // A query block boundary of the CPU kernel (64 queries) inside the sequence.
  const Array ql = random_array({1, 70, 4}, float64, 22), kl = random_array({1, 70, 4}, float64, 23);
  const Array vl = random_array({1, 70, 2}, float64, 24);
  check_vjp(
      [&](const std::vector<Array>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], 0.5, true); },
      {ql, kl, vl});
}

TEST(Attention, GradientsOfFloat32MatchTheComposite) {
  const Array q = random_array({2, 3, 9, 8}, float32, 25), k = random_array({2, 3, 12, 8}, float32, 26);
  const Array v = random_array({2, 3, 12, 8}, float32, 27);
  const Array u = random_array({2, 3, 9, 8}, float32, 28);
  auto loss = [&](bool fused) {
    return [&, fused](const std::vector<Array>& x) {
      const Array o = fused ? scaled_dot_product_attention(x[0], x[1], x[2], 0.3, true)
                            : composite(x[0], x[1], x[2], 0.3, true);
      return std::vector<Array>{sum(o * u)};
    };
  };
  const auto got = grad(loss(true), {0, 1, 2})({q, k, v});
  const auto want = grad(loss(false), {0, 1, 2})({q, k, v});
  for (size_t i = 0; i < 3; ++i) expect_close(got[i], want[i], 1e-4, 1e-5);
}

TEST(Attention, SecondOrder) {
  const Array q = random_array({1, 3, 4}, float64, 29), k = random_array({1, 4, 4}, float64, 30);
  const Array v = random_array({1, 4, 2}, float64, 31);
  check_second_order(
      [](const std::vector<Array>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], 0.8, true); },
      {q, k, v});
}

TEST(Attention, JvpAgreesWithTheComposite) {
  const Array q = random_array({2, 4, 3}, float64, 32), k = random_array({2, 6, 3}, float64, 33);
  const Array v = random_array({2, 6, 5}, float64, 34);
  const std::vector<Array> tangents{random_array({2, 4, 3}, float64, 35),
                                    random_array({2, 6, 3}, float64, 36),
                                    random_array({2, 6, 5}, float64, 37)};
  const auto [out, tout] = jvp(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{scaled_dot_product_attention(x[0], x[1], x[2], 0.6, true)};
      },
      {q, k, v}, tangents);
  const auto [ref, tref] = jvp(
      [](const std::vector<Array>& x) { return std::vector<Array>{composite(x[0], x[1], x[2], 0.6, true)}; },
      {q, k, v}, tangents);
  expect_close(out[0], ref[0], 1e-12, 1e-12);
  expect_close(tout[0], tref[0], 1e-10, 1e-10);
}

TEST(Attention, VmapMatchesALoop) {
  const Array q = random_array({3, 2, 4, 8}, float32, 38), k = random_array({2, 5, 8}, float32, 39);
  const Array v = random_array({3, 2, 5, 6}, float32, 40);
  // q and v batched at different axes, k shared.
  const Array qb = transpose(q, {1, 0, 2, 3});
  const auto f = vmap(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{scaled_dot_product_attention(x[0], x[1], x[2], 0.4, true)};
      },
      {1, -1, 0});
  const Array got = f({qb, k, v})[0];
  ASSERT_EQ(got.shape(), (Shape{3, 2, 4, 6}));
  for (int64_t i = 0; i < 3; ++i) {
    const Array want = composite(at(q, i), k, at(v, i), 0.4, true);
    expect_close(at(got, i), want, 1e-5, 1e-6);
  }
  // vmap of the gradient: per-example gradients of q.
  const auto per_example = vmap(
      [&](const std::vector<Array>& x) {
        return grad(
            [&](const std::vector<Array>& y) {
              return std::vector<Array>{sum(scaled_dot_product_attention(y[0], k, y[1], 0.4, true))};
            },
            {0})({x[0], x[1]});
      },
      {0, 0});
  const Array g = per_example({q, v})[0];
  for (int64_t i = 0; i < 3; ++i) {
    const Array want = grad(
        [&](const std::vector<Array>& y) {
          return std::vector<Array>{sum(composite(y[0], k, at(v, i), 0.4, true))};
        },
        {0})({at(q, i)})[0];
    expect_close(at(g, i), want, 1e-4, 1e-5);
  }
}

TEST(Attention, Errors) {
  const Array q = random_array({2, 4, 8}, float32, 41), k = random_array({2, 5, 8}, float32, 42);
  const Array v = random_array({2, 5, 3}, float32, 43);
  EXPECT_THROW(scaled_dot_product_attention(astype(q, int32), k, v, 1.0), DtypeError);
  EXPECT_THROW(scaled_dot_product_attention(q, random_array({2, 5, 7}, float32, 44), v, 1.0), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, random_array({2, 6, 3}, float32, 45), 1.0), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, random_array({3, 5, 8}, float32, 46), v, 1.0), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(random_array({8}, float32, 47), k, v, 1.0), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, kInf), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, 1.0, false, zeros({4, 6}, bool_)), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, 1.0, false, zeros({4, 5}, int32)), DtypeError);
  EXPECT_THROW(scaled_dot_product_attention(Array(), k, v, 1.0), ValueError);
}

}  // namespace
}  // namespace kiln
