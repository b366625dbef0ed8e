// io::load_keras_weights on files in Keras' layouts (written by tests/io/keras_files.py with h5py):
// legacy .h5 at the root and under model_weights with split layer_names/weight_names, tf.keras and
// Keras 3 weight names, Keras 3 .weights.h5 (flat and nested). The mapped trees load into kiln's
// Linear, Conv2d (also depthwise) and BatchNorm1d, whose outputs must equal Keras' math computed
// by numpy in Keras' layouts; plus the default keys, raw layouts and every error.
#include "kiln/io/keras_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/hdf5_test_util.h"
#include "kiln/core/ops/shape.h"
#include "kiln/io/hdf5_weights.h"
#include "kiln/nn/layers/conv.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_mentions;
using test::relative_error;

struct KerasNet : nn::Module {
  nn::ModuleInfo<nn::Linear> fc1{this, "fc1", 6, 4};
  nn::ModuleInfo<nn::Conv2d> conv{this, "conv", 3, 5, 3};
  nn::ModuleInfo<nn::Conv2d> dw{this, "dw", 3, 6, 3, nn::Conv2dOptions{.groups = 3}};
  nn::ModuleInfo<nn::BatchNorm1d> bn{this, "bn", 5, nn::BatchNormOptions{.eps = 1e-3}};
  nn::ModuleInfo<nn::Linear> fc2{this, "fc2", 4, 2};
};

const KerasNameMap kMap = {{"dense", "fc1"},
                           {"conv2d", "conv"},
                           {"depthwise_conv2d", "dw"},
                           {"batch_normalization", "bn"},
                           {"dense_1", "fc2"}};

class KerasWeights : public test::PythonFilesTest<KerasWeights> {
 public:
  static constexpr test::PythonFiles kFiles{
      .imports = "h5py, numpy", .script = "tests/io/keras_files.py", .tag = "keras"};

 protected:
  // Loads `name` through kMap into a KerasNet and compares every layer with Keras' outputs.
  static void expect_keras_outputs(const std::string& name) {
    SCOPED_TRACE(name);
    KerasNet net;
    net.update(load_keras_weights(file(name), kMap));  // Verify::all: every slot is filled
    net.eval_mode();
    const nn::ParamTree ref = load_weights(file("keras_ref.h5"));
    auto nhwc = [](const Array& x) { return transpose(x, {0, 2, 3, 1}); };
    auto nchw = [](const Array& x) { return transpose(x, {0, 3, 1, 2}); };
    EXPECT_LT(relative_error(net.fc1(ref.at("dense.x")), ref.at("dense.y")), 1e-5);
    EXPECT_LT(relative_error(net.fc2(ref.at("dense_1.x")), ref.at("dense_1.y")), 1e-5);
    EXPECT_LT(relative_error(nhwc(net.conv(nchw(ref.at("conv.x")))), ref.at("conv.y")), 1e-5);
    EXPECT_LT(relative_error(nhwc(net.dw(nchw(ref.at("depthwise.x")))), ref.at("depthwise.y")), 1e-5);
    EXPECT_LT(relative_error(net.bn(ref.at("bn.x")), ref.at("bn.y")), 1e-5);
    EXPECT_EQ(net.bn->num_batches_tracked.value().item<int64_t>(), 0);
  }
};

TEST_F(KerasWeights, LegacyH5MatchesKerasMath) { expect_keras_outputs("legacy.h5"); }

TEST_F(KerasWeights, LegacyUnderModelWeightsWithSplitNamesMatchesKerasMath) {
  expect_keras_outputs("legacy_split.h5");
}

TEST_F(KerasWeights, Keras3WeightsH5MatchesKerasMath) { expect_keras_outputs("model.weights.h5"); }

