// The MPI transport (built only with KILN_MPI=ON): every kiln call into MPI is here.
//
// Each collective is posted non-blocking (MPI_Iallreduce, ...) and polled with MPI_Testall until it
// completes or the group's timeout passes, so a rank that failed, exited or evaluated collectives in
// another order gives the others a RuntimeError instead of a hang. The communicator is a duplicate
// of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI failures come back as codes, and kiln's traffic
// never matches a user's own MPI messages.
// MPI's C API only: Open MPI's and MPICH's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "kiln/core/distributed/communicator_impl.h"

namespace kiln::distributed {

bool is_available() { return true; }

namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Elements (all_sum) or bytes (the others) per MPI call: MPI counts are ints.
constexpr int64_t kMaxCount = int64_t{1} << 30;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

// float16/bfloat16 have no MPI type: they travel as uint16 and these ops add them in float32,
// rounding back after every addition (what kiln's own kernels do).
template <class Half>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float s = static_cast<float>(Half::from_bits(a[i])) + static_cast<float>(Half::from_bits(b[i]));
    b[i] = Half::from_float(s);
  }
}

// Polls `requests` until they complete; returns what went wrong on an MPI error or past `timeout`
// seconds. (With a status, `requests` holds one request.)
std::optional<std::string> poll(std::span<MPI_Request> requests, double timeout, const std::string& peer,
                                MPI_Status* status = nullptr) {
  const auto start = Clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    const int rc =
        status ? MPI_Test(requests.data(), &done, status)
               : MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return fmt::format("MPI failed while waiting for {}: {}", peer, mpi_error(rc));
    if (done) return std::nullopt;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout)
      return fmt::format(
          "timed out after {:.1f} s waiting for {} (a rank failed, exited, or evaluates "
          "collectives in another order); the limit is KILN_DISTRIBUTED_TIMEOUT or "
          "Group::set_timeout",
          waited, peer);
    // MPI progresses only inside MPI_Test, so poll tightly at first, then yield the core (2.7 MB
    // between 2 ranks: 0.24 ms yielding, 0.5-0.9 ms sleeping 10 us between polls). A long wait (a
    // peer still computing) sleeps, leaving the cores to the ranks that work.
    if (polls < 64) continue;
    if (waited < 0.002)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(waited < 0.05 ? std::chrono::microseconds(20)
                                                : std::chrono::microseconds(200));
  }
}

