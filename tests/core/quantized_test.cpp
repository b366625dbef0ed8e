// quantize, dequantize and quantized_matmul (core/ops/quantized.h): the packed layout and the
// round-trip error against a float64 reference written here, the product against the dequantized
// float64 product in both layouts, the gradients by finite differences, batching, and errors.
#include "kiln/core/ops/quantized.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

struct Layout {
  int group_size, bits;
};
constexpr Layout kLayouts[] = {{32, 2}, {64, 2}, {32, 4}, {64, 4}, {128, 4}, {32, 8}, {64, 8}, {128, 8}};

// The integers of a packed row, read as the layout says: value i in word i / (32 / bits), at bit
// (i % (32 / bits)) * bits.
std::vector<uint32_t> unpack(const std::vector<uint32_t>& words, int bits) {
  const int per = 32 / bits;
  std::vector<uint32_t> q;
  for (size_t i = 0; i < words.size() * per; ++i)
    q.push_back((words[i / per] >> ((i % per) * bits)) & ((1u << bits) - 1));
  return q;
}

// scale * q + bias per group, in float64, from the packed words: the reference dequantization.
std::vector<double> reference_dequantize(const QuantizedWeight& q, int group_size, int bits) {
  const std::vector<uint32_t> levels = unpack(q.weight.to_vector<uint32_t>(), bits);
  const std::vector<double> s = values(q.scales), b = values(q.biases);
  std::vector<double> w(levels.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = s[i / group_size] * levels[i] + b[i / group_size];
  return w;
}

TEST(Quantize, ShapesDtypesAndLayout) {
  const Array w = random_array({3, 5, 128}, float32, 1);
  const auto [wq, scales, biases] = quantize(w, 64, 4);
  EXPECT_EQ(wq.shape(), (Shape{3, 5, 16}));
  EXPECT_EQ(wq.dtype(), uint32);
  EXPECT_EQ(scales.shape(), (Shape{3, 5, 2}));
  EXPECT_EQ(scales.dtype(), float32);
  EXPECT_EQ(biases.shape(), (Shape{3, 5, 2}));
  // Each group: bias = its minimum, scale = (max - min) / 15, q = round((w - bias) / scale).
  const std::vector<double> x = values(w), s = values(scales), b = values(biases);
  const std::vector<uint32_t> levels = unpack(wq.to_vector<uint32_t>(), 4);
  for (size_t g = 0; g < s.size(); ++g) {
    const auto lo = std::min_element(x.begin() + g * 64, x.begin() + (g + 1) * 64);
    const auto hi = std::max_element(x.begin() + g * 64, x.begin() + (g + 1) * 64);
    EXPECT_FLOAT_EQ(b[g], *lo);
    EXPECT_FLOAT_EQ(s[g], (*hi - *lo) / 15);
    for (size_t i = g * 64; i < (g + 1) * 64; ++i)
      EXPECT_NEAR(levels[i], std::clamp(std::round((x[i] - b[g]) / s[g]), 0.0, 15.0), 0.5 + 1e-9) << i;
  }
}

TEST(Quantize, RoundTripIsWithinHalfAScale) {
  uint64_t seed = 10;
  for (const Layout& l : kLayouts)
    for (Dtype t : {float32, float64, float16, bfloat16}) {
      SCOPED_TRACE(std::to_string(l.bits) + " bits, group " + std::to_string(l.group_size) + ", " +
                   std::string(dtype_name(t)));
      const Array w = random_array({7, 256}, t, seed++, -2.0, 3.0);
      const QuantizedWeight q = quantize(w, l.group_size, l.bits);
      const Array back = dequantize(q.weight, q.scales, q.biases, l.group_size, l.bits);
      EXPECT_EQ(back.dtype(), t);
      const std::vector<double> ref = reference_dequantize(q, l.group_size, l.bits), got = values(back),
                                x = values(w), s = values(q.scales);
      // float16/bfloat16 store a rounded scale and bias and round the result: up to a scale.
      const double half = t == float32 || t == float64 ? 0.5 : 1.0;
      const double unit = t == float64 ? 1e-15 : t == float32 ? 1e-6 : t == float16 ? 2e-3 : 1.6e-2;
      for (size_t i = 0; i < x.size(); ++i) {
        const double scale = s[i / l.group_size];
        ASSERT_LE(std::abs(got[i] - x[i]), half * scale + unit * 3) << i;
        ASSERT_NEAR(got[i], ref[i], unit * 3 * std::max(1.0, std::abs(ref[i]))) << i;
      }
    }
}

TEST(Quantize, ConstantGroupsAreExact) {
  std::vector<double> v(2 * 64, 0.75);
  for (int i = 64; i < 128; ++i) v[i] = -1.25;
  const Array w(v, {2, 64}, float32);
  const QuantizedWeight q = quantize(w, 64, 4);
  EXPECT_EQ(values(q.scales), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(dequantize(q.weight, q.scales, q.biases, 64, 4)), v);
}

// quantized_matmul of a random x (rows..., in) and W against the float64 product with the reference
// dequantization.
void check_product(Layout l, bool transpose, const Shape& rows, Dtype t, int64_t in, int64_t out,
                   uint64_t seed) {
  SCOPED_TRACE(std::to_string(l.bits) + " bits, group " + std::to_string(l.group_size) +
               (transpose ? ", (out, in) " : ", (in, out) ") + std::to_string(in) + " x " +
               std::to_string(out) + ", " + std::string(dtype_name(t)) + ", x rows " + shape_str(rows));
  const Array w = random_array(transpose ? Shape{out, in} : Shape{in, out}, t, seed);
  const QuantizedWeight q = quantize(w, l.group_size, l.bits);
  Shape xs = rows;
  xs.push_back(in);
  const Array x = random_array(xs, t, seed + 1);
  const Array y = quantized_matmul(x, q.weight, q.scales, q.biases, transpose, l.group_size, l.bits);
  Shape ys = rows;
  ys.push_back(out);
  ASSERT_EQ(y.shape(), ys);
  EXPECT_EQ(y.dtype(), t);
  const std::vector<double> wd = reference_dequantize(q, l.group_size, l.bits), xd = values(x);
  const int64_t m = x.size() / in;
  std::vector<double> want(static_cast<size_t>(m * out), 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < in; ++c) acc += xd[r * in + c] * (transpose ? wd[j * in + c] : wd[c * out + j]);
      want[r * out + j] = acc;
    }
  const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-4 : 3e-2;
  expect_close(y, want, tol, tol * 4);
}

