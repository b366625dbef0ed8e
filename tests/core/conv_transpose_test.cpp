// conv_transpose1d/2d/3d against a direct scatter loop and PyTorch's output sizes, conv3d and
// conv_general against the definition in loops (float64), the adjoint identity with conv2d,
// gradients by finite differences, jvp by the product rule, vmap against a loop, and errors.
#include <gtest/gtest.h>

#include <array>

#include "kiln/core/ops/conv_general.h"
#include "support/error_of.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;
using Ints = std::vector<int>;

// Spatial sizes and per-axis parameters are padded to 3 axes in front (size 1, stride 1, ...).
Shape spatial3(const Shape& s) {
  Shape r(3 - (s.size() - 2), 1);
  r.insert(r.end(), s.begin() + 2, s.end());
  return r;
}
Ints params3(const Ints& p, int fill) {
  Ints r(3 - p.size(), fill);
  r.insert(r.end(), p.begin(), p.end());
  return r;
}

struct TCase {
  Shape x, w;  // x (N, Cin, spatial...), w (Cin, Cout / groups, k...)
  Ints stride, padding, output_padding, dilation;
  int groups = 1;
};

// The transposed convolution as a scatter: every input element adds x * w to output position
// i * stride - padding + k * dilation, when that lies inside the output.
std::vector<double> ref_conv_transpose(const std::vector<double>& x, const std::vector<double>& w,
                                       const TCase& c, Shape* out_shape) {
  const Shape xs = spatial3(c.x), ks = spatial3(c.w);
  const Ints st = params3(c.stride, 1), pd = params3(c.padding, 0), op = params3(c.output_padding, 0),
             dl = params3(c.dilation, 1);
  const int64_t N = c.x[0], Cin = c.x[1], Cog = c.w[1], G = c.groups, Cig = Cin / G, Cout = Cog * G;
  int64_t os[3];
  for (int a = 0; a < 3; ++a) os[a] = (xs[a] - 1) * st[a] - 2 * pd[a] + dl[a] * (ks[a] - 1) + op[a] + 1;
  *out_shape = {N, Cout};
  for (size_t a = 3 - (c.x.size() - 2); a < 3; ++a) out_shape->push_back(os[a]);
  std::vector<double> y(static_cast<size_t>(N * Cout * os[0] * os[1] * os[2]), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < Cin; ++ci)
      for (int64_t i0 = 0; i0 < xs[0]; ++i0)
        for (int64_t i1 = 0; i1 < xs[1]; ++i1)
          for (int64_t i2 = 0; i2 < xs[2]; ++i2) {
            const double xv =
                x[static_cast<size_t>((((n * Cin + ci) * xs[0] + i0) * xs[1] + i1) * xs[2] + i2)];
            for (int64_t co = 0; co < Cog; ++co)
              for (int64_t k0 = 0; k0 < ks[0]; ++k0)
                for (int64_t k1 = 0; k1 < ks[1]; ++k1)
                  for (int64_t k2 = 0; k2 < ks[2]; ++k2) {
                    const int64_t p0 = i0 * st[0] - pd[0] + k0 * dl[0], p1 = i1 * st[1] - pd[1] + k1 * dl[1],
                                  p2 = i2 * st[2] - pd[2] + k2 * dl[2];
                    if (p0 < 0 || p0 >= os[0] || p1 < 0 || p1 >= os[1] || p2 < 0 || p2 >= os[2]) continue;
                    const int64_t oc = (ci / Cig) * Cog + co;
                    y[static_cast<size_t>((((n * Cout + oc) * os[0] + p0) * os[1] + p1) * os[2] + p2)] +=
                        xv *
                        w[static_cast<size_t>((((ci * Cog + co) * ks[0] + k0) * ks[1] + k1) * ks[2] + k2)];
                  }
          }
  return y;
}

struct GCase {
  Shape x, w;  // x (N, C, spatial...), w (O, C / groups, k...)
  Ints stride, lo, hi, kdil, idil;
  int groups = 1;
  bool flip = false;
};

