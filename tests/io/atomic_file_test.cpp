// io/atomic_file_impl.h: replace_atomically writes through a temporary file of its own beside the
// target; every failure (in the writer, creating, writing, renaming) leaves the target as it was and
// no temporary file; writers on several threads never share a temporary file, so the target is
// always one writer's whole file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file_impl.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using detail::replace_atomically;
using detail::TempFile;
using test::error_of;
using test::TempDir;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Random bytes from a fixed seed.
std::string random_text(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

void replace_with(const fs::path& target, const std::string& text) {
  replace_atomically("test_op", target, [&](TempFile& f) { f.write(text.data(), text.size()); });
}

TEST(ReplaceAtomically, WritesAndReplacesTheTarget) {
  TempDir dir;
  const fs::path target = dir / "out.bin";
  const std::string first = random_text(5000, 1), second = random_text(300, 2);
  replace_with(target, first);
  EXPECT_EQ(read_file(target), first);
  replace_with(target, second);
  EXPECT_EQ(read_file(target), second);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(ReplaceAtomically, TheTemporaryFileIsBesideTheTargetAndUnique) {
  TempDir dir;
  const fs::path target = dir / "out.bin";
  fs::path outer, inner;
  replace_atomically("test_op", target, [&](TempFile& f) {
    outer = f.path();
    EXPECT_TRUE(fs::exists(f.path()));
    EXPECT_EQ(fs::file_size(f.path()), 0u);  // created empty
    // A second writer of the same target while the first is still writing gets another file.
    replace_atomically("test_op", target, [&](TempFile& g) { inner = g.path(); });
    f.write("outer", 5);
  });
  EXPECT_EQ(outer.parent_path(), target.parent_path());
  EXPECT_TRUE(outer.filename().string().starts_with(".out.bin.tmp-")) << outer;
  EXPECT_NE(outer, inner);
  EXPECT_EQ(read_file(target), "outer");  // the last rename wins
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(ReplaceAtomically, WriteAtPatchesAndPathWritersWork) {
  TempDir dir;
  const fs::path target = dir / "patched.bin";
  replace_atomically("test_op", target, [&](TempFile& f) {
    f.write("0000abcd", 8);
    EXPECT_EQ(f.size(), 8);
    f.write_at(1, "xy", 2);
    EXPECT_EQ(f.size(), 8);
  });
  EXPECT_EQ(read_file(target), "0xy0abcd");
  // A writer that opens the path itself (as libhdf5 does), truncating it.
  const std::string text = random_text(777, 3);
  replace_atomically("test_op", target, [&](TempFile& f) {
    std::ofstream out(f.path(), std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  });
  EXPECT_EQ(read_file(target), text);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"patched.bin"});
}

TEST(ReplaceAtomically, AWriterThatThrowsLeavesTheTargetAndNoTemporaryFile) {
  TempDir dir;
  const fs::path target = dir / "out.bin";
  const std::string old_text = random_text(1000, 4);
  replace_with(target, old_text);
  EXPECT_THROW(replace_atomically("test_op", target,
                                  [&](TempFile& f) {
                                    const std::string part = random_text(4096, 5);
                                    f.write(part.data(), part.size());
                                    throw std::logic_error("the writer gave up");
                                  }),
               std::logic_error);
  EXPECT_EQ(read_file(target), old_text);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(ReplaceAtomically, FileSystemErrorsNameTheTargetAndTheStep) {
  TempDir dir;
  const fs::path missing = dir / "no_such_folder" / "out.bin";
  std::string msg = error_of<RuntimeError>([&] { replace_with(missing, "x"); });
  EXPECT_NE(msg.find(missing.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("[test_op] cannot create the temporary file"), std::string::npos) << msg;

  // A folder in the way: the rename fails, the folder and what it holds stay, the temporary file goes.
  const fs::path taken = dir / "taken";
  fs::create_directory(taken);
  std::ofstream(taken / "keep") << "kept";
  msg = error_of<RuntimeError>([&] { replace_with(taken, "x"); });
  EXPECT_NE(msg.find(taken.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot rename"), std::string::npos) << msg;
  EXPECT_EQ(read_file(taken / "keep"), "kept");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
}

TEST(ReplaceAtomically, AWriteErrorLeavesTheTargetAndNoTemporaryFile) {
  TempDir dir;
  const fs::path target = dir / "out.bin";
  replace_with(target, "old");
  // A file size limit the new bytes pass: write() fails with EFBIG (SIGXFSZ ignored).
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string msg = error_of<RuntimeError>([&] { replace_with(target, random_text(5000, 6)); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("[test_op] cannot write"), std::string::npos) << msg;
  EXPECT_NE(msg.find(target.string()), std::string::npos) << msg;
  EXPECT_EQ(read_file(target), "old");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

// Two threads replace one target over and over while a third reads it: every read, and the file
// at the end, is one writer's text, whole.
TEST(ReplaceAtomically, ConcurrentWritersLeaveOneCompleteFile) {
  TempDir dir;
  const fs::path target = dir / "shared.bin";
  const std::string texts[2] = {random_text(100000, 7), random_text(60000, 8)};
  replace_with(target, texts[0]);
  std::atomic<int> writing{2};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (writing.load() > 0) {
      const std::string got = read_file(target);
      if (got != texts[0] && got != texts[1]) ++torn;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) replace_with(target, texts[w]);
      --writing;
    });
  for (std::thread& t : writers) t.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  const std::string last = read_file(target);
  EXPECT_TRUE(last == texts[0] || last == texts[1]) << "a file of " << last.size() << " bytes";
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"shared.bin"});
}

}  // namespace
}  // namespace kiln::io
