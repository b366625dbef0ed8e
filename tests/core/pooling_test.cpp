// max_pool2d against a float64 loop reference, ties and NaN as PyTorch, gradients by finite
// differences (first and second order, and of the gather/scatter adjoints), jvp, vmap and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;
using Vec = std::vector<double>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct PoolCase {
  Shape x;
  std::array<int, 2> kernel, stride, padding{0, 0}, dilation{1, 1};
  std::array<int64_t, 2> output_size{-1, -1};
};

Array run(const PoolCase& c, const Array& x) {
  return max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, c.output_size);
}

// The definition in plain loops. Each window's maximum over the input positions it covers; NaN if
// any of them is NaN; -inf if it covers none. `argmax` (if given) receives each window's flat
// input index of its first maximum (-1 for NaN or empty windows).
Vec ref_max_pool(const Vec& x, const PoolCase& c, Shape* out_shape, std::vector<int64_t>* argmax = nullptr) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3];
  int64_t out[2];
  for (int a = 0; a < 2; ++a) {
    const int64_t in = c.x[2 + a];
    out[a] = c.output_size[a] > 0
                 ? c.output_size[a]
                 : (in + 2 * c.padding[a] - c.dilation[a] * (c.kernel[a] - 1) - 1) / c.stride[a] + 1;
  }
  *out_shape = {N, C, out[0], out[1]};
  Vec y;
  for (int64_t n = 0; n < N * C; ++n)
    for (int64_t i = 0; i < out[0]; ++i)
      for (int64_t j = 0; j < out[1]; ++j) {
        double m = -kInf;
        int64_t at = -1;
        bool nan = false;
        for (int ki = 0; ki < c.kernel[0]; ++ki)
          for (int kj = 0; kj < c.kernel[1]; ++kj) {
            const int64_t r = i * c.stride[0] - c.padding[0] + ki * c.dilation[0];
            const int64_t q = j * c.stride[1] - c.padding[1] + kj * c.dilation[1];
            if (r < 0 || r >= H || q < 0 || q >= W) continue;
            const int64_t idx = (n * H + r) * W + q;
            nan |= std::isnan(x[idx]);
            if (at < 0 || x[idx] > m) {
              m = x[idx];
              at = idx;
            }
          }
        y.push_back(nan ? kNan : m);
        if (argmax) argmax->push_back(nan ? -1 : at);
      }
  return y;
}

const PoolCase kCases[] = {
    {{2, 3, 8, 8}, {2, 2}, {2, 2}},                          // tiling windows (LeNet's)
    {{2, 3, 7, 9}, {3, 3}, {2, 2}, {1, 1}},                  // overlapping, padded
    {{1, 2, 9, 8}, {3, 2}, {1, 2}, {1, 0}, {2, 1}},          // dilation
    {{2, 2, 8, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {4, 5}},  // ceil_mode's sizes: a partial last column
    {{2, 2, 7, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {4, 4}},  // ceil_mode without padding
    {{1, 3, 6, 10}, {2, 4}, {3, 2}, {1, 2}},                 // non-square everything
    {{1, 2, 5, 7}, {3, 2}, {1, 3}, {1, 1}, {2, 3}},
    {{2, 2, 3, 4}, {1, 1}, {1, 1}},             // 1x1 windows: the identity
    {{1, 2, 4, 5}, {4, 5}, {1, 1}},             // one window covers the input
    {{3, 16, 33, 31}, {3, 3}, {2, 2}, {1, 1}},  // large enough to run on the pool
};

TEST(MaxPool2d, ForwardMatchesLoopReference) {
  uint64_t seed = 1;
  for (const PoolCase& c : kCases)
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      SCOPED_TRACE(testing::Message() << "input " << shape_str(c.x) << ", " << dtype_name(t));
      const Array x = random_array(c.x, t, seed++);
      Shape shape;
      const Vec ref = ref_max_pool(values(x), c, &shape);
      const Array y = run(c, x);
      EXPECT_EQ(y.dtype(), t);
      ASSERT_EQ(y.shape(), shape);
      expect_close(y, ref, 0, 0);  // the maximum is one of the inputs: exact in every dtype
    }
}

TEST(MaxPool2d, NonContiguousInput) {
  const PoolCase c{{2, 3, 9, 7}, {3, 2}, {2, 1}, {1, 1}};
  const Array x = swapaxes(random_array({2, 3, 7, 9}, float32, 40), 2, 3);
  Shape shape;
  expect_close(run(c, x), ref_max_pool(values(x), c, &shape), 0, 0);
}

TEST(MaxPool2d, WindowsWithoutInputElementsAreMinusInfinity) {
  // H = 1 with dilation 3 and padding 2: the taps of rows -2 and -1 are (-2, 1) and (-1, 2).
  const PoolCase c{{1, 1, 1, 6}, {2, 2}, {1, 1}, {2, 0}, {3, 1}};
  const Array x = random_array(c.x, float64, 41);
  Shape shape;
  const Vec ref = ref_max_pool(values(x), c, &shape);
  EXPECT_EQ(ref, Vec(10, -kInf));
  expect_close(run(c, x), ref, 0, 0);
  auto [out, g] = vjp([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0])}; }, {x},
                      {random_array(shape, float64, 42)});
  expect_close(g[0], Vec(6, 0.0), 0, 0);
}

