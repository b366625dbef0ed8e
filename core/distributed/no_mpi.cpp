// Built when KILN_MPI is OFF: no MPI transport. init() then returns the single-process group,
// unless a launcher started several ranks, which would each train alone without noticing.
#include "kiln/core/distributed/communicator_impl.h"

namespace kiln::distributed {

bool is_available() { return false; }

namespace detail {

std::shared_ptr<Communicator> mpi_world(bool strict, double /*timeout*/) {
  const LauncherInfo launcher = detect_launcher();
  if (launcher.size > 1)
    throw RuntimeError::of("distributed::init",
                           "launched as one of several ranks, but kiln was built without MPI",
                           "rank {} of {} ({}); rebuild with -DKILN_MPI=ON (needs libopenmpi-dev)",
                           launcher.rank, launcher.size, launcher.variable);
  if (strict)
    throw RuntimeError::of("distributed::init", "MPI was required (strict), but kiln was built without it",
                           "rebuild with -DKILN_MPI=ON (needs libopenmpi-dev)");
  return nullptr;
}

}  // namespace detail
}  // namespace kiln::distributed
