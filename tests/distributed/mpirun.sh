#!/usr/bin/env bash
# Runs a command on N local ranks for the distributed tests: mpirun.sh <mpiexec> <N> <command...>
# With Open MPI it adds --oversubscribe (more ranks than cores: CI has two) and, as root (CI
# containers), --allow-run-as-root, which Open MPI otherwise refuses.
set -euo pipefail
mpiexec=$1
ranks=$2
shift 2
flags=()
if "$mpiexec" --version 2>/dev/null | grep -qE "Open ?MPI|OpenRTE"; then
  flags+=(--oversubscribe)
  if ((EUID == 0)); then
    flags+=(--allow-run-as-root)
  fi
fi
exec "$mpiexec" -n "$ranks" "${flags[@]}" "$@"
