#pragma once
// A fresh folder per test (or per test suite), removed afterwards: what the io tests write goes
// there, and the names of what it holds can be checked for leftovers.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::test {

/// Creates "<temp>/kiln_<tag>_<pid>[_<suite>_<test>]" (emptied if it exists; the test's name when
/// a test is running) and removes it with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view tag = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// The path of `name` inside the folder (nothing is created).
  std::filesystem::path file(const std::string& name) const { return path_ / name; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  /// The names of the folder's entries, sorted.
  std::vector<std::string> entries() const;

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::test
