// scripts/torch_to_hdf5.py against PyTorch itself: tests/io/torch_export_models.py builds seeded
// PyTorch models that mirror kiln's (models::Mlp, models::LeNet, a stack of
// nn::TransformerEncoderLayer, nn::BatchNorm1d), exports them (through the function and the
// command line) with PyTorch's eval-mode outputs for fixed inputs; kiln loads each state_dict with
// Module::load_weights (every key, shape and dtype must match) and must give the same outputs.
// Skipped unless /usr/bin/python3 can import torch and h5py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/hdf5_test_util.h"
#include "kiln/io/hdf5_weights.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/layers/norm.h"
#include "kiln/nn/layers/transformer.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::relative_error;

// The kiln twin of torch_export_models.py's Encoder.
struct Encoder : nn::Module {
  nn::ModuleList<nn::TransformerEncoderLayer> layers{this, "layers"};
  Encoder() {
    layers.emplace_back(16, 4, nn::TransformerLayerOptions{.dim_feedforward = 32});
    layers.emplace_back(
        16, 4,
        nn::TransformerLayerOptions{
            .dim_feedforward = 32, .activation = nn::TransformerActivation::gelu, .norm_first = true});
  }
  Array operator()(Array x) const {
    for (const auto& layer : layers) x = (*layer)(x);
    return x;
  }
};

class TorchExport : public test::PythonFilesTest<TorchExport> {
 public:
  static constexpr test::PythonFiles kFiles{
      .imports = "torch, h5py, numpy", .script = "tests/io/torch_export_models.py", .tag = "torch_export"};

 protected:
  void SetUp() override {
    if (set_up_files()) io_ = load_weights(file("io.h5"));
  }
  const Array& x(const std::string& model) const { return io_.at(model + ".x"); }
  const Array& y(const std::string& model) const { return io_.at(model + ".y"); }

  nn::ParamTree io_;
};

TEST_F(TorchExport, MlpMatchesPyTorch) {
  models::Mlp mlp({.in_features = 20, .hidden = {32, 16}, .out_features = 5});
  mlp.load_weights(file("mlp.h5"));
  EXPECT_LT(relative_error(mlp(x("mlp")), y("mlp")), 1e-5);
}

TEST_F(TorchExport, LeNetFromTheCommandLineMatchesPyTorch) {
  models::LeNet lenet;
  lenet.load_weights(file("lenet.h5"));
  EXPECT_LT(relative_error(lenet(x("lenet")), y("lenet")), 1e-5);
  const auto meta = load_weights_metadata(file("lenet.h5"));
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"model", "lenet"}, {"source", "torch"}}));
}

TEST_F(TorchExport, TransformerEncoderLayersMatchPyTorch) {
  Encoder encoder;
  encoder.load_weights(file("encoder.h5"));
  encoder.eval_mode();  // dropout off, as PyTorch's eval()
  EXPECT_LT(relative_error(encoder(x("encoder")), y("encoder")), 1e-5);
  // The file keeps the state_dict's order, which is kiln's declaration order too.
  EXPECT_EQ(load_weights(file("encoder.h5")).keys(), encoder.parameters().keys());
}

TEST_F(TorchExport, BatchNormBuffersAndCounterLoad) {
  nn::BatchNorm1d bn(5);
  bn.load_weights(file("bn.h5"));
  EXPECT_EQ(bn.num_batches_tracked.value().dtype(), int64);
  EXPECT_EQ(bn.num_batches_tracked.value().item<int64_t>(), 3);
  bn.eval_mode();
  EXPECT_LT(relative_error(bn(x("bn")), y("bn")), 1e-5);
}

TEST_F(TorchExport, Bfloat16StateDictKeepsItsBits) {
  models::Mlp mlp({.in_features = 20, .hidden = {32, 16}, .out_features = 5, .dtype = bfloat16});
  mlp.load_weights(file("mlp_bf16.h5"));  // dtypes must match: bfloat16 came back as bfloat16
  const nn::ParamTree f32 = load_weights(file("mlp.h5"));
  for (const auto& [key, value] : mlp.parameters()) {
    ASSERT_EQ(value.dtype(), bfloat16) << key;
    // PyTorch and kiln both round float32 to bfloat16 to nearest even.
    EXPECT_EQ(test::bytes_of(value), test::bytes_of(astype(f32.at(key), bfloat16))) << key;
  }
}

}  // namespace
}  // namespace kiln::io
