#!/usr/bin/env bash
# Data-parallel training speed: examples/train_distributed (the Fashion-MNIST MLP 784-512-512-10,
# float32, SGD) on 1 and 2 processes of this machine, as steps/s and samples/s, and the bytes each
# rank hands to MPI per step against the size of the gradients. Every run skips its first step
# (warm-up) in the timing. Needs a build with KILN_MPI=ON and the dataset-fashion-mnist package.
# Usage: bench/distributed_bench.sh [build folder (build/release)] [steps per run (300)]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/release}
steps=${2:-300}
example=$build/examples/train_distributed
mpirun=(tests/distributed/mpirun.sh "$(command -v mpiexec)")
cores=$(nproc)

run() {
  local label=$1
  shift
  printf '%-52s ' "$label"
  "$@" --steps "$steps" --log-every 1000000 | grep -o '[0-9.]* steps/s.*'
}

echo "train_distributed, $steps steps per run, $cores cores"
run "1 process, batch 128" env KILN_NUM_THREADS="$cores" "$example" --batch-size 128
run "2 processes, batch 64 each (global 128)" env KILN_NUM_THREADS=$((cores > 2 ? cores / 2 : 1)) \
  "${mpirun[@]}" 2 "$example" --batch-size 64
run "1 process, batch 256" env KILN_NUM_THREADS="$cores" "$example" --batch-size 256
run "2 processes, batch 128 each (global 256)" env KILN_NUM_THREADS=$((cores > 2 ? cores / 2 : 1)) \
  "${mpirun[@]}" 2 "$example" --batch-size 128
