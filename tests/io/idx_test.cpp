// read_idx on synthetic files of every element type (plain and gzipped), on the real Fashion-MNIST
// files, and on every kind of malformed file; load_mnist and fashion_mnist_dir.
#include "kiln/io/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/core/ops/shape.h"
#include "kiln/io/datasets.h"
#include "support/temp_dir.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Bytes = std::vector<uint8_t>;

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), int(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// Big-endian bytes of an unsigned value, written independently of the reader's decoder.
void put_be(Bytes& out, uint64_t v, int n) {
  for (int k = n - 1; k >= 0; --k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
}

Bytes header(uint8_t type, const std::vector<uint32_t>& dims) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be(b, d, 4);
  return b;
}

// Every element type: values at the edges of each type, negative ones included.
struct TypeCase {
  const char* name;
  uint8_t code;
  Dtype dtype;
  std::vector<double> values;  // 6 values, shape (2, 3)
  Bytes (*encode)(const std::vector<double>&);
};

Bytes encode_u8(const std::vector<double>& v) {
  Bytes b;
  for (double x : v) b.push_back(static_cast<uint8_t>(x));
  return b;
}
Bytes encode_i8(const std::vector<double>& v) {
  Bytes b;
  for (double x : v) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(x)));
  return b;
}
Bytes encode_i16(const std::vector<double>& v) {
  Bytes b;
  for (double x : v) put_be(b, static_cast<uint16_t>(static_cast<int16_t>(x)), 2);
  return b;
}
Bytes encode_i32(const std::vector<double>& v) {
  Bytes b;
  for (double x : v) put_be(b, static_cast<uint32_t>(static_cast<int32_t>(x)), 4);
  return b;
}
Bytes encode_f32(const std::vector<double>& v) {
  Bytes b;
  for (double x : v) put_be(b, std::bit_cast<uint32_t>(static_cast<float>(x)), 4);
  return b;
}
Bytes encode_f64(const std::vector<double>& v) {
  Bytes b;
  for (double x : v) put_be(b, std::bit_cast<uint64_t>(x), 8);
  return b;
}

const TypeCase kTypes[] = {
    {"ubyte", 0x08, uint8, {0, 1, 127, 128, 254, 255}, encode_u8},
    {"byte", 0x09, int8, {-128, -1, 0, 1, 100, 127}, encode_i8},
    {"short", 0x0B, int32, {-32768, -258, -1, 0, 513, 32767}, encode_i16},
    {"int", 0x0C, int32, {-2147483648.0, -65536, -1, 0, 16909060, 2147483647}, encode_i32},
    {"float", 0x0D, float32, {-1.5, 0, 3.25, 1e-30, -2.5e20, 0.1f}, encode_f32},
    {"double", 0x0E, float64, {-1.5, 0, 3.25, 1e-300, -2.5e200, 0.1}, encode_f64},
};

class IdxTypes : public ::testing::TestWithParam<std::tuple<TypeCase, bool>> {};

TEST_P(IdxTypes, ReadsValuesShapeAndDtype) {
  const auto& [tc, gzip] = GetParam();
  TempDir dir;
  Bytes bytes = header(tc.code, {2, 3});
  const Bytes payload = tc.encode(tc.values);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  const std::string path = dir.file(gzip ? "x.idx.gz" : "x.idx");
  gzip ? write_gzip(path, bytes) : write_plain(path, bytes);

  const Array a = read_idx(path);
  EXPECT_TRUE(a.is_available());
  EXPECT_EQ(a.dtype(), tc.dtype);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  const std::vector<double> got = a.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want =
        tc.dtype == float32 ? static_cast<double>(static_cast<float>(tc.values[i])) : tc.values[i];
    EXPECT_EQ(got[i], want) << tc.name << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Idx, IdxTypes, ::testing::Combine(::testing::ValuesIn(kTypes), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) ? "_gzip" : "_plain");
                         });

