#pragma once
// Shared by the tests of io/hdf5_isolated_impl.h: the fuzzer's seed file, raw file bytes, and
// running a reader in a child directly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/hdf5_test_util.h"
#include "kiln/core/random.h"
#include "kiln/io/hdf5_isolated_impl.h"
#include "kiln/nn/param_tree.h"

namespace kiln::test {

inline std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

/// The bytes of `a` as a reader in the child produces them.
inline io::detail::RawArray raw_of(const Array& a) {
  const auto bytes = bytes_of(a);
  io::detail::RawArray out{a.dtype(), a.shape(), std::vector<std::byte>(bytes.size())};
  if (!bytes.empty()) std::memcpy(out.bytes.data(), bytes.data(), bytes.size());
  return out;
}

/// Runs `read` in a child as op "test_op" on a path that does not exist (so 1 s of CPU time).
inline std::vector<io::detail::Entry> run(const io::detail::IsolatedReader& read) {
  return io::detail::run_isolated("/no/such/file.h5", "test_op", read);
}

/// The fuzzer's seed: nested groups, several dtypes. Its root's first link is "layers", and
/// "bool" is the last `dtype` string in its global heap.
inline nn::ParamTree seed_tree() {
  nn::ParamTree tree;
  tree.set("layers.0.weight", random::normal({4, 5}, random::key(2)));
  tree.set("layers.0.bias", astype(random::normal({4}, random::key(3)), bfloat16));
  tree.set("layers.1.weight", astype(random::normal({2, 4}, random::key(4)), float16));
  tree.set("norm.num_batches_tracked", Array(int64_t{3}));
  tree.set("mask", random::bernoulli({5}, random::key(5)));
  return tree;
}

}  // namespace kiln::test