// conv_general by its definition: out[q] = sum_k w'[k] xd[q * stride + k * kdil - lo], xd the
// input with idil - 1 zeros between elements, w' the kernel (reversed when flip).
std::vector<double> ref_conv_general(const std::vector<double>& x, const std::vector<double>& w,
                                     const GCase& c, Shape* out_shape) {
  const Shape xs = spatial3(c.x), ks = spatial3(c.w);
  const Ints st = params3(c.stride, 1), lo = params3(c.lo, 0), hi = params3(c.hi, 0), kd = params3(c.kdil, 1),
             id = params3(c.idil, 1);
  const int64_t N = c.x[0], C = c.x[1], O = c.w[0], Cg = c.w[1], Og = O / c.groups;
  int64_t os[3];
  for (int a = 0; a < 3; ++a) {
    const int64_t span = (xs[a] - 1) * id[a] + 1 + lo[a] + hi[a] - kd[a] * (ks[a] - 1) - 1;
    os[a] = span / st[a] + 1;
  }
  *out_shape = {N, O};
  for (size_t a = 3 - (c.x.size() - 2); a < 3; ++a) out_shape->push_back(os[a]);
  std::vector<double> y(static_cast<size_t>(N * O * os[0] * os[1] * os[2]), 0.0);
  auto source = [&](int a, int64_t q, int64_t k, int64_t* i) {
    const int64_t p = q * st[a] + k * kd[a] - lo[a];
    if (p < 0 || p % id[a] != 0 || p / id[a] >= xs[a]) return false;
    *i = p / id[a];
    return true;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t q0 = 0; q0 < os[0]; ++q0)
        for (int64_t q1 = 0; q1 < os[1]; ++q1)
          for (int64_t q2 = 0; q2 < os[2]; ++q2) {
            double acc = 0;
            for (int64_t ci = 0; ci < Cg; ++ci)
              for (int64_t k0 = 0; k0 < ks[0]; ++k0)
                for (int64_t k1 = 0; k1 < ks[1]; ++k1)
                  for (int64_t k2 = 0; k2 < ks[2]; ++k2) {
                    int64_t i0, i1, i2;
                    if (!source(0, q0, k0, &i0) || !source(1, q1, k1, &i1) || !source(2, q2, k2, &i2))
                      continue;
                    const int64_t c_in = (o / Og) * Cg + ci;
                    const int64_t f0 = c.flip ? ks[0] - 1 - k0 : k0, f1 = c.flip ? ks[1] - 1 - k1 : k1,
                                  f2 = c.flip ? ks[2] - 1 - k2 : k2;
                    acc += x[static_cast<size_t>((((n * C + c_in) * xs[0] + i0) * xs[1] + i1) * xs[2] + i2)] *
                           w[static_cast<size_t>((((o * Cg + ci) * ks[0] + f0) * ks[1] + f1) * ks[2] + f2)];
                  }
            y[static_cast<size_t>((((n * O + o) * os[0] + q0) * os[1] + q1) * os[2] + q2)] = acc;
          }
  return y;
}

template <size_t N>
std::array<int, N> arr(const Ints& v, int fill) {
  std::array<int, N> a;
  a.fill(fill);
  for (size_t i = 0; i < v.size() && i < N; ++i) a[i] = v[i];
  return a;
}

Array run_transpose(const TCase& c, const Array& x, const Array& w) {
  const size_t d = c.x.size() - 2;
  const Ints st = c.stride.empty() ? Ints(d, 1) : c.stride, pd = c.padding.empty() ? Ints(d, 0) : c.padding,
             op = c.output_padding.empty() ? Ints(d, 0) : c.output_padding,
             dl = c.dilation.empty() ? Ints(d, 1) : c.dilation;
  if (d == 1) return conv_transpose1d(x, w, st[0], pd[0], op[0], dl[0], c.groups);
  if (d == 2)
    return conv_transpose2d(x, w, arr<2>(st, 1), arr<2>(pd, 0), arr<2>(op, 0), arr<2>(dl, 1), c.groups);
  return conv_transpose3d(x, w, arr<3>(st, 1), arr<3>(pd, 0), arr<3>(op, 0), arr<3>(dl, 1), c.groups);
}

Array run_general(const GCase& c, const Array& x, const Array& w) {
  return conv_general(x, w, c.stride, c.lo, c.hi, c.kdil, c.idil, c.groups, c.flip);
}