TEST(Idx, GzipIsRecognizedByContentNotName) {
  TempDir dir;
  Bytes bytes = header(0x08, {4});
  for (uint8_t v : {3, 1, 4, 1}) bytes.push_back(v);
  write_gzip(dir.file("no_suffix"), bytes);
  write_plain(dir.file("plain.gz"), bytes);
  EXPECT_EQ(read_idx(dir.file("no_suffix")).to_vector<int>(), (std::vector<int>{3, 1, 4, 1}));
  EXPECT_EQ(read_idx(dir.file("plain.gz")).to_vector<int>(), (std::vector<int>{3, 1, 4, 1}));
}

TEST(Idx, ScalarsEmptyDimensionsAndHighRank) {
  TempDir dir;
  Bytes scalar = header(0x0C, {});
  put_be(scalar, 0xfffffff9u, 4);  // -7
  write_plain(dir.file("scalar"), scalar);
  const Array s = read_idx(dir.file("scalar"));
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.item<int32_t>(), -7);

  write_gzip(dir.file("empty.gz"), header(0x0D, {0, 28, 28}));
  const Array e = read_idx(dir.file("empty.gz"));
  EXPECT_EQ(e.shape(), (Shape{0, 28, 28}));
  EXPECT_EQ(e.dtype(), float32);

  Bytes rank16 = header(0x08, std::vector<uint32_t>(16, 1));
  rank16.push_back(42);
  write_plain(dir.file("rank16"), rank16);
  const Array r = read_idx(dir.file("rank16"));
  EXPECT_EQ(r.ndim(), 16);
  EXPECT_EQ(r.item<int>(), 42);
}

