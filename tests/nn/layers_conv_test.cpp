// Conv1d, Conv2d, ConvTranspose2d, MaxPool2d and AvgPool2d: forward against float64 loop
// references written here, PyTorch literals, parameter keys and shapes, initialization bounds,
// gradients by finite differences, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kiln/nn/layers/conv.h"
#include "kiln/nn/layers/pooling.h"
#include "kiln/nn/value_and_grad.h"
#include "support/op_test.h"

namespace kiln::nn {
namespace {

using test::expect_close;
using test::random_array;
using test::values;
using Vec = std::vector<double>;

// ---------------------------------------------------------------- references (plain loops)

struct Geo {
  int sh = 1, sw = 1;    // stride
  int plh = 0, plw = 0;  // padding before
  int phh = 0, phw = 0;  // padding after
  int dh = 1, dw = 1;    // dilation
  int groups = 1;
};

// Cross-correlation of x (n, c, h, w) with w (o, c / groups, kh, kw), zero padding.
Vec conv2d_ref(const Vec& x, const Shape& xs, const Vec& w, const Shape& ws, const Vec& b, const Geo& g,
               Shape& out_shape) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  const int64_t oh = (h + g.plh + g.phh - g.dh * (kh - 1) - 1) / g.sh + 1;
  const int64_t ow = (wd + g.plw + g.phw - g.dw * (kw - 1) - 1) / g.sw + 1;
  out_shape = {n, o, oh, ow};
  Vec out(static_cast<size_t>(n * o * oh * ow));
  const int64_t og = o / g.groups;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b.empty() ? 0.0 : b[oc];
          const int64_t grp = oc / og;
          for (int64_t cc = 0; cc < cg; ++cc)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t r = i * g.sh - g.plh + a * g.dh, s = j * g.sw - g.plw + q * g.dw;
                if (r < 0 || r >= h || s < 0 || s >= wd) continue;
                acc += x[((in * c + grp * cg + cc) * h + r) * wd + s] * w[((oc * cg + cc) * kh + a) * kw + q];
              }
          out[((in * o + oc) * oh + i) * ow + j] = acc;
        }
  return out;
}

// Transposed convolution: each input element scatters weight[ci, co_local] into the output.
Vec conv_transpose2d_ref(const Vec& x, const Shape& xs, const Vec& w, const Shape& ws, const Vec& b, int s,
                         int p, int op, int d, int groups, Shape& out_shape) {
  const int64_t n = xs[0], ci = xs[1], h = xs[2], wd = xs[3], og = ws[1], kh = ws[2], kw = ws[3];
  const int64_t co = og * groups, ig = ci / groups;
  const int64_t oh = (h - 1) * s - 2 * p + d * (kh - 1) + op + 1,
                ow = (wd - 1) * s - 2 * p + d * (kw - 1) + op + 1;
  out_shape = {n, co, oh, ow};
  Vec out(static_cast<size_t>(n * co * oh * ow), 0.0);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < wd; ++j)
          for (int64_t ol = 0; ol < og; ++ol)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t r = i * s - p + a * d, t = j * s - p + q * d;
                if (r < 0 || r >= oh || t < 0 || t >= ow) continue;
                const int64_t oc = (c / ig) * og + ol;
                out[((in * co + oc) * oh + r) * ow + t] +=
                    x[((in * ci + c) * h + i) * wd + j] * w[((c * og + ol) * kh + a) * kw + q];
              }
  if (!b.empty())
    for (int64_t in = 0; in < n; ++in)
      for (int64_t oc = 0; oc < co; ++oc)
        for (int64_t k = 0; k < oh * ow; ++k) out[(in * co + oc) * oh * ow + k] += b[oc];
  return out;
}

int64_t pool_size(int64_t n, int k, int s, int p, int d, bool ceil_mode) {
  const int64_t span = n + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

struct PoolCase {
  int kh, kw, sh, sw, ph, pw, dh = 1, dw = 1;
  bool ceil_mode = false;
};

// Max over the real (unpadded) elements of each window.
Vec maxpool_ref(const Vec& x, const Shape& xs, const PoolCase& c, Shape& out_shape) {
  const int64_t nc = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t oh = pool_size(h, c.kh, c.sh, c.ph, c.dh, c.ceil_mode);
  const int64_t ow = pool_size(w, c.kw, c.sw, c.pw, c.dw, c.ceil_mode);
  out_shape = {xs[0], xs[1], oh, ow};
  Vec out;
  for (int64_t m = 0; m < nc; ++m)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity();
        for (int a = 0; a < c.kh; ++a)
          for (int q = 0; q < c.kw; ++q) {
            const int64_t r = i * c.sh - c.ph + a * c.dh, s = j * c.sw - c.pw + q * c.dw;
            if (r >= 0 && r < h && s >= 0 && s < w) best = std::max(best, x[(m * h + r) * w + s]);
          }
        out.push_back(best);
      }
  return out;
}

