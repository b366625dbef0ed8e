// Group, init() and the single-process communicator: compiled in every build (with or without MPI).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "kiln/core/distributed/communicator_impl.h"

namespace kiln::distributed {
namespace detail {
namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }

  void all_sum(const char*, void*, int64_t count_elements, Dtype dtype, const KeepAlive&) override {
    record(count_elements * size_of(dtype));
  }
  void all_gather(const char*, const void* in, void* out, int64_t bytes, const KeepAlive&) override {
    if (bytes > 0 && in != out) std::memcpy(out, in, static_cast<size_t>(bytes));
    record(bytes);
  }
  void broadcast(const char*, void*, int64_t bytes, int, const KeepAlive&) override { record(bytes); }
  void send(const char* op, const void*, int64_t, int dst, const KeepAlive&) override {
    throw ValueError::of(op, "a group of one process has no other rank", "destination {}", dst);
  }
  void recv(const char* op, void*, int64_t, int src, const KeepAlive&) override {
    throw ValueError::of(op, "a group of one process has no other rank", "source {}", src);
  }
  void barrier(const char*) override { record(0); }
};

// Reads a positive integer environment variable; -1 when unset or not a number.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  int out = -1;
  const auto [end, ec] = std::from_chars(v, v + std::strlen(v), out);
  return ec == std::errc() && *end == '\0' ? out : -1;
}

}  // namespace

std::shared_ptr<Communicator> single_process_communicator() { return std::make_shared<SingleProcess>(); }

LauncherInfo detect_launcher() {
  // Open MPI's mpirun, then PMI-1/PMI-2 (MPICH's Hydra, Slurm's srun --mpi=pmi2), then PMIx.
  struct Pair {
    const char *size, *rank;
  };
  constexpr Pair kVariables[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}, {"PMI_SIZE", "PMI_RANK"}, {"PMIX_SIZE", "PMIX_RANK"}};
  for (const Pair& p : kVariables) {
    const int size = env_int(p.size);
    if (size >= 1) return {.rank = std::max(env_int(p.rank), 0), .size = size, .variable = p.size};
  }
  // Under PMIx alone (e.g. prterun) only the rank is set; the size comes from MPI itself.
  if (env_int("PMIX_RANK") >= 0) return {.rank = env_int("PMIX_RANK"), .size = 1, .variable = "PMIX_RANK"};
  return {};
}

double parse_timeout(const char* text, double fallback) {
  if (!text || !*text) return fallback;
  const std::string_view s(text);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v <= 0)
    throw ValueError::of("distributed::init", "KILN_DISTRIBUTED_TIMEOUT must be a positive number of seconds",
                         "got '{}'", s);
  return v;
}

}  // namespace detail

int Group::rank() const { return comm_->rank(); }
int Group::size() const { return comm_->size(); }
std::string Group::backend() const { return comm_->backend(); }
double Group::timeout() const { return comm_->timeout(); }
void Group::set_timeout(double seconds) const {
  if (!std::isfinite(seconds) || seconds <= 0)
    throw ValueError::of("Group::set_timeout", "the timeout must be a positive number of seconds", "got {}",
                         seconds);
  comm_->set_timeout(seconds);
}
int64_t Group::bytes_sent() const { return comm_->bytes_sent(); }
int64_t Group::collectives() const { return comm_->collectives(); }
void Group::barrier() const { comm_->barrier("barrier"); }

Group init(const InitOptions& options) {
  // Guards `world`: init() may be called from any thread; MPI is started at most once.
  static std::mutex mutex;
  static std::optional<Group> world;
  std::lock_guard lock(mutex);
  if (world) return *world;
  double timeout = detail::parse_timeout(std::getenv("KILN_DISTRIBUTED_TIMEOUT"), 60.0);
  if (options.timeout_seconds) {
    if (!std::isfinite(*options.timeout_seconds) || *options.timeout_seconds <= 0)
      throw ValueError::of("distributed::init", "timeout_seconds must be a positive number of seconds",
                           "got {}", *options.timeout_seconds);
    timeout = *options.timeout_seconds;
  }
  std::shared_ptr<detail::Communicator> comm = detail::mpi_world(options.strict, timeout);
  if (!comm) comm = detail::single_process_communicator();
  comm->set_timeout(timeout);
  world.emplace(std::move(comm));
  return *world;
}

}  // namespace kiln::distributed
