#!/usr/bin/env bash
# Probe: an urgent process's kernels beside a batch process that is busy, parked (one block
# asleep on the GPU, as a preempted kernel's tail), waiting on a stream memory wait (no block),
# or idle, each process in its own context (no MPS: the GPU time-slices between contexts), and
# the same under MPS (started here). scripts/probes/timeslice_wait.cu; no cupreempt code.
# Usage: scripts/probes/timeslice_wait.sh   Env: PROBE_URGENT=300, PROBE_MODES="idle busy parked
#   waiting".
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
probe_folders
n=${PROBE_URGENT:-300}
probe_build timeslice_wait -lcuda
echo "== alone"
"$work/timeslice_wait" urgent "$n"
cases() {
  for mode in ${PROBE_MODES:-idle busy parked waiting}; do
    "$work/timeslice_wait" batch "$mode" 1000 >"$work/batch.txt" 2>&1 &
    local b=$!
    sleep 1.5
    echo "== $1, beside batch $mode: $("$work/timeslice_wait" urgent "$n")"
    kill $b 2>/dev/null || true
    wait $b 2>/dev/null || true
  done
}
cases "own contexts"
start_mps || { echo "the MPS control daemon cannot be started here"; exit 1; }
trap stop_mps EXIT
cases "MPS"
