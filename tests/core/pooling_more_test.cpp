// max_pool1d/3d, avg_pool1d/2d/3d, adaptive_avg_pool1d/2d/3d and their nn layers: against float64
// loop references written here, PyTorch's output sizes, gradients (vjp, jvp, vmap, second order)
// and errors.
#include "kiln/nn/layers/pooling_more.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::check_jvp;
using test::check_second_order;
using test::check_vjp;
using test::check_vmap;
using test::expect_close;
using test::random_array;
using test::values;

using I3 = std::array<int, 3>;
using S3 = std::array<int64_t, 3>;

// A pooling configuration over (D, H, W); 1-d and 2-d ones have unit leading axes (k 1, s 1, p 0).
struct Pool3 {
  I3 k, s, p, d;
};

int64_t ref_out(int64_t n, int k, int s, int p, int d, bool ceil_mode) {
  // torch.nn.MaxPool1d's documented L_out, then PyTorch's rule that a last window must not start
  // in the right padding.
  const double span = static_cast<double>(n + 2 * p - d * (k - 1) - 1) / s;
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

// Max or average pooling of row-major (planes, D, H, W) values, in float64, by looping over every
// window's taps.
std::vector<double> ref_pool(const std::vector<double>& x, int64_t planes, S3 in, const Pool3& c, S3 out,
                             bool is_max, bool count_include_pad = true,
                             std::optional<int> divisor = std::nullopt) {
  std::vector<double> y;
  for (int64_t n = 0; n < planes; ++n)
    for (int64_t od = 0; od < out[0]; ++od)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow) {
          const int64_t o[3] = {od, oh, ow};
          double m = -INFINITY, sum = 0, pool_size = 1;
          int64_t count = 0;
          for (int a = 0; a < 3; ++a) {  // PyTorch's window extent, clipped to the padded input
            const int64_t start = o[a] * c.s[a] - c.p[a];
            pool_size *= static_cast<double>(std::min<int64_t>(start + c.k[a], in[a] + c.p[a]) - start);
          }
          for (int a = 0; a < c.k[0]; ++a)
            for (int b = 0; b < c.k[1]; ++b)
              for (int e = 0; e < c.k[2]; ++e) {
                const int64_t i = od * c.s[0] - c.p[0] + a * c.d[0], j = oh * c.s[1] - c.p[1] + b * c.d[1],
                              l = ow * c.s[2] - c.p[2] + e * c.d[2];
                if (i < 0 || i >= in[0] || j < 0 || j >= in[1] || l < 0 || l >= in[2]) continue;
                const double v = x[((n * in[0] + i) * in[1] + j) * in[2] + l];
                m = std::max(m, v);
                sum += v;
                ++count;
              }
          if (is_max)
            y.push_back(m);
          else
            y.push_back(sum / (divisor             ? *divisor
                               : count_include_pad ? pool_size
                                                   : static_cast<double>(count)));
        }
  return y;
}

// Adaptive average pooling of (planes, D, H, W) to `out`, windows [floor(i L / O), ceil((i + 1) L / O)).
std::vector<double> ref_adaptive(const std::vector<double>& x, int64_t planes, S3 in, S3 out) {
  const auto lo = [](int64_t i, int64_t l, int64_t o) {
    return static_cast<int64_t>(std::floor(static_cast<double>(i * l) / static_cast<double>(o)));
  };
  const auto hi = [](int64_t i, int64_t l, int64_t o) {
    return static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * l) / static_cast<double>(o)));
  };
  std::vector<double> y;
  for (int64_t n = 0; n < planes; ++n)
    for (int64_t od = 0; od < out[0]; ++od)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow) {
          double sum = 0;
          int64_t count = 0;
          for (int64_t i = lo(od, in[0], out[0]); i < hi(od, in[0], out[0]); ++i)
            for (int64_t j = lo(oh, in[1], out[1]); j < hi(oh, in[1], out[1]); ++j)
              for (int64_t l = lo(ow, in[2], out[2]); l < hi(ow, in[2], out[2]); ++l) {
                sum += x[((n * in[0] + i) * in[1] + j) * in[2] + l];
                ++count;
              }
          y.push_back(sum / static_cast<double>(count));
        }
  return y;
}

