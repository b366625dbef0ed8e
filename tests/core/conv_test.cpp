// conv1d/conv2d against a naive 7-loop float64 reference, gradients by finite differences
// (first and second order), and argument checks.
#include <gtest/gtest.h>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

struct ConvCase {
  Shape x, w;
  std::array<int, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int groups = 1;
};

// The definition, in plain loops: y[n,o,i,j] = sum_{c,ki,kj} x[n, g*Cg + c, i*s + ki*d - p, ...]
// w[o,c,ki,kj].
std::vector<double> ref_conv2d(const std::vector<double>& x, const std::vector<double>& w, const ConvCase& k,
                               Shape* out_shape) {
  const int64_t N = k.x[0], C = k.x[1], H = k.x[2], W = k.x[3];
  const int64_t O = k.w[0], Cg = k.w[1], KH = k.w[2], KW = k.w[3];
  const int64_t Og = O / k.groups;
  const int64_t OH = (H + 2 * k.padding[0] - k.dilation[0] * (KH - 1) - 1) / k.stride[0] + 1;
  const int64_t OW = (W + 2 * k.padding[1] - k.dilation[1] * (KW - 1) - 1) / k.stride[1] + 1;
  *out_shape = {N, O, OH, OW};
  std::vector<double> y(N * O * OH * OW, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double s = 0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t iy = i * k.stride[0] + ki * k.dilation[0] - k.padding[0];
                const int64_t ix = j * k.stride[1] + kj * k.dilation[1] - k.padding[1];
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                s += x[((n * C + g * Cg + c) * H + iy) * W + ix] * w[((o * Cg + c) * KH + ki) * KW + kj];
              }
          y[((n * O + o) * OH + i) * OW + j] = s;
        }
  (void)C;
  return y;
}

const ConvCase kCases[] = {
    {{2, 3, 7, 6}, {4, 3, 3, 3}},
    {{2, 3, 9, 8}, {4, 3, 3, 3}, {2, 2}, {1, 1}},
    {{1, 2, 9, 9}, {3, 2, 3, 3}, {1, 1}, {2, 2}, {2, 2}},
    {{2, 4, 6, 5}, {6, 2, 3, 2}, {1, 1}, {1, 0}, {1, 1}, 2},
    {{2, 4, 6, 6}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4},  // depthwise, channel multiplier 2
    {{1, 3, 8, 7}, {2, 3, 2, 3}, {1, 2}, {2, 0}, {1, 1}},     // non-square kernel, stride and padding
    {{3, 2, 10, 9}, {3, 2, 3, 2}, {3, 2}, {1, 2}, {2, 1}},
    {{4, 6, 5, 5}, {4, 6, 1, 1}},                             // pointwise, batched into one GEMM
    {{2, 6, 5, 4}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2},  // pointwise with groups
    {{1, 3, 50, 48}, {2, 3, 1, 1}},                           // pointwise, input used as columns
    {{1, 2, 49, 47}, {3, 2, 3, 3}, {1, 1}, {1, 1}},           // large image: one sample per GEMM
    {{3, 2, 4, 4}, {2, 2, 4, 4}},                             // kernel covers the input: 1x1 output
    {{2, 1, 6, 6}, {1, 1, 3, 3}, {2, 2}, {0, 0}},             // stride leaves input rows unread
};

Array run(const ConvCase& k, const Array& x, const Array& w) {
  return conv2d(x, w, k.stride, k.padding, k.dilation, k.groups);
}

TEST(Conv2d, ForwardMatchesNaiveReference) {
  uint64_t seed = 1;
  for (const ConvCase& k : kCases) {
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      const Array x = random_array(k.x, t, seed++), w = random_array(k.w, t, seed++);
      Shape shape;
      const std::vector<double> ref = ref_conv2d(values(x), values(w), k, &shape);
      const Array y = run(k, x, w);
      EXPECT_EQ(y.dtype(), t);
      ASSERT_EQ(y.shape(), shape) << "input " << shape_str(k.x) << " weight " << shape_str(k.w);
      const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : t == float16 ? 1e-2 : 6e-2;
      expect_close(y, ref, tol, tol);
    }
  }
}

