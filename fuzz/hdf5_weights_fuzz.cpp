// libFuzzer target: io::load_weights and io::load_keras_weights on mutated HDF5 files. Any outcome
// but a tree or a kiln::Error (a crash, a sanitizer report, a leak, another exception) is a
// finding. The seeds are valid kiln weight files: several dtypes, nested groups, metadata.
//
// The loaders run libhdf5 in a forked child (io/hdf5_isolated_impl.h), so a file that crashes
// libhdf5 or makes it loop is a FormatError here, not a finding. The child increments its own copy
// of the coverage counters, which libFuzzer would never see: ChildCoverage moves the child's
// counters onto shared memory right after the fork and adds them to the parent's after each load,
// so the reading code still guides the fuzzer.
#include <kiln/io/hdf5_weights.h>
#include <kiln/io/keras_weights.h>
#include <kiln/kiln.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "fuzz_file.h"

// Bounds of the inline 8-bit counters of -fsanitize=fuzzer, made by the linker (one section for
// the whole static executable); null when the build has none.
extern "C" {
extern uint8_t __start___sancov_cntrs[] __attribute__((weak, visibility("hidden")));
extern uint8_t __stop___sancov_cntrs[] __attribute__((weak, visibility("hidden")));
}

namespace {

using kiln::Array;

class ChildCoverage {
 public:
  /// Sets up the shared pages and the fork handler; without counters it does nothing.
  static void install() {
    if (__start___sancov_cntrs == nullptr || __stop___sancov_cntrs <= __start___sancov_cntrs) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    begin_ = reinterpret_cast<uintptr_t>(__start___sancov_cntrs) & ~(page - 1);
    size_ = ((reinterpret_cast<uintptr_t>(__stop___sancov_cntrs) + page - 1) & ~(page - 1)) - begin_;
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
    uint8_t* mine = __start___sancov_cntrs;
    uint8_t* child = counters_in(shared_);
    const size_t n = static_cast<size_t>(__stop___sancov_cntrs - __start___sancov_cntrs);
    for (size_t i = 0; i < n; ++i) {
      if (child[i] == 0) continue;
      const unsigned sum = unsigned{mine[i]} + child[i];
      mine[i] = static_cast<uint8_t>(sum > 255 ? 255 : sum);
      child[i] = 0;
    }
  }

 private:
  static uint8_t* counters_in(uint8_t* pages) {
    return pages + (reinterpret_cast<uintptr_t>(__start___sancov_cntrs) - begin_);
  }

  // In the child, right after the fork: the pages holding the counters (and whatever else shares
  // them, which only the child uses from now on) become the shared pages, counters at zero.
  static void in_child() {
    std::memcpy(shared_, reinterpret_cast<const void*>(begin_), size_);
    std::memset(counters_in(shared_), 0, static_cast<size_t>(__stop___sancov_cntrs - __start___sancov_cntrs));
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