// EXPECT that fn throws E whose message names `who`.
template <class E, class F>
void expect_error(F&& fn, const std::string& who) {
  try {
    fn();
    ADD_FAILURE() << "expected an error naming " << who;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find("[" + who + "]"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- output sizes

TEST(PoolingMore, OutputSizesArePyTorchs) {
  // (L, kernel, stride, padding, dilation) -> L_out without and with ceil_mode, worked out from
  // torch.nn.MaxPool1d's documented formula (AvgPool1d's is the same with dilation 1).
  struct Case {
    int64_t l;
    int k, s, p, d;
    int64_t floor_out, ceil_out;
  };
  const Case cases[] = {
      {5, 2, 2, 0, 1, 2, 3},   // ceil_mode keeps the last, partial window
      {6, 3, 2, 1, 1, 3, 4},   //
      {1, 2, 2, 1, 1, 1, 1},   // ceil_mode's window would start in the right padding: dropped
      {10, 3, 1, 0, 2, 6, 6},  // dilation
      {7, 3, 3, 1, 1, 3, 3},   //
      {8, 4, 3, 2, 1, 3, 4},   //
      {9, 2, 4, 1, 2, 3, 3},   //
  };
  for (const Case& c : cases)
    for (bool ceil_mode : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "L " << c.l << " k " << c.k << " s " << c.s << " p " << c.p
                                        << " d " << c.d << " ceil " << ceil_mode);
      const int64_t expected = ceil_mode ? c.ceil_out : c.floor_out;
      EXPECT_EQ(ref_out(c.l, c.k, c.s, c.p, c.d, ceil_mode), expected);
      const Array x = random_array({1, 2, c.l}, float32, 1);
      EXPECT_EQ(max_pool1d(x, c.k, c.s, c.p, c.d, ceil_mode).shape(), (Shape{1, 2, expected}));
      const Array x3 = random_array({1, 1, c.l, 3, c.l}, float32, 2);
      EXPECT_EQ(
          max_pool3d(x3, {c.k, 1, c.k}, I3{c.s, 1, c.s}, {c.p, 0, c.p}, {c.d, 1, c.d}, ceil_mode).shape(),
          (Shape{1, 1, expected, 3, expected}));
      if (c.d != 1) continue;
      EXPECT_EQ(avg_pool1d(x, c.k, c.s, c.p, ceil_mode).shape(), (Shape{1, 2, expected}));
      EXPECT_EQ(avg_pool2d(random_array({2, c.l, 4}, float32, 3), {c.k, 1}, std::array<int, 2>{c.s, 1},
                           {c.p, 0}, ceil_mode)
                    .shape(),
                (Shape{2, expected, 4}));
      EXPECT_EQ(avg_pool3d(x3, {1, 1, c.k}, I3{1, 1, c.s}, {0, 0, c.p}, ceil_mode).shape(),
                (Shape{1, 1, c.l, 3, expected}));
    }
  // stride defaults to the kernel size.
  EXPECT_EQ(max_pool1d(random_array({1, 1, 9}, float32, 4), 3).shape(), (Shape{1, 1, 3}));
  EXPECT_EQ(avg_pool3d(random_array({2, 4, 6, 8}, float32, 5), {2, 3, 4}).shape(), (Shape{2, 2, 2, 2}));
}

// ---------------------------------------------------------------- max pooling

TEST(MaxPoolMore, MatchesTheLoopReference) {
  struct Case {
    S3 in;
    Pool3 c;
    bool ceil_mode;
  };
  const Case cases3[] = {
      {{4, 5, 6}, {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}}, false},
      {{5, 4, 5}, {{3, 2, 3}, {2, 1, 2}, {1, 1, 1}, {1, 1, 1}}, true},
      {{5, 6, 5}, {{2, 3, 2}, {1, 2, 3}, {1, 1, 0}, {2, 1, 2}}, false},
      {{3, 3, 7}, {{1, 3, 3}, {1, 1, 2}, {0, 1, 1}, {1, 1, 1}}, true},
  };
  for (Dtype t : {float64, float32, float16})
    for (const Case& k : cases3) {
      SCOPED_TRACE(::testing::Message()
                   << t << " in " << shape_str(Shape(k.in.begin(), k.in.end())) << " ceil " << k.ceil_mode);
      const Shape shape{2, 3, k.in[0], k.in[1], k.in[2]};
      const Array x = random_array(shape, t, 10);
      const Array y = max_pool3d(x, k.c.k, k.c.s, k.c.p, k.c.d, k.ceil_mode);
      S3 out;
      for (int a = 0; a < 3; ++a)
        out[a] = ref_out(k.in[a], k.c.k[a], k.c.s[a], k.c.p[a], k.c.d[a], k.ceil_mode);
      EXPECT_EQ(y.shape(), (Shape{2, 3, out[0], out[1], out[2]}));
      EXPECT_EQ(y.dtype(), t);
      expect_close(y, ref_pool(values(x), 6, k.in, k.c, out, true), 0, 0);
      // Unbatched input.
      const Array x1 = random_array({3, k.in[0], k.in[1], k.in[2]}, t, 11);
      expect_close(max_pool3d(x1, k.c.k, k.c.s, k.c.p, k.c.d, k.ceil_mode),
                   ref_pool(values(x1), 3, k.in, k.c, out, true), 0, 0);
    }
  struct Case1 {
    int64_t l;
    int k;
    std::optional<int> s;
    int p, d;
    bool ceil_mode;
  };
  const Case1 cases1[] = {{9, 3, std::nullopt, 0, 1, false},
                          {10, 4, 3, 2, 1, true},
                          {11, 3, 2, 1, 2, true},
                          {6, 2, 1, 1, 3, false}};
  for (Dtype t : {float64, float32, bfloat16})
    for (const Case1& k : cases1) {
      const int s = k.s.value_or(k.k);
      const Pool3 c{{1, 1, k.k}, {1, 1, s}, {0, 0, k.p}, {1, 1, k.d}};
      const S3 in{1, 1, k.l}, out{1, 1, ref_out(k.l, k.k, s, k.p, k.d, k.ceil_mode)};
      const Array x = random_array({2, 3, k.l}, t, 12);
      const Array y = max_pool1d(x, k.k, k.s, k.p, k.d, k.ceil_mode);
      EXPECT_EQ(y.shape(), (Shape{2, 3, out[2]}));
      expect_close(y, ref_pool(values(x), 6, in, c, out, true), 0, 0);
      const Array x1 = random_array({3, k.l}, t, 13);
      expect_close(max_pool1d(x1, k.k, k.s, k.p, k.d, k.ceil_mode), ref_pool(values(x1), 3, in, c, out, true),
                   0, 0);
    }
}

// The gradient goes to the first maximum in row-major (d, h, w) window order; a NaN is the
// maximum (the last NaN), as max_pool2d and PyTorch's CPU kernel.
TEST(MaxPoolMore, TiesAndNan) {
  const Array x = zeros({1, 1, 2, 2, 2}, float64);
  const Array g = grad([](const Array& a) { return sum(max_pool3d(a, {2, 2, 2})); })(x);
  expect_close(g, std::vector<double>{1, 0, 0, 0, 0, 0, 0, 0}, 0, 0);
  // The maximum 5 in slices d = 0 (at h, w = 1, 0) and d = 1 (at 0, 0): d = 0's wins.
  const Array t(std::vector<double>{1, 2, 5, 3, 5, 4, 0, 5}, {1, 1, 2, 2, 2});
  const Array gt = grad([](const Array& a) { return sum(max_pool3d(a, {2, 2, 2})); })(t);
  expect_close(gt, std::vector<double>{0, 0, 1, 0, 0, 0, 0, 0}, 0, 0);
  const double nan = std::nan("");
  const Array n(std::vector<double>{1, nan, 5, 3, nan, 4, 0, 5}, {1, 1, 2, 2, 2});
  expect_close(max_pool3d(n, {2, 2, 2}), std::vector<double>{nan}, 0, 0);
  const Array gn = grad([](const Array& a) { return sum(max_pool3d(a, {2, 2, 2})); })(n);
  expect_close(gn, std::vector<double>{0, 0, 0, 0, 1, 0, 0, 0}, 0, 0);
  // Windows (2, 2, 1) and (2, 1, 2): each one's first 2.
  const Array g1 = grad([](const Array& a) { return sum(max_pool1d(a, 3, 1)); })(
      reshape(Array({2.0, 2.0, 1.0, 2.0}), {1, 4}));
  expect_close(g1, std::vector<double>{1, 1, 0, 0}, 0, 0);
}

// ---------------------------------------------------------------- average pooling

TEST(AvgPoolMore, MatchesTheLoopReference) {
  struct Case {
    S3 in;
    Pool3 c;
    bool ceil_mode, count_include_pad;
    std::optional<int> divisor;
  };
  const I3 one{1, 1, 1};
  const Case cases[] = {
      {{4, 6, 6}, {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}, one}, false, true, std::nullopt},
      {{5, 5, 4}, {{3, 3, 2}, {2, 2, 2}, {1, 1, 1}, one}, true, true, std::nullopt},
      {{5, 5, 4}, {{3, 3, 2}, {2, 2, 2}, {1, 1, 1}, one}, true, false, std::nullopt},
      {{5, 4, 7}, {{2, 3, 3}, {1, 2, 3}, {1, 1, 1}, one}, true, true, 5},
      {{3, 7, 5}, {{3, 2, 4}, {3, 1, 2}, {0, 1, 2}, one}, false, false, std::nullopt},
  };
  for (Dtype t : {float64, float32, float16, bfloat16})
    for (const Case& k : cases) {
      SCOPED_TRACE(::testing::Message()
                   << t << " in " << shape_str(Shape(k.in.begin(), k.in.end())) << " ceil " << k.ceil_mode
                   << " count_include_pad " << k.count_include_pad);
      S3 out;
      for (int a = 0; a < 3; ++a) out[a] = ref_out(k.in[a], k.c.k[a], k.c.s[a], k.c.p[a], 1, k.ceil_mode);
      const auto tol = test::tolerance(t);
      // 3-d.
      const Array x = random_array({2, 2, k.in[0], k.in[1], k.in[2]}, t, 20);
      const Array y = avg_pool3d(x, k.c.k, k.c.s, k.c.p, k.ceil_mode, k.count_include_pad, k.divisor);
      EXPECT_EQ(y.shape(), (Shape{2, 2, out[0], out[1], out[2]}));
      EXPECT_EQ(y.dtype(), t);
      expect_close(y, ref_pool(values(x), 4, k.in, k.c, out, false, k.count_include_pad, k.divisor), tol.rtol,
                   tol.atol);
      // 2-d over (H, W), unbatched.
      const Pool3 c2{{1, k.c.k[1], k.c.k[2]}, {1, k.c.s[1], k.c.s[2]}, {0, k.c.p[1], k.c.p[2]}, one};
      const Array x2 = random_array({3, k.in[1], k.in[2]}, t, 21);
      const Array y2 = avg_pool2d(x2, {k.c.k[1], k.c.k[2]}, std::array<int, 2>{k.c.s[1], k.c.s[2]},
                                  {k.c.p[1], k.c.p[2]}, k.ceil_mode, k.count_include_pad, k.divisor);
      EXPECT_EQ(y2.shape(), (Shape{3, out[1], out[2]}));
      expect_close(y2,
                   ref_pool(values(x2), 3, {1, k.in[1], k.in[2]}, c2, {1, out[1], out[2]}, false,
                            k.count_include_pad, k.divisor),
                   tol.rtol, tol.atol);
      // 1-d over W.
      const Pool3 c1{{1, 1, k.c.k[2]}, {1, 1, k.c.s[2]}, {0, 0, k.c.p[2]}, one};
      const Array x1 = random_array({2, 3, k.in[2]}, t, 22);
      const Array y1 =
          avg_pool1d(x1, k.c.k[2], k.c.s[2], k.c.p[2], k.ceil_mode, k.count_include_pad, k.divisor);
      expect_close(
          y1,
          ref_pool(values(x1), 6, {1, 1, k.in[2]}, c1, {1, 1, out[2]}, false, k.count_include_pad, k.divisor),
          tol.rtol, tol.atol);
    }
}