TEST(Conv2d, NonContiguousOperands) {
  const ConvCase k{{2, 3, 6, 7}, {4, 3, 3, 2}, {1, 2}, {1, 1}};
  // x as a (N, C, W, H) array with its last two axes swapped; w sliced with a step.
  const Array xt = random_array({2, 3, 7, 6}, float32, 31);
  const Array x = swapaxes(xt, 2, 3);
  const Array wbig = random_array({8, 3, 3, 2}, float32, 32);
  const Array w = slice(wbig, {Slice{0, 8, 2}});
  Shape shape;
  const std::vector<double> ref = ref_conv2d(values(x), values(w), k, &shape);
  expect_close(run(k, x, w), ref, 1e-5, 1e-5);
  // Pointwise kernels take the input as columns only when its pixels are dense.
  const ConvCase p{{2, 3, 6, 7}, {2, 3, 1, 1}};
  const Array w1 = random_array({2, 3, 1, 1}, float32, 33);
  expect_close(run(p, x, w1), ref_conv2d(values(x), values(w1), p, &shape), 1e-5, 1e-5);
}

TEST(Conv1d, MatchesTwoDimensionalReference) {
  struct Case1 {
    Shape x, w;
    int stride = 1, padding = 0, dilation = 1, groups = 1;
  };
  const Case1 cases[] = {{{2, 3, 11}, {4, 3, 3}},
                         {{2, 4, 12}, {6, 2, 3}, 2, 1, 1, 2},
                         {{1, 3, 15}, {3, 1, 4}, 1, 3, 2, 3},
                         {{3, 2, 9}, {5, 2, 1}}};
  uint64_t seed = 40;
  for (const Case1& c : cases) {
    for (Dtype t : {float64, float32}) {
      const Array x = random_array(c.x, t, seed++), w = random_array(c.w, t, seed++);
      const ConvCase k{{c.x[0], c.x[1], 1, c.x[2]},
                       {c.w[0], c.w[1], 1, c.w[2]},
                       {1, c.stride},
                       {0, c.padding},
                       {1, c.dilation},
                       c.groups};
      Shape shape;
      const std::vector<double> ref = ref_conv2d(values(x), values(w), k, &shape);
      const Array y = conv1d(x, w, c.stride, c.padding, c.dilation, c.groups);
      EXPECT_EQ(y.shape(), (Shape{shape[0], shape[1], shape[3]}));
      expect_close(y, ref, t == float64 ? 1e-12 : 1e-5, t == float64 ? 1e-12 : 1e-5);
    }
  }
}

