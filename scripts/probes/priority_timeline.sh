#!/usr/bin/env bash
# Probe: where a program with two stream priorities loses time in the persistent form
# (scripts/probes/priority_timeline.cu, the shape of fixtures/bench/priority_streams.cu small):
# built as written and transformed, each run alone, each printing its launches' first task
# start and last task end on the GPU's clock and, per round, the total, the low-priority
# launches' summed time and how long the high-priority launches waited after the low launch
# they depend on. GPU machine with nvcc on PATH.
# Usage: scripts/probes/priority_timeline.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR [ROUNDS]
#   Env: PROBE_ENV (assignments for the transformed run, e.g. CUPREEMPT_SHORT_US=0).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The persistent form's cost as a scheduled process pays it: without a scheduler daemon every
# launch the shim plans would run the original kernel (docs/runtime.md, rule 7).
export CUPREEMPT_PREEMPTIBLE=${CUPREEMPT_PREEMPTIBLE:-1}
cli=${1:?usage: scripts/probes/priority_timeline.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR [ROUNDS]}
lib=$(realpath "${2:?RUNTIME_LIB_DIR}")
rounds=${3:-5}
work=$(mktemp -d)
nvcc -arch=sm_90 -O3 -std=c++17 scripts/probes/priority_timeline.cu -o "$work/orig"
"$cli" headers --out "$work/include" >/dev/null
"$cli" transform scripts/probes/priority_timeline.cu -o "$work/tr.cu" 2>/dev/null
nvcc -arch=sm_90 -O3 -std=c++17 -I"$work/include" "$work/tr.cu" -L"$lib" -Xlinker -rpath \
  -Xlinker "$lib" -lcupreempt_runtime -o "$work/tr"
echo "== original"
"$work/orig" "$rounds"
echo "== transformed ${PROBE_ENV:-}"
env ${PROBE_ENV:-} CUPREEMPT_VERBOSE=1 "$work/tr" "$rounds" 2>&1 |
  grep -v "launching the original kernel" || true
rm -rf "$work"