const TCase kTransposeCases[] = {
    {{2, 3, 7}, {3, 2, 3}, {1}, {0}, {0}, {1}},
    {{2, 4, 6}, {4, 3, 4}, {3}, {1}, {2}, {1}, 2},
    {{1, 2, 5}, {2, 2, 3}, {1}, {2}, {1}, {2}},  // output_padding >= stride, < dilation
    {{2, 3, 4, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1}},
    {{2, 2, 5, 5}, {2, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},     // the classic 2x upsampling
    {{1, 4, 4, 3}, {4, 1, 2, 3}, {2, 3}, {0, 1}, {1, 2}, {2, 1}, 4},  // depthwise
    {{2, 4, 3, 4}, {4, 2, 3, 2}, {3, 1}, {2, 0}, {0, 0}, {1, 2}, 2},
    {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 1}, {0, 0}, {1, 0}, {2, 1}},  // output_padding 1 at stride 1
    {{1, 2, 3, 3, 3}, {2, 2, 2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}},
    {{2, 2, 3, 4, 3}, {2, 3, 3, 2, 2}, {2, 1, 2}, {1, 0, 1}, {1, 0, 0}, {1, 2, 1}},
    {{1, 4, 2, 3, 3}, {4, 1, 2, 3, 2}, {3, 2, 1}, {0, 1, 0}, {2, 1, 0}, {2, 1, 1}, 2},
    {{1, 2, 3, 2, 2}, {2, 1, 2, 1, 2}, {1, 2, 1}, {1, 0, 0}, {1, 1, 0}, {3, 1, 1}},  // op >= stride in depth
};

TEST(ConvTranspose, MatchesScatterReference) {
  uint64_t seed = 1;
  for (const TCase& c : kTransposeCases) {
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      SCOPED_TRACE(testing::Message()
                   << "input " << shape_str(c.x) << " weight " << shape_str(c.w) << " " << dtype_name(t));
      const Array x = random_array(c.x, t, seed++), w = random_array(c.w, t, seed++);
      Shape shape;
      const std::vector<double> ref = ref_conv_transpose(values(x), values(w), c, &shape);
      const Array y = run_transpose(c, x, w);
      EXPECT_EQ(y.dtype(), t);
      ASSERT_EQ(y.shape(), shape);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : t == float16 ? 1e-2 : 6e-2;
      expect_close(y, ref, tol, tol);
    }
  }
}

TEST(ConvTranspose, OutputSizeAsPyTorch) {
  // torch.nn.ConvTranspose2d's documented examples (shapes only: nothing is evaluated).
  EXPECT_EQ(conv_transpose2d(zeros({2, 16, 50, 100}), zeros({16, 33, 3, 5}), {2, 1}, {4, 2}).shape(),
            (Shape{2, 33, 93, 100}));
  EXPECT_EQ(conv_transpose2d(zeros({1, 16, 6, 6}), zeros({16, 16, 3, 3}), {2, 2}, {1, 1}).shape(),
            (Shape{1, 16, 11, 11}));
  EXPECT_EQ(conv_transpose2d(zeros({1, 16, 6, 6}), zeros({16, 16, 3, 3}), {2, 2}, {1, 1}, {1, 1}).shape(),
            (Shape{1, 16, 12, 12}));  // output_size=(12, 12) in the example
  // torch.nn.ConvTranspose3d's example, and conv_transpose1d with every parameter.
  EXPECT_EQ(
      conv_transpose3d(zeros({2, 16, 10, 50, 100}), zeros({16, 33, 3, 5, 2}), {2, 1, 1}, {0, 4, 2}).shape(),
      (Shape{2, 33, 21, 46, 97}));
  EXPECT_EQ(conv_transpose1d(zeros({3, 4, 9}), zeros({4, 5, 4}), 3, 2, 1, 2, 1).shape(), (Shape{3, 5, 28}));
  EXPECT_EQ(conv_transpose1d(zeros({3, 4, 9}), zeros({4, 3, 4}), 1, 0, 2, 3, 2).shape(), (Shape{3, 6, 20}));
}

TEST(ConvTranspose, IsTheAdjointOfConv2d) {
  // <conv2d(x, w), y> = <x, conv_transpose2d(y, w)> with the same weight and parameters.
  struct Case {
    Shape x, w;
    std::array<int, 2> stride, padding, output_padding, dilation;
    int groups;
  };
  const Case cases[] = {{{2, 4, 9, 8}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {0, 1}, {1, 1}, 2},
                        {{1, 3, 10, 7}, {2, 3, 2, 3}, {3, 1}, {0, 2}, {2, 0}, {1, 2}, 1}};
  uint64_t seed = 100;
  for (const Case& c : cases) {
    const Array x = random_array(c.x, float64, seed++), w = random_array(c.w, float64, seed++);
    const Array cx = conv2d(x, w, c.stride, c.padding, c.dilation, c.groups);
    const Array y = random_array(cx.shape(), float64, seed++);
    const Array ty = conv_transpose2d(y, w, c.stride, c.padding, c.output_padding, c.dilation, c.groups);
    ASSERT_EQ(ty.shape(), x.shape());
    EXPECT_NEAR(sum(cx * y).item<double>(), sum(x * ty).item<double>(), 1e-10);
  }
}