TEST(Idx, LargeGzipFileReadsInChunks) {
  // Larger than the reader's 16 MiB chunk, so the buffer grows several times.
  TempDir dir;
  const uint32_t n = (uint32_t{1} << 24) + 12345;
  Bytes bytes = header(0x08, {n});
  bytes.resize(bytes.size() + n);
  for (uint32_t i = 0; i < n; ++i) bytes[8 + i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  write_gzip(dir.file("big.gz"), bytes);
  const Array a = read_idx(dir.file("big.gz"));
  ASSERT_EQ(a.shape(), (Shape{n}));
  const uint8_t* p = a.data<uint8_t>();
  int64_t mismatches = 0;
  for (uint32_t i = 0; i < n; ++i) mismatches += p[i] != bytes[8 + i];
  EXPECT_EQ(mismatches, 0);
}

// ---- malformed files ----

// Runs read_idx expecting FormatError whose message names the path and contains `what`.
template <class E = FormatError>
void expect_error(const std::string& path, const std::string& what) {
  try {
    read_idx(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[read_idx]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

Bytes short_file() {  // shape (3, 2) of short: 12 data bytes
  Bytes b = header(0x0B, {3, 2});
  const Bytes p = encode_i16({1, -2, 3, -4, 5, -6});
  b.insert(b.end(), p.begin(), p.end());
  return b;
}

TEST(IdxErrors, MissingFileAndFolderAreRuntimeErrors) {
  TempDir dir;
  expect_error<RuntimeError>(dir.file("nope.idx"), "cannot open file");
  expect_error<RuntimeError>(dir.path().string(), "cannot read file");
  try {
    read_idx(dir.file("nope.idx"));
  } catch (const FormatError&) {
    ADD_FAILURE() << "a missing file is not a format error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(IdxErrors, EmptyAndShortHeaders) {
  TempDir dir;
  for (bool gz : {false, true}) {
    const std::string sfx = gz ? ".gz" : "";
    auto write = [&](const std::string& p, const Bytes& b) { gz ? write_gzip(p, b) : write_plain(p, b); };
    write(dir.file("empty" + sfx), {});
    expect_error(dir.file("empty" + sfx), "truncated header");
    write(dir.file("magic3" + sfx), {0, 0, 8});
    expect_error(dir.file("magic3" + sfx), "truncated header");
    Bytes dims = header(0x08, {3, 4});
    dims.pop_back();
    dims.pop_back();
    write(dir.file("dims" + sfx), dims);
    expect_error(dir.file("dims" + sfx), "truncated header");
  }
}

TEST(IdxErrors, BadMagicUnknownTypeAndRank) {
  TempDir dir;
  Bytes b = short_file();
  b[1] = 0x08;
  write_plain(dir.file("magic"), b);
  expect_error(dir.file("magic"), "bad magic");
  write_plain(dir.file("text"), Bytes{'h', 'e', 'l', 'l', 'o', '\n'});
  expect_error(dir.file("text"), "bad magic");
  b = short_file();
  b[2] = 0x0A;
  write_gzip(dir.file("type.gz"), b);
  expect_error(dir.file("type.gz"), "unknown element type");
  Bytes rank = header(0x08, std::vector<uint32_t>(17, 1));
  rank.push_back(1);
  write_plain(dir.file("rank"), rank);
  expect_error(dir.file("rank"), "too many dimensions");
}

TEST(IdxErrors, TruncatedData) {
  TempDir dir;
  Bytes b = short_file();
  b.pop_back();
  write_plain(dir.file("short"), b);
  expect_error(dir.file("short"), "truncated data");
  write_gzip(dir.file("short.gz"), b);
  expect_error(dir.file("short.gz"), "truncated data");

  // A complete IDX payload whose gzip stream is cut: the reader must not return partial data.
  Bytes big = header(0x0D, {4096});
  for (int i = 0; i < 4096; ++i) put_be(big, std::bit_cast<uint32_t>(std::sin(float(i))), 4);
  write_gzip(dir.file("cut.gz"), big);
  Bytes gz = read_bytes(dir.file("cut.gz"));
  for (size_t cut : {gz.size() / 2, gz.size() - 4}) {  // mid-stream, and inside the trailer
    write_plain(dir.file("cut.gz"), Bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(cut)));
    expect_error(dir.file("cut.gz"), "truncated data");
  }
}

TEST(IdxErrors, TrailingBytes) {
  TempDir dir;
  Bytes b = short_file();
  b.push_back(0);
  write_plain(dir.file("long"), b);
  expect_error(dir.file("long"), "trailing bytes");
  write_gzip(dir.file("long.gz"), b);
  expect_error(dir.file("long.gz"), "trailing bytes");
}

TEST(IdxErrors, HugeDimensionsFailBeforeAllocating) {
  TempDir dir;
  // 2^128 elements: the product overflows.
  write_plain(dir.file("overflow"), header(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}));
  expect_error(dir.file("overflow"), "dimensions overflow");
  // 2^62 doubles: the element count fits, the byte count does not.
  write_plain(dir.file("bytes"), header(0x0E, {1u << 31, 1u << 31}));
  expect_error(dir.file("bytes"), "dimensions overflow");
  // 2^48 bytes claimed by a tiny file: refused from the file size (plain) or as data runs out (gzip),
  // never allocated up front (ASan would report the allocation).
  write_plain(dir.file("claim"), header(0x08, {65536, 65536, 65536}));
  expect_error(dir.file("claim"), "truncated data");
  write_gzip(dir.file("claim.gz"), header(0x08, {65536, 65536, 65536}));
  expect_error(dir.file("claim.gz"), "truncated data");
}

TEST(IdxErrors, CorruptGzipStream) {
  TempDir dir;
  Bytes big = header(0x0C, {2048});
  for (int i = 0; i < 2048; ++i) put_be(big, static_cast<uint32_t>(i * i), 4);
  write_gzip(dir.file("ok.gz"), big);
  const Bytes gz = read_bytes(dir.file("ok.gz"));
  // Flip bytes in the deflate data and in the CRC; each must give a FormatError, whatever the
  // decoder makes of it.
  for (size_t at : {gz.size() / 3, gz.size() / 2, gz.size() - 6}) {
    Bytes bad = gz;
    bad[at] ^= 0x5a;
    write_plain(dir.file("bad.gz"), bad);
    EXPECT_THROW(read_idx(dir.file("bad.gz")), FormatError) << "flipped byte " << at;
  }
}

TEST(IdxErrors, ErrorsAreCatchableAsStandardAndKilnErrors) {
  TempDir dir;
  write_plain(dir.file("bad"), Bytes{1, 2, 3, 4});
  EXPECT_THROW(read_idx(dir.file("bad")), std::runtime_error);
  EXPECT_THROW(read_idx(dir.file("bad")), Error);
  EXPECT_THROW(read_idx(dir.file("missing")), std::runtime_error);
}

// ---- the real Fashion-MNIST files (Debian package dataset-fashion-mnist) ----

// Reference values from Python's gzip + struct:
//   im = gzip.open(d + 't10k-images-idx3-ubyte.gz').read(); lb = gzip.open(d +
//   't10k-labels-idx1-ubyte.gz').read() struct.unpack('>IIII', im[:16]) -> (2051, 10000, 28, 28);
//   list(lb[8:28]); list(lb[-5:]) list(im[16 + 14*28 : 16 + 15*28]) (row 14 of image 0); sum(im[16:16+784]);
//   sum(im[16+9999*784:])
const std::vector<int> kTestLabels = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5, 7, 3, 4, 1, 2, 4, 8, 0};
const std::vector<int> kTestLastLabels = {9, 1, 8, 1, 5};
const std::vector<int> kImage0Row14 = {0,   0,   0,   0,   0,   0,   2,   4,   1,   0,   0,   0,   98,  136,
                                       110, 109, 110, 162, 135, 144, 149, 159, 167, 144, 158, 169, 119, 0};
const int64_t kImage0Sum = 33456, kImage9999Sum = 24390;
const std::vector<int> kTrainLabels = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};  // list(train_labels[8:18])

std::string fashion_dir_or_skip() {
  try {
    return fashion_mnist_dir();
  } catch (const RuntimeError&) {
    return {};
  }
}

TEST(FashionMnist, ReadIdxOfTheTestFiles) {
  const std::string dir = fashion_dir_or_skip();
  if (dir.empty()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const Array labels = read_idx(dir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(labels.shape(), (Shape{10000}));
  ASSERT_EQ(labels.dtype(), uint8);
  const std::vector<int> l = labels.to_vector<int>();
  EXPECT_EQ(std::vector<int>(l.begin(), l.begin() + 20), kTestLabels);
  EXPECT_EQ(std::vector<int>(l.end() - 5, l.end()), kTestLastLabels);

  const Array images = read_idx(dir + "/t10k-images-idx3-ubyte.gz");
  ASSERT_EQ(images.shape(), (Shape{10000, 28, 28}));
  ASSERT_EQ(images.dtype(), uint8);
  const uint8_t* p = images.data<uint8_t>();
  EXPECT_EQ(std::vector<int>(p + 14 * 28, p + 15 * 28), kImage0Row14);
  EXPECT_EQ(std::accumulate(p, p + 784, int64_t{0}), kImage0Sum);
  EXPECT_EQ(std::accumulate(p + 9999 * 784, p + 10000 * 784, int64_t{0}), kImage9999Sum);
}

TEST(FashionMnist, LoadMnistBothSplitsAndLayouts) {
  const std::string dir = fashion_dir_or_skip();
  if (dir.empty()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const Mnist test = load_mnist(dir, Split::test);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(test.images.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(test.labels.dtype(), uint8);
  EXPECT_EQ(test.labels.to_vector<int>()[4], kTestLabels[4]);

  const Mnist test32 = load_mnist(dir, Split::test, int32);
  EXPECT_EQ(test32.labels.dtype(), int32);
  const std::vector<int> l = test32.labels.to_vector<int>();
  EXPECT_EQ(std::vector<int>(l.begin(), l.begin() + 20), kTestLabels);
  EXPECT_EQ(kFashionMnistClasses[static_cast<size_t>(l[0])], "Ankle boot");

  const Mnist first = test32.head(20);
  EXPECT_EQ(first.size(), 20);
  EXPECT_EQ(first.images.shape(), (Shape{20, 28, 28}));
  EXPECT_EQ(first.labels.to_vector<int>(), kTestLabels);
  EXPECT_EQ(first.images.to_vector<int>(), slice(test32.images, {Slice{0, 20}}).to_vector<int>());
  EXPECT_EQ(test32.head(0).size(), 10000);  // 0 and past-the-end: everything
  EXPECT_EQ(test32.head(10001).size(), 10000);

  // The train labels alone (the 47 MB image file would dominate the test's time): a folder with
  // uncompressed files under MNIST's other spelling, "labels.idx1".
  TempDir tmp;
  gzFile f = gzopen((dir + "/train-labels-idx1-ubyte.gz").c_str(), "rb");
  ASSERT_NE(f, nullptr);
  Bytes train(60008);
  ASSERT_EQ(gzread(f, train.data(), static_cast<unsigned>(train.size())), 60008);
  gzclose(f);
  write_plain(tmp.file("train-labels.idx1-ubyte"), train);
  // Tiny stand-in images so the split loads without the real image file.
  Bytes images = header(0x08, {60000, 1, 1});
  images.resize(images.size() + 60000, 7);
  write_gzip(tmp.file("train-images-idx3-ubyte.gz"), images);
  const Mnist tr = load_mnist(tmp.path().string(), Split::train);
  EXPECT_EQ(tr.size(), 60000);
  const std::vector<int> tl = tr.labels.to_vector<int>();
  EXPECT_EQ(std::vector<int>(tl.begin(), tl.begin() + 10), kTrainLabels);
}

TEST(LoadMnist, Errors) {
  TempDir dir;
  try {
    load_mnist(dir.path().string(), Split::train);
    ADD_FAILURE();
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[load_mnist] file not found"), std::string::npos) << msg;
    EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  }
  Bytes images = header(0x08, {3, 2, 2});
  images.resize(images.size() + 12, 1);
  Bytes labels = header(0x08, {2});
  labels.resize(labels.size() + 2, 1);
  write_plain(dir.file("t10k-images-idx3-ubyte"), images);
  write_plain(dir.file("t10k-labels-idx1-ubyte"), labels);
  EXPECT_THROW(load_mnist(dir.path().string(), Split::test), FormatError);  // 3 images, 2 labels
  labels = header(0x08, {3});
  labels.resize(labels.size() + 3, 1);
  write_plain(dir.file("t10k-labels-idx1-ubyte"), labels);
  EXPECT_EQ(load_mnist(dir.path().string(), Split::test).size(), 3);
  EXPECT_THROW(load_mnist(dir.path().string(), Split::test, float32), DtypeError);
  Bytes flat = header(0x08, {3, 4});
  flat.resize(flat.size() + 12, 1);
  write_plain(dir.file("t10k-images-idx3-ubyte"), flat);
  EXPECT_THROW(load_mnist(dir.path().string(), Split::test), FormatError);  // 2-d images
}

TEST(FashionMnistDir, EnvironmentOverrideAndMissingFolder) {
  const char* old = std::getenv("KILN_FASHION_MNIST_DIR");
  const std::string saved = old ? old : "";
  TempDir dir;
  ::setenv("KILN_FASHION_MNIST_DIR", dir.path().c_str(), 1);
  EXPECT_EQ(fashion_mnist_dir(), dir.path().string());
  ::setenv("KILN_FASHION_MNIST_DIR", dir.file("absent").c_str(), 1);
  try {
    fashion_mnist_dir();
    ADD_FAILURE();
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.file("absent")), std::string::npos) << msg;
  }
  if (old)
    ::setenv("KILN_FASHION_MNIST_DIR", saved.c_str(), 1);
  else
    ::unsetenv("KILN_FASHION_MNIST_DIR");
}

TEST(FashionMnist, ClassNames) {
  EXPECT_EQ(kFashionMnistClasses.size(), 10u);
  EXPECT_EQ(kFashionMnistClasses[0], "T-shirt/top");
  EXPECT_EQ(kFashionMnistClasses[9], "Ankle boot");
}

}  // namespace
}  // namespace kiln::io