// Process-wide MPI state: started once by mpi_world(), finalized when the process exits (only
// when kiln started MPI; a program that called MPI_Init itself also finalizes it).
struct Runtime {
  bool started_here = false;
  MPI_Op sum_f16 = MPI_OP_NULL;
  MPI_Op sum_bf16 = MPI_OP_NULL;
  // Set when a group failed (a peer died or stopped answering). Its pending call can then make
  // MPI_Finalize wait forever for that peer (the dead-rank test hung 60 s under ASan once).
  mutable std::atomic<bool> group_failed{false};
  ~Runtime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (group_failed.load()) {
      // Finalize normally where it can (a peer that stopped still finalizes), but do not hang: the
      // job failed already, and the system reclaims what MPI holds.
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::fputs("kiln: MPI_Finalize did not return within 10 s of a failed group; exiting\n", stderr);
        std::_Exit(1);
      }).detach();
    }
    if (sum_f16 != MPI_OP_NULL) MPI_Op_free(&sum_f16);
    if (sum_bf16 != MPI_OP_NULL) MPI_Op_free(&sum_bf16);
    if (started_here) MPI_Finalize();
  }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const Runtime& runtime) : comm_(comm), runtime_(runtime) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_sum(const char* op, void* data, int64_t count, Dtype dtype, const KeepAlive& keep) override {
    std::lock_guard lock(mutex_);
    check_usable(op);
    const auto [type, mpi_op] = sum_type(op, dtype);
    auto* bytes = static_cast<char*>(data);
    for (int64_t done = 0; done == 0 || done < count; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, count - done));
      MPI_Request request;
      post(op, keep,
           MPI_Iallreduce(MPI_IN_PLACE, bytes + done * size_of(dtype), n, type, mpi_op, comm_, &request));
      wait(op, keep, {&request, 1}, "the other ranks");
    }
    record(count * size_of(dtype));
  }

  void all_gather(const char* op, const void* in, void* out, int64_t bytes, const KeepAlive& keep) override {
    std::lock_guard lock(mutex_);
    check_usable(op);
    if (bytes > INT_MAX)
      throw ValueError::of(op, "too large for one MPI message", "{} bytes per rank, at most {}", bytes,
                           INT_MAX);
    MPI_Request request;
    const int n = static_cast<int>(bytes);
    post(op, keep, MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, &request));
    wait(op, keep, {&request, 1}, "the other ranks");
    record(bytes);
  }

  void broadcast(const char* op, void* data, int64_t bytes, int root, const KeepAlive& keep) override {
    std::lock_guard lock(mutex_);
    check_usable(op);
    for (int64_t done = 0; done == 0 || done < bytes; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, bytes - done));
      MPI_Request request;
      post(op, keep, MPI_Ibcast(static_cast<char*>(data) + done, n, MPI_BYTE, root, comm_, &request));
      wait(op, keep, {&request, 1}, root == rank_ ? "the other ranks" : fmt::format("root rank {}", root));
    }
    record(rank_ == root ? bytes : 0);
  }

  void send(const char* op, const void* data, int64_t bytes, int dst, const KeepAlive& keep) override {
    std::lock_guard lock(mutex_);
    check_usable(op);
    for (int64_t done = 0; done == 0 || done < bytes; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, bytes - done));
      MPI_Request request;
      post(op, keep, MPI_Isend(static_cast<const char*>(data) + done, n, MPI_BYTE, dst, 0, comm_, &request));
      wait(op, keep, {&request, 1}, fmt::format("rank {} to receive", dst));
    }
    record(bytes);
  }

  void recv(const char* op, void* data, int64_t bytes, int src, const KeepAlive& keep) override {
    std::lock_guard lock(mutex_);
    check_usable(op);
    for (int64_t done = 0; done == 0 || done < bytes; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, bytes - done));
      MPI_Request request;
      MPI_Status status;
      post(op, keep, MPI_Irecv(static_cast<char*>(data) + done, n, MPI_BYTE, src, 0, comm_, &request));
      wait(op, keep, {&request, 1}, fmt::format("rank {} to send", src), &status);
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      if (got != n)
        fail(
            op, keep,
            fmt::format("rank {} sent {} bytes where {} were expected (shape or dtype differ)", src, got, n));
    }
    record(0);
  }

  void barrier(const char* op) override {
    std::lock_guard lock(mutex_);
    check_usable(op);
    MPI_Request request;
    post(op, {}, MPI_Ibarrier(comm_, &request));
    wait(op, {}, {&request, 1}, "the other ranks");
    record(0);
  }

 private:
  void wait(const char* op, const KeepAlive& keep, std::span<MPI_Request> requests, const std::string& peer,
            MPI_Status* status = nullptr) {
    if (auto error = poll(requests, timeout(), peer, status)) fail(op, keep, *error);
  }

  std::pair<MPI_Datatype, MPI_Op> sum_type(const char* op, Dtype dtype) const {
    switch (dtype) {
      case Dtype::uint8:
        return {MPI_UINT8_T, MPI_SUM};
      case Dtype::int8:
        return {MPI_INT8_T, MPI_SUM};
      case Dtype::int16:
        return {MPI_INT16_T, MPI_SUM};
      case Dtype::uint16:
        return {MPI_UINT16_T, MPI_SUM};
      case Dtype::int32:
        return {MPI_INT32_T, MPI_SUM};
      case Dtype::int64:
        return {MPI_INT64_T, MPI_SUM};
      case Dtype::uint32:
        return {MPI_UINT32_T, MPI_SUM};
      case Dtype::uint64:
        return {MPI_UINT64_T, MPI_SUM};
      case Dtype::float16:
        return {MPI_UINT16_T, runtime_.sum_f16};
      case Dtype::bfloat16:
        return {MPI_UINT16_T, runtime_.sum_bf16};
      case Dtype::float32:
        return {MPI_FLOAT, MPI_SUM};
      case Dtype::float64:
        return {MPI_DOUBLE, MPI_SUM};
      default:
        throw DtypeError::of(op, "cannot sum this dtype", "{}", dtype_name(dtype));
    }
  }

  void check_usable(const char* op) const {
    if (!failure_.empty())
      throw RuntimeError::of(op, "the group failed earlier and can no longer be used", "rank {} of {}: {}",
                             rank_, size_, failure_);
  }

  void post(const char* op, const KeepAlive& keep, int rc) {
    if (rc != MPI_SUCCESS) fail(op, keep, fmt::format("MPI refused the call: {}", mpi_error(rc)));
  }

  // The ranks no longer agree on what comes next, so the group is unusable from here on. MPI may
  // still write into the memory of the failed call: it is kept until the process ends.
  [[noreturn]] void fail(const char* op, const KeepAlive& keep, const std::string& what) {
    parked_.insert(parked_.end(), keep.begin(), keep.end());
    failure_ = fmt::format("[{}] {}", op, what);
    runtime_.group_failed.store(true);
    throw RuntimeError::of(op, "communication failed", "rank {} of {}: {}", rank_, size_, what);
  }

  MPI_Comm comm_;
  const Runtime& runtime_;
  int rank_ = 0, size_ = 1;
  std::mutex mutex_;     // serializes this communicator's calls; guards failure_ and parked_
  std::string failure_;  // the first failure, or empty
  KeepAlive parked_;     // memory MPI may still write to (see fail)
};

}  // namespace