TEST(Conv3d, MatchesReference) {
  struct Case {
    Shape x, w;
    std::array<int, 3> stride, padding, dilation;
    int groups;
  };
  const Case cases[] = {
      {{2, 3, 4, 5, 4}, {4, 3, 2, 3, 2}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1},
      {{1, 2, 6, 5, 5}, {3, 2, 3, 3, 3}, {2, 1, 2}, {1, 1, 0}, {1, 1, 1}, 1},
      {{2, 4, 5, 4, 6}, {6, 2, 2, 2, 3}, {1, 2, 1}, {1, 0, 1}, {2, 1, 2}, 2},
      {{1, 3, 3, 4, 4}, {6, 1, 3, 1, 2}, {1, 1, 1}, {1, 0, 0}, {1, 1, 1}, 3},  // depthwise
      {{2, 2, 3, 3, 3}, {2, 2, 1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1},  // pointwise
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    const GCase g{c.x,
                  c.w,
                  Ints(c.stride.begin(), c.stride.end()),
                  Ints(c.padding.begin(), c.padding.end()),
                  Ints(c.padding.begin(), c.padding.end()),
                  Ints(c.dilation.begin(), c.dilation.end()),
                  {},
                  c.groups};
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      SCOPED_TRACE(testing::Message() << "input " << shape_str(c.x) << " " << dtype_name(t));
      const Array x = random_array(c.x, t, seed++), w = random_array(c.w, t, seed++);
      Shape shape;
      const std::vector<double> ref = ref_conv_general(values(x), values(w), g, &shape);
      const Array y = conv3d(x, w, c.stride, c.padding, c.dilation, c.groups);
      EXPECT_EQ(y.dtype(), t);
      ASSERT_EQ(y.shape(), shape);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : t == float16 ? 1e-2 : 6e-2;
      expect_close(y, ref, tol, tol);
    }
  }
}

const GCase kGeneralCases[] = {
    {{2, 2, 7}, {3, 2, 3}, {1}, {2}, {1}, {1}, {2}},
    {{1, 4, 6}, {4, 2, 2}, {2}, {0}, {3}, {2}, {3}, 2, true},
    {{2, 3, 4, 5}, {2, 3, 3, 2}, {1, 2}, {1, 0}, {2, 1}, {1, 2}, {2, 1}},
    {{1, 2, 5, 4}, {2, 2, 2, 3}, {2, 1}, {0, 2}, {1, 0}, {2, 1}, {1, 2}, 1, true},
    {{1, 2, 3, 4, 3}, {2, 1, 2, 2, 2}, {1, 2, 1}, {1, 0, 2}, {0, 1, 1}, {1, 1, 2}, {2, 1, 2}, 2, true},
    {{1, 3, 4, 5, 2}, {2, 3, 2, 3, 1}, {1}, {1}, {0}, {}, {}},  // single values for every axis
};

TEST(ConvGeneral, MatchesReference) {
  uint64_t seed = 300;
  for (const GCase& c : kGeneralCases) {
    for (Dtype t : {float64, float32, bfloat16}) {
      SCOPED_TRACE(testing::Message() << "input " << shape_str(c.x) << " " << dtype_name(t));
      const Array x = random_array(c.x, t, seed++), w = random_array(c.w, t, seed++);
      Shape shape;
      // The reference takes one value per axis: a single value is repeated.
      GCase e = c;
      for (Ints* v : {&e.stride, &e.lo, &e.hi, &e.kdil, &e.idil})
        if (v->size() == 1) v->assign(c.x.size() - 2, v->front());
      const std::vector<double> ref = ref_conv_general(values(x), values(w), e, &shape);
      const Array y = run_general(c, x, w);
      ASSERT_EQ(y.shape(), shape);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : 6e-2;
      expect_close(y, ref, tol, tol);
    }
  }
}

