#pragma once
// Data-parallel communication between processes: a Group of ranks and collective ops (all_sum,
// all_mean, all_gather, broadcast, send, recv) that are graph primitives with vjp rules, so they
// compose with grad, vjp, jvp, vmap and compile. Over MPI when kiln is built with KILN_MPI and the
// program is launched by mpirun; otherwise a single-process group on which every collective is the
// identity, so one script runs either way (docs/distributed.md).
//
//   auto group = kiln::distributed::init();            // rank 0 of 1 unless launched by mpirun
//   Array total = kiln::distributed::all_sum(x, group); // lazy, like every op; eval() communicates
//
// Ordering rule: MPI matches collectives by their order, so every rank must evaluate the same
// collectives in the same order (the same program, evaluated with eval() on one thread per rank).
// A rank that stops taking part makes the others fail with a RuntimeError after the group's timeout
// (KILN_DISTRIBUTED_TIMEOUT, 60 s by default) instead of hanging.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kiln/core/array.h"

namespace kiln::distributed {

namespace detail {
class Communicator;
}

/// Options of init(); only the first call's options count (later calls return the same group).
struct InitOptions {
  /// Require MPI: throw RuntimeError when kiln was built without it (KILN_MPI=OFF) or MPI fails
  /// to start, and start MPI even when no launcher (mpirun) is detected.
  bool strict = false;
  /// Seconds a collective waits for the other ranks before it throws; unset: the environment
  /// variable KILN_DISTRIBUTED_TIMEOUT, else 60.
  std::optional<double> timeout_seconds{};
};

/// A set of processes that communicate: this process is rank() of size(). A cheap, copyable
/// handle; copies share the communicator, its timeout and its byte counter. Thread-safe.
class Group {
 public:
  int rank() const;
  int size() const;
  /// "mpi" or "single" (one process, no communication).
  std::string backend() const;

  /// Seconds a collective waits for the other ranks before throwing RuntimeError.
  double timeout() const;
  /// Sets the timeout for every handle of this group. Throws ValueError unless seconds > 0.
  void set_timeout(double seconds) const;

  /// Payload bytes this rank has handed to collectives so far: an all_sum or all_gather counts its
  /// input, a broadcast its input on the root only, a send its array, a recv nothing. (What MPI's
  /// algorithms move on the wire depends on the implementation; this is what kiln asked it to.)
  int64_t bytes_sent() const;
  /// Collectives this rank has completed so far (each all_sum, all_gather, ... and barrier).
  int64_t collectives() const;

  /// Blocks until every rank has called barrier(), or throws RuntimeError after the timeout.
  void barrier() const;

  bool operator==(const Group& other) const { return comm_ == other.comm_; }

  /// For the collective primitives.
  const std::shared_ptr<detail::Communicator>& communicator() const { return comm_; }
  explicit Group(std::shared_ptr<detail::Communicator> comm) : comm_(std::move(comm)) {}

 private:
  std::shared_ptr<detail::Communicator> comm_;
};

/// True when kiln was built with MPI (KILN_MPI=ON).
bool is_available();

/// The group of all processes of this job. Under mpirun (or another MPI launcher, detected from
/// its environment variables) it starts MPI once, in MPI_THREAD_MULTIPLE mode, and returns the
/// world group; otherwise a single-process group (rank 0 of 1). Every call returns the same group;
/// MPI is finalized when the process exits. Throws RuntimeError when launched as one of several
/// ranks by a kiln built without MPI (each would otherwise train alone), when `strict` is set and
/// MPI is missing or fails, and ValueError for a bad timeout (option or KILN_DISTRIBUTED_TIMEOUT).
Group init(const InitOptions& options = {});

/// The sum of `x` over all ranks of the group (every rank gets it). Runs on the CPU; GPU inputs
/// are staged through host memory. Any dtype but bool; float16 and bfloat16 are added in float32
/// and rounded after each addition.
/// On a group of one it returns x. vjp: all_sum of the cotangent (each rank's output feeds its own
/// loss). Throws DtypeError for bool, ValueError for an empty array.
Array all_sum(const Array& x, std::optional<Group> group = std::nullopt);

/// all_sum(x) / size(), in x's dtype; integers are divided as floats (promoted like divide).
Array all_mean(const Array& x, std::optional<Group> group = std::nullopt);

/// The ranks' arrays concatenated along axis 0, rank 0 first: (n, ...) -> (size * n, ...); a 0-d x
/// gives (size,). Every rank must pass the same shape and dtype. vjp: the rank's own slice of the
/// cotangent. Throws ValueError for an empty array.
Array all_gather(const Array& x, std::optional<Group> group = std::nullopt);

/// Rank `root`'s x on every rank (x's shape and dtype must agree across ranks; the values of the
/// other ranks are ignored). vjp: on the root, the all_sum of the cotangents; elsewhere zeros.
/// Throws ValueError for a root outside [0, size) or an empty array.
Array broadcast(const Array& x, int root = 0, std::optional<Group> group = std::nullopt);

/// Sends x to rank `dst` when evaluated, and returns x's values (so the send can be sequenced:
/// evaluate the result). Pairs with recv(x's shape, dtype, this rank) on dst. vjp: the cotangent
/// received from dst (which sends it with send(grad, this rank)), plus the result's own. Throws
/// ValueError on a group of one, for dst == rank() or outside [0, size), or an empty array.
Array send(const Array& x, int dst, std::optional<Group> group = std::nullopt);

/// The array rank `src` sends with send(); shape and dtype must match the sender's. Not
/// differentiable through (it has no input): a backward pass sends its gradient back explicitly.
/// Throws ValueError on a group of one, for src == rank() or outside [0, size).
Array recv(const Shape& shape, Dtype dtype, int src, std::optional<Group> group = std::nullopt);

}  // namespace kiln::distributed
