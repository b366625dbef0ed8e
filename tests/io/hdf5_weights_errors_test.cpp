// Files io::load_weights and Module::load_weights must refuse with a clear error naming the file
// (and the key): missing, not HDF5, truncated at many points, wrong or missing version, dataset
// types kiln has no dtype for, malformed datasets and links; and weights that do not fit the
// model (missing, extra, wrong shapes, wrong dtypes), after which the model is unchanged. Also
// unusual files that are valid (compressed, big-endian) and must load.
#include <gtest/gtest.h>

#include <fstream>

#include "io/hdf5_test_util.h"
#include "kiln/io/hdf5_weights.h"
#include "kiln/nn/layers/linear.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_mentions;
using test::random_bits;
using test::TempDir;
using test::trees_identical;

struct Net : nn::Module {
  nn::ModuleInfo<nn::Linear> fc1{this, "fc1", 3, 2};
  nn::ModuleInfo<nn::Linear> fc2{this, "fc2", 2, 1};
};

// Loads `file` into a fresh Net expecting E, and checks the message and that nothing changed.
template <class E>
std::string refuse_into_net(const fs::path& file, nn::Verify verify = nn::Verify::all) {
  Net net;
  const nn::ParamTree before = net.parameters();
  nn::eval(before);
  const std::string msg = error_of<E>([&] { net.load_weights(file, verify); });
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
  EXPECT_TRUE(trees_identical(net.parameters(), before)) << "a refused load changed the model";
  return msg;
}

TEST(Hdf5WeightsErrors, MissingFile) {
  TempDir dir("hdf5err");
  const fs::path file = dir.file("absent.h5");
  expect_mentions(error_of<RuntimeError>([&] { load_weights(file); }), {file.string(), "not found"});
  refuse_into_net<RuntimeError>(file);
  EXPECT_THROW(load_weights(dir.path()), RuntimeError);  // a folder
}

TEST(Hdf5WeightsErrors, NotAnHdf5File) {
  TempDir dir("hdf5err");
  const fs::path text = dir.file("notes.h5"), empty = dir.file("empty.h5");
  std::ofstream(text) << "these are not the weights you are looking for\n";
  std::ofstream{empty};
  for (const fs::path& f : {text, empty}) {
    expect_mentions(error_of<FormatError>([&] { load_weights(f); }), {f.string(), "not an HDF5 file"});
    refuse_into_net<FormatError>(f);
  }
}

TEST(Hdf5WeightsErrors, TruncatedFilesAreFormatErrors) {
  TempDir dir("hdf5err");
  const fs::path whole = dir.file("whole.h5");
  Net source;
  source.save_weights(whole);
  std::ifstream in(whole, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 1000u);
  const size_t n = bytes.size();
  for (size_t cut : {size_t{1}, size_t{7}, size_t{8}, size_t{64}, size_t{200}, size_t{512}, n / 3, n / 2,
                     n - 100, n - 8, n - 1}) {
    SCOPED_TRACE(cut);
    const fs::path part = dir.file("cut_" + std::to_string(cut) + ".h5");
    std::ofstream(part, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(cut));
    expect_mentions(error_of<FormatError>([&] { load_weights(part); }), {part.string()});
    refuse_into_net<FormatError>(part);
  }
  Net target;
  target.load_weights(whole);  // the uncut file is fine
  EXPECT_TRUE(trees_identical(target.parameters(), source.parameters()));
}

// Module::load_weights: every mismatch names the file and the key; the model is left as it was.
TEST(Hdf5WeightsErrors, MismatchedWeightsNameFileAndKeys) {
  TempDir dir("hdf5err");
  Net good;
  const nn::ParamTree params = good.parameters();

  nn::ParamTree missing = params;
  missing.erase("fc2.bias");
  save_weights(dir.file("missing.h5"), missing);
  expect_mentions(refuse_into_net<KeyError>(dir.file("missing.h5")), {"missing fc2.bias"});

  nn::ParamTree extra = params;
  extra.set("fc3.weight", random_bits({1, 1}, float32, 1));
  save_weights(dir.file("extra.h5"), extra);
  expect_mentions(refuse_into_net<KeyError>(dir.file("extra.h5")), {"unknown fc3.weight"});

  nn::ParamTree shape = params;
  shape.set("fc1.weight", random_bits({3, 2}, float32, 2));
  save_weights(dir.file("shape.h5"), shape);
  expect_mentions(refuse_into_net<ShapeError>(dir.file("shape.h5")), {"fc1.weight", "(2,3)", "(3,2)"});

  nn::ParamTree dtype = params;
  dtype.set("fc2.weight", random_bits({1, 2}, float64, 3));
  save_weights(dir.file("dtype.h5"), dtype);
  expect_mentions(refuse_into_net<DtypeError>(dir.file("dtype.h5")), {"fc2.weight", "float32", "float64"});

  // Several problems at once are all listed; key problems win the exception type.
  nn::ParamTree many = shape;
  many.erase("fc2.bias");
  save_weights(dir.file("many.h5"), many);
  expect_mentions(refuse_into_net<KeyError>(dir.file("many.h5")), {"missing fc2.bias", "fc1.weight"});

  // What verify leaves out is not an error: the known keys are applied.
  Net tolerant;
  tolerant.load_weights(dir.file("extra.h5"), nn::Verify::all & ~nn::Verify::unknown);
  EXPECT_TRUE(trees_identical(tolerant.parameters(), params));
}