TEST(ConvGeneral, InputDilationAndFlipGiveTheTransposedConv) {
  // MLX's identity: conv_transpose(x, w) = conv_general(x, w with in/out swapped, input dilation
  // = stride, padding (K - 1) dilation - padding [+ output_padding high], flip).
  const Array x = random_array({2, 3, 5, 4}, float64, 400), w = random_array({3, 2, 3, 2}, float64, 401);
  const std::array<int, 2> st{2, 3}, pd{1, 0}, op{1, 2}, dl{1, 2};
  const Array expected = conv_transpose2d(x, w, st, pd, op, dl);
  const Ints lo{(3 - 1) * 1 - 1, (2 - 1) * 2 - 0}, hi{lo[0] + op[0], lo[1] + op[1]};
  const Array y = conv_general(x, swapaxes(w, 0, 1), {}, lo, hi, {1, 2}, {2, 3}, 1, true);
  expect_close(y, expected, 1e-12, 1e-12);
}

TEST(ConvTranspose, VjpMatchesFiniteDifferences) {
  const TCase cases[] = {
      {{2, 2, 4}, {2, 2, 3}, {2}, {1}, {1}, {1}},
      {{1, 2, 3, 3}, {2, 2, 2, 3}, {2, 1}, {0, 1}, {1, 0}, {1, 1}},
      {{1, 4, 3, 2}, {4, 1, 3, 2}, {1, 2}, {1, 0}, {0, 1}, {2, 1}, 2},
      {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, {2, 1, 2}, {1, 0, 0}, {1, 0, 1}, {1, 2, 1}},
  };
  uint64_t seed = 500;
  for (const TCase& c : cases) {
    SCOPED_TRACE(shape_str(c.x));
    test::check_vjp([c](const std::vector<Array>& in) { return run_transpose(c, in[0], in[1]); },
                    {random_array(c.x, float64, seed), random_array(c.w, float64, seed + 1)});
    seed += 2;
  }
  test::check_vjp(
      [](const std::vector<Array>& in) {
        return conv3d(in[0], in[1], {2, 1, 1}, {1, 0, 1}, {1, 2, 1}, 2);
      },
      {random_array({1, 4, 4, 5, 3}, float64, 520), random_array({2, 2, 2, 2, 2}, float64, 521)});
  for (const GCase& c : {kGeneralCases[1], kGeneralCases[3], kGeneralCases[4]})
    test::check_vjp([c](const std::vector<Array>& in) { return run_general(c, in[0], in[1]); },
                    {random_array(c.x, float64, 530), random_array(c.w, float64, 531)});
  test::check_second_order(
      [](const std::vector<Array>& in) {
        const Array y = conv_transpose2d(in[0], in[1], {2, 1}, {1, 0}, {1, 0});
        return y * y;
      },
      {random_array({1, 2, 3, 2}, float64, 540), random_array({2, 2, 2, 2}, float64, 541)});
}

// Each op is bilinear in (input, weight): its tangent is op(tx, w) + op(x, tw).
TEST(ConvTranspose, JvpIsTheProductRule) {
  const TCase t2{{2, 2, 3, 4}, {2, 3, 3, 2}, {2, 1}, {1, 0}, {1, 0}, {1, 2}};
  const TCase t3{{1, 2, 2, 3, 2}, {2, 1, 2, 2, 2}, {2, 1, 1}, {0, 1, 0}, {1, 0, 0}, {1, 1, 2}, 2};
  uint64_t seed = 600;
  for (const TCase& c : {t2, t3}) {
    const Array x = random_array(c.x, float64, seed), w = random_array(c.w, float64, seed + 1);
    const Array tx = random_array(c.x, float64, seed + 2), tw = random_array(c.w, float64, seed + 3);
    seed += 4;
    const auto f = [c](const std::vector<Array>& in) {
      return std::vector<Array>{run_transpose(c, in[0], in[1])};
    };
    const Array ty = jvp(f, {x, w}, {tx, tw}).second[0];
    Shape shape;
    std::vector<double> e = ref_conv_transpose(values(tx), values(w), c, &shape);
    const std::vector<double> e2 = ref_conv_transpose(values(x), values(tw), c, &shape);
    for (size_t i = 0; i < e.size(); ++i) e[i] += e2[i];
    expect_close(ty, e, 1e-12, 1e-12);
  }
  const GCase g = kGeneralCases[4];
  const Array x = random_array(g.x, float64, 610), w = random_array(g.w, float64, 611);
  const Array tx = random_array(g.x, float64, 612), tw = random_array(g.w, float64, 613);
  const auto f = [g](const std::vector<Array>& in) {
    return std::vector<Array>{run_general(g, in[0], in[1])};
  };
  Shape shape;
  std::vector<double> e = ref_conv_general(values(tx), values(w), g, &shape);
  const std::vector<double> e2 = ref_conv_general(values(x), values(tw), g, &shape);
  for (size_t i = 0; i < e.size(); ++i) e[i] += e2[i];
  expect_close(jvp(f, {x, w}, {tx, tw}).second[0], e, 1e-12, 1e-12);
}