TEST(Conv2d, VjpMatchesFiniteDifferences) {
  const ConvCase grad_cases[] = {
      {{2, 2, 5, 4}, {3, 2, 3, 2}},
      {{1, 2, 7, 6}, {2, 2, 3, 3}, {2, 2}, {1, 1}},
      {{1, 2, 7, 7}, {2, 2, 2, 3}, {1, 2}, {2, 1}, {2, 2}},
      {{2, 4, 4, 5}, {4, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
      {{1, 3, 5, 5}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},
      {{3, 3, 4, 3}, {2, 3, 1, 1}},
      {{1, 1, 6, 6}, {2, 1, 3, 3}, {2, 2}, {0, 0}},
  };
  uint64_t seed = 100;
  for (const ConvCase& k : grad_cases) {
    const auto f = [k](const std::vector<Array>& in) { return run(k, in[0], in[1]); };
    test::check_vjp(f, {random_array(k.x, float64, seed++), random_array(k.w, float64, seed++)});
  }
  test::check_vjp([](const std::vector<Array>& in) { return conv1d(in[0], in[1], 2, 1, 1, 1); },
                  {random_array({2, 2, 9}, float64, 150), random_array({3, 2, 3}, float64, 151)});
}

// A batch larger than the pool's sample blocks (several samples per block, an uneven split):
// each gradient equals the one built from single-sample convolutions, the weight's as their sum.
TEST(Conv2d, BatchSplitIntoSampleBlocks) {
  const ConvCase k{{19, 4, 6, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2};
  const Array x = random_array(k.x, float64, 160), w = random_array(k.w, float64, 161);
  const Array gy = random_array({19, 6, 6, 5}, float64, 162);
  const auto f = [k](const std::vector<Array>& in) { return std::vector<Array>{run(k, in[0], in[1])}; };
  const auto [y, g] = vjp(f, {x, w}, {gy});
  Shape shape;
  expect_close(y[0], ref_conv2d(values(x), values(w), k, &shape), 1e-12, 1e-12);
  Array dw_sum;
  std::vector<Array> dx_parts;
  for (int64_t n = 0; n < 19; ++n) {
    const Array xn = slice(x, {Slice{n, n + 1}}), gyn = slice(gy, {Slice{n, n + 1}});
    const auto [yn, gn] = vjp(f, {xn, w}, {gyn});
    dx_parts.push_back(gn[0]);
    dw_sum = dw_sum.valid() ? dw_sum + gn[1] : gn[1];
  }
  expect_close(g[0], values(concatenate(dx_parts, 0)), 1e-12, 1e-12);
  expect_close(g[1], values(dw_sum), 1e-12, 1e-12);
}

TEST(Conv2d, SecondOrder) {
  const ConvCase cases[] = {
      {{1, 2, 5, 5}, {2, 2, 3, 3}, {2, 1}, {1, 1}},
      {{2, 4, 5, 4}, {4, 2, 2, 3}, {1, 1}, {1, 0}, {2, 1}, 2},
  };
  uint64_t seed = 200;
  for (const ConvCase& k : cases) {
    const Array x = random_array(k.x, float64, seed++), w = random_array(k.w, float64, seed++);
    // Differentiating first in x exercises ConvGradInput's vjp; first in w, ConvGradWeight's.
    test::check_second_order([k](const std::vector<Array>& in) { return run(k, in[0], in[1]); }, {x, w});
    test::check_second_order([k](const std::vector<Array>& in) { return run(k, in[1], in[0]); }, {w, x});
    // A nonlinear function of the convolution, so second derivatives are not only cross terms.
    test::check_second_order(
        [k](const std::vector<Array>& in) {
          const Array y = run(k, in[0], in[1]);
          return y * y;
        },
        {x, w});
  }
}

TEST(Conv2d, GradientOfGradWeightMatchesConv) {
  // grad_weight's gy-adjoint is conv itself: d/d gy <c, grad_weight(x, gy)> = conv(x, c).
  const ConvCase k{{2, 2, 6, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}};
  const Array x = random_array(k.x, float64, 301), w = random_array(k.w, float64, 302);
  const Array u = random_array({2, 3, 6, 5}, float64, 303);
  auto dw = [&](const std::vector<Array>& in) {
    auto loss = [&](const std::vector<Array>& v) {
      return std::vector<Array>{sum(run(k, in[0], v[0]) * in[1])};
    };
    return grad(loss, {0})({w})[0];
  };
  const Array c = random_array(k.w, float64, 304);
  auto outer = [&](const std::vector<Array>& in) { return std::vector<Array>{sum(dw(in) * c)}; };
  const Array d_u = grad(outer, {1})({x, u})[0];
  Shape shape;
  expect_close(d_u, ref_conv2d(values(x), values(c), k, &shape), 1e-10, 1e-10);
}

TEST(Conv2d, Errors) {
  const Array x = ones({2, 4, 6, 6}), w = ones({6, 2, 3, 3});
  EXPECT_THROW(conv2d(ones({4, 6, 6}), w), ShapeError);
  EXPECT_THROW(conv2d(x, ones({6, 2, 3})), ShapeError);
  EXPECT_THROW(conv2d(x, w), ShapeError);  // weight has 2 channels, input 4, groups 1
  EXPECT_NO_THROW(conv2d(x, w, {1, 1}, {0, 0}, {1, 1}, 2));
  EXPECT_THROW(conv2d(x, w, {1, 1}, {0, 0}, {1, 1}, 3), ShapeError);                   // 4 channels, 3 groups
  EXPECT_THROW(conv2d(x, ones({5, 2, 3, 3}), {1, 1}, {0, 0}, {1, 1}, 2), ShapeError);  // 5 outputs
  EXPECT_THROW(conv2d(x, ones({6, 2, 7, 3}), {1, 1}, {0, 0}, {1, 1}, 2), ShapeError);  // kernel > input
  EXPECT_THROW(conv2d(x, w, {1, 1}, {0, 0}, {3, 3}, 2), ShapeError);  // dilated kernel > input
  EXPECT_NO_THROW(conv2d(x, ones({6, 2, 7, 3}), {1, 1}, {1, 0}, {1, 1}, 2));
  EXPECT_THROW(conv2d(x, w, {0, 1}, {0, 0}, {1, 1}, 2), ValueError);
  EXPECT_THROW(conv2d(x, w, {1, 1}, {-1, 0}, {1, 1}, 2), ValueError);
  EXPECT_THROW(conv2d(x, w, {1, 1}, {0, 0}, {1, 1}, 0), ValueError);
  EXPECT_THROW(conv2d(astype(x, int32), astype(w, int32), {1, 1}, {0, 0}, {1, 1}, 2), DtypeError);
  EXPECT_THROW(conv1d(ones({2, 4, 6}), ones({6, 4, 7})), ShapeError);
  EXPECT_THROW(conv1d(ones({2, 4, 6, 1}), ones({6, 4, 3})), ShapeError);
  // A kernel larger than the input with a stride: (2 - 3) / 2 must not round up to one window.
  EXPECT_THROW(conv2d(ones({1, 1, 2, 2}), ones({1, 1, 3, 3}), {2, 2}), ShapeError);
  EXPECT_THROW(conv1d(ones({1, 1, 2}), ones({1, 1, 4}), 3), ShapeError);
  EXPECT_EQ(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 3, 3}), {2, 2}).shape(), (Shape{1, 1, 1, 1}));
  try {
    conv2d(x, w);
  } catch (const ShapeError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "[conv2d] weight channels differ from input channels / groups: input (2,4,6,6), weight (6,2,3,3), "
        "groups 1");
  }
}