// PyTorch, for x = arange(1, 8) as (1, 1, 7): F.avg_pool1d(x, 3, 2, 1, ceil_mode=True) and with
// count_include_pad=False.
TEST(AvgPoolMore, MatchesPyTorchValues) {
  const Array x = reshape(arange(1, 8, 1, float32), {1, 1, 7});
  expect_close(avg_pool1d(x, 3, 2, 1, true), std::vector<double>{1, 3, 5, 13.0 / 3});
  expect_close(avg_pool1d(x, 3, 2, 1, true, false), std::vector<double>{1.5, 3, 5, 6.5});
  expect_close(avg_pool1d(x, 2, 2, 0, true), std::vector<double>{1.5, 3.5, 5.5, 7});
  expect_close(avg_pool1d(x, 3, 2, 1, false, true, 2), std::vector<double>{1.5, 4.5, 7.5, 6.5});
}

// ---------------------------------------------------------------- adaptive average pooling

TEST(AdaptiveAvgPool, MatchesTheLoopReference) {
  struct Case {
    S3 in, out;
  };
  const Case cases[] = {{{4, 6, 8}, {2, 3, 4}},  // O divides L
                        {{5, 7, 6}, {3, 4, 4}},  // overlapping windows
                        {{3, 5, 2}, {1, 1, 1}},  // global
                        {{2, 3, 4}, {3, 5, 7}},  // O > L
                        {{6, 5, 9}, {6, 2, 4}}};
  for (Dtype t : {float64, float32, float16})
    for (const Case& k : cases) {
      SCOPED_TRACE(::testing::Message() << t << " in " << shape_str(Shape(k.in.begin(), k.in.end()))
                                        << " out " << shape_str(Shape(k.out.begin(), k.out.end())));
      const auto tol = test::tolerance(t);
      const Array x = random_array({2, 2, k.in[0], k.in[1], k.in[2]}, t, 30);
      const Array y = adaptive_avg_pool3d(x, k.out);
      EXPECT_EQ(y.shape(), (Shape{2, 2, k.out[0], k.out[1], k.out[2]}));
      EXPECT_EQ(y.dtype(), t);
      expect_close(y, ref_adaptive(values(x), 4, k.in, k.out), tol.rtol, tol.atol);
      const Array x2 = random_array({3, k.in[1], k.in[2]}, t, 31);
      const Array y2 = adaptive_avg_pool2d(x2, {k.out[1], k.out[2]});
      EXPECT_EQ(y2.shape(), (Shape{3, k.out[1], k.out[2]}));
      expect_close(y2, ref_adaptive(values(x2), 3, {1, k.in[1], k.in[2]}, {1, k.out[1], k.out[2]}), tol.rtol,
                   tol.atol);
      const Array x1 = random_array({2, 2, k.in[2]}, t, 32);
      expect_close(adaptive_avg_pool1d(x1, k.out[2]),
                   ref_adaptive(values(x1), 4, {1, 1, k.in[2]}, {1, 1, k.out[2]}), tol.rtol, tol.atol);
    }
}