TEST(MaxPool2d, TiesAndNaNAsPyTorch) {
  // /usr/bin/python3 (torch 1.13): x = tensor([[[[3, 1, 3, nan, 2]]]], requires_grad=True);
  //   y = F.max_pool2d(x, (1, 3), stride=1); y.sum().backward()  ->  y [3, nan, nan], x.grad [1, 0, 0, 2, 0]
  //   x = tensor([[[[1, nan, nan, 5]]]]); F.max_pool2d(x, (1, 4))  ->  y [nan], x.grad [0, 0, 1, 0]
  const auto pool = [](std::array<int, 2> k) {
    return [k](const std::vector<Array>& a) { return std::vector<Array>{max_pool2d(a[0], k, {1, 1})}; };
  };
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(t));
    auto [y1, g1] = vjp(pool({1, 3}), {Array(Vec{3, 1, 3, kNan, 2}, {1, 1, 1, 5}, t)},
                        {Array(Vec{1, 1, 1}, {1, 1, 1, 3}, t)});
    expect_close(y1[0], Vec{3, kNan, kNan}, 0, 0);
    expect_close(g1[0], Vec{1, 0, 0, 2, 0}, 0, 0);
    auto [y2, g2] =
        vjp(pool({1, 4}), {Array(Vec{1, kNan, kNan, 5}, {1, 1, 1, 4}, t)}, {Array(Vec{1}, {1, 1, 1, 1}, t)});
    expect_close(y2[0], Vec{kNan}, 0, 0);
    expect_close(g2[0], Vec{0, 0, 1, 0}, 0, 0);
  }
  // Ties in 2-d: the first maximum in row-major window order takes the whole gradient.
  const Array tied(Vec{1, 3, 3, 0, 2, 3, 3, 1}, {1, 1, 2, 4}, float64);
  auto [y, g] = vjp(pool({2, 2}), {tied}, {Array(Vec{1, 10, 100}, {1, 1, 1, 3}, float64)});
  expect_close(y[0], Vec{3, 3, 3}, 0, 0);
  expect_close(g[0], Vec{0, 11, 100, 0, 0, 0, 0, 0}, 0, 0);
  // The unrolled 2x2 and 3x3 windows: the last NaN takes the gradient, also among ties. (These and
  // the infinities below agree with F.max_pool2d's values and x.grad in /usr/bin/python3.)
  for (std::array<int, 2> k : {std::array<int, 2>{2, 2}, std::array<int, 2>{3, 3}}) {
    Vec v(k[0] * k[1], 7.0), expected(v.size(), 0.0);
    v[0] = kNan;
    v[1] = kNan;
    expected[1] = 1;
    auto [yn, gn] =
        vjp(pool(k), {Array(v, {1, 1, k[0], k[1]}, float32)}, {Array(Vec{1}, {1, 1, 1, 1}, float32)});
    expect_close(yn[0], Vec{kNan}, 0, 0);
    expect_close(gn[0], expected, 0, 0);
  }
  // Infinities are ordinary values: -inf loses to everything, +inf wins, the first of equal
  // infinities takes the gradient (a window holding both takes the exact path for NaN).
  const Array inf(Vec{-kInf, -kInf, kInf, 2}, {1, 1, 1, 4}, float32);
  expect_close(max_pool2d(inf, {1, 2}, {1, 2}), Vec{-kInf, kInf}, 0, 0);
  auto [yi, gi] = vjp(pool({2, 2}), {Array(Vec{-kInf, kInf, kInf, -kInf}, {1, 1, 2, 2}, float64)},
                      {Array(Vec{1}, {1, 1, 1, 1}, float64)});
  expect_close(yi[0], Vec{kInf}, 0, 0);
  expect_close(gi[0], Vec{0, 1, 0, 0}, 0, 0);
  auto [ym, gm] = vjp(pool({2, 2}), {Array(Vec{-kInf, -kInf, -kInf, -kInf}, {1, 1, 2, 2}, float64)},
                      {Array(Vec{1}, {1, 1, 1, 1}, float64)});
  expect_close(ym[0], Vec{-kInf}, 0, 0);
  expect_close(gm[0], Vec{1, 0, 0, 0}, 0, 0);
}