// Both layouts at batch 1, a few rows and 64 rows, with W spanning several blocks (up to 4 rows of
// x take the matrix-vector kernel, more the blocks through OpenBLAS).
TEST(QuantizedMatmul, MatchesTheDequantizedFloat64Product) {
  uint64_t seed = 100;
  for (const Layout& l : {Layout{32, 4}, Layout{64, 8}, Layout{128, 2}, Layout{64, 4}})
    for (bool transpose : {true, false})
      for (const Shape& rows : {Shape{1}, Shape{2, 2}, Shape{3, 2}, Shape{64}})
        for (Dtype t : {float32, float64, bfloat16})  // W 384 x 256: 98304 values, two blocks or more
          check_product(l, transpose, rows, t, 384, 256, seed += 2);
}

// The matrix-vector kernel takes several groups a step (16 lanes); a count of groups that is no
// multiple of that leaves groups it takes one at a time.
TEST(QuantizedMatmul, MatrixVectorKernelTakesTheLeftoverGroups) {
  uint64_t seed = 300;
  for (const Layout& l : {Layout{64, 4}, Layout{32, 4}, Layout{32, 2}, Layout{64, 2}, Layout{32, 8}})
    for (const Shape& rows : {Shape{1}, Shape{3}}) check_product(l, true, rows, float32, 320, 40, seed += 2);
}

TEST(QuantizedMatmul, PromotesAndHandlesEmptyOperands) {
  const QuantizedWeight q = quantize(random_array({8, 64}, bfloat16, 1), 64, 4);
  const Array y = quantized_matmul(random_array({2, 64}, float32, 2), q.weight, q.scales, q.biases);
  EXPECT_EQ(y.dtype(), float32);  // float32 x, bfloat16 scales
  const Array none = quantized_matmul(zeros({0, 64}, float32), q.weight, q.scales, q.biases);
  EXPECT_EQ(none.shape(), (Shape{0, 8}));
  none.eval();
}

// The weights as inputs of a test function: W quantized once, its scales and biases varied.
struct Quantized {
  Array wq, scales, biases;
};
Quantized quantized_weight(const Shape& shape, int group_size, int bits, uint64_t seed) {
  const QuantizedWeight q = quantize(random_array(shape, float64, seed), group_size, bits);
  return {q.weight, q.scales, q.biases};
}

