#include <gtest/gtest.h>

#include "support/op_test.h"

namespace kiln {
namespace {

TEST(Creation, ZerosOnesFull) {
  EXPECT_EQ(zeros({2, 3}).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({2}, int64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(full({2, 2}, 2.5, float64).to_vector<double>(), std::vector<double>(4, 2.5));
  EXPECT_EQ(full({3}, 7).dtype(), int32);
  EXPECT_EQ(full({2}, Array({1.0f, 2.0f})).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(zeros({0, 3}).size(), 0);
  EXPECT_THROW(zeros({-1}), ShapeError);
}

TEST(Creation, Likes) {
  const Array x = test::random_array({2, 3}, float16, 1);
  EXPECT_EQ(zeros_like(x).dtype(), float16);
  EXPECT_EQ(ones_like(x).shape(), x.shape());
  EXPECT_EQ(full_like(x, 3).to_vector<float>(), std::vector<float>(6, 3.0f));
}

TEST(Creation, RangesAndEye) {
  EXPECT_EQ(arange(5).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(5, 0, -2, int32).to_vector<int32_t>(), (std::vector<int32_t>{5, 3, 1}));
  EXPECT_EQ(arange(3, 1).size(), 0);
  EXPECT_THROW(arange(0, 1, 0), ValueError);
  EXPECT_EQ(linspace(0, 1, 5).to_vector<float>(), (std::vector<float>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(eye(2, 3, 1).to_vector<float>(), (std::vector<float>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(identity(2, int32).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0, 1}));
}

TEST(Creation, CastsAndContiguous) {
  const Array x({1.7, -1.7, 0.0});
  EXPECT_EQ(astype(x, int32).to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 0}));
  EXPECT_EQ(astype(x, bool_).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(astype(x, float64).id(), x.id());
  const Array t = transpose(test::random_array({3, 4}, float32, 2));
  const Array c = contiguous(t);
  EXPECT_EQ(c.to_vector<float>(), t.to_vector<float>());
  EXPECT_NO_THROW(c.data<float>());
  test::check_vjp([](const std::vector<Array>& a) { return astype(a[0], float32) * 2.0; },
                  {test::random_array({3}, float64, 3)}, 1e-3, 1e-4);
}

}  // namespace
}  // namespace kiln
