// libFuzzer target: io::load_weights and io::load_keras_weights on mutated HDF5 files. Any outcome
// but a tree or a kiln::Error (a crash, a sanitizer report, a leak, another exception) is a
// finding. The seeds are valid kiln weight files: several dtypes, nested groups, metadata.
//
// The loaders run libhdf5 in a forked child (io/hdf5_isolated_impl.h), so a file that crashes
// libhdf5 or makes it loop is a FormatError here, not a finding. The child increments its own copy
// of the coverage counters, which libFuzzer would never see: ChildCoverage moves the child's
// counters onto shared memory right after the fork and adds them to the parent's after each load,
// so the reading code still guides the fuzzer. A sanitizer's report in a child is printed but not
// saved as a crash (see in_child): a kiln bug in the reading code shows there as a FormatError and
// a report whose stack names kiln rather than libhdf5.
#include <kiln/io/hdf5_weights.h>
#include <kiln/io/keras_weights.h>
#include <kiln/kiln.h>
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "fuzz_file.h"

namespace {

// Bounds of the inline 8-bit counters of -fsanitize=fuzzer, made by the linker (one section for
// the whole static executable). Taken in assembly: a C++ declaration of __start___sancov_cntrs in
// this file would make the coverage pass rename its own, and the constructor that registers the
// counters with libFuzzer would pass it nulls. Null on other architectures (no child coverage).
uint8_t* counters_begin() {
  uint8_t* p = nullptr;
#if defined(__x86_64__)
  asm("leaq __start___sancov_cntrs(%%rip), %0" : "=r"(p));
#elif defined(__aarch64__)
  asm("adrp %0, __start___sancov_cntrs\n\tadd %0, %0, :lo12:__start___sancov_cntrs" : "=r"(p));
#endif
  return p;
}
uint8_t* counters_end() {
  uint8_t* p = nullptr;
#if defined(__x86_64__)
  asm("leaq __stop___sancov_cntrs(%%rip), %0" : "=r"(p));
#elif defined(__aarch64__)
  asm("adrp %0, __stop___sancov_cntrs\n\tadd %0, %0, :lo12:__stop___sancov_cntrs" : "=r"(p));
#endif
  return p;
}

using kiln::Array;

class ChildCoverage {
 public:
  /// Sets up the shared pages and the fork handler; without counters it does nothing.
  static void install() {
    if (count() == 0) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    begin_ = reinterpret_cast<uintptr_t>(counters_begin()) & ~(page - 1);
    size_ = ((reinterpret_cast<uintptr_t>(counters_end()) + page - 1) & ~(page - 1)) - begin_;
    fd_ = ::memfd_create("kiln-fuzz-child-coverage", MFD_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) return;
    void* view = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (view == MAP_FAILED) return;
    shared_ = static_cast<uint8_t*>(view);
    ::pthread_atfork(nullptr, nullptr, &in_child);
  }

  /// Adds the last child's counts to this process's counters (libFuzzer reads them after the input).
  static void merge() {
    if (shared_ == nullptr) return;
    uint8_t* mine = counters_begin();
    uint8_t* child = counters_in(shared_);
    for (size_t i = 0, n = count(); i < n; ++i) {
      if (child[i] == 0) continue;
      const unsigned sum = unsigned{mine[i]} + child[i];
      mine[i] = static_cast<uint8_t>(sum > 255 ? 255 : sum);
      child[i] = 0;
    }
  }

 private:
  static size_t count() {
    const uint8_t* begin = counters_begin();
    const uint8_t* end = counters_end();
    return begin != nullptr && end > begin ? static_cast<size_t>(end - begin) : 0;
  }
  static uint8_t* counters_in(uint8_t* pages) {
    return pages + (reinterpret_cast<uintptr_t>(counters_begin()) - begin_);
  }

  // In the child, right after the fork: the pages holding the counters (and whatever else shares
  // them, which only the child uses from now on) become the shared pages, counters at zero.
  static void in_child() {
    // A sanitizer's report in the child ends the child, and the load with a FormatError: what a
    // file that breaks libhdf5 must give, not a finding. libFuzzer's death callback would save the
    // input as a crash; without it the report is printed and the child exits with status 1.
    __sanitizer_set_death_callback(nullptr);
    // The raw system call: the pages hold other globals' redzones, which AddressSanitizer would
    // report as read by memcpy (and checks in its write interceptor too).
    ::syscall(SYS_pwrite64, fd_, reinterpret_cast<const void*>(begin_), size_, 0);
    std::memset(counters_in(shared_), 0, count());
    ::mmap(reinterpret_cast<void*>(begin_), size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_, 0);
  }

  static inline uintptr_t begin_ = 0;
  static inline size_t size_ = 0;
  static inline int fd_ = -1;
  static inline uint8_t* shared_ = nullptr;
};

void write_seeds(const std::filesystem::path& dir) {
  namespace io = kiln::io;
  kiln::nn::ParamTree small;
  small.set("w", kiln::random::normal({3, 2}, kiln::random::key(1)));
  io::save_weights(dir / "small.h5", small);

  kiln::nn::ParamTree tree;
  tree.set("layers.0.weight", kiln::random::normal({4, 5}, kiln::random::key(2)));
  tree.set("layers.0.bias", kiln::astype(kiln::random::normal({4}, kiln::random::key(3)), kiln::bfloat16));
  tree.set("layers.1.weight",
           kiln::astype(kiln::random::normal({2, 4}, kiln::random::key(4)), kiln::float16));
  tree.set("norm.num_batches_tracked", Array(int64_t{3}));
  tree.set("mask", kiln::random::bernoulli({5}, kiln::random::key(5)));
  io::save_weights(dir / "tree.h5", tree, {{"model", "mlp"}});
}

}  // namespace

// Each load forks, and a fork copies the page tables of all resident memory: with ASan's default
// 256 MiB quarantine of freed blocks the process grows to ~400 MB and the fuzzer slows to a third.
// A null from malloc for absurd sizes is what libhdf5 gets from glibc too (and handles).
extern "C" const char* __asan_default_options() {
  return "quarantine_size_mb=16:allocator_may_return_null=1";
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln_fuzz::maybe_write_seeds(write_seeds);
  ChildCoverage::install();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& path = kiln_fuzz::input_path("hdf5");
  kiln_fuzz::write_input(path, data, size);
  try {
    (void)kiln::io::load_weights(path);
  } catch (const kiln::Error&) {
    // Reported as an error: what a damaged file must give.
  }
  ChildCoverage::merge();
  try {
    (void)kiln::io::load_keras_weights(path);
  } catch (const kiln::Error&) {
  }
  ChildCoverage::merge();
  return 0;
}
