#!/usr/bin/env bash
# The data-parallel equivalence of examples/train_distributed: 2 ranks of batch B print the same
# loss curve as one process of batch 2B, to a relative 1e-4 (float32 sums in another order).
# Usage: compare_example.sh <mpirun.sh> <mpiexec> <train_distributed> <B> [more arguments...]
set -euo pipefail
mpirun_sh=$1
mpiexec=$2
example=$3
batch=$4
shift 4

two=$("$mpirun_sh" "$mpiexec" 2 "$example" --batch-size "$batch" --log-every 1 "$@")
one=$("$example" --batch-size $((2 * batch)) --log-every 1 "$@")
printf '%s\n--- 2 ranks above, 1 process below ---\n%s\n' "$two" "$one"

losses() { awk '$1 == "step" && $3 == "loss" { print $2, $4 }'; }
paste <(losses <<<"$two") <(losses <<<"$one") | awk '
  { n++
    if ($1 != $3) { printf "step numbers differ: %s vs %s\n", $1, $3; bad = 1; next }
    d = $2 - $4; if (d < 0) d = -d
    m = $4 < 0 ? -$4 : $4
    if (d > 1e-4 * m + 1e-6) { printf "step %s: loss %s on 2 ranks, %s on 1\n", $1, $2, $4; bad = 1 } }
  END {
    if (n < 2) { print "too few steps to compare"; exit 1 }
    if (bad) exit 1
    printf "%d steps: the loss curves agree\n", n }'
grep -q "2 rank(s) (mpi)" <<<"$two" || { echo "the 2-rank run did not run on 2 MPI ranks"; exit 1; }