// Malformed or unsupported files, written by h5py (the tests do not link libhdf5 themselves).
class Hdf5BadFiles : public test::PythonFilesTest<Hdf5BadFiles> {
 public:
  static constexpr test::PythonFiles kFiles{
      .imports = "h5py, numpy", .script = "tests/io/hdf5_bad_files.py", .tag = "hdf5bad"};
};

TEST_F(Hdf5BadFiles, VersionIsCheckedFirst) {
  expect_mentions(error_of<FormatError>([&] { load_weights(file("version2.h5")); }),
                  {file("version2.h5").string(), "unsupported format version", "version 2"});
  expect_mentions(error_of<FormatError>([&] { load_weights(file("version_string.h5")); }),
                  {file("version_string.h5").string(), "kiln_format_version"});
  expect_mentions(error_of<FormatError>([&] { load_weights(file("no_version.h5")); }),
                  {file("no_version.h5").string(), "not a kiln weights file"});
  expect_mentions(error_of<FormatError>([&] { load_weights(file("keras_like.h5")); }),
                  {"load_keras_weights"});
  refuse_into_net<FormatError>(file("version2.h5"));
  EXPECT_THROW(load_weights_metadata(file("version2.h5")), FormatError);
}

TEST_F(Hdf5BadFiles, TypesWithoutAKilnDtypeNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"strings.h5", "meta.names"},
      {"compound.h5", "pairs"},
      {"unknown_dtype_attr.h5", "z"},
  };
  for (const auto& [name, key] : cases) {
    SCOPED_TRACE(name);
    expect_mentions(error_of<DtypeError>([&] { load_weights(file(name)); }),
                    {file(name).string(), std::string("'") + key + "'"});
    refuse_into_net<DtypeError>(file(name));
  }
}

TEST_F(Hdf5BadFiles, NumPysInt16AndUint64Load) {
  const nn::ParamTree a = load_weights(file("int16.h5"));
  EXPECT_EQ(a.at("fc.weight").dtype(), int16);
  EXPECT_EQ(a.at("fc.weight").shape(), (Shape{2, 3}));
  EXPECT_EQ(a.at("fc.weight").to_vector<int16_t>(), (std::vector<int16_t>{0, 1, 2, 3, 4, 5}));
  const nn::ParamTree b = load_weights(file("uint64.h5"));
  EXPECT_EQ(b.at("fc.counter").dtype(), uint64);
  EXPECT_EQ(b.at("fc.counter").to_vector<uint64_t>(), (std::vector<uint64_t>{0, 1, 2}));
}

TEST_F(Hdf5BadFiles, MalformedDatasetsAndLinksAreFormatErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"contradicting_attr.h5", "contradicts the stored type"},
      {"bfloat16_wrong_carrier.h5", "contradicts the stored type"},
      {"rank17.h5", "too many dimensions"},
      {"null_space.h5", "empty dataspace"},
      {"external.h5", "external storage"},
      {"soft_link.h5", "links are not followed"},
      {"cycle.h5", "linked twice"},
  };
  for (const auto& [name, what] : cases) {
    SCOPED_TRACE(name);
    expect_mentions(error_of<FormatError>([&] { load_weights(file(name)); }), {file(name).string(), what});
    refuse_into_net<FormatError>(file(name));
  }
}

TEST_F(Hdf5BadFiles, UnusualValidFilesLoad) {
  const nn::ParamTree t = load_weights(file("valid_unusual.h5"));
  EXPECT_EQ(t.keys(),
            (std::vector<std::string>{"bf16", "big_endian", "big_endian_i64", "flags", "gzip", "half"}));
  std::vector<float> gz(12);
  for (int i = 0; i < 12; ++i) gz[i] = 0.5f * static_cast<float>(i);
  EXPECT_EQ(t.at("gzip").shape(), (Shape{3, 4}));
  EXPECT_EQ(t.at("gzip").to_vector<float>(), gz);
  EXPECT_EQ(t.at("big_endian").to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  EXPECT_EQ(t.at("big_endian_i64").to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -5}));
  EXPECT_EQ(t.at("half").dtype(), float16);
  EXPECT_EQ(t.at("half").to_vector<float>(), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(t.at("flags").dtype(), bool_);
  EXPECT_EQ(t.at("flags").to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(t.at("bf16").dtype(), bfloat16);
  EXPECT_EQ(t.at("bf16").to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
}

}  // namespace
}  // namespace kiln::io
