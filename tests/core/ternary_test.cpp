#include <gtest/gtest.h>

#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

TEST(Where, SelectsWithBroadcasting) {
  const Array c({true, false, true}, {3, 1});
  const Array x = random_array({3, 4}, float32, 1), y = random_array({4}, float32, 2);
  const Array r = where(c, x, y);
  ASSERT_EQ(r.shape(), (Shape{3, 4}));
  const auto xv = values(x), yv = values(y), cv = values(c);
  std::vector<double> ref;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) ref.push_back(cv[i] ? xv[i * 4 + j] : yv[j]);
  expect_close(r, ref);
}

TEST(Where, ScalarsAndPromotion) {
  const Array c({true, false});
  EXPECT_EQ(where(c, ones({2}, bfloat16), 0.0).dtype(), bfloat16);
  EXPECT_EQ(where(c, 1, 2).to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(where(Array({1.0f, 0.0f}), 1.0f, 2.0f).to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(Where, GradientFlowsToTheChosenBranch) {
  const Array c({true, false, true, false}, {2, 2});
  test::check_vjp([&](const std::vector<Array>& a) { return where(c, a[0], a[1]); },
                  {random_array({2, 2}, float64, 3), random_array({2}, float64, 4)});
}

TEST(Where, JvpAndVmapRules) {
  const Array cond = test::random_array({2, 3}, float32, 21) > 0.0;
  const Array x = test::random_array({2, 3}, float64, 22), y = test::random_array({3}, float64, 23);
  const test::Fn f = [](const std::vector<Array>& a) { return where(a[0], a[1], a[2]); };
  test::check_jvp(f, {cond, x, y});
  test::check_vmap(f, {cond, astype(x, float32), astype(y, float32)});
  const test::Fn g = [](const std::vector<Array>& a) { return clip(a[0], -0.5, 0.5); };
  test::check_jvp(g, {x});
  test::check_vmap(g, {astype(x, float32)});
}

TEST(Where, RejectsBadShapes) { EXPECT_THROW(where(Array({true, false}), ones({3}), 0.0), ShapeError); }

TEST(Clip, ClipsAndPassesGradientInside) {
  const Array x({-2.0, -0.5, 0.5, 2.0});
  EXPECT_EQ(clip(x, -1.0, 1.0).to_vector<double>(), (std::vector<double>{-1, -0.5, 0.5, 1}));
  EXPECT_EQ(clip(x, std::nullopt, 0.0).to_vector<double>(), (std::vector<double>{-2, -0.5, 0, 0}));
  EXPECT_EQ(clip(x, 0.0, std::nullopt).to_vector<double>(), (std::vector<double>{0, 0, 0.5, 2}));
  const Array g = grad([](const Array& a) { return sum(clip(a, -1.0, 1.0)); })(x);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_THROW(clip(x, std::nullopt, std::nullopt), ValueError);
}

}  // namespace
}  // namespace kiln