// float32/float64 tiling 2x2 windows (stride 2, LeNet's) take a dedicated loop; float16 takes the
// general one. On values every dtype holds exactly (small integers with many ties, NaN, +-inf, odd
// sizes that leave an edge unread) both give the same outputs and gradients.
TEST(MaxPool2d, Tiling2x2LoopAgreesWithGeneralPath) {
  for (const Shape& shape : {Shape{2, 3, 7, 9}, Shape{1, 2, 8, 6}}) {
    Vec v = values(random_array(shape, float64, 60, -3, 3));
    for (double& e : v) e = std::round(e);
    for (size_t i = 0; i < v.size(); i += 7) v[i] = i % 3 == 0 ? kNan : (i % 3 == 1 ? kInf : -kInf);
    const Shape out{shape[0], shape[1], shape[2] / 2, shape[3] / 2};
    Vec u = values(random_array(out, float64, 61, -4, 4));
    for (double& e : u) e = std::round(e);
    const auto pool = [](const std::vector<Array>& a) {
      return std::vector<Array>{max_pool2d(a[0], {2, 2}, {2, 2})};
    };
    auto [y16, g16] = vjp(pool, {Array(v, shape, float16)}, {Array(u, out, float16)});
    for (Dtype t : {float32, float64}) {
      SCOPED_TRACE(dtype_name(t));
      auto [y, g] = vjp(pool, {Array(v, shape, t)}, {Array(u, out, t)});
      expect_close(y[0], values(y16[0]), 0, 0);
      expect_close(g[0], values(g16[0]), 0, 0);
    }
  }
}

// The gradient of the pooled input: g[argmax of each window] += u.
TEST(MaxPool2d, GradientRoutesToTheArgmaxInEveryDtype) {
  uint64_t seed = 60;
  for (const PoolCase& c : kCases)
    for (Dtype t : {float64, float32, float16, bfloat16}) {
      SCOPED_TRACE(testing::Message() << "input " << shape_str(c.x) << ", " << dtype_name(t));
      const Array x = random_array(c.x, t, seed++);
      Shape shape;
      std::vector<int64_t> at;
      ref_max_pool(values(x), c, &shape, &at);
      const Array u = random_array(shape, t, seed++);
      const Vec uv = values(u);
      Vec ref(x.size(), 0.0);
      for (size_t k = 0; k < at.size(); ++k) ref[at[k]] += uv[k];
      auto [out, g] =
          vjp([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0])}; }, {x}, {u});
      EXPECT_EQ(g[0].dtype(), t);
      expect_close(g[0], ref);  // exact ties pick the same first element; sums round once
    }
}

TEST(MaxPool2d, VjpMatchesFiniteDifferences) {
  uint64_t seed = 100;
  for (const PoolCase& c : kCases) {
    if (shape_size(c.x) > 1000) continue;
    test::check_vjp([c](const std::vector<Array>& a) { return run(c, a[0]); },
                    {random_array(c.x, float64, seed++)});
  }
}

