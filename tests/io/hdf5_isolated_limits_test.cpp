// The two ways a child is stopped rather than awaited, each taking its time (about 1 s for a CPU
// limit, 0.2 s per deadlocked child), so apart from hdf5_isolated_test.cpp: a child that loops,
// made by a reader and by a file that makes libhdf5 1.10.8 loop; and a child that deadlocks on a
// lock another thread held at the fork, retried until it gets through or given up on.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "io/hdf5_isolated_test_util.h"
#include "kiln/io/hdf5_weights.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using detail::Hdf5Lock;
using detail::RawEntry;
using test::error_of;
using test::expect_mentions;
using test::read_bytes;
using test::run;
using test::seed_tree;
using test::TempDir;
using test::trees_identical;
using test::write_bytes;

// A counter the children can add to and the parent read: anonymous shared memory.
class SharedCounter {
 public:
  SharedCounter() {
    void* p =
        ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    count_ = new (p) std::atomic<int>(0);
  }
  ~SharedCounter() { ::munmap(count_, sizeof(std::atomic<int>)); }
  SharedCounter(const SharedCounter&) = delete;
  SharedCounter& operator=(const SharedCounter&) = delete;
  std::atomic<int>& operator*() const { return *count_; }

 private:
  std::atomic<int>* count_;
};

TEST(Hdf5IsolatedLimits, AChildThatLoopsIsStoppedByItsCpuLimit) {
  const std::string msg = error_of<FormatError>([] {
    detail::run_isolated(
        "/no/such/file.h5", "test_op",
        [](const Hdf5Lock&) -> std::vector<RawEntry> {
          std::atomic<uint64_t> n{1};
          while (n.fetch_add(1) != 0) {
          }
          return {};
        },
        1);
  });
  expect_mentions(msg, {"[test_op]", "/no/such/file.h5", "did not finish", "1 s of CPU time"});
}

// Another one-byte change makes libhdf5 1.10.8 loop forever: the free-space object at the end of
// the global heap collection (which holds the `dtype` strings; "bool" is the last) shrinks from
// 3936 to 96 bytes, and H5HG's parser walks zero-length objects without advancing. The child is
// stopped by its CPU limit (1 s for a small file).
TEST(Hdf5IsolatedLimits, AFileThatMakesLibhdf5LoopIsAFormatError) {
  TempDir dir("hdf5iso");
  const fs::path good = dir.file("good.h5"), bad = dir.file("loop.h5");
  save_weights(good, seed_tree(), {{"model", "mlp"}});
  std::string bytes = read_bytes(good);
  const size_t at = bytes.rfind(std::string("bool\0\0\0\0", 8));
  ASSERT_NE(at, std::string::npos) << "the global heap's last string was not found";
  ASSERT_EQ(bytes.substr(at + 16, 2), "\x60\x0f") << "the free-space object is not where expected";
  bytes[at + 17] = '\0';
  write_bytes(bad, bytes);
  const std::string msg = error_of<FormatError>([&] { load_weights(bad); });
  expect_mentions(msg, {"[load_weights]", bad.string()});
  std::cout << "load_weights of the looping file: " << msg << "\n";
  EXPECT_TRUE(trees_identical(load_weights(good), seed_tree()));
}

// A mutex another thread holds at the fork stays locked in the child, whose one thread then waits
// forever: the parent sees it asleep in a futex using no CPU, kills it and forks again. Here the
// holder lets go after 200 ms, so a later child gets through.
TEST(Hdf5IsolatedLimits, AChildDeadlockedOnALockIsForkedAgain) {
  SharedCounter forks;
  std::mutex held;
  std::promise<void> locked;
  std::thread holder([&] {
    std::lock_guard guard(held);
    locked.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  locked.get_future().wait();
  const auto entries = run([&](const Hdf5Lock&) {
    ++*forks;
    std::lock_guard guard(held);
    return std::vector<RawEntry>{{{"through"}, std::nullopt}};
  });
  holder.join();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].names, std::vector<std::string>{"through"});
  EXPECT_GE((*forks).load(), 2);
}

TEST(Hdf5IsolatedLimits, AChildThatAlwaysDeadlocksIsGivenUpOn) {
  SharedCounter forks;
  std::mutex held;
  std::string msg;
  {
    std::lock_guard guard(held);
    msg = error_of<RuntimeError>([&] {
      run([&](const Hdf5Lock&) {
        ++*forks;
        std::lock_guard inner(held);
        return std::vector<RawEntry>{};
      });
    });
  }
  expect_mentions(msg, {"[test_op]", "/no/such/file.h5", "deadlocked", "5 times"});
  EXPECT_EQ((*forks).load(), 5);
}

}  // namespace
}  // namespace kiln::io
