#!/usr/bin/env bash
# Probe: where the GPU places the blocks of persistent kernels limited to SM ranges
# (scripts/probes/sm_placement.cu; no cupreempt code), alone and two processes side by side
# under MPS (started here, as root or the GPU's owner), as the shares experiment's SM shares
# (docs/daemon.md). On a GPU machine with nvcc.
# Usage: scripts/probes/sm_placement.sh   Env: PROBE_SECONDS=3, PROBE_SPLIT=44 (the first
#   process's SMs are [0, SPLIT), the second's [SPLIT, all)), PROBE_GRIDS="full own".
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
probe_folders
secs=${PROBE_SECONDS:-3}
split=${PROBE_SPLIT:-44}
probe_build sm_placement
pair() {  # LABEL GRID_FIRST GRID_SECOND
  echo "== $1"
  "$work/sm_placement" 0 "$split" "$secs" "$2" >"$work/a.txt" &
  local a=$!
  "$work/sm_placement" "$split" all "$secs" "$3" >"$work/b.txt" &
  local b=$!
  wait $a $b
  echo "first:  $(cat "$work/a.txt")"
  echo "second: $(cat "$work/b.txt")"
}
for grid in ${PROBE_GRIDS:-full own}; do
  echo "== alone, no MPS, second range, grid $grid"
  "$work/sm_placement" "$split" all "$secs" "$grid"
done
start_mps || { echo "the MPS control daemon cannot be started here"; exit 1; }
trap stop_mps EXIT
for grid in ${PROBE_GRIDS:-full own}; do
  echo "== alone under MPS, second range, grid $grid"
  "$work/sm_placement" "$split" all "$secs" "$grid"
  pair "MPS, side by side, grids $grid" "$grid" "$grid"
done