// scatter(x, g) is the vjp in x; gather(x, src) is the jvp. Both are linear in their second
// argument and constant in x (between argmax changes).
Array scatter(const PoolCase& c, const Array& x, const Array& g) {
  return vjp([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0])}; }, {x}, {g})
      .second[0];
}
Array gather(const PoolCase& c, const Array& x, const Array& src) {
  return jvp([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0])}; }, {x}, {src})
      .second[0];
}

TEST(MaxPool2d, AdjointsHaveGradients) {
  const PoolCase cases[] = {kCases[1], kCases[2], kCases[3]};
  uint64_t seed = 200;
  for (const PoolCase& c : cases) {
    Shape shape;
    ref_max_pool(Vec(shape_size(c.x), 0.0), c, &shape);
    const Array x = random_array(c.x, float64, seed++);
    test::check_vjp([c](const std::vector<Array>& a) { return scatter(c, a[0], a[1]); },
                    {x, random_array(shape, float64, seed++)});
    test::check_vjp([c](const std::vector<Array>& a) { return gather(c, a[0], a[1]); },
                    {x, random_array(c.x, float64, seed++)});
  }
}

TEST(MaxPool2d, SecondOrder) {
  uint64_t seed = 300;
  for (const PoolCase& c : {kCases[1], kCases[3], kCases[5]}) {
    const Array x = random_array(c.x, float64, seed++);
    // Nonlinear in the pooled values, so grad(grad) goes through scatter's and gather's vjps.
    test::check_second_order(
        [c](const std::vector<Array>& a) {
          const Array y = run(c, a[0]);
          return y * y * y;
        },
        {x});
    test::check_second_order([c](const std::vector<Array>& a) { return run(c, a[0] * a[1]); },
                             {x, random_array(c.x, float64, seed++, 0.5, 1.5)});
  }
}

TEST(MaxPool2d, JvpMatchesFiniteDifferences) {
  uint64_t seed = 400;
  for (const PoolCase& c : kCases) {
    if (shape_size(c.x) > 1000) continue;  // near-ties within eps become likely
    const Array x = random_array(c.x, float64, seed++), t = random_array(c.x, float64, seed++);
    const double eps = 1e-7;
    const Vec hi = values(run(c, x + eps * t)), lo = values(run(c, x - eps * t));
    Vec fd(hi.size());
    for (size_t i = 0; i < fd.size(); ++i) fd[i] = (hi[i] - lo[i]) / (2 * eps);
    expect_close(gather(c, x, t), fd, 1e-6, 1e-6);
  }
  // Forward mode through the vjp (a Hessian-vector style product): the jvp of scatter in g.
  const PoolCase& c = kCases[1];
  Shape shape;
  ref_max_pool(Vec(shape_size(c.x), 0.0), c, &shape);
  const Array x = random_array(c.x, float64, 450), g = random_array(shape, float64, 451),
              tg = random_array(shape, float64, 452);
  const auto [out, tangent] =
      jvp([&](const std::vector<Array>& a) { return std::vector<Array>{scatter(c, a[0], a[1])}; }, {x, g},
          {random_array(c.x, float64, 453), tg});
  expect_close(tangent[0], scatter(c, x, tg), 0, 0);
}