TEST(AdaptiveAvgPool, InfinityStaysInItsWindows) {
  // L = 5 -> 3: windows [0, 2), [1, 4), [3, 5); an inf at 0 is in the first window only.
  const double inf = std::numeric_limits<double>::infinity();
  const Array x({inf, 1.0, 2.0, 3.0, 4.0});
  expect_close(adaptive_avg_pool1d(reshape(x, {1, 1, 5}), 3), std::vector<double>{inf, 2, 3.5}, 1e-12, 0);
  // PyTorch: F.adaptive_avg_pool1d(arange(1., 8.).view(1, 1, 7), 3) = [2, 4, 6].
  expect_close(adaptive_avg_pool1d(reshape(arange(1, 8, 1, float32), {1, 7}), 3),
               std::vector<double>{2, 4, 6});
}

// ---------------------------------------------------------------- rules

TEST(PoolingMore, GradientsJvpAndVmap) {
  using Fn = test::Fn;
  const Array x1 = random_array({2, 2, 7}, float64, 40);
  const Array x2 = random_array({2, 5, 6}, float64, 41);
  const Array x3 = random_array({1, 2, 4, 5, 3}, float64, 42);
  const std::vector<std::pair<Fn, Array>> cases = {
      {[](const std::vector<Array>& a) { return max_pool1d(a[0], 3, 2, 1, 1, true); }, x1},
      {[](const std::vector<Array>& a) { return max_pool1d(a[0], 2, 1, 1, 2); }, x1},
      {[](const std::vector<Array>& a) {
         return max_pool3d(a[0], {2, 3, 2}, I3{1, 2, 1}, {1, 1, 0});
       },
       x3},
      {[](const std::vector<Array>& a) {
         return max_pool3d(a[0], {2, 2, 2}, std::nullopt, {1, 0, 1}, {1, 2, 1}, true);
       },
       x3},
      {[](const std::vector<Array>& a) { return avg_pool1d(a[0], 3, 2, 1, true, false); }, x1},
      {[](const std::vector<Array>& a) {
         return avg_pool2d(a[0], {2, 3}, std::array<int, 2>{1, 2}, {1, 1}, true);
       },
       x2},
      {[](const std::vector<Array>& a) {
         return avg_pool2d(a[0], {2, 2});
       },
       x2},
      {[](const std::vector<Array>& a) {
         return avg_pool3d(a[0], {2, 2, 3}, I3{2, 1, 1}, {1, 1, 1}, true, false);
       },
       x3},
      {[](const std::vector<Array>& a) { return adaptive_avg_pool1d(a[0], 3); }, x1},
      {[](const std::vector<Array>& a) {
         return adaptive_avg_pool2d(a[0], {3, 4});
       },
       x2},
      {[](const std::vector<Array>& a) {
         return adaptive_avg_pool3d(a[0], {2, 3, 2});
       },
       x3},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i);
    check_vjp(cases[i].first, {cases[i].second});
    check_jvp(cases[i].first, {cases[i].second});
    check_vmap(cases[i].first, {cases[i].second});
  }
  check_second_order(
      [](const std::vector<Array>& a) {
        return avg_pool2d(a[0] * a[0], {2, 2}, std::nullopt, {1, 1});
      },
      {x2});
  check_second_order([](const std::vector<Array>& a) { return max_pool3d(a[0] * a[0], {2, 2, 2}); }, {x3});
  check_second_order([](const std::vector<Array>& a) { return adaptive_avg_pool1d(a[0] * a[0], 4); }, {x1});
}

