// models::SmallCnn: keys and counts, output shapes, the forward pass against a float64 computation
// written out in loops, initialization keys, gradients, a weights file round trip and every error
// path. Tiny configurations keep it fast.
#include "kiln/models/small_cnn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "support/op_test.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using models::SmallCnn;
using models::SmallCnnConfig;
using test::expect_close;
using test::values;

// An odd image size, so the reference's pooling must drop the last row and column.
SmallCnnConfig tiny(uint64_t seed = 1, Dtype dtype = float32) {
  return {.in_channels = 2,
          .num_classes = 3,
          .image_size = 9,
          .conv1_channels = 3,
          .conv2_channels = 4,
          .hidden = 5,
          .dtype = dtype,
          .key = random::key(seed)};
}

// ---- float64 reference, independent of kiln's ops: plain loops over row-major vectors ----

struct Tensor {
  std::vector<int64_t> shape;  // N, C, H, W
  std::vector<double> data;
  double& at(int64_t n, int64_t c, int64_t i, int64_t j) {
    return data[static_cast<size_t>(((n * shape[1] + c) * shape[2] + i) * shape[3] + j)];
  }
  double at(int64_t n, int64_t c, int64_t i, int64_t j) const {
    return data[static_cast<size_t>(((n * shape[1] + c) * shape[2] + i) * shape[3] + j)];
  }
};

// 3x3 convolution with zero padding 1 and a bias: w is (O, C, 3, 3).
Tensor conv3x3(const Tensor& x, const std::vector<double>& w, const std::vector<double>& b, int64_t out) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  Tensor y{{n, out, h, wd}, std::vector<double>(static_cast<size_t>(n * out * h * wd))};
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < wd; ++j) {
          double acc = b[static_cast<size_t>(o)];
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t ki = 0; ki < 3; ++ki)
              for (int64_t kj = 0; kj < 3; ++kj) {
                const int64_t r = i + ki - 1, q = j + kj - 1;
                if (r < 0 || r >= h || q < 0 || q >= wd) continue;
                acc += w[static_cast<size_t>(((o * c + ci) * 3 + ki) * 3 + kj)] * x.at(s, ci, r, q);
              }
          y.at(s, o, i, j) = acc;
        }
  return y;
}

// max(0, x), then 2x2 max pooling with stride 2 (a trailing odd row or column is dropped).
Tensor relu_pool(const Tensor& x) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2] / 2, w = x.shape[3] / 2;
  Tensor y{{n, c, h, w}, std::vector<double>(static_cast<size_t>(n * c * h * w))};
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          double m = 0;  // relu: max over the window and 0
          for (int64_t di = 0; di < 2; ++di)
            for (int64_t dj = 0; dj < 2; ++dj) m = std::max(m, x.at(s, ch, 2 * i + di, 2 * j + dj));
          y.at(s, ch, i, j) = m;
        }
  return y;
}

// rows (N, in) -> (N, out) with w (out, in), optionally followed by relu.
std::vector<double> linear(const std::vector<double>& x, int64_t n, const std::vector<double>& w,
                           const std::vector<double>& b, bool relu) {
  const auto out = static_cast<int64_t>(b.size());
  const int64_t in = static_cast<int64_t>(x.size()) / n;
  std::vector<double> y(static_cast<size_t>(n * out));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[static_cast<size_t>(o)];
      for (int64_t k = 0; k < in; ++k)
        acc += w[static_cast<size_t>(o * in + k)] * x[static_cast<size_t>(s * in + k)];
      y[static_cast<size_t>(s * out + o)] = relu ? std::max(acc, 0.0) : acc;
    }
  return y;
}

// The model's logits for x, computed in float64 from its parameters.
std::vector<double> reference_logits(const SmallCnn& model, const Array& x) {
  const SmallCnnConfig& c = model.config();
  const nn::ParamTree p = model.parameters();
  Tensor h{{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]}, values(x)};
  h = relu_pool(conv3x3(h, values(p.at("conv1.weight")), values(p.at("conv1.bias")), c.conv1_channels));
  h = relu_pool(conv3x3(h, values(p.at("conv2.weight")), values(p.at("conv2.bias")), c.conv2_channels));
  const int64_t n = h.shape[0];  // the (C, H, W) row-major flattening is the data's own order
  const std::vector<double> f1 =
      linear(h.data, n, values(p.at("fc1.weight")), values(p.at("fc1.bias")), true);
  return linear(f1, n, values(p.at("fc2.weight")), values(p.at("fc2.bias")), false);
}

