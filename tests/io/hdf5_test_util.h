#pragma once
// Shared by the HDF5 weight tests: arrays built from raw bytes, comparisons of trees and outputs,
// error messages; with the temporary folders and the Python runner of tests/support.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/random.h"
#include "kiln/nn/param_tree.h"
#include "support/dtypes.h"
#include "support/error_of.h"
#include "support/python_runner.h"
#include "support/temp_dir.h"

namespace kiln::test {

namespace fs = std::filesystem;

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

/// Every dtype in three shapes (2-d, 0-d and empty) with random bytes, so floats include NaN
/// payloads: "arrays.<dtype>.matrix", ".scalar" and ".empty".
inline nn::ParamTree every_dtype_tree(uint64_t seed = 100) {
  nn::ParamTree tree;
  for (Dtype t : kAllDtypes) {
    const std::string name(dtype_name(t));
    tree.set("arrays." + name + ".matrix", random_bits({7, 5}, t, seed++));
    tree.set("arrays." + name + ".scalar", random_bits({}, t, seed++));
    tree.set("arrays." + name + ".empty", random_bits({0, 3}, t, seed++));
  }
  return tree;
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

/// max |got - want| / max |want|, after checking the shapes agree. Relative to the largest output
/// rather than elementwise: an output near zero has a huge elementwise relative error from rounding
/// alone, while float32 rounding in a sum of n terms is bounded by about n * 2^-24 times the
/// magnitudes involved.
inline double relative_error(const Array& got, const Array& want) {
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  EXPECT_EQ(got.shape(), want.shape());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

/// EXPECTs that `msg` holds every one of `parts`.
inline void expect_mentions(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

}  // namespace kiln::test