TEST(PoolingMore, HalfGradientsKeepTheirDtype) {
  const Array x = random_array({1, 2, 6, 6}, float16, 43);
  const Array g = grad([](const Array& a) {
    return sum(avg_pool2d(a, {3, 3}, std::array<int, 2>{2, 2}, {1, 1}));
  })(x);
  EXPECT_EQ(g.dtype(), float16);
  const Array g64 = grad([](const Array& a) {
    return sum(avg_pool2d(a, {3, 3}, std::array<int, 2>{2, 2}, {1, 1}));
  })(astype(x, float64));
  expect_close(g, values(g64), 2e-3, 1e-3);
  const Array ga = grad([](const Array& a) { return sum(adaptive_avg_pool2d(a, {4, 4})); })(x);
  EXPECT_EQ(ga.dtype(), float16);
}

// ---------------------------------------------------------------- errors

TEST(PoolingMore, Errors) {
  const Array x1 = ones({1, 2, 6}), x3 = ones({1, 1, 4, 4, 4});
  expect_error<ShapeError>([&] { max_pool1d(ones({6}), 2); }, "max_pool1d");
  expect_error<ShapeError>([&] { max_pool3d(ones({1, 1, 1, 4, 4, 4}), {2, 2, 2}); }, "max_pool3d");
  expect_error<ShapeError>([&] { avg_pool2d(ones({4, 4}), {2, 2}); }, "avg_pool2d");
  expect_error<ShapeError>(
      [&] {
        adaptive_avg_pool2d(ones({1, 4, 4, 4, 4}), {2, 2});
      },
      "adaptive_avg_pool2d");
  expect_error<DtypeError>([&] { max_pool1d(ones({1, 2, 6}, int32), 2); }, "max_pool1d");
  expect_error<DtypeError>([&] { avg_pool3d(ones({1, 1, 4, 4, 4}, uint8), {2, 2, 2}); }, "avg_pool3d");
  expect_error<DtypeError>([&] { adaptive_avg_pool1d(ones({1, 2, 6}, bool_), 2); }, "adaptive_avg_pool1d");
  expect_error<ValueError>([&] { max_pool1d(x1, 0); }, "max_pool1d");
  expect_error<ValueError>([&] { max_pool1d(x1, 2, 0); }, "max_pool1d");
  expect_error<ValueError>([&] { max_pool1d(x1, 2, 1, 0, 0); }, "max_pool1d");
  expect_error<ValueError>([&] { max_pool1d(x1, 2, 1, 2); }, "max_pool1d");  // padding > half the kernel
  expect_error<ValueError>([&] { max_pool3d(x3, {2, 2, 2}, std::nullopt, {0, -1, 0}); }, "max_pool3d");
  expect_error<ValueError>([&] { avg_pool1d(x1, 3, 1, 2); }, "avg_pool1d");
  expect_error<ValueError>(
      [&] {
        avg_pool2d(ones({1, 1, 4, 4}), {2, 2}, std::nullopt, {0, 0}, false, true, 0);
      },
      "avg_pool2d");
  expect_error<ValueError>([&] { adaptive_avg_pool3d(x3, {2, 0, 2}); }, "adaptive_avg_pool3d");
  expect_error<ShapeError>([&] { max_pool1d(ones({1, 1, 2}), 3); }, "max_pool1d");  // output size 0
  expect_error<ShapeError>([&] { avg_pool3d(ones({1, 1, 4, 1, 4}), {2, 2, 2}); }, "avg_pool3d");
  expect_error<ShapeError>([&] { adaptive_avg_pool1d(ones({1, 2, 0}), 2); }, "adaptive_avg_pool1d");
  expect_error<ValueError>([&] { avg_pool1d(Array(), 2); }, "avg_pool1d");
  // An empty batch is fine.
  EXPECT_EQ(avg_pool1d(ones({0, 2, 6}), 2).shape(), (Shape{0, 2, 3}));
  EXPECT_EQ(max_pool3d(ones({0, 1, 4, 4, 4}), {2, 2, 2}).shape(), (Shape{0, 1, 2, 2, 2}));
}