// PyTorch's avg_pool2d divisor rules, written out per window.
Vec avgpool_ref(const Vec& x, const Shape& xs, const PoolCase& c, bool include_pad, int divisor_override,
                Shape& out_shape) {
  const int64_t nc = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t oh = pool_size(h, c.kh, c.sh, c.ph, 1, c.ceil_mode);
  const int64_t ow = pool_size(w, c.kw, c.sw, c.pw, 1, c.ceil_mode);
  out_shape = {xs[0], xs[1], oh, ow};
  Vec out;
  for (int64_t m = 0; m < nc; ++m)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t r0 = i * c.sh - c.ph, s0 = j * c.sw - c.pw;
        const int64_t r1 = std::min<int64_t>(r0 + c.kh, h + c.ph),
                      s1 = std::min<int64_t>(s0 + c.kw, w + c.pw);
        double total = 0.0;
        int64_t real = 0;
        for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r1, h); ++r)
          for (int64_t s = std::max<int64_t>(s0, 0); s < std::min(s1, w); ++s) {
            total += x[(m * h + r) * w + s];
            ++real;
          }
        const double div = divisor_override > 0 ? divisor_override
                           : include_pad        ? static_cast<double>((r1 - r0) * (s1 - s0))
                                                : static_cast<double>(real);
        out.push_back(total / div);
      }
  return out;
}