TEST(QuantizedMatmul, GradientsMatchFiniteDifferences) {
  for (bool transpose : {true, false}) {
    SCOPED_TRACE(transpose ? "(out, in)" : "(in, out)");
    const Quantized q = quantized_weight(transpose ? Shape{5, 64} : Shape{3, 64}, 32, 4, 20);
    const int64_t in = transpose ? 64 : 3;
    const Array x = random_array({2, in}, float64, 21);
    const test::Fn f = [&](const std::vector<Array>& a) {
      return quantized_matmul(a[0], q.wq, a[1], a[2], transpose, 32, 4);
    };
    test::check_vjp(f, {x, q.scales, q.biases});
    test::check_jvp(f, {x, q.scales, q.biases});
    // The integers get a zero cotangent (they are not differentiable).
    const auto [out, grads] = vjp(
        [&](const std::vector<Array>& a) {
          return std::vector<Array>{quantized_matmul(a[0], a[1], a[2], a[3], transpose, 32, 4)};
        },
        std::vector<Array>{x, q.wq, q.scales, q.biases},
        std::vector<Array>{ones({2, transpose ? int64_t{5} : int64_t{64}}, float64)});
    EXPECT_EQ(values(grads[1]), std::vector<double>(static_cast<size_t>(q.wq.size()), 0.0));
  }
}

TEST(Dequantize, GradientsMatchFiniteDifferences) {
  const Quantized q = quantized_weight({3, 128}, 64, 8, 30);
  const test::Fn f = [&](const std::vector<Array>& a) { return dequantize(q.wq, a[0], a[1], 64, 8); };
  test::check_vjp(f, {q.scales, q.biases});
  test::check_jvp(f, {q.scales, q.biases});
}

TEST(QuantizedOps, VmapEqualsLoop) {
  const Quantized q = quantized_weight({6, 64}, 32, 4, 40);
  test::check_vmap(
      [&](const std::vector<Array>& a) { return quantized_matmul(a[0], q.wq, a[1], a[2], true, 32, 4); },
      {random_array({2, 64}, float32, 41), astype(q.scales, float32), astype(q.biases, float32)});
  test::check_vmap(
      [&](const std::vector<Array>& a) { return quantized_matmul(a[0], a[1], a[2], a[3], false, 32, 4); },
      {random_array({3, 6}, float32, 42), q.wq, astype(q.scales, float32), astype(q.biases, float32)});
  test::check_vmap(
      [](const std::vector<Array>& a) {
        const QuantizedWeight r = quantize(a[0], 32, 4);
        return dequantize(r.weight, r.scales, r.biases, 32, 4);
      },
      {random_array({2, 64}, float32, 43)});
}

TEST(QuantizedOps, BadArgumentsAreClearErrors) {
  const Array w = random_array({4, 64}, float32, 50);
  const QuantizedWeight q = quantize(w, 32, 4);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { quantize(w, 32, 3); }).find("bits must be 2, 4 or 8"), std::string::npos);
  EXPECT_NE(message([&] { quantize(w, 48, 4); }).find("group_size must be 32, 64 or 128"), std::string::npos);
  EXPECT_NE(message([&] {
              quantize(random_array({4, 96}, float32, 51), 64, 4);
            }).find("multiple of group_size"),
            std::string::npos);
  EXPECT_NE(message([&] { quantize(random_array({64}, float32, 52), 64, 4); }).find("at least 2 dimensions"),
            std::string::npos);
  EXPECT_THROW(quantize(astype(w, int32), 32, 4), DtypeError);
  EXPECT_THROW(dequantize(astype(q.weight, int32), q.scales, q.biases, 32, 4), DtypeError);
  EXPECT_THROW(dequantize(q.weight, q.scales, astype(q.biases, float64), 32, 4), DtypeError);
  EXPECT_THROW(dequantize(q.weight, q.scales, q.biases, 64, 4), ShapeError);  // scales of another group size
  EXPECT_THROW(dequantize(q.weight, q.scales, q.biases, 32, 8), ShapeError);  // words of another width
  EXPECT_NE(message([&] {
              quantized_matmul(random_array({2, 32}, float32, 53), q.weight, q.scales, q.biases, true, 32, 4);
            }).find("x's last dimension must be the weight's input dimension"),
            std::string::npos);
  EXPECT_THROW(
      quantized_matmul(random_array({2, 64}, float32, 54), q.weight, q.scales, q.biases, false, 32, 4),
      ShapeError);  // stored (in, out) = (4, 64): x must be (..., 4)
  EXPECT_THROW(quantized_matmul(random_array({2, 64}, int32, 55), q.weight, astype(q.scales, int32),
                                astype(q.biases, int32), true, 32, 4),
               DtypeError);
}

}  // namespace
}  // namespace kiln
