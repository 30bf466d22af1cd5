#!/usr/bin/env bash
# Probe: scripts/probes/persistent_forms.cu built against several copies of cuda_support/ (GPU
# machine, nvcc on PATH), run alternately, to tell what a change to the task loop does to each
# persistent form apart from any program. A copy of an older commit's headers:
#   git archive COMMIT cuda_support | tar -x -C /tmp/base
# Prints, per argument set and run, each build's run_tasks and run_tasks_host time per launch
# and ratio to the original.
# Usage: scripts/probes/compare_forms.sh NAME=SUPPORT_DIR... [-- "TASKS INNER ROUNDS" ...]
#   (argument sets default to "8192 16 5" "16384 256 5" "65536 16 5"); PROBE_RUNS (2),
#   PROBE_NVCC_FLAGS (e.g. -DPROBE_BARRIER_TASK).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
names=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  name=${1%%=*}
  names+=("$name")
  nvcc -O3 -arch=sm_90 -std=c++17 ${PROBE_NVCC_FLAGS:-} -I "${1#*=}" \
    scripts/probes/persistent_forms.cu -o "$work/pf-$name" &
  shift
done
wait
[ "${1:-}" = "--" ] && shift
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=("8192 16 5" "16384 256 5" "65536 16 5")
for args in "${sets[@]}"; do
  for ((r = 1; r <= ${PROBE_RUNS:-2}; r++)); do
    for name in "${names[@]}"; do
      # shellcheck disable=SC2086 # the set is several arguments
      line=$("$work/pf-$name" $args | awk '/^run_tasks/ {printf "%s %s us %s | ", $1, $7, $11}')
      echo "$name [$args] run $r: $line"
    done
  done
done