// vmap over an extra batch axis equals the loop over its examples, for the forward pass and its
// two adjoints, with either argument unbatched.
TEST(MaxPool2d, VmapEqualsLoop) {
  const int kB = 3;
  const PoolCase c{{2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 2}};
  Shape y_shape;
  ref_max_pool(Vec(shape_size(c.x), 0.0), c, &y_shape);
  auto batched = [&](const Shape& s, int axis, uint64_t seed) {
    Shape b = s;
    b.insert(b.begin() + axis, kB);
    return random_array(b, float64, seed);
  };
  auto example = [](const Array& v, int axis, int i) { return axis >= 0 ? take(v, Array(i), axis) : v; };
  const Array xb = batched(c.x, 2, 500);
  const Array yb =
      vmap([&](const std::vector<Array>& a) { return std::vector<Array>{run(c, a[0])}; }, {2}, {1})({xb})[0];
  for (int i = 0; i < kB; ++i) expect_close(example(yb, 1, i), run(c, example(xb, 2, i)), 0, 0);

  const Array x0 = random_array(c.x, float64, 501);
  for (int ax : {-1, 0, 4})
    for (int ao : {-1, 0, 3}) {
      if (ax < 0 && ao < 0) continue;
      SCOPED_TRACE(testing::Message() << "x axis " << ax << ", other axis " << ao);
      const Array x = ax < 0 ? x0 : batched(c.x, ax, 510 + ax);
      const Array g = ao < 0 ? random_array(y_shape, float64, 520) : batched(y_shape, ao, 520 + ao);
      const Array src = ao < 0 ? random_array(c.x, float64, 530) : batched(c.x, ao, 530 + ao);
      const Array ds =
          vmap([&](const std::vector<Array>& a) { return std::vector<Array>{scatter(c, a[0], a[1])}; },
               {ax, ao})({x, g})[0];
      const Array dg =
          vmap([&](const std::vector<Array>& a) { return std::vector<Array>{gather(c, a[0], a[1])}; },
               {ax, ao})({x, src})[0];
      for (int i = 0; i < kB; ++i) {
        expect_close(example(ds, 0, i), scatter(c, example(x, ax, i), example(g, ao, i)), 0, 0);
        expect_close(example(dg, 0, i), gather(c, example(x, ax, i), example(src, ao, i)), 0, 0);
      }
    }
  // Per-example gradients: vmap of grad.
  const Array xs = batched({1, 2, 6, 6}, 0, 540);
  const auto loss = [](const std::vector<Array>& a) {
    const Array y = max_pool2d(a[0], {3, 3}, {2, 2}, {1, 1});
    return std::vector<Array>{sum(y * y)};
  };
  const Array per = vmap(grad(loss))({xs})[0];
  for (int i = 0; i < kB; ++i) expect_close(example(per, 0, i), grad(loss)({example(xs, 0, i)})[0], 0, 0);
}

TEST(MaxPool2d, Errors) {
  const Array x = ones({1, 2, 6, 6});
  auto expect_message = [](auto&& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), what);
    }
  };
  EXPECT_THROW(max_pool2d(ones({2, 6, 6}), {2, 2}, {2, 2}), ShapeError);
  EXPECT_THROW(max_pool2d(ones({1, 1, 2, 6, 6}), {2, 2}, {2, 2}), ShapeError);
  EXPECT_THROW(max_pool2d(Array(), {2, 2}, {2, 2}), ValueError);
  EXPECT_THROW(max_pool2d(ones({1, 2, 6, 6}, int32), {2, 2}, {2, 2}), DtypeError);
  EXPECT_THROW(max_pool2d(x, {0, 2}, {2, 2}), ValueError);
  EXPECT_THROW(max_pool2d(x, {2, 2}, {2, 0}), ValueError);
  EXPECT_THROW(max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 0}), ValueError);
  EXPECT_THROW(max_pool2d(x, {2, 2}, {2, 2}, {-1, 0}), ValueError);
  EXPECT_THROW(max_pool2d(x, {3, 3}, {1, 1}, {2, 1}), ValueError);  // more than half the kernel
  EXPECT_NO_THROW(max_pool2d(x, {2, 2}, {1, 1}, {2, 0}, {3, 1}));   // the dilated kernel spans 4
  EXPECT_THROW(max_pool2d(x, {7, 2}, {1, 1}), ShapeError);          // output size 0
  EXPECT_THROW(max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {0, 3}), ValueError);
  EXPECT_THROW(max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {4, 3}), ValueError);  // starts at 6
  EXPECT_NO_THROW(max_pool2d(x, {2, 2}, {2, 2}, {1, 1}, {1, 1}, {4, 4}));           // starts at 6 < 8
  EXPECT_EQ(max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {-1, 2}).shape(), (Shape{1, 2, 3, 2}));
  expect_message(
      [&] {
        max_pool2d(x, {3, 3}, {1, 1}, {2, 1});
      },
      "[max_pool2d] padding must be at most half of the (dilated) kernel size: padding (2, 1), "
      "kernel (3, 3), dilation (1, 1)");
  expect_message(
      [&] {
        max_pool2d(ones({2, 6, 6}), {2, 2}, {2, 2});
      },
      "[max_pool2d] input must be 4-d (N, C, H, W): got (2,6,6)");
}

}  // namespace
}  // namespace kiln