// ---------------------------------------------------------------- layers

TEST(PoolingMoreLayers, RunTheirOpsAndCheckOptions) {
  using namespace nn;
  const Array x1 = random_array({2, 3, 9}, float32, 50), x3 = random_array({2, 1, 5, 6, 7}, float32, 51);
  expect_close(MaxPool1d(3, {.stride = 2, .padding = 1, .ceil_mode = true})(x1),
               max_pool1d(x1, 3, 2, 1, 1, true), 0, 0);
  expect_close(MaxPool1d(2)(x1), max_pool1d(x1, 2), 0, 0);
  expect_close(MaxPool3d({2, 3, 2}, {.stride = IntTriple(1, 2, 2), .padding = 1, .dilation = {1, 1, 2}})(x3),
               max_pool3d(x3, {2, 3, 2}, I3{1, 2, 2}, {1, 1, 1}, {1, 1, 2}), 0, 0);
  expect_close(AvgPool1d(3, {.stride = 2, .padding = 1, .count_include_pad = false})(x1),
               avg_pool1d(x1, 3, 2, 1, false, false), 0, 0);
  expect_close(AvgPool3d(2, {.ceil_mode = true, .divisor_override = 3})(x3),
               avg_pool3d(x3, {2, 2, 2}, std::nullopt, {0, 0, 0}, true, true, 3), 0, 0);
  expect_close(AdaptiveAvgPool1d(4)(x1), adaptive_avg_pool1d(x1, 4), 0, 0);
  expect_close(AdaptiveAvgPool2d({2, 3})(squeeze(x3, 1)), adaptive_avg_pool2d(squeeze(x3, 1), {2, 3}), 0, 0);
  expect_close(AdaptiveAvgPool3d(1)(x3), mean(x3, {2, 3, 4}, true), 1e-6, 1e-6);
  EXPECT_TRUE(AvgPool3d(2).parameters().keys().empty());
  EXPECT_TRUE(AdaptiveAvgPool2d(1).parameters().keys().empty());
  // Unbatched input.
  EXPECT_EQ(MaxPool3d(2)(random_array({1, 4, 4, 4}, float32, 52)).shape(), (Shape{1, 2, 2, 2}));
  expect_error<ValueError>([] { MaxPool1d(0); }, "MaxPool1d");
  expect_error<ValueError>([] { MaxPool1d(2, {.padding = 2}); }, "MaxPool1d");
  expect_error<ValueError>([] { MaxPool3d(2, {.dilation = {1, 0, 1}}); }, "MaxPool3d");
  expect_error<ValueError>([] { AvgPool1d(2, {.stride = 0}); }, "AvgPool1d");
  expect_error<ValueError>([] { AvgPool3d({3, 3, 1}, {.padding = {1, 2, 0}}); }, "AvgPool3d");
  expect_error<ValueError>([] { AvgPool3d(2, {.divisor_override = 0}); }, "AvgPool3d");
  expect_error<ValueError>([] { AdaptiveAvgPool1d(0); }, "AdaptiveAvgPool1d");
  expect_error<ValueError>([] { AdaptiveAvgPool2d({2, 0}); }, "AdaptiveAvgPool2d");
  expect_error<ValueError>([] { AdaptiveAvgPool3d(-1); }, "AdaptiveAvgPool3d");
  expect_error<ShapeError>([&] { MaxPool3d(2)(x1); }, "max_pool3d");
  // AvgPool2d now runs avg_pool2d.
  const Array x2 = random_array({2, 3, 7, 6}, float32, 53);
  expect_close(AvgPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false})(x2),
               avg_pool2d(x2, {3, 3}, std::array<int, 2>{2, 2}, {1, 1}, true, false), 0, 0);
}

}  // namespace
}  // namespace kiln