TEST_F(KerasWeights, DefaultKeysFollowLayerNames) {
  const std::vector<std::string> legacy_keys = {
      "dense.weight",
      "dense.bias",
      "conv2d.weight",
      "conv2d.bias",
      "depthwise_conv2d.weight",
      "depthwise_conv2d.bias",
      "batch_normalization.weight",
      "batch_normalization.bias",
      "batch_normalization.running_mean",
      "batch_normalization.running_var",
      "batch_normalization.num_batches_tracked",
      "dense_1.weight",
      "dense_1.bias",
  };
  EXPECT_EQ(load_keras_weights(file("legacy.h5")).keys(), legacy_keys);
  EXPECT_EQ(load_keras_weights(file("legacy_split.h5")).keys(), legacy_keys);
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const nn::ParamTree k3 = load_keras_weights(file("model.weights.h5"));
  EXPECT_EQ(sorted(k3.keys()), sorted(legacy_keys));
  EXPECT_EQ(k3.at("dense.weight").shape(), (Shape{4, 6}));
  EXPECT_EQ(k3.at("conv2d.weight").shape(), (Shape{5, 3, 3, 3}));
  EXPECT_EQ(k3.at("depthwise_conv2d.weight").shape(), (Shape{6, 1, 3, 3}));

  const nn::ParamTree nested = load_keras_weights(file("nested.weights.h5"));
  EXPECT_TRUE(nested.contains("functional.dense.weight"));
  EXPECT_TRUE(nested.contains("functional.batch_normalization.running_var"));
  EXPECT_EQ(nested.size(), legacy_keys.size());
  const nn::ParamTree mapped =
      load_keras_weights(file("nested.weights.h5"), {{"functional/dense", "encoder.fc"}});
  EXPECT_TRUE(mapped.contains("encoder.fc.weight"));
  EXPECT_TRUE(test::trees_identical(mapped.subtree("encoder.fc"), nested.subtree("functional.dense")));
}

TEST_F(KerasWeights, AdaptersOffKeepTheFilesNamesAndLayouts) {
  const KerasOptions raw{.adapt_layouts = false};
  const nn::ParamTree legacy = load_keras_weights(file("legacy.h5"), {}, raw);
  EXPECT_EQ(legacy.size(), 12u) << "no num_batches_tracked is added";
  EXPECT_EQ(legacy.at("dense.kernel").shape(), (Shape{6, 4}));
  EXPECT_EQ(legacy.at("conv2d.kernel").shape(), (Shape{3, 3, 3, 5}));
  EXPECT_TRUE(legacy.contains("batch_normalization.moving_variance"));
  const nn::ParamTree k3 = load_keras_weights(file("model.weights.h5"), {}, raw);
  EXPECT_EQ(test::bytes_of(k3.at("dense.0")), test::bytes_of(legacy.at("dense.kernel")));
  EXPECT_EQ(test::bytes_of(k3.at("batch_normalization.3")),
            test::bytes_of(legacy.at("batch_normalization.moving_variance")));
  const nn::ParamTree no_counter = load_keras_weights(file("legacy.h5"), {}, {.num_batches_tracked = false});
  EXPECT_FALSE(no_counter.contains("batch_normalization.num_batches_tracked"));
  EXPECT_TRUE(no_counter.contains("batch_normalization.running_mean"));
}

TEST_F(KerasWeights, ErrorsNameTheFileAndWhatIsWrong) {
  const std::string legacy = file("legacy.h5").string();
  expect_mentions(error_of<KeyError>([&] {
                    load_keras_weights(legacy, {{"dense_9", "fc"}});
                  }),
                  {legacy, "dense_9"});
  expect_mentions(error_of<KeyError>([&] {
                    load_keras_weights(legacy, {{"dense", "fc"}, {"dense_1", "fc"}});
                  }),
                  {legacy, "dense/dense/kernel:0", "dense_1/dense_1/kernel:0", "fc.weight"});
  expect_mentions(error_of<FormatError>([&] { load_keras_weights(file("bn3.weights.h5")); }),
                  {file("bn3.weights.h5").string(), "batch_normalization", "3 variables"});
  expect_mentions(error_of<FormatError>([&] { load_keras_weights(file("missing_group.h5")); }),
                  {file("missing_group.h5").string(), "ghost"});
  expect_mentions(error_of<FormatError>([&] { load_keras_weights(file("missing_weight.h5")); }),
                  {file("missing_weight.h5").string(), "dense/bias:0"});
  expect_mentions(error_of<FormatError>([&] { load_keras_weights(file("keras_ref.h5")); }),
                  {file("keras_ref.h5").string(), "not a Keras weights file"});
  expect_mentions(error_of<RuntimeError>([&] { load_keras_weights(file("absent.h5")); }),
                  {file("absent.h5").string()});

  // A tree that does not fit the model is refused by update, and the model is unchanged.
  KerasNet net;
  const nn::ParamTree before = net.parameters();
  nn::eval(before);
  EXPECT_THROW(net.update(load_keras_weights(legacy)), KeyError);  // no map: keys name Keras layers
  EXPECT_TRUE(test::trees_identical(net.parameters(), before));
}

}  // namespace
}  // namespace kiln::io
