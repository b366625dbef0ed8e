#include "support/temp_dir.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

namespace kiln::test {

namespace fs = std::filesystem;

TempDir::TempDir(std::string_view tag) {
  std::string name = fmt::format("kiln_{}_{}", tag, ::getpid());
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    name += fmt::format("_{}_{}", info->test_suite_name(), info->name());
  std::replace(name.begin(), name.end(), '/', '_');  // parameterized tests' names hold '/'
  path_ = fs::temp_directory_path() / name;
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::test