bool trees_identical(const nn::ParamTree& a, const nn::ParamTree& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [key, value] : a) {
    const Array& other = b.at(key);
    if (value.shape() != other.shape() || value.dtype() != other.dtype()) return false;
    if (!all(equal(value, other)).item<bool>()) return false;
  }
  return true;
}

TEST(SmallCnn, KeysShapesAndParameterCount) {
  const SmallCnnConfig c = tiny();
  SmallCnn model(c);
  const nn::ParamTree p = model.parameters();
  EXPECT_EQ(p.keys(), (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                                "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  const int64_t pooled = c.image_size / 4;  // 9 -> 4 -> 2
  EXPECT_EQ(p.at("conv1.weight").shape(), (Shape{c.conv1_channels, c.in_channels, 3, 3}));
  EXPECT_EQ(p.at("conv2.weight").shape(), (Shape{c.conv2_channels, c.conv1_channels, 3, 3}));
  EXPECT_EQ(p.at("fc1.weight").shape(), (Shape{c.hidden, c.conv2_channels * pooled * pooled}));
  EXPECT_EQ(p.at("fc2.weight").shape(), (Shape{c.num_classes, c.hidden}));
  for (const auto& [key, value] : p) EXPECT_EQ(value.dtype(), float32) << key;

  // The defaults: Fashion-MNIST's 28x28x1 -> 16 -> 32 channels -> 128 -> 10.
  SmallCnn standard;
  const int64_t conv = (16 * 1 * 9 + 16) + (32 * 16 * 9 + 32);
  const int64_t fc = (32 * 7 * 7 * 128 + 128) + (128 * 10 + 10);
  EXPECT_EQ(nn::num_elements(standard.parameters()), conv + fc);
  EXPECT_EQ(nn::num_elements(standard.trainable_parameters()), conv + fc);
}

TEST(SmallCnn, OutputShapes) {
  SmallCnn standard({.key = random::key(2)});
  EXPECT_EQ(standard(random::normal({3, 28, 28}, random::key(3))).shape(), (Shape{3, 10}));
  EXPECT_EQ(standard(random::normal({2, 1, 28, 28}, random::key(4))).shape(), (Shape{2, 10}));
  SmallCnn model(tiny());
  EXPECT_EQ(model(random::normal({4, 2, 9, 9}, random::key(5))).shape(), (Shape{4, 3}));
  EXPECT_EQ(model(random::normal({0, 2, 9, 9}, random::key(6))).shape(), (Shape{0, 3}));
}

TEST(SmallCnn, ForwardMatchesFloat64Reference) {
  SmallCnn model(tiny(7));
  const Array x = test::random_array({3, 2, 9, 9}, float32, 8, -2.0, 2.0);
  expect_close(model(x), reference_logits(model, x), 1e-5, 1e-5);
}

TEST(SmallCnn, ForwardMatchesFloat64ReferenceInFloat64) {
  SmallCnn model(tiny(9, float64));
  for (const auto& [key, value] : model.parameters()) EXPECT_EQ(value.dtype(), float64) << key;
  const Array x = test::random_array({2, 2, 9, 9}, float64, 10, -2.0, 2.0);
  const Array logits = model(x);
  EXPECT_EQ(logits.dtype(), float64);
  expect_close(logits, reference_logits(model, x), 1e-12, 1e-12);
}

TEST(SmallCnn, OneChannelImagesMayOmitTheChannelAxis) {
  SmallCnnConfig c = tiny(11);
  c.in_channels = 1;
  SmallCnn model(c);
  const Array x = test::random_array({2, 9, 9}, float32, 12);
  expect_close(model(x), reference_logits(model, reshape(x, {2, 1, 9, 9})), 1e-5, 1e-5);
}

TEST(SmallCnn, InitializationFollowsTheKey) {
  SmallCnn a(tiny(13)), b(tiny(13)), other(tiny(14));
  EXPECT_TRUE(trees_identical(a.parameters(), b.parameters()));
  for (const auto& [key, value] : a.parameters())
    EXPECT_FALSE(all(equal(value, other.parameters().at(key))).item<bool>()) << key;
  // Without a key each layer draws from the process-wide sequence: seeding it repeats the model.
  SmallCnnConfig unkeyed = tiny();
  unkeyed.key = Array();
  random::seed(15);
  SmallCnn c(unkeyed);
  random::seed(15);
  SmallCnn d(unkeyed);
  EXPECT_TRUE(trees_identical(c.parameters(), d.parameters()));
}

TEST(SmallCnn, GradientsReachEveryParameter) {
  SmallCnn model(tiny(16));
  const Array x = test::random_array({4, 2, 9, 9}, float32, 17);
  const Array labels(std::vector<int32_t>{0, 2, 1, 2}, {4});
  auto step = nn::value_and_grad(
      model, [&](const Array& images, const Array& y) { return nn::cross_entropy(model(images), y); });
  auto [loss, grads] = step(x, labels);
  EXPECT_TRUE(std::isfinite(loss.item<float>()));
  EXPECT_EQ(grads.keys(), model.trainable_parameters().keys());
  for (const auto& [key, g] : grads) {
    EXPECT_EQ(g.shape(), model.parameters().at(key).shape()) << key;
    EXPECT_TRUE(any(not_equal(g, 0)).item<bool>()) << key;
  }
}

TEST(SmallCnn, WeightsFileRoundTrip) {
  const test::TempDir dir("small_cnn");
  const fs::path file = dir / "small_cnn.h5";
  SmallCnn trained(tiny(18));
  trained.save_weights(file);
  SmallCnn loaded(tiny(19));
  ASSERT_FALSE(trees_identical(trained.parameters(), loaded.parameters()));
  loaded.load_weights(file);
  EXPECT_TRUE(trees_identical(trained.parameters(), loaded.parameters()));
  const Array x = test::random_array({2, 2, 9, 9}, float32, 20);
  EXPECT_TRUE(all(equal(trained(x), loaded(x))).item<bool>());

  // A model of another width refuses the file and keeps its own weights.
  SmallCnnConfig wider = tiny(21);
  wider.hidden = 6;
  SmallCnn mismatched(wider);
  const nn::ParamTree before = mismatched.parameters();
  EXPECT_THROW(mismatched.load_weights(file), Error);
  EXPECT_TRUE(trees_identical(before, mismatched.parameters()));
}

TEST(SmallCnn, BadConfigsAreValueErrors) {
  const auto with = [](auto change) {
    SmallCnnConfig c = tiny();
    change(c);
    return c;
  };
  EXPECT_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.in_channels = 0; })), ValueError);
  EXPECT_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.num_classes = 0; })), ValueError);
  EXPECT_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.conv1_channels = -1; })), ValueError);
  EXPECT_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.conv2_channels = 0; })), ValueError);
  EXPECT_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.hidden = 0; })), ValueError);
  EXPECT_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.image_size = 3; })), ValueError);
  EXPECT_NO_THROW(SmallCnn(with([](SmallCnnConfig& c) { c.image_size = 4; })));
}

TEST(SmallCnn, WrongInputShapesAreShapeErrors) {
  SmallCnn model(tiny(22));
  EXPECT_THROW(model(random::normal({2, 2, 8, 9}, random::key(23))), ShapeError);  // size
  EXPECT_THROW(model(random::normal({2, 1, 9, 9}, random::key(24))), ShapeError);  // channels
  EXPECT_THROW(model(random::normal({2, 9, 9}, random::key(25))), ShapeError);     // 3-d, 2 channels
  EXPECT_THROW(model(random::normal({2, 2, 9, 9, 1}, random::key(26))), ShapeError);
  EXPECT_THROW(model(Array()), ValueError);
  try {
    model(random::normal({2, 2, 8, 9}, random::key(27)));
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("SmallCnn"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(2,2,8,9)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
