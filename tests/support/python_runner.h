#pragma once
// Running the system Python (the interpreter with h5py and torch) on the scripts the io tests use
// to write files kiln must read. Header-only: it needs KILN_SOURCE_DIR, which CMake defines for
// the tests under tests/io only (an absolute path in every command line would defeat ccache).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace kiln::test {

// The interpreter Debian's python3-h5py is installed for (a pyenv python3 on PATH may lack it).
inline constexpr const char* kPython = "/usr/bin/python3";

/// The repository root. From CMake, not __FILE__: with CCACHE_BASEDIR (the Makefile sets it)
/// __FILE__ is relative to the build folder, not to where the test runs.
inline std::filesystem::path repo_root() { return std::filesystem::path(KILN_SOURCE_DIR); }

/// `s` in single quotes for the shell.
inline std::string shell_quote(const std::string& s) {
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
  if (!std::filesystem::exists(kPython)) return fmt::format("{} does not exist", kPython);
  const std::string cmd = fmt::format("{} -c {} > /dev/null 2>&1", kPython, shell_quote("import " + imports));
  if (std::system(cmd.c_str()) != 0) return fmt::format("{} cannot import {}", kPython, imports);
  return "";
}

/// Runs `kPython args...` with its output in `log`; returns "" on success, else the exit status
/// and the output.
inline std::string run_python(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::string cmd = kPython;
  for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" > ").append(shell_quote(log.string())).append(" 2>&1");
  const int status = std::system(cmd.c_str());
  if (status == 0) return "";
  std::ifstream in(log);
  std::string out = fmt::format("python exited with status {}:\n", status);
  out.append(std::istreambuf_iterator<char>(in), {});
  return out;
}

/// What a PythonFilesTest suite runs: `kPython <repo>/<script> <folder>`, which writes its files
/// into the folder, when the Python can import `imports`.
struct PythonFiles {
  const char* imports;
  const char* script;  // relative to the repository root
  const char* tag;     // names the folder (see TempDir)
};

/// A test suite over files a Python script writes once for the whole suite. `Suite` states
/// `static constexpr test::PythonFiles kFiles`. Each test is skipped when the Python lacks a module
/// and fails when the script failed; file(name) is the path of a file the script wrote.
template <class Suite>
class PythonFilesTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    constexpr PythonFiles files = Suite::kFiles;
    skip_reason_ = python_missing(files.imports);
    if (!skip_reason_.empty()) return;
    dir_ = std::make_unique<TempDir>(files.tag);
    error_ =
        run_python({(repo_root() / files.script).string(), dir_->path().string()}, dir_->file("log.txt"));
  }
  static void TearDownTestSuite() {
    dir_.reset();
    error_.clear();
    skip_reason_.clear();
  }

 protected:
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_EQ(error_, "");
  }
  /// SetUp for a suite that does more: true when the test is to go on.
  bool set_up_files() {
    PythonFilesTest::SetUp();
    return !IsSkipped() && !HasFatalFailure();
  }
  static std::filesystem::path file(const std::string& name) { return dir_->file(name); }

 private:
  static inline std::unique_ptr<TempDir> dir_;
  static inline std::string error_, skip_reason_;
};

}  // namespace kiln::test
