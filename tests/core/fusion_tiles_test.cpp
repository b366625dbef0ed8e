// compile's register tiles (core/transforms/fusion.cpp): float32 chains of arithmetic, exp and
// tanh agree bit for bit with the uncompiled ops over whole tiles, partial blocks, scalars on
// either side, values read several times, runs split by ops the tiles do not cover, and NaN or
// infinite inputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "kiln/core/ops/elementwise_impl.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::random_array;

void expect_same_bits(const Array& got, const Array& want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << "at " << i;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(w[i]))
        << "at " << i << ": " << g[i] << " instead of " << w[i];
  }
}

// Every tile op, with scalars on both sides and intermediates read more than once.
Array every_op(const Array& x, const Array& y) {
  const Array t = tanh(0.5f * x - y);
  const Array e = exp(-(x / 4.0f)) + t * t;
  return (2.0f - e) / (y * y + 1.0f) + 3.0f * x;
}

std::vector<Array> every_op_fn(const std::vector<Array>& a) { return {every_op(a[0], a[1])}; }

TEST(FusionTiles, Float32ChainsMatchTheUncompiledOpsBitForBit) {
  auto f = compile(every_op_fn);
  // 192: one short block of whole tiles; 2240: full blocks and a tiled tail; 5000: a tail that is
  // not whole tiles (the per-member loops); 100000: several threads.
  for (int64_t n : {192, 2240, 5000, 100000}) {
    const Array x = random_array({n}, float32, 11, -8, 8), y = random_array({n}, float32, 12, -2, 2);
    const Array got = f({x, y})[0];
    ASSERT_TRUE(got.has_primitive());
    EXPECT_STREQ(got.primitive()->name(), "FusedElementwise");
    expect_same_bits(got, every_op(x, y));
  }
}

TEST(FusionTiles, RunsSplitByOtherOpsAndNonDenseInputs) {
  // sigmoid and sqrt have no tile op: they run as block loops between tile runs, reading stored
  // results; h is read by both sides of them.
  auto f = compile([](const std::vector<Array>& a) {
    const Array h = sigmoid(a[0] * a[1] + 1.0f);
    return std::vector<Array>{tanh(sqrt(h) * a[0]) - h};
  });
  auto reference = [](const Array& x, const Array& b) {
    const Array h = sigmoid(x * b + 1.0f);
    return tanh(sqrt(h) * x) - h;
  };
  const Array x = random_array({40, 64}, float32, 13, -3, 3), b = random_array({64}, float32, 14);
  expect_same_bits(f({x, b})[0], reference(x, b));  // b broadcast: made dense once
  const Array xt = transpose(random_array({64, 40}, float32, 15, -3, 3));
  expect_same_bits(f({xt, b})[0], reference(xt, b));  // a strided input
  const Array s(0.75f);
  expect_same_bits(f({x, s})[0], reference(x, s));  // a scalar input, splatted
}

TEST(FusionTiles, NanAndInfinitiesPassThroughTiles) {
  auto f = compile([](const std::vector<Array>& a) {
    return std::vector<Array>{tanh(a[0]) * 2.0f + exp(a[0]) / (a[0] - 1.0f)};
  });
  std::vector<float> v = random_array({256}, float32, 16, -5, 5).to_vector<float>();
  const float inf = std::numeric_limits<float>::infinity();
  v[3] = std::nanf("");
  v[70] = inf;
  v[130] = 0.0f;
  v[200] = -inf;
  v[201] = 1.0f;    // 0 denominator
  v[255] = 200.0f;  // exp overflows
  const Array x(v, {256});
  const Array got = f({x})[0];
  expect_same_bits(got, tanh(x) * 2.0f + exp(x) / (x - 1.0f));
  const std::vector<float> g = got.to_vector<float>();
  EXPECT_TRUE(std::isnan(g[3]));
  EXPECT_TRUE(std::isnan(g[70]));  // inf / inf
  EXPECT_EQ(g[200], -2.0f);
  EXPECT_EQ(g[201], inf);
}

// The fused chain asks each member's primitive for its tile op (no list of names): the seven ops
// with a register-tile form state it, the others report none and run as block loops.
TEST(FusionTiles, PrimitivesStateTheirTileOps) {
  using detail::TileOp;
  const Array x = random_array({6}, float32, 17, -2, 2), y = random_array({6}, float32, 18, 0.5, 2);
  auto tile_op_of = [](const Array& a) {
    EXPECT_TRUE(a.has_primitive());
    const auto* kernel = dynamic_cast<const detail::BlockKernel*>(a.primitive().get());
    EXPECT_NE(kernel, nullptr) << a.primitive()->name();
    return kernel ? kernel->tile_op() : TileOp::none;
  };
  EXPECT_EQ(tile_op_of(add(x, y)), TileOp::add);
  EXPECT_EQ(tile_op_of(subtract(x, y)), TileOp::subtract);
  EXPECT_EQ(tile_op_of(multiply(x, y)), TileOp::multiply);
  EXPECT_EQ(tile_op_of(divide(x, y)), TileOp::divide);
  EXPECT_EQ(tile_op_of(negative(x)), TileOp::negative);
  EXPECT_EQ(tile_op_of(exp(x)), TileOp::exp);
  EXPECT_EQ(tile_op_of(tanh(x)), TileOp::tanh);
  EXPECT_EQ(tile_op_of(sqrt(y)), TileOp::none);
  EXPECT_EQ(tile_op_of(maximum(x, y)), TileOp::none);
  EXPECT_EQ(tile_op_of(power(y, x)), TileOp::none);
}

}  // namespace
}  // namespace kiln
