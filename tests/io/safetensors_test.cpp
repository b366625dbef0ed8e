// io::save_safetensors / load_safetensors: round trips of every dtype, files written by NumPy by
// hand (as the format's specification lays them out) including float8 and misaligned tensors,
// files kiln writes read back by Python, loading in place from the mapping, sharded checkpoints,
// Module::load_weights by extension, malformed files (each a clear error naming the file and the
// tensor, the model unchanged) and concurrent loads.
#include "kiln/io/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "io/hdf5_test_util.h"
#include "kiln/core/allocator.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/module.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::every_dtype_tree;
using test::random_bits;
using test::TempDir;
using test::trees_identical;

TEST(Safetensors, RoundTripIsBitExactForEveryDtype) {
  TempDir dir("safetensors");
  const nn::ParamTree tree = every_dtype_tree(300);
  save_safetensors(dir.file("w.safetensors"), tree, {{"format", "pt"}, {"note", "ünïcode ok"}});
  const SafetensorsFile back = read_safetensors(dir.file("w.safetensors"));
  EXPECT_TRUE(trees_identical(tree, back.tensors));
  EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode ok"}}));
  for (const auto& [key, value] : back.tensors) EXPECT_TRUE(value.is_available()) << key;
  // Views and lazy arrays are written densely.
  nn::ParamTree views;
  const Array base = random_bits({6, 4}, float32, 1);
  views.set("t", transpose(base));
  views.set("lazy", base * 2.0f);
  save_safetensors(dir.file("v.safetensors"), views);
  const nn::ParamTree v = load_safetensors(dir.file("v.safetensors"));
  EXPECT_EQ(test::bytes_of(v.at("t")), test::bytes_of(transpose(base)));
  EXPECT_EQ(v.at("lazy").to_vector<float>(), (base * 2.0f).to_vector<float>());
}

TEST(Safetensors, LoadsInPlaceFromTheMapping) {
  TempDir dir("safetensors");
  nn::ParamTree tree;
  tree.set("big", random_bits({1024, 1024}, float32, 2));  // 4 MiB
  save_safetensors(dir.file("big.safetensors"), tree);
  const size_t before = memory_stats().active_bytes;
  const nn::ParamTree back = load_safetensors(dir.file("big.safetensors"));
  // No host buffer holds a copy: the array reads the mapped file.
  EXPECT_LT(memory_stats().active_bytes, before + (1u << 20));
  EXPECT_TRUE(trees_identical(tree, back));
  // The mapping outlives the file's name, and the arrays outlive the tree.
  fs::remove(dir.file("big.safetensors"));
  const Array kept = back.at("big");
  EXPECT_EQ(test::bytes_of(kept), test::bytes_of(tree.at("big")));
  EXPECT_EQ(test::bytes_of(transpose(kept)), test::bytes_of(transpose(tree.at("big"))));  // a kernel reads it
}