TEST(ConvTranspose, VmapMatchesLoopOverBatch) {
  const int kB = 3;
  auto example = [](const Array& a, int axis, int i) { return axis >= 0 ? take(a, Array(i), axis) : a; };
  auto check = [&](const TCase& c, int ax, int aw, uint64_t seed) {
    SCOPED_TRACE(testing::Message() << shape_str(c.x) << " x axis " << ax << " w axis " << aw);
    Shape bx = c.x, bw = c.w;
    if (ax >= 0) bx.insert(bx.begin() + ax, kB);
    if (aw >= 0) bw.insert(bw.begin() + aw, kB);
    const Array x = random_array(bx, float64, seed), w = random_array(bw, float64, seed + 1);
    const auto f = [c](const std::vector<Array>& in) {
      return std::vector<Array>{run_transpose(c, in[0], in[1])};
    };
    const Array y = vmap(f, {ax, aw})({x, w})[0];
    for (int i = 0; i < kB; ++i) {
      Shape shape;
      expect_close(take(y, Array(i), 0),
                   ref_conv_transpose(values(example(x, ax, i)), values(example(w, aw, i)), c, &shape), 1e-12,
                   1e-12);
    }
  };
  const TCase t1{{2, 2, 4}, {2, 3, 2}, {2}, {0}, {1}, {1}};
  const TCase t2{{2, 4, 3, 3}, {4, 1, 2, 3}, {2, 1}, {1, 1}, {0, 0}, {1, 1}, 2};
  const TCase t3{{1, 2, 2, 2, 3}, {2, 2, 2, 1, 2}, {2, 1, 1}, {1, 0, 0}, {1, 0, 0}, {1, 1, 1}};
  check(t1, 0, -1, 700);
  check(t2, 0, -1, 710);
  check(t2, -1, 0, 720);
  check(t2, 2, 4, 730);
  check(t3, 1, -1, 740);
  check(t3, 0, 0, 750);
  // conv3d and conv_general under vmap, over the input and the weight.
  const GCase g = kGeneralCases[4];
  const Array x = random_array({kB, 1, 2, 3, 4, 3}, float64, 760),
              w = random_array({2, 1, 2, 2, 2, kB}, float64, 761);
  const auto fg = [g](const std::vector<Array>& in) {
    return std::vector<Array>{run_general(g, in[0], in[1])};
  };
  const Array yg = vmap(fg, {0, 5})({x, w})[0];
  const auto f3 = [](const std::vector<Array>& in) {
    return std::vector<Array>{conv3d(in[0], in[1], {1, 2, 1}, {1, 0, 0}, {1, 1, 2}, 2)};
  };
  const Array y3 = vmap(f3, {0, 5})({x, w})[0];
  for (int i = 0; i < kB; ++i) {
    const Array xi = take(x, Array(i), 0), wi = take(w, Array(i), 5);
    Shape shape;
    expect_close(take(yg, Array(i), 0), ref_conv_general(values(xi), values(wi), g, &shape), 1e-12, 1e-12);
    const GCase c3{g.x, g.w, {1, 2, 1}, {1, 0, 0}, {1, 0, 0}, {1, 1, 2}, {}, 2};
    expect_close(take(y3, Array(i), 0), ref_conv_general(values(xi), values(wi), c3, &shape), 1e-12, 1e-12);
  }
}

