#pragma once
// Shared by the HDF5 weight tests: a temporary folder per test, arrays built from raw bytes, and
// running the system Python (the interpreter with h5py and torch) on a helper script.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/random.h"
#include "kiln/nn/param_tree.h"

namespace kiln::test {

namespace fs = std::filesystem;

// The interpreter Debian's python3-h5py is installed for (a pyenv python3 on PATH may lack it).
inline constexpr const char* kPython = "/usr/bin/python3";

/// The repository root, from this header's path (tests/io/hdf5_test_util.h).
// From CMake, not __FILE__: with CCACHE_BASEDIR (the Makefile sets it) __FILE__ is relative to the
// build folder, not to where the test runs.
inline fs::path repo_root() { return fs::path(KILN_SOURCE_DIR); }

/// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("kiln_{}_{}", tag, ::getpid());
    if (info != nullptr) name += fmt::format("_{}_{}", info->test_suite_name(), info->name());
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = fs::temp_directory_path() / name;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path file(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out.append("'\\''");
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

/// "" when the system Python can import every module of `imports` ("h5py, numpy"), else why not.
inline std::string python_missing(const std::string& imports) {
  if (!fs::exists(kPython)) return fmt::format("{} does not exist", kPython);
  const std::string cmd = fmt::format("{} -c {} > /dev/null 2>&1", kPython, quote("import " + imports));
  if (std::system(cmd.c_str()) != 0) return fmt::format("{} cannot import {}", kPython, imports);
  return "";
}

/// Runs `kPython args...`; returns "" on success, else the exit status and the output.
inline std::string run_python(const std::vector<std::string>& args, const fs::path& log) {
  std::string cmd = kPython;
  for (const std::string& a : args) cmd.append(" ").append(quote(a));
  cmd.append(" > ").append(quote(log.string())).append(" 2>&1");
  const int status = std::system(cmd.c_str());
  if (status == 0) return "";
  std::ifstream in(log);
  std::string out = fmt::format("python exited with status {}:\n", status);
  out.append(std::istreambuf_iterator<char>(in), {});
  return out;
}

/// The row-major bytes of an array (evaluated).
inline std::vector<uint8_t> bytes_of(const Array& a) {
  Array c = contiguous(a);
  c.eval();
  std::vector<uint8_t> out(static_cast<size_t>(c.nbytes()));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

/// An evaluated array holding exactly these bytes.
inline Array from_bytes(const Shape& shape, Dtype dtype, const std::vector<uint8_t>& bytes) {
  Array a = Array::empty_available(shape, dtype);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), a.nbytes());
  if (!bytes.empty()) std::memcpy(a.raw_data(), bytes.data(), bytes.size());
  return a;
}

/// An array of `dtype` whose bytes are random (kiln::random bits from `seed`): for floats this
/// includes NaNs with payloads, infinities and subnormals. bool gets 0 and 1.
inline Array random_bits(const Shape& shape, Dtype dtype, uint64_t seed) {
  const int64_t n = shape_size(shape) * size_of(dtype);
  const int64_t words = std::max<int64_t>((n + 3) / 4, 1);
  const auto bits = random::bits({words}, random::key(seed)).to_vector<uint32_t>();
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  if (n > 0) std::memcpy(bytes.data(), bits.data(), bytes.size());
  if (dtype == bool_)
    for (uint8_t& b : bytes) b &= 1;
  return from_bytes(shape, dtype, bytes);
}

/// True when both trees have the same keys in the same order and bit-identical arrays.
inline ::testing::AssertionResult trees_identical(const nn::ParamTree& a, const nn::ParamTree& b) {
  if (a.keys() != b.keys()) return ::testing::AssertionFailure() << "keys differ";
  for (const auto& [key, x] : a) {
    const Array& y = b.at(key);
    if (x.dtype() != y.dtype())
      return ::testing::AssertionFailure() << key << ": dtype " << x.dtype() << " vs " << y.dtype();
    if (x.shape() != y.shape())
      return ::testing::AssertionFailure()
             << key << ": shape " << shape_str(x.shape()) << " vs " << shape_str(y.shape());
    if (bytes_of(x) != bytes_of(y)) return ::testing::AssertionFailure() << key << ": bytes differ";
  }
  return ::testing::AssertionSuccess();
}

/// The message of the exception `f` throws as E; fails the test when it throws nothing or another type.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace kiln::test