// A function of {x, parameters...} for check_vjp: the parameters (in parameters() order) are put
// into the module before it runs. The module must hold float64 parameters.
template <class M>
test::Fn with_params(M& m) {
  return [&m](const std::vector<Array>& a) {
    const auto keys = m.parameters().keys();
    ParamTree p;
    for (size_t i = 0; i < keys.size(); ++i) p.set(keys[i], a[i + 1]);
    m.update(p);
    return m(a[0]);
  };
}
template <class M>
std::vector<Array> inputs_and_params(const M& m, const Array& x) {
  std::vector<Array> in{x};
  for (const Array& v : m.parameters().values()) in.push_back(v);
  return in;
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

std::vector<std::string> keys(const Module& m) { return m.parameters().keys(); }

// ---------------------------------------------------------------- Conv2d

TEST(Conv2d, KeysShapesAndInitMatchPyTorch) {
  Conv2d c(3, 8, 3, {.key = random::key(1)});
  EXPECT_EQ(keys(c), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(c.weight.value().shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(c.bias.value().shape(), (Shape{8}));
  EXPECT_EQ(c.weight.value().dtype(), float32);
  const double bound = 1.0 / std::sqrt(27.0);
  double wmax = 0.0, bmax = 0.0;
  for (double v : values(c.weight.value())) wmax = std::max(wmax, std::abs(v));
  for (double v : values(c.bias.value())) bmax = std::max(bmax, std::abs(v));
  EXPECT_LE(wmax, bound);
  EXPECT_GT(wmax, 0.8 * bound);  // 216 draws fill the interval
  EXPECT_LE(bmax, bound);
  EXPECT_GT(bmax, 0.0);

  Conv2d g(4, 6, {3, 2}, {.groups = 2, .bias = false, .dtype = float64, .key = random::key(2)});
  EXPECT_EQ(keys(g), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(g.weight.value().shape(), (Shape{6, 2, 3, 2}));
  EXPECT_EQ(g.weight.value().dtype(), float64);
  for (double v : values(g.weight.value())) EXPECT_LE(std::abs(v), 1.0 / std::sqrt(12.0));
  // The same key gives the same weights; the default key sequence gives fresh ones.
  Conv2d same(3, 8, 3, {.key = random::key(1)});
  EXPECT_EQ(values(same.weight.value()), values(c.weight.value()));
  Conv2d a(3, 8, 3), b(3, 8, 3);
  EXPECT_NE(values(a.weight.value()), values(b.weight.value()));
}

struct Conv2dCase {
  int64_t in, out;
  IntPair k;
  Conv2dOptions o;
  Shape x;
  Geo ref;  // the same geometry for the reference (per-side padding)
};

TEST(Conv2d, MatchesTheLoopReference) {
  const Conv2dCase cases[] = {
      {3, 4, 3, {}, {2, 3, 6, 5}, {}},
      {3, 4, 3, {.padding = 1}, {2, 3, 6, 5}, {.plh = 1, .plw = 1, .phh = 1, .phw = 1}},
      {2,
       3,
       {3, 2},
       {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}},
       {1, 2, 7, 6},
       {.sh = 2, .plh = 1, .phh = 1, .dw = 2}},
      {4,
       6,
       3,
       {.stride = 2, .padding = 2, .dilation = 2, .groups = 2},
       {2, 4, 8, 7},
       {.sh = 2, .sw = 2, .plh = 2, .plw = 2, .phh = 2, .phw = 2, .dh = 2, .dw = 2, .groups = 2}},
      {4, 4, 3, {.groups = 4, .bias = false}, {1, 4, 5, 5}, {.groups = 4}},
      // "same" with an even kernel: the odd padding unit goes at the bottom/right, as PyTorch.
      {2, 3, {4, 3}, {.padding = "same"}, {1, 2, 5, 6}, {.plh = 1, .plw = 1, .phh = 2, .phw = 1}},
      {2,
       3,
       3,
       {.padding = "same", .dilation = {2, 1}},
       {1, 2, 6, 4},
       {.plh = 2, .plw = 1, .phh = 2, .phw = 1, .dh = 2}},
      {2, 3, 2, {.padding = "valid"}, {1, 2, 4, 4}, {}},
  };
  uint64_t seed = 10;
  for (const Conv2dCase& c : cases) {
    Conv2dOptions o = c.o;
    o.dtype = float64;
    o.key = random::key(seed);
    Conv2d conv(c.in, c.out, c.k, o);
    const Array x = random_array(c.x, float64, ++seed);
    Shape ys;
    const Vec ref = conv2d_ref(values(x), c.x, values(conv.weight.value()), conv.weight.value().shape(),
                               conv.bias.has_value() ? values(conv.bias.value()) : Vec{}, c.ref, ys);
    const Array y = conv(x);
    EXPECT_EQ(y.shape(), ys) << "case " << seed;
    expect_close(y, ref, 1e-12, 1e-12);
    if (c.x[0] == 1) {  // unbatched input gives the unbatched output
      const Array yu = conv(reshape(x, {c.x[1], c.x[2], c.x[3]}));
      EXPECT_EQ(yu.shape(), (Shape{ys[1], ys[2], ys[3]}));
      expect_close(yu, ref, 1e-12, 1e-12);
    }
  }
  // float32 parameters and input: float32 result within float32 tolerance.
  Conv2d c32(3, 2, 3, {.padding = 1, .key = random::key(40)});
  const Array x32 = random_array({1, 3, 4, 4}, float32, 41);
  Shape ys;
  const Vec ref = conv2d_ref(values(x32), {1, 3, 4, 4}, values(c32.weight.value()), {2, 3, 3, 3},
                             values(c32.bias.value()), {.plh = 1, .plw = 1, .phh = 1, .phw = 1}, ys);
  EXPECT_EQ(c32(x32).dtype(), float32);
  expect_close(c32(x32), ref);
}

TEST(Conv2d, GradientsOfInputWeightAndBias) {
  Conv2d c(4, 2, {2, 3},
           {.stride = {1, 2}, .padding = 1, .groups = 2, .dtype = float64, .key = random::key(3)});
  test::check_vjp(with_params(c), inputs_and_params(c, random_array({2, 4, 4, 5}, float64, 4)));
  Conv2d same(2, 2, 2, {.padding = "same", .dtype = float64, .key = random::key(5)});
  test::check_vjp(with_params(same), inputs_and_params(same, random_array({1, 2, 3, 4}, float64, 6)));
}

TEST(Conv2d, RejectsBadOptionsAndInputs) {
  expect_error<ValueError>([] { Conv2d(0, 2, 3); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, {3, 0}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, 3, {.stride = {1, 0}}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, 3, {.padding = -1}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, 3, {.dilation = 0}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(3, 2, 3, {.groups = 2}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 3, 3, {.groups = 2}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, 3, {.groups = 0}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, 3, {.padding = "full"}); }, "Conv2d");
  expect_error<ValueError>([] { Conv2d(2, 2, 3, {.stride = 2, .padding = "same"}); }, "Conv2d");
  Conv2d c(3, 2, 3, {.key = random::key(7)});
  expect_error<ShapeError>([&] { c(ones({1, 4, 5, 5})); }, "Conv2d");     // wrong channel count
  expect_error<ShapeError>([&] { c(ones({4, 5, 5})); }, "Conv2d");        // unbatched, wrong channels
  expect_error<ShapeError>([&] { c(ones({3, 5})); }, "Conv2d");           // rank 2
  expect_error<ShapeError>([&] { c(ones({1, 1, 3, 5, 5})); }, "Conv2d");  // rank 5
  expect_error<ShapeError>([&] { c(ones({1, 3, 2, 5})); }, "Conv2d");     // smaller than the kernel
  expect_error<DtypeError>([&] { c(ones({1, 3, 5, 5}, int32)); }, "Conv2d");
  expect_error<ValueError>([&] { c(Array()); }, "Conv2d");
}

// ---------------------------------------------------------------- Conv1d

TEST(Conv1d, MatchesTheLoopReferenceAndPyTorchShapes) {
  Conv1d plain(3, 5, 4, {.key = random::key(8)});
  EXPECT_EQ(keys(plain), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(plain.weight.value().shape(), (Shape{5, 3, 4}));
  for (double v : values(plain.weight.value())) EXPECT_LE(std::abs(v), 1.0 / std::sqrt(12.0));
  struct Case {
    int64_t in, out;
    int k;
    Conv1dOptions o;
    Shape x;
    Geo ref;
  };
  const Case cases[] = {
      {3, 5, 4, {}, {2, 3, 9}, {}},
      {4,
       2,
       3,
       {.stride = 2, .padding = 1, .dilation = 2, .groups = 2},
       {2, 4, 10},
       {.sw = 2, .plw = 1, .phw = 1, .dw = 2, .groups = 2}},
      {2, 2, 4, {.padding = "same", .bias = false}, {1, 2, 7}, {.plw = 1, .phw = 2}},
      {2, 2, 3, {.padding = "same", .dilation = 3}, {1, 2, 7}, {.plw = 3, .phw = 3, .dw = 3}},
      {2, 2, 3, {.padding = "valid"}, {1, 2, 5}, {}},
  };
  uint64_t seed = 50;
  for (const Case& c : cases) {
    Conv1dOptions o = c.o;
    o.dtype = float64;
    o.key = random::key(seed);
    Conv1d conv(c.in, c.out, c.k, o);
    const Array x = random_array(c.x, float64, ++seed);
    Shape ys;
    const Shape ws = conv.weight.value().shape();
    const Vec ref = conv2d_ref(values(x), {c.x[0], c.x[1], 1, c.x[2]}, values(conv.weight.value()),
                               {ws[0], ws[1], 1, ws[2]},
                               conv.bias.has_value() ? values(conv.bias.value()) : Vec{}, c.ref, ys);
    const Array y = conv(x);
    EXPECT_EQ(y.shape(), (Shape{ys[0], ys[1], ys[3]}));
    expect_close(y, ref, 1e-12, 1e-12);
    if (c.x[0] == 1) expect_close(conv(reshape(x, {c.x[1], c.x[2]})), ref, 1e-12, 1e-12);
  }
  Conv1d g(2, 4, 3, {.padding = "same", .groups = 2, .dtype = float64, .key = random::key(9)});
  test::check_vjp(with_params(g), inputs_and_params(g, random_array({2, 2, 6}, float64, 10)));
}

TEST(Conv1d, RejectsBadOptionsAndInputs) {
  expect_error<ValueError>([] { Conv1d(2, 2, 0); }, "Conv1d");
  expect_error<ValueError>([] { Conv1d(2, 2, 3, {.stride = 0}); }, "Conv1d");
  expect_error<ValueError>([] { Conv1d(2, 2, 3, {.padding = -2}); }, "Conv1d");
  expect_error<ValueError>([] { Conv1d(2, 2, 3, {.padding = "SAME"}); }, "Conv1d");
  expect_error<ValueError>([] { Conv1d(2, 2, 3, {.stride = 3, .padding = "same"}); }, "Conv1d");
  expect_error<ValueError>([] { Conv1d(3, 3, 3, {.groups = 2}); }, "Conv1d");
  Conv1d c(2, 3, 3, {.key = random::key(11)});
  expect_error<ShapeError>([&] { c(ones({1, 3, 8})); }, "Conv1d");
  expect_error<ShapeError>([&] { c(ones({1, 2, 8, 8})); }, "Conv1d");
  expect_error<ShapeError>([&] { c(ones({8})); }, "Conv1d");
  expect_error<ShapeError>([&] { c(ones({1, 2, 2})); }, "Conv1d");
  expect_error<DtypeError>([&] { c(ones({1, 2, 8}, int64)); }, "Conv1d");
}

// ---------------------------------------------------------------- ConvTranspose2d

// Deterministic values shared with the PyTorch script below.
Vec formula(int64_t n, double a, double b, double scale, bool use_sin) {
  Vec v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * (use_sin ? std::sin(a * i + b) : std::cos(a * i + b));
  return v;
}

TEST(ConvTranspose2d, MatchesPyTorchWithStridePaddingAndOutputPadding) {
  // /usr/bin/python3 (torch 1.13):
  //   x = tensor([sin(0.37 i + 0.1) for i in range(12)]).reshape(1, 2, 2, 3)
  //   w = tensor([0.5 cos(0.23 i) for i in range(54)]).reshape(2, 3, 3, 3); b = [-0.1, 0, 0.1]
  //   m = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1).double()
  //   m.weight, m.bias = w, b; print(m(x).flatten())
  const Vec expected = {
      0.172745663212,   0.446612940849,   0.181713272626,    0.416348474138,  0.152552312168,
      0.071410203788,   0.22550345956,    0.397637932387,    0.0831756779089, 0.0805859323183,
      -0.0839440724312, -0.187361365715,  0.0892095810332,   0.159718316704,  0.000258220728354,
      -0.0319136861164, -0.10226261942,   -0.113309021516,   -0.123166789725, -0.18173038363,
      -0.129989950663,  -0.197046376128,  -0.132754112468,   -0.140128682634, -0.406249830871,
      -0.822051212115,  -0.436556682972,  -0.826094569637,   -0.407777636013, -0.411928203575,
      -0.595004649693,  -1.13077233494,   -0.535934629387,   -0.942537972665, -0.404328371176,
      -0.347588446137,  -0.323807798991,  -0.513342652978,   -0.196012095426, -0.238876883532,
      -0.0416870742801, -0.0348196964858, -0.274526779649,   -0.406040168812, -0.155829614372,
      -0.150686113397,  -0.016041641819,  -0.00511995269479, 0.216219491984,  0.340462530945,
      0.236269271711,   0.374598322803,   0.23787564478,     0.32299172689,   0.344185579852,
      0.68502353189,    0.429956588134,   0.821849960466,    0.471069520108,  0.520160996932,
      0.220821196132,   0.331783191755,   0.187414165385,    0.260627095981,  0.142176037432,
      0.146647247451,   0.386013302725,   0.570494797241,    0.279189496194,  0.341321260766,
      0.148113231969,   0.145030797154};
  ConvTranspose2d m(2, 3, 3, {.stride = 2, .padding = 1, .output_padding = 1, .dtype = float64});
  EXPECT_EQ(keys(m), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(m.weight.value().shape(), (Shape{2, 3, 3, 3}));  // (in, out / groups, kH, kW)
  m.weight = Array(formula(54, 0.23, 0.0, 0.5, false), {2, 3, 3, 3}, float64);
  m.bias = Array(Vec{-0.1, 0.0, 0.1}, {3}, float64);
  const Array x(formula(12, 0.37, 0.1, 1.0, true), {1, 2, 2, 3}, float64);
  const Array y = m(x);
  EXPECT_EQ(y.shape(), (Shape{1, 3, 4, 6}));
  expect_close(y, expected, 1e-10, 1e-11);
}

TEST(ConvTranspose2d, MatchesTheLoopReference) {
  struct Case {
    int64_t in, out;
    int k, s, p, op, d, groups;
    Shape x;
  };
  const Case cases[] = {
      {2, 3, 3, 1, 0, 0, 1, 1, {2, 2, 3, 4}}, {2, 3, 4, 2, 1, 0, 1, 1, {1, 2, 3, 3}},
      {4, 6, 3, 2, 1, 1, 1, 2, {2, 4, 3, 2}}, {2, 2, 3, 3, 2, 2, 2, 1, {1, 2, 3, 3}},
      {2, 4, 2, 1, 0, 2, 3, 2, {1, 2, 2, 3}},  // output_padding >= stride, allowed by dilation 3
      {3, 2, 5, 1, 3, 0, 1, 1, {1, 3, 4, 4}},  // padding past the kernel's reach: output cropped
  };
  uint64_t seed = 60;
  for (const Case& c : cases) {
    ConvTranspose2d m(c.in, c.out, c.k,
                      {.stride = c.s,
                       .padding = c.p,
                       .output_padding = c.op,
                       .groups = c.groups,
                       .dilation = c.d,
                       .dtype = float64,
                       .key = random::key(seed)});
    EXPECT_EQ(m.weight.value().shape(), (Shape{c.in, c.out / c.groups, c.k, c.k}));
    const Array x = random_array(c.x, float64, ++seed);
    Shape ys;
    const Vec ref = conv_transpose2d_ref(values(x), c.x, values(m.weight.value()), m.weight.value().shape(),
                                         values(m.bias.value()), c.s, c.p, c.op, c.d, c.groups, ys);
    const Array y = m(x);
    EXPECT_EQ(y.shape(), ys) << "case " << seed;
    expect_close(y, ref, 1e-12, 1e-12);
    if (c.x[0] == 1) expect_close(m(reshape(x, {c.x[1], c.x[2], c.x[3]})), ref, 1e-12, 1e-12);
  }
  // Init bound: fan_in of the (in, out / groups, kH, kW) weight is out / groups * kH * kW.
  ConvTranspose2d big(16, 2, 3, {.key = random::key(70)});
  double wmax = 0.0;
  for (double v : values(big.weight.value())) wmax = std::max(wmax, std::abs(v));
  EXPECT_LE(wmax, 1.0 / std::sqrt(18.0));
  EXPECT_GT(wmax, 0.8 / std::sqrt(18.0));
}

TEST(ConvTranspose2d, GradientsVmapAndModuleGradients) {
  ConvTranspose2d m(4, 2, {3, 2},
                    {.stride = {2, 1},
                     .padding = {1, 0},
                     .output_padding = {1, 0},
                     .groups = 2,
                     .dtype = float64,
                     .key = random::key(12)});
  test::check_vjp(with_params(m), inputs_and_params(m, random_array({2, 4, 3, 3}, float64, 13)));
  test::check_second_order([&](const std::vector<Array>& a) { return m(a[0]) * m(a[0]); },
                           {random_array({1, 4, 2, 2}, float64, 14)});
  // vmap over a batch of unbatched images equals the batched call.
  const Array xs = random_array({3, 4, 2, 3}, float64, 15);
  const Array ys = vmap([&](const Array& x) { return m(x); })(xs);
  expect_close(ys, values(m(xs)), 1e-12, 1e-12);
  // compile traces through the inner vjp.
  auto compiled = compile([&](const std::vector<Array>& a) { return std::vector<Array>{m(a[0])}; });
  expect_close(compiled({xs})[0], values(m(xs)), 1e-12, 1e-12);
  // nn::value_and_grad reaches the weight through the transposed convolution.
  auto step = value_and_grad(m, [&](const Array& x) { return sum(m(x) * m(x)); });
  auto [loss, grads] = step(xs);
  EXPECT_EQ(grads.keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(grads.at("weight").shape(), m.weight.value().shape());
  EXPECT_GT(values(sum(abs(grads.at("weight"))))[0], 0.0);
}

TEST(ConvTranspose2d, RejectsBadOptionsAndInputs) {
  const char* who = "ConvTranspose2d";
  expect_error<ValueError>([] { ConvTranspose2d(2, 2, 3, {.stride = 2, .output_padding = 2}); }, who);
  expect_error<ValueError>([] { ConvTranspose2d(2, 2, 3, {.output_padding = 1}); }, who);
  expect_error<ValueError>([] { ConvTranspose2d(2, 2, 3, {.padding = -1}); }, who);
  expect_error<ValueError>([] { ConvTranspose2d(2, 3, 3, {.groups = 2}); }, who);
  expect_error<ValueError>([] { ConvTranspose2d(2, 2, 0); }, who);
  expect_error<ValueError>([] { ConvTranspose2d(2, 2, 3, {.stride = 0}); }, who);
  ConvTranspose2d m(2, 3, 3, {.padding = 4, .key = random::key(16)});
  expect_error<ShapeError>([&] { m(ones({1, 3, 4, 4})); }, who);
  expect_error<ShapeError>([&] { m(ones({2, 4, 4})); }, who);
  expect_error<ShapeError>([&] { m(ones({1, 2, 2, 2})); }, who);  // output size (2 - 1) - 8 + 2 + 1 < 1
  expect_error<DtypeError>([&] { m(ones({1, 2, 8, 8}, int32)); }, who);
}

// ---------------------------------------------------------------- pooling

TEST(MaxPool2d, MatchesTheLoopReference) {
  const PoolCase cases[] = {
      {2, 2, 2, 2, 0, 0},              // tiling windows (the reshape path)
      {3, 3, 2, 2, 1, 1},              // overlapping, padded
      {3, 2, 1, 2, 1, 0, 2, 1},        // dilation
      {3, 3, 2, 2, 1, 1, 1, 1, true},  // ceil_mode
      {2, 2, 2, 2, 0, 0, 1, 1, true},  // ceil_mode on the tiling path: a partial last window
      {2, 3, 3, 2, 1, 1, 2, 1, true},
  };
  for (const PoolCase& c : cases) {
    MaxPool2d pool({c.kh, c.kw}, {.stride = IntPair(c.sh, c.sw),
                                  .padding = {c.ph, c.pw},
                                  .dilation = {c.dh, c.dw},
                                  .ceil_mode = c.ceil_mode});
    const Shape xs{2, 3, 7, 8};
    const Array x = random_array(xs, float64, 20 + c.kh * 10 + c.sw);
    Shape ys;
    const Vec ref = maxpool_ref(values(x), xs, c, ys);
    const Array y = pool(x);
    EXPECT_EQ(y.shape(), ys);
    expect_close(y, ref, 0, 0);
    expect_close(pool(reshape(x, {6, 7, 8})), ref, 0, 0);  // unbatched (C, H, W)
    test::check_vjp([&](const std::vector<Array>& a) { return pool(a[0]); }, {x});
  }
  MaxPool2d pool(2);
  EXPECT_TRUE(pool.parameters().empty());
  // vmap over unbatched images equals the batched call (both paths: tiling and general windows).
  const Array xb = random_array({3, 2, 5, 6}, float64, 31);
  MaxPool2d overlapping(3, {.stride = 2, .padding = 1});
  for (const MaxPool2d* p : {&pool, &overlapping})
    expect_close(vmap([&](const Array& v) { return (*p)(v); })(xb), values((*p)(xb)), 0, 0);
  const Array x32 = random_array({1, 2, 4, 6}, float32, 30);
  EXPECT_EQ(pool(x32).dtype(), float32);
  EXPECT_EQ(pool(x32).shape(), (Shape{1, 2, 2, 3}));
}

TEST(MaxPool2d, MatchesPyTorchInCeilModeAndRoutesTheGradientToTheFirstMaximum) {
  // /usr/bin/python3: x = tensor([sin(0.37 i + 0.1) for i in range(30)]).reshape(1, 1, 5, 6);
  //   nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)(x), and MaxPool2d(2, 2, padding=1, ceil_mode=True)
  const Array x(formula(30, 0.37, 0.1, 1.0, true), {1, 1, 5, 6}, float64);
  expect_close(
      MaxPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true})(x),
      Vec{0.73223144403, 0.935616001553, 0.999957646499, 0.928959715004, 0.749174348332, 0.999871708718,
          0.999871708718, 0.727573290971, 0.749174348332, 0.999871708718, 0.999871708718, 0.727573290971},
      1e-11, 1e-11);
  expect_close(
      MaxPool2d(2, {.stride = 2, .padding = 1, .ceil_mode = true})(x),
      Vec{0.0998334166468, 0.744643119971, 0.999957646499, 0.928959715004, 0.73223144403, 0.43639908216,
          -0.26015749143, 0.106611693781, 0.458951486378, 0.937999976775, 0.999871708718, 0.727573290971},
      1e-11, 1e-11);
  // Ties: all of the gradient goes to the first maximum in row-major order, as PyTorch.
  const Array tied(Vec{1, 3, 3, 0, 2, 3, 3, 1}, {1, 1, 2, 4}, float64);
  auto [out, g] = vjp([](const std::vector<Array>& a) { return std::vector<Array>{MaxPool2d(2)(a[0])}; },
                      {tied}, {Array(Vec{1.0, 10.0}, {1, 1, 1, 2}, float64)});
  expect_close(out[0], Vec{3, 3}, 0, 0);
  expect_close(g[0], Vec{0, 1, 10, 0, 0, 0, 0, 0}, 0, 0);
  // A NaN in a window is its maximum.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Vec y = values(MaxPool2d(2)(Array(Vec{1, nan, 2, 5}, {1, 1, 2, 2}, float64)));
  EXPECT_TRUE(std::isnan(y[0]));
}

TEST(AvgPool2d, MatchesTheLoopReferenceAndPyTorch) {
  const PoolCase cases[] = {
      {2, 2, 2, 2, 0, 0},
      {3, 3, 2, 2, 1, 1},
      {3, 2, 1, 2, 1, 1, 1, 1, true},
      {3, 3, 2, 2, 1, 1, 1, 1, true},
      {2, 2, 3, 3, 1, 0, 1, 1, true},
  };
  for (const PoolCase& c : cases)
    for (bool include_pad : {true, false})
      for (int div : {0, 3}) {
        AvgPool2d pool({c.kh, c.kw}, {.stride = IntPair(c.sh, c.sw),
                                      .padding = {c.ph, c.pw},
                                      .ceil_mode = c.ceil_mode,
                                      .count_include_pad = include_pad,
                                      .divisor_override = div > 0 ? std::optional<int>(div) : std::nullopt});
        const Shape xs{2, 2, 7, 8};
        const Array x = random_array(xs, float64, 40 + c.kh + c.sh);
        Shape ys;
        const Vec ref = avgpool_ref(values(x), xs, c, include_pad, div, ys);
        EXPECT_EQ(pool(x).shape(), ys);
        expect_close(pool(x), ref, 1e-12, 1e-12);
        expect_close(pool(reshape(x, {4, 7, 8})), ref, 1e-12, 1e-12);
      }
  // /usr/bin/python3: x as in the MaxPool2d test; nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
  //   count_include_pad=True / False / divisor_override=2)(x)
  const Array x(formula(30, 0.37, 0.1, 1.0, true), {1, 1, 5, 6}, float64);
  expect_close(AvgPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true})(x),
               Vec{0.191261136468, 0.262957880921, 0.123530198379, 0.0120802901398, 0.0456711312891,
                   0.0561199816586, 0.0173152821402, -0.00371549823539, 0.190343508868, 0.205952021082,
                   0.021147454955, -0.0431250956076},
               1e-11, 1e-11);
  expect_close(AvgPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false})(x),
               Vec{0.430337557054, 0.394436821381, 0.185295297569, 0.0362408704194, 0.0685066969336,
                   0.0561199816586, 0.0173152821402, -0.00743099647077, 0.428272894953, 0.308928031622,
                   0.0317211824325, -0.129375286823},
               1e-11, 1e-11);
  expect_close(
      AvgPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true, .divisor_override = 2})(x),
      Vec{0.860675114108, 1.18331046414, 0.555885892706, 0.0362408704194, 0.205520090801, 0.252539917464,
          0.077918769631, -0.0111464947062, 0.856545789906, 0.926784094867, 0.0951635472975, -0.129375286823},
      1e-11, 1e-11);
  // nn.AvgPool2d(2, stride=2, padding=1, ceil_mode=True)(x)
  expect_close(
      AvgPool2d(2, {.stride = 2, .padding = 1, .ceil_mode = true})(x),
      Vec{0.0249583541617, 0.299382351337, 0.483893412013, 0.232239928751, -0.0632365843684, -0.326456226433,
          -0.437039168885, -0.187466570096, 0.222302235273, 0.367732581232, 0.11226941706, -0.0646876434114},
      1e-11, 1e-11);
  AvgPool2d pool(3, {.stride = 2, .padding = 1, .count_include_pad = false});
  EXPECT_TRUE(pool.parameters().empty());
  const Array xb = random_array({3, 2, 5, 6}, float64, 52);
  expect_close(vmap([&](const Array& v) { return pool(v); })(xb), values(pool(xb)), 1e-12, 1e-12);
  test::check_vjp([&](const std::vector<Array>& a) { return pool(a[0]); },
                  {random_array({1, 2, 5, 6}, float64, 50)});
  const Array x32 = random_array({1, 2, 4, 6}, float32, 51);
  EXPECT_EQ(AvgPool2d(2)(x32).dtype(), float32);
}