TEST(ConvTranspose, Errors) {
  using test::error_of;
  const Array x = ones({2, 4, 5, 5}), w = ones({4, 3, 3, 3});
  EXPECT_NO_THROW(conv_transpose2d(x, w));
  EXPECT_THROW(conv_transpose2d(ones({4, 5, 5}), w), ShapeError);
  EXPECT_THROW(conv_transpose2d(x, ones({4, 3, 3})), ShapeError);
  EXPECT_EQ(error_of<ShapeError>([&] {
              conv_transpose2d(x, ones({3, 3, 3, 3}));
            }),
            "[conv_transpose2d] weight's first dim differs from the input channels: input (2,4,5,5), weight "
            "(3,3,3,3), groups 1 (the weight is (Cin, Cout / groups, k...))");
  EXPECT_THROW(conv_transpose2d(x, w, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 3),
               ShapeError);  // 4 channels, 3 groups
  EXPECT_EQ(error_of<ValueError>([&] {
              conv_transpose2d(x, w, {2, 2}, {0, 0}, {2, 0});
            }),
            "[conv_transpose2d] output_padding must be smaller than stride or dilation: output_padding 2, "
            "stride 2, "
            "dilation 1");
  EXPECT_NO_THROW(conv_transpose2d(x, w, {1, 1}, {0, 0}, {1, 0}, {2, 1}));
  EXPECT_THROW(conv_transpose2d(x, w, {0, 1}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, {1, 1}, {-1, 0}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, {1, 1}, {0, 0}, {-1, 0}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, {1, 1}, {0, 0}, {0, 0}, {0, 1}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 0), ValueError);
  EXPECT_EQ(
      error_of<ShapeError>([&] {
        conv_transpose2d(ones({1, 4, 1, 1}), ones({4, 1, 1, 1}), {1, 1}, {1, 0});
      }),
      "[conv_transpose2d] the output would be empty: input (1,4,1,1), weight (4,1,1,1), groups 1: size -1 "
      "along spatial axis 0");
  EXPECT_THROW(conv_transpose2d(astype(x, int32), astype(w, int32)), DtypeError);
  EXPECT_THROW(conv_transpose1d(ones({2, 4, 5}), ones({4, 3, 0})), ShapeError);
  EXPECT_THROW(conv_transpose3d(ones({2, 4, 5, 5}), ones({4, 3, 3, 3, 3})), ShapeError);
  EXPECT_THROW(conv_transpose1d(Array(), w), ValueError);

  EXPECT_NO_THROW(conv3d(ones({1, 4, 3, 3, 3}), ones({2, 2, 3, 3, 3}), {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 2));
  EXPECT_EQ(
      error_of<ShapeError>([] {
        conv3d(ones({1, 4, 3, 3, 3}), ones({2, 4, 4, 3, 3}));
      }),
      "[conv3d] input is smaller than the dilated kernel: input (1,4,3,3,3), weight (2,4,4,3,3), groups 1, "
      "padding 0,0,0, dilation 1,1,1");
  // Stride past the end: floor((2 - 3) / 2) + 1 = 0 outputs, an error (not one output).
  EXPECT_THROW(conv3d(ones({1, 1, 2, 3, 3}), ones({1, 1, 3, 1, 1}), {2, 1, 1}), ShapeError);
  EXPECT_THROW(conv3d(ones({1, 4, 3, 3, 3}), ones({2, 3, 1, 1, 1})), ShapeError);
  EXPECT_THROW(conv3d(ones({1, 4, 3, 3, 3}), ones({2, 4, 1, 1, 1}), {1, 0, 1}), ValueError);
  EXPECT_THROW(conv3d(ones({1, 4, 3, 3}), ones({2, 4, 1, 1, 1})), ShapeError);

  EXPECT_THROW(conv_general(ones({1, 2}), ones({1, 2})), ShapeError);  // no spatial axis
  EXPECT_THROW(conv_general(ones({1, 2, 2, 2, 2, 2}), ones({1, 2, 1, 1, 1, 1})), ShapeError);  // four
  EXPECT_EQ(error_of<ValueError>([] {
              conv_general(ones({1, 2, 4, 4}), ones({1, 2, 1, 1}), {1, 1, 1});
            }),
            "[conv_general] a parameter list has the wrong length: stride has 3 values for 2 spatial axes");
  EXPECT_THROW(conv_general(ones({1, 2, 4}), ones({1, 2, 1}), {}, {}, {}, {}, {0}), ValueError);
  EXPECT_THROW(conv_general(ones({1, 2, 4}), ones({1, 2, 1}), {}, {-1}), ValueError);
  EXPECT_THROW(conv_general(ones({1, 2, 2}), ones({1, 2, 3}), {}, {}, {}, {}, {}), ShapeError);
  EXPECT_NO_THROW(conv_general(ones({1, 2, 2}), ones({1, 2, 3}), {}, {}, {}, {}, {2}));  // dilated to 3
}

}  // namespace
}  // namespace kiln
