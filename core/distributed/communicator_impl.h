#pragma once
// The transport behind a Group (internal): raw-memory collectives, implemented over MPI
// (mpi.cpp, KILN_MPI=ON) or for a single process (distributed.cpp). The primitives
// (primitives.cpp) turn arrays into these calls.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/distributed/distributed.h"

namespace kiln::distributed::detail {

/// Owners of the memory a call works on. When a call fails after MPI was handed the memory
/// (a timeout), MPI may still write into it later: the transport keeps these alive for good.
using KeepAlive = std::vector<std::shared_ptr<const void>>;

/// A communicator. Every call is collective over the group except send and recv, blocks until
/// done, and throws RuntimeError naming `op` (the kiln op, e.g. "all_sum"), the rank and the wait
/// when a peer fails or the timeout passes; after such a failure every later call throws at once
/// (the ranks no longer agree on what comes next). Thread-safe: calls are serialized.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  /// In place: data (count elements of dtype) becomes the sum over ranks.
  virtual void all_sum(const char* op, void* data, int64_t count, Dtype dtype, const KeepAlive& keep) = 0;
  /// out (size() * bytes) receives every rank's `bytes` bytes of in, rank 0 first.
  virtual void all_gather(const char* op, const void* in, void* out, int64_t bytes,
                          const KeepAlive& keep) = 0;
  /// In place: data (bytes) becomes root's.
  virtual void broadcast(const char* op, void* data, int64_t bytes, int root, const KeepAlive& keep) = 0;
  virtual void send(const char* op, const void* data, int64_t bytes, int dst, const KeepAlive& keep) = 0;
  virtual void recv(const char* op, void* data, int64_t bytes, int src, const KeepAlive& keep) = 0;
  virtual void barrier(const char* op) = 0;

  double timeout() const { return timeout_.load(std::memory_order_relaxed); }
  void set_timeout(double seconds) { timeout_.store(seconds, std::memory_order_relaxed); }
  int64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  int64_t collectives() const { return collectives_.load(std::memory_order_relaxed); }

 protected:
  void record(int64_t bytes) {
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    collectives_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<double> timeout_{60.0};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> collectives_{0};
};

/// The communicator of one process alone (rank 0 of 1): sums and broadcasts leave data as it is,
/// all_gather copies, send and recv throw (there is no other rank).
std::shared_ptr<Communicator> single_process_communicator();

/// The world communicator over MPI (mpi.cpp), created within `timeout` seconds. `strict`:
/// initialize MPI even without a launcher.
/// Returns null when no MPI launcher is detected and not strict (the caller then uses a single
/// process). Without KILN_MPI (no_mpi.cpp) it throws RuntimeError when `strict` or when a launcher
/// started several ranks, and returns null otherwise.
std::shared_ptr<Communicator> mpi_world(bool strict, double timeout);

/// The (rank, size) an MPI launcher advertises in the environment (OMPI_COMM_WORLD_*, PMI_*,
/// PMIX_RANK), or size 0 when none is set.
struct LauncherInfo {
  int rank = 0;
  int size = 0;
  std::string variable;  ///< the variable the size came from, for messages
};
LauncherInfo detect_launcher();

/// The timeout in seconds from KILN_DISTRIBUTED_TIMEOUT's text, or `fallback` when null or empty.
/// Throws ValueError unless it is a positive finite number.
double parse_timeout(const char* text, double fallback);

}  // namespace kiln::distributed::detail
