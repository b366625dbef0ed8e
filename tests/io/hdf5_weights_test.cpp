// io::save_weights / io::load_weights round trips (every dtype, 0-d and empty arrays, NaN payloads,
// views, lazy arrays), the file layout as h5py sees it, prefixes, metadata, atomic replacement,
// key checks, Module::save_weights / load_weights (frozen parameters, BatchNorm buffers) and
// concurrent use. Malformed files and mismatched models: hdf5_weights_errors_test.cpp.
#include "kiln/io/hdf5_weights.h"

#include <gtest/gtest.h>

#include <thread>

#include "io/hdf5_test_util.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::bytes_of;
using test::error_of;
using test::every_dtype_tree;
using test::random_bits;
using test::TempDir;
using test::trees_identical;

// Every dtype in three shapes: 2-d, 0-d and empty; random bytes, so floats include NaN payloads.
TEST(Hdf5Weights, RoundTripIsBitExactForEveryDtype) {
  TempDir dir("hdf5");
  const nn::ParamTree tree = every_dtype_tree();
  save_weights(dir.file("w.h5"), tree);
  const nn::ParamTree back = load_weights(dir.file("w.h5"));
  EXPECT_TRUE(trees_identical(tree, back));
  for (const auto& [key, value] : back) EXPECT_TRUE(value.is_available()) << key;
}

TEST(Hdf5Weights, NanPayloadsSignsAndSubnormalsSurvive) {
  TempDir dir("hdf5");
  const std::vector<uint32_t> f32 = {0x7fc00001u, 0xffc12345u, 0x7f800001u, 0x80000000u,
                                     0x7f800000u, 0x00000001u, 0x807fffffu, 0x3f800000u};
  const std::vector<uint64_t> f64 = {0x7ff8000000000001ull, 0xfff0000000000abcull, 0x8000000000000000ull,
                                     0x0000000000000001ull};
  const std::vector<uint16_t> f16 = {0x7e01, 0xfe00, 0x7c01, 0x8000, 0x0001, 0x7c00};
  auto bytes = [](const auto& v) {
    std::vector<uint8_t> b(v.size() * sizeof(v[0]));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  nn::ParamTree tree;
  tree.set("f32", test::from_bytes({8}, float32, bytes(f32)));
  tree.set("f64", test::from_bytes({2, 2}, float64, bytes(f64)));
  tree.set("f16", test::from_bytes({6}, float16, bytes(f16)));
  tree.set("bf16", test::from_bytes({3, 2}, bfloat16, bytes(f16)));
  save_weights(dir.file("nan.h5"), tree);
  const nn::ParamTree back = load_weights(dir.file("nan.h5"));
  EXPECT_TRUE(trees_identical(tree, back));
  EXPECT_EQ(bytes_of(back.at("f32")), bytes(f32));
}

TEST(Hdf5Weights, ViewsAndLazyArraysAreWrittenDensely) {
  TempDir dir("hdf5");
  const Array base = random::normal({4, 6}, random::key(1));
  const Array small = random::normal({3}, random::key(2));
  nn::ParamTree tree;
  tree.set("transposed", transpose(base));
  tree.set("strided", slice(base, {0, 1}, {4, 6}, {2, 2}));
  tree.set("broadcast", broadcast_to(small, {5, 3}));
  tree.set("lazy", base * 2.0f + 1.0f);  // not evaluated yet
  save_weights(dir.file("views.h5"), tree);
  const nn::ParamTree back = load_weights(dir.file("views.h5"));
  ASSERT_EQ(back.keys(), tree.keys());
  for (const auto& [key, value] : tree) {
    EXPECT_EQ(back.at(key).shape(), value.shape()) << key;
    EXPECT_EQ(back.at(key).to_vector<float>(), value.to_vector<float>()) << key;
  }
}

TEST(Hdf5Weights, KeysComeBackInSavedOrder) {
  TempDir dir("hdf5");
  nn::ParamTree tree;
  for (int i = 11; i >= 0; --i)
    tree.set("layers." + std::to_string(i) + ".weight", random_bits({2}, float32, i));
  tree.set("alpha", random_bits({1}, int32, 50));
  save_weights(dir.file("order.h5"), tree);
  EXPECT_EQ(load_weights(dir.file("order.h5")).keys(), tree.keys());
}

TEST(Hdf5Weights, PrefixReadsOneGroup) {
  TempDir dir("hdf5");
  nn::ParamTree tree;
  tree.set("encoder.layers.0.weight", random_bits({2, 3}, float32, 1));
  tree.set("encoder.layers.0.bias", random_bits({2}, float32, 2));
  tree.set("encoder.layers.1.weight", random_bits({3, 3}, float64, 3));
  tree.set("head.weight", random_bits({4}, float32, 4));
  const fs::path file = dir.file("prefix.h5");
  save_weights(file, tree);
  EXPECT_TRUE(trees_identical(load_weights(file, "encoder"), tree.subtree("encoder")));
  EXPECT_TRUE(trees_identical(load_weights(file, "encoder.layers.1"), tree.subtree("encoder.layers.1")));
  for (const char* bad : {"decoder", "encoder.layers.2", "head.weight"}) {
    const std::string msg = error_of<KeyError>([&] { load_weights(file, bad); });
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  }
  EXPECT_THROW(load_weights(file, ""), KeyError);
}

TEST(Hdf5Weights, MetadataRoundTrips) {
  TempDir dir("hdf5");
  const fs::path file = dir.file("meta.h5");
  const std::map<std::string, std::string> meta = {
      {"model", "mlp-20-32-5"}, {"note", "µ-law, ünïcode"}, {"empty", ""}};
  save_weights(file, {{"w", random_bits({2}, float32, 1)}}, meta);
  EXPECT_EQ(load_weights_metadata(file), meta);
  EXPECT_THROW(save_weights(file, {{"w", Array(1.0f)}}, {{"kiln_format_version", "2"}}), ValueError);
  EXPECT_THROW(save_weights(file, {{"w", Array(1.0f)}}, {{"", "x"}}), ValueError);
  EXPECT_THROW(save_weights(file, {{"w", Array(1.0f)}}, {{"k", std::string("a\0b", 3)}}), ValueError);
  EXPECT_EQ(load_weights_metadata(file), meta);  // the refused saves left the file alone
}

TEST(Hdf5Weights, BadKeysAreRefusedAndTheOldFileIsKept) {
  TempDir dir("hdf5");
  const fs::path file = dir.file("keys.h5");
  const nn::ParamTree old = {{"fc.weight", random_bits({2, 2}, float32, 9)}};
  save_weights(file, old);

  const nn::ParamTree collide = {{"a", Array(1.0f)}, {"a-b", Array(2.0f)}, {"a.b", Array(3.0f)}};
  const std::string msg = error_of<KeyError>([&] { save_weights(file, collide); });
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a.b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
  EXPECT_THROW(save_weights(file, {{"a..b", Array(1.0f)}}), KeyError);
  EXPECT_THROW(save_weights(file, {{".a", Array(1.0f)}}), KeyError);
  EXPECT_THROW(save_weights(file, {{"a/b", Array(1.0f)}}), KeyError);
  EXPECT_THROW(save_weights(file, {{"a", Array()}}), ValueError);

  EXPECT_TRUE(trees_identical(load_weights(file), old));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1)
      << "no temporary file is left behind";
}