// ---- jvp and vmap rules, called on the primitives directly

Array example(const Array& x, int axis, int i) { return axis >= 0 ? take(x, Array(i), axis) : x; }

TEST(Conv2d, JvpRule) {
  const ConvCase k{{2, 4, 6, 5}, {4, 2, 3, 2}, {2, 1}, {1, 1}, {1, 1}, 2};
  const Array x = random_array(k.x, float64, 401), w = random_array(k.w, float64, 402);
  const Array tx = random_array(k.x, float64, 403), tw = random_array(k.w, float64, 404);
  const Array y = run(k, x, w);
  const std::vector<Array> primals{x, w}, tangents{tx, tw};
  const std::vector<int> both{0, 1};
  const auto t = y.primitive()->jvp({primals, tangents, both});
  Shape shape;
  std::vector<double> e = ref_conv2d(values(tx), values(w), k, &shape);
  const std::vector<double> e2 = ref_conv2d(values(x), values(tw), k, &shape);
  for (size_t i = 0; i < e.size(); ++i) e[i] += e2[i];
  expect_close(t[0], e, 1e-12, 1e-12);
}

// vmap of Conv, ConvGradInput and ConvGradWeight for every batching pattern, against the same
// primitive built on each example.
TEST(Conv2d, VmapRules) {
  const int kB = 3;
  const ConvCase k{{2, 4, 6, 5}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2};
  const Shape y_shape{2, 6, 3, 3};
  auto batched = [&](const Shape& s, int axis, uint64_t seed) {
    if (axis < 0) return random_array(s, float64, seed);
    Shape b = s;
    b.insert(b.begin() + axis, kB);
    return random_array(b, float64, seed);
  };
  // The three primitives built from unbatched operands: Conv directly, the adjoints from its vjp.
  auto nodes = [&](const Array& x, const Array& w, const Array& gy) {
    const Array y = run(k, x, w);
    const std::vector<Array> primals{x, w}, cot{gy}, outs{y};
    const std::vector<int> both{0, 1};
    const auto g = y.primitive()->vjp({primals, cot, both, outs});
    return std::vector<Array>{y, g[0], g[1]};
  };
  uint64_t seed = 500;
  for (int ax : {-1, 0, 2})
    for (int aw : {-1, 0, 4}) {
      if (ax < 0 && aw < 0) continue;
      const int ag = ax;  // gy batched like x
      const Array x = batched(k.x, ax, seed++), w = batched(k.w, aw, seed++),
                  gy = batched(y_shape, ag, seed++);
      const auto n0 = nodes(example(x, ax, 0), example(w, aw, 0), example(gy, ag, 0));
      const std::vector<Array> in_conv{x, w}, in_gi{gy, w}, in_gw{x, gy};
      const std::vector<int> ax_conv{ax, aw}, ax_gi{ag, aw}, ax_gw{ax, ag};
      const VmapResult r_conv = n0[0].primitive()->vmap({in_conv, ax_conv});
      const VmapResult r_gi = n0[1].primitive()->vmap({in_gi, ax_gi});
      // ConvGradWeight's inputs (x, gy) are both unbatched when only w is: no vmap happens there.
      const VmapResult r_gw = ax >= 0 ? n0[2].primitive()->vmap({in_gw, ax_gw}) : VmapResult{};
      for (int i = 0; i < kB; ++i) {
        SCOPED_TRACE(testing::Message() << "x axis " << ax << ", w axis " << aw << ", example " << i);
        const auto ni = nodes(example(x, ax, i), example(w, aw, i), example(gy, ag, i));
        {
          SCOPED_TRACE("Conv");
          expect_close(example(r_conv.outputs[0], r_conv.axes[0], i), ni[0], 1e-12, 1e-12);
        }
        {
          SCOPED_TRACE("ConvGradInput");
          expect_close(example(r_gi.outputs[0], r_gi.axes[0], i), ni[1], 1e-12, 1e-12);
        }
        SCOPED_TRACE("ConvGradWeight");
        if (ax >= 0) expect_close(example(r_gw.outputs[0], r_gw.axes[0], i), ni[2], 1e-12, 1e-12);
      }
    }
}
}  // namespace
}  // namespace kiln