// A file laid out by hand with NumPy: every format dtype, a 1-byte tensor first so the next ones
// start misaligned, the float8 codes with their values from an independent decoder, metadata.
TEST(Safetensors, ReadsAFileWrittenByNumPy) {
  if (auto why = test::python_missing("numpy"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("safetensors");
  const fs::path script = dir.file("write.py"), file = dir.file("np.safetensors");
  std::ofstream(script) << R"(import json, struct, sys, numpy as np
def e4m3(b):  # float8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    if e == 15 and m == 7: return float("nan")
    v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if s else v
def e5m2(b):  # float8 e5m2: bias 15, IEEE infinities and NaNs
    s, e, m = b >> 7, (b >> 2) & 31, b & 3
    if e == 31: v = float("inf") if m == 0 else float("nan")
    else: v = m / 4 * 2.0 ** -14 if e == 0 else (1 + m / 4) * 2.0 ** (e - 15)
    return -v if s else v
codes = np.arange(256, dtype=np.uint8)
tensors = [
    ("flag", "BOOL", np.array([1], np.uint8)),
    ("w.f32", "F32", np.array([[1.5, -2.0, 3.25], [0.0, 1e-30, -7.0]], np.float32)),
    ("w.f16", "F16", np.array([0.5, -65504.0, 6e-8], np.float16)),
    ("w.bf16", "BF16", (np.array([1.0, -2.5, 3.0e38], np.float32).view(np.uint32) >> 16).astype(np.uint16)),
    ("w.f64", "F64", np.array([np.pi, -1e300], np.float64)),
    ("i.i8", "I8", np.array([-128, 127], np.int8)),
    ("i.u8", "U8", np.array([0, 255], np.uint8)),
    ("i.i16", "I16", np.array([-32768, 32767, 5], np.int16)),
    ("i.u16", "U16", np.array([65535, 1], np.uint16)),
    ("i.i32", "I32", np.array([-2**31, 2**31 - 1], np.int32)),
    ("i.u32", "U32", np.array([2**32 - 1], np.uint32)),
    ("i.i64", "I64", np.array([-2**63, 2**63 - 1], np.int64)),
    ("i.u64", "U64", np.array([2**64 - 1, 2**63], np.uint64)),
    ("mask", "BOOL", np.array([[True, False], [False, True]])),
    ("f8.e4m3", "F8_E4M3", codes),
    ("f8.e5m2", "F8_E5M2", codes),
    ("f8.e4m3_ref", "F16", np.array([e4m3(b) for b in range(256)], np.float16)),
    ("f8.e5m2_ref", "F16", np.array([e5m2(b) for b in range(256)], np.float16)),
    ("empty", "F32", np.zeros((0, 3), np.float32)),
]
header, data = {"__metadata__": {"format": "np"}}, b""
for name, dtype, a in tensors:
    header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [len(data), len(data) + a.nbytes]}
    data += a.tobytes()
h = json.dumps(header).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
)";
  ASSERT_EQ(test::run_python({script.string(), file.string()}, dir.file("log.txt")), "");
  const SafetensorsFile f = read_safetensors(file);
  EXPECT_EQ(f.metadata.at("format"), "np");
  const nn::ParamTree& t = f.tensors;
  EXPECT_EQ(t.keys().front(), "flag");  // in offset order
  EXPECT_EQ(t.at("w.f32").shape(), (Shape{2, 3}));
  EXPECT_EQ(t.at("w.f32").to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f}));
  EXPECT_EQ(t.at("w.f16").dtype(), float16);
  EXPECT_EQ(t.at("w.f16").to_vector<float>()[1], -65504.0f);
  EXPECT_EQ(t.at("w.bf16").dtype(), bfloat16);
  EXPECT_EQ(t.at("w.bf16").to_vector<float>()[1], -2.5f);
  EXPECT_EQ(t.at("w.f64").to_vector<double>()[1], -1e300);
  EXPECT_EQ(t.at("i.i8").to_vector<int8_t>(), (std::vector<int8_t>{-128, 127}));
  EXPECT_EQ(t.at("i.i16").to_vector<int16_t>(), (std::vector<int16_t>{-32768, 32767, 5}));
  EXPECT_EQ(t.at("i.u16").to_vector<uint16_t>(), (std::vector<uint16_t>{65535, 1}));
  EXPECT_EQ(t.at("i.i32").to_vector<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(t.at("i.u32").to_vector<uint32_t>()[0], std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(t.at("i.i64").to_vector<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(t.at("i.u64").to_vector<uint64_t>(), (std::vector<uint64_t>{~uint64_t{0}, uint64_t{1} << 63}));
  EXPECT_EQ(t.at("mask").dtype(), bool_);
  EXPECT_EQ(t.at("mask").to_vector<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(t.at("empty").shape(), (Shape{0, 3}));
  // Every float8 code converts to the float16 the reference decoder gives (NaNs as NaN).
  for (const char* kind : {"e4m3", "e5m2"}) {
    SCOPED_TRACE(kind);
    const Array got = t.at(std::string("f8.") + kind), want = t.at(std::string("f8.") + kind + "_ref");
    EXPECT_EQ(got.dtype(), float16);
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    for (int b = 0; b < 256; ++b) {
      if (std::isnan(w[b]))
        EXPECT_TRUE(std::isnan(g[b])) << b;
      else
        EXPECT_EQ(g[b], w[b]) << b;
    }
  }
}

TEST(Safetensors, PythonReadsWhatKilnWrites) {
  if (auto why = test::python_missing("numpy"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("safetensors");
  nn::ParamTree tree;
  tree.set("model.embed.weight", Array(std::vector<float>{1.5f, -2.0f, 3.0f, 4.0f, 0.25f, 8.0f}, {3, 2}));
  tree.set("model.ids", Array(std::vector<uint16_t>{50256, 7}, {2}));
  tree.set("model.norm", astype(Array(std::vector<float>{1.0f, -2.0f}, {2}), bfloat16));
  tree.set("step", Array(int64_t{9}));
  save_safetensors(dir.file("k.safetensors"), tree, {{"format", "pt"}});
  const fs::path script = dir.file("check.py");
  std::ofstream(script) << R"(import json, struct, sys, numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
assert n % 8 == 0, n
h = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert h["__metadata__"] == {"format": "pt"}, h
def get(name, dtype):
    e = h[name]
    b, end = e["data_offsets"]
    return np.frombuffer(data[b:end], dtype).reshape(e["shape"])
assert h["model.embed.weight"]["dtype"] == "F32"
assert np.array_equal(get("model.embed.weight", np.float32), [[1.5, -2], [3, 4], [0.25, 8]])
assert h["model.ids"]["dtype"] == "U16" and list(get("model.ids", np.uint16)) == [50256, 7]
assert h["model.norm"]["dtype"] == "BF16" and list(get("model.norm", np.uint16)) == [0x3f80, 0xc000]
assert h["step"]["dtype"] == "I64" and h["step"]["shape"] == [] and get("step", np.int64) == 9
assert max(e["data_offsets"][1] for k, e in h.items() if k != "__metadata__") == len(data)
)";
  EXPECT_EQ(test::run_python({script.string(), dir.file("k.safetensors").string()}, dir.file("log.txt")), "");
}

TEST(Safetensors, ShardedCheckpointsThroughTheIndex) {
  TempDir dir("safetensors");
  nn::ParamTree tree;
  for (int i = 0; i < 5; ++i)
    tree.set("layers." + std::to_string(i) + ".weight", random_bits({16, 16}, float32, 40 + i));  // 1 KiB
  const fs::path index = dir.file("model.safetensors.index.json");
  save_safetensors_sharded(index, tree, 2100, {{"format", "pt"}});
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors"})
    EXPECT_TRUE(fs::exists(dir.file(shard))) << shard;
  const SafetensorsFile back = read_safetensors(index);
  EXPECT_TRUE(trees_identical(tree, back.tensors));
  EXPECT_EQ(back.metadata.at("total_size"), "5120");
  EXPECT_EQ(back.metadata.at("format"), "pt");
  // A Module loads the index as it loads one file.
  struct Net : nn::Module {
    nn::ModuleInfo<nn::Linear> fc{this, "fc", 16, 16, nn::LinearOptions{.bias = false}};
  } net;
  nn::ParamTree one;
  one.set("fc.weight", random_bits({16, 16}, float32, 50));
  save_safetensors_sharded(dir.file("net.safetensors.index.json"), one, 1 << 20);
  net.load_weights(dir.file("net.safetensors.index.json"));
  EXPECT_EQ(test::bytes_of(net.fc->weight), test::bytes_of(one.at("fc.weight")));
  // An index naming a tensor its shard lacks.
  std::ofstream(dir.file("bad.index.json"))
      << R"({"metadata": {}, "weight_map": {"layers.0.weight": "model-00001-of-00003.safetensors",
            "missing.weight": "model-00001-of-00003.safetensors"}})";
  test::expect_mentions(error_of<FormatError>([&] { load_safetensors(dir.file("bad.index.json")); }),
                        {"bad.index.json", "missing.weight", "lacks"});
  EXPECT_THROW(save_safetensors_sharded(dir.file("x.safetensors.index.json"), tree, 0), ValueError);
}

struct Net : nn::Module {
  nn::ModuleInfo<nn::Linear> fc{this, "fc", 3, 2};
};

TEST(Safetensors, ModuleWeightsChooseTheFormatByExtension) {
  TempDir dir("safetensors");
  Net a, b;
  a.save_weights(dir.file("net.safetensors"));
  a.save_weights(dir.file("net.h5"));
  b.load_weights(dir.file("net.safetensors"));
  EXPECT_EQ(test::bytes_of(b.fc->weight), test::bytes_of(a.fc->weight));
  Net c;
  c.load_weights(dir.file("net.h5"));
  EXPECT_EQ(test::bytes_of(c.fc->bias), test::bytes_of(a.fc->bias));
  // The first bytes are the safetensors header length, not HDF5's signature.
  std::ifstream in(dir.file("net.safetensors"), std::ios::binary);
  char head[8];
  in.read(head, 8);
  EXPECT_NE(std::string(head, 8), std::string("\x89HDF\r\n\x1a\n", 8));
  EXPECT_THROW(a.save_weights(dir.file("net.safetensors.index.json")), ValueError);
  // A file whose keys differ: named, and the model keeps its values.
  nn::ParamTree other;
  other.set("fc.weight", random_bits({2, 3}, float32, 60));
  other.set("fc.extra", random_bits({2}, float32, 61));
  save_safetensors(dir.file("other.safetensors"), other);
  const auto before = test::bytes_of(b.fc->weight);
  test::expect_mentions(error_of<KeyError>([&] { b.load_weights(dir.file("other.safetensors")); }),
                        {"other.safetensors", "fc.extra", "fc.bias"});
  EXPECT_EQ(test::bytes_of(b.fc->weight), before);
}

// ---------------------------------------------------------------- malformed files

void write_raw(const fs::path& path, const std::string& header, size_t data_bytes,
               uint64_t stated_length = 0) {
  const uint64_t n = stated_length ? stated_length : header.size();
  std::string bytes;
  for (int k = 0; k < 8; ++k) bytes.push_back(static_cast<char>(n >> (8 * k)));
  bytes += header;
  bytes.append(data_bytes, '\x01');
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Safetensors, MalformedFilesAreClearErrorsNamingFileAndTensor) {
  TempDir dir("safetensors");
  struct Case {
    const char* name;
    std::string header;
    size_t data;
    std::vector<std::string> mentions;
    uint64_t stated = 0;
  };
  const std::string ok = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  const std::vector<Case> cases = {
      {"not_json", "{\"a\": ", 8, {"not valid JSON"}},
      {"array", "[1, 2]", 0, {"not an object"}},
      {"no_dtype", R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8, {"'w'", "no dtype"}},
      {"no_offsets", R"({"w": {"dtype": "F32", "shape": [2]}})", 8, {"'w'", "data_offsets"}},
      {"bad_shape", R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, {"'w'", "shape"}},
      {"shape_vs_bytes",
       R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
       8,
       {"'w'", "needs 12 bytes"}},
      {"past_end",
       R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
       8,
       {"'w'", "out of range"}},
      {"reversed",
       R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})",
       8,
       {"'w'", "out of range"}},
      {"overlap",
       "{" + ok + R"(, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12,
       {"'a'", "'b'", "overlap"}},
      {"gap",
       R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       8,
       {"'w'", "no tensor covers"}},
      {"trailing", "{" + ok + "}", 12, {"no tensor covers", "at the end"}},
      {"duplicate", "{" + ok + ", " + ok + "}", 8, {"'a'", "twice"}},
      {"huge_shape",
       R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
       8,
       {"'w'", "disagree"}},
      {"bad_metadata", R"({"__metadata__": {"k": 3}})", 0, {"__metadata__", "'k'"}},
      {"deep", std::string(40, '[') + std::string(40, ']'), 0, {"nested"}},
      {"length_past_end", "{}", 0, {"past the end"}, 64},
      {"length_huge", "{}", 0, {"too large"}, uint64_t{1} << 40},
  };
  Net net;
  const auto before = test::bytes_of(net.fc->weight);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path p = dir.file(std::string(c.name) + ".safetensors");
    write_raw(p, c.header, c.data, c.stated);
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back(p.string());
    test::expect_mentions(error_of<FormatError>([&] { load_safetensors(p); }), mentions);
    EXPECT_THROW(net.load_weights(p), FormatError);
  }
  EXPECT_EQ(test::bytes_of(net.fc->weight), before);
  // An unknown dtype is a DtypeError naming it.
  write_raw(dir.file("c64.safetensors"), R"({"z": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})",
            8);
  test::expect_mentions(error_of<DtypeError>([&] { load_safetensors(dir.file("c64.safetensors")); }),
                        {"c64.safetensors", "'z'", "C64"});
  // Truncated below the length field, missing, a folder.
  std::ofstream(dir.file("short.safetensors"), std::ios::binary) << "abc";
  test::expect_mentions(error_of<FormatError>([&] { load_safetensors(dir.file("short.safetensors")); }),
                        {"short.safetensors", "truncated"});
  test::expect_mentions(error_of<RuntimeError>([&] { load_safetensors(dir.file("none.safetensors")); }),
                        {"none.safetensors"});
  EXPECT_THROW(load_safetensors(dir.path()), RuntimeError);
  // Saving refuses names the format cannot hold, and leaves the old file.
  nn::ParamTree bad;
  bad.set("__metadata__", Array(1.0f));
  save_safetensors(dir.file("keep.safetensors"), every_dtype_tree(300));
  EXPECT_THROW(save_safetensors(dir.file("keep.safetensors"), bad), ValueError);
  EXPECT_TRUE(trees_identical(load_safetensors(dir.file("keep.safetensors")), every_dtype_tree(300)));
  EXPECT_THROW(
      save_safetensors(dir.file("keep.safetensors"), every_dtype_tree(300), {{"k", std::string("\xff\xfe")}}),
      ValueError);
  EXPECT_THROW(save_safetensors(dir.file("no/such/folder/x.safetensors"), every_dtype_tree(300)),
               RuntimeError);
}

TEST(Safetensors, ThreadsLoadOneFileConcurrently) {
  TempDir dir("safetensors");
  const nn::ParamTree tree = every_dtype_tree(300);
  save_safetensors(dir.file("w.safetensors"), tree);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 5; ++k)
        if (trees_identical(tree, load_safetensors(dir.file("w.safetensors")))) ++good;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(good.load(), 20);
}

}  // namespace
}  // namespace kiln::io