TEST(Hdf5Weights, SaveReplacesAnExistingFile) {
  TempDir dir("hdf5");
  const fs::path file = dir.file("replace.h5");
  save_weights(file, {{"a", random_bits({3}, float32, 1)}, {"b", random_bits({3}, int64, 2)}});
  const nn::ParamTree second = {{"c", random_bits({2, 2}, float16, 3)}};
  save_weights(file, second);
  EXPECT_TRUE(trees_identical(load_weights(file), second));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(Hdf5Weights, SaveIntoAMissingFolderOrOntoAFolderFails) {
  TempDir dir("hdf5");
  const fs::path missing = dir.file("no_such_folder") / "w.h5";
  const std::string msg = error_of<RuntimeError>([&] { save_weights(missing, {{"a", Array(1.0f)}}); });
  EXPECT_NE(msg.find(missing.string()), std::string::npos) << msg;
  fs::create_directory(dir.file("taken"));
  EXPECT_THROW(save_weights(dir.file("taken"), {{"a", Array(1.0f)}}), RuntimeError);
  EXPECT_TRUE(fs::is_directory(dir.file("taken")));
}

// h5py reads the layout the header documents: groups by key, dtype attributes, numpy dtypes.
TEST(Hdf5Weights, H5pySeesTheDocumentedLayout) {
  if (auto why = test::python_missing("h5py, numpy"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("hdf5");
  const fs::path file = dir.file("layout.h5");
  nn::ParamTree tree;
  tree.set("layers.0.weight", Array(std::vector<float>{1.5f, -2.0f, 3.25f, 0.5f, 8.0f, -1.0f}, {2, 3}));
  tree.set("layers.0.mask", Array(std::vector<bool>{true, false, true}, {3}));
  tree.set("half", astype(Array(std::vector<float>{0.5f, -1.5f}, {2}), float16));
  tree.set("brain", astype(Array(std::vector<float>{1.0f, -2.0f}, {2}), bfloat16));
  tree.set("count", Array(int64_t{7}));
  save_weights(file, tree, {{"source", "test"}});
  const fs::path script = dir.file("check.py");
  std::ofstream(script) << R"(import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["kiln_format_version"] == 1, f.attrs["kiln_format_version"]
assert f.attrs["source"] == "test"
w = f["layers"]["0"]["weight"]
assert w.dtype == np.float32 and w.attrs["dtype"] == "float32"
assert np.array_equal(w[()], np.array([[1.5, -2, 3.25], [0.5, 8, -1]], np.float32))
m = f["layers/0/mask"]
assert m.dtype == np.bool_ and m.attrs["dtype"] == "bool" and list(m[()]) == [True, False, True]
h = f["half"]
assert h.dtype == np.float16 and list(h[()]) == [0.5, -1.5]
b = f["brain"]
assert b.dtype == np.uint16 and b.attrs["dtype"] == "bfloat16" and list(b[()]) == [0x3f80, 0xc000]
c = f["count"]
assert c.shape == () and c.dtype == np.int64 and c[()] == 7
assert sorted(f.keys()) == ["brain", "count", "half", "layers"], list(f.keys())
)";
  EXPECT_EQ(test::run_python({script.string(), file.string()}, dir.file("log.txt")), "");
}

struct Net : nn::Module {
  nn::ModuleInfo<nn::Linear> fc{this, "fc", 4, 3};
  nn::ModuleInfo<nn::BatchNorm1d> bn{this, "bn", 3};
  nn::ModuleInfo<nn::Linear> head{this, "head", 3, 2, nn::LinearOptions{.bias = false}};
};

TEST(Hdf5Weights, ModuleRoundTripKeepsFrozenParametersAndBuffers) {
  TempDir dir("hdf5");
  const fs::path file = dir.file("net.h5");
  Net a;
  a.freeze({"head"});
  for (int i = 0; i < 3; ++i) a.bn->train_step(random::normal({8, 3}, random::key(10 + i)));
  a.save_weights(file);
  EXPECT_EQ(load_weights(file).keys(), a.parameters().keys());
  EXPECT_EQ(load_weights(file).at("bn.num_batches_tracked").item<int64_t>(), 3);

  Net b;
  b.unfreeze();
  EXPECT_FALSE(trees_identical(a.parameters(), b.parameters()));
  b.load_weights(file);
  EXPECT_TRUE(trees_identical(a.parameters(), b.parameters()));
  EXPECT_EQ(b.trainable_parameters().size(), b.parameters().size()) << "loading does not change freezing";
  const Array x = random::normal({5, 4}, random::key(20));
  a.eval_mode();
  b.eval_mode();
  EXPECT_EQ(b.head(b.bn(b.fc(x))).to_vector<float>(), a.head(a.bn(a.fc(x))).to_vector<float>());
}

TEST(Hdf5Weights, MlpRoundTripThroughModuleMethods) {
  TempDir dir("hdf5");
  const models::MlpConfig config{.in_features = 6, .hidden = {8, 8}, .out_features = 3};
  models::Mlp a(config), b(config);
  a.save_weights(dir.file("mlp.h5"));
  b.load_weights(dir.file("mlp.h5"));
  EXPECT_TRUE(trees_identical(a.parameters(), b.parameters()));
}

// libhdf5 is not reentrant: kiln serializes every call, so threads may load and save at once.
TEST(Hdf5Weights, ThreadsSaveAndLoadConcurrently) {
  TempDir dir("hdf5");
  constexpr int kThreads = 4;
  std::vector<nn::ParamTree> trees;
  for (int t = 0; t < kThreads; ++t)
    trees.push_back({{"w", random_bits({16, 8}, float32, 40 + t)}, {"b.i", random_bits({5}, int64, 50 + t)}});
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const fs::path file = dir.file("t" + std::to_string(t) + ".h5");
      for (int i = 0; i < 5; ++i) {
        save_weights(file, trees[t]);
        ok[t] += trees_identical(load_weights(file), trees[t]) ? 1 : 0;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[t], 5) << "thread " << t;
}

}  // namespace
}  // namespace kiln::io