std::shared_ptr<Communicator> mpi_world(bool strict, double timeout) {
  const LauncherInfo launcher = detect_launcher();
  if (launcher.size == 0 && !strict) return nullptr;
  // Destroyed at exit, after every communicator user: it finalizes MPI. Created under init()'s lock.
  static Runtime runtime;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Open MPI's non-blocking sums (libnbc) use a binomial tree for fewer than 4 ranks and for
    // in-place sums: 0.55 ms for 2.7 MB between 2 ranks where MPI_Allreduce takes 0.25 ms.
    // Rabenseifner's reduce-scatter + allgather takes 0.24-0.28 ms. A value the user set stays.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw RuntimeError::of("distributed::init", "MPI_Init_thread failed");
    runtime.started_here = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  // kiln serializes its own calls, but they may come from any thread (async_eval's scheduler).
  if (provided < MPI_THREAD_SERIALIZED)
    throw RuntimeError::of("distributed::init", "MPI does not allow calls from several threads",
                           "thread level {}; kiln needs MPI_THREAD_SERIALIZED or more", provided);
  if (runtime.sum_f16 == MPI_OP_NULL) {
    MPI_Op_create(&half_sum<float16_t>, 1, &runtime.sum_f16);
    MPI_Op_create(&half_sum<bfloat16_t>, 1, &runtime.sum_bf16);
  }
  // The duplicate is made non-blocking too: a rank that never calls init() must not hang the rest.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request;
  if (const int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request); rc != MPI_SUCCESS)
    throw RuntimeError::of("distributed::init", "MPI_Comm_idup failed", "{}", mpi_error(rc));
  if (auto error = poll({&request, 1}, timeout, "the other ranks to call distributed::init()"))
    throw RuntimeError::of("distributed::init", "could not create the communicator", "{}", *error);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_shared<MpiCommunicator>(comm, runtime);
}

}  // namespace detail
}  // namespace kiln::distributed