TEST(Pooling, RejectsBadOptionsAndInputs) {
  expect_error<ValueError>([] { MaxPool2d(0); }, "MaxPool2d");
  expect_error<ValueError>([] { MaxPool2d(2, {.stride = 0}); }, "MaxPool2d");
  expect_error<ValueError>([] { MaxPool2d(2, {.padding = 2}); }, "MaxPool2d");  // more than half the kernel
  expect_error<ValueError>([] { MaxPool2d(2, {.padding = -1}); }, "MaxPool2d");
  expect_error<ValueError>([] { MaxPool2d(2, {.dilation = 0}); }, "MaxPool2d");
  EXPECT_NO_THROW(MaxPool2d(2, {.padding = 2, .dilation = 3}));  // the dilated kernel spans 4
  expect_error<ValueError>([] { AvgPool2d(3, {.padding = 2}); }, "AvgPool2d");
  expect_error<ValueError>([] { AvgPool2d({2, 0}); }, "AvgPool2d");
  expect_error<ValueError>([] { AvgPool2d(2, {.divisor_override = 0}); }, "AvgPool2d");
  MaxPool2d mp(3);
  AvgPool2d ap(3);
  expect_error<ShapeError>([&] { mp(ones({4, 4})); }, "MaxPool2d");
  expect_error<ShapeError>([&] { ap(ones({1, 1, 1, 4, 4})); }, "AvgPool2d");
  expect_error<ShapeError>([&] { mp(ones({1, 1, 2, 4})); }, "MaxPool2d");  // output size 0
  expect_error<ShapeError>([&] { ap(ones({1, 1, 4, 2})); }, "AvgPool2d");
  expect_error<DtypeError>([&] { mp(ones({1, 1, 4, 4}, int32)); }, "MaxPool2d");
  expect_error<DtypeError>([&] { ap(ones({1, 1, 4, 4}, uint8)); }, "AvgPool2d");
}

}  // namespace
}  // namespace kiln::nn
