#!/usr/bin/env bash
# Launch path probe (scripts/probes/launch_path.cu): first launch and steady per-launch cost,
# cupreempt against a plain launch of the same kernel. On a GPU machine with nvcc.
# Usage: scripts/probes/launch_path.sh [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]
#   Env: PROBE_FIRST=7 (processes per form for the first launch), PROBE_REPS=2000.
set -euo pipefail
cd "$(dirname "$0")/../.."
cli=${1:-target/release/cupreempt}
lib=$(realpath "${2:-$(dirname "$cli")}")
work=$(mktemp -d)
"$cli" transform scripts/probes/launch_path.cu -o "$work/launch_path.cupreempt.cu"
nvcc -arch=sm_90 -O2 -std=c++17 -I cuda_support "$work/launch_path.cupreempt.cu" \
  -L "$lib" -Xlinker -rpath -Xlinker "$lib" -lcupreempt_runtime -o "$work/launch_path"
medians() {  # FILE: per form and key, the median of the "key value" pairs of its lines
  python3 - "$1" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    form, *kv = line.split()
    d = dict(zip(kv[::2], map(float, kv[1::2])))
    for k, v in d.items():
        rows.setdefault((form, k), []).append(v)
for (form, k), v in sorted(rows.items()):
    print(f"median {form:9s} {k:18s} {statistics.median(v):9.1f}")
PY
}
echo "first launch (each line one process; host clock):"
for i in $(seq "${PROBE_FIRST:-7}"); do
  "$work/launch_path" first plain
  "$work/launch_path" first cupreempt
done | sort | tee "$work/first.txt"
medians "$work/first.txt"
for loading in LAZY EAGER; do
  echo "first launch step by step, $loading module loading (each line one process):"
  for i in $(seq "${PROBE_FIRST:-7}"); do
    CUDA_MODULE_LOADING=$loading "$work/launch_path" steps plain
    CUDA_MODULE_LOADING=$loading "$work/launch_path" steps cupreempt
  done | sort | tee "$work/steps-$loading.txt"
  medians "$work/steps-$loading.txt"
done
echo "first launch waiting for the runtime's setup (CUPREEMPT_SETUP=wait):"
for i in $(seq "${PROBE_FIRST:-7}"); do
  CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_SETUP=wait "$work/launch_path" first cupreempt
done | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END {print "median first_launch_us", a[int((NR+1)/2)]}'
echo "one first launch, the runtime's setup step by step (with CUPREEMPT_SETUP=wait):"
CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_TRACE_SETUP=1 CUPREEMPT_SETUP=wait "$work/launch_path" first cupreempt
echo "one first launch as a scheduled program makes it, the plan's first call step by step:"
CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_TRACE_SETUP=1 "$work/launch_path" first cupreempt
echo "steady state, unscheduled (rule 7: every launch runs the original kernel):"
"$work/launch_path" steady x "${PROBE_REPS:-2000}"
echo "steady state planned as a scheduled process (CUPREEMPT_PREEMPTIBLE=1; one wave runs the original):"
CUPREEMPT_PREEMPTIBLE=1 "$work/launch_path" steady x "${PROBE_REPS:-2000}"
echo "steady state, every launch preemptible (CUPREEMPT_SHORT_US=0):"
CUPREEMPT_SHORT_US=0 "$work/launch_path" steady x "${PROBE_REPS:-2000}"
echo "every launch preemptible, one wave, the runtime's steps (CUPREEMPT_TRACE_LAUNCH=1):"
CUPREEMPT_SHORT_US=0 CUPREEMPT_TRACE_LAUNCH=1 PROBE_BLOCKS=64 "$work/launch_path" steady x "${PROBE_REPS:-2000}"
echo "the shim's steps, each alone (host time per call), unscheduled:"
"$work/launch_path" pieces
echo "the shim's steps, planned as a scheduled process (CUPREEMPT_PREEMPTIBLE=1):"
CUPREEMPT_PREEMPTIBLE=1 "$work/launch_path" pieces
echo "the same, the runtime ready before the first plan (CUPREEMPT_SETUP=wait):"
CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_SETUP=wait "$work/launch_path" pieces
echo "steady state on a created stream of the highest priority (CUPREEMPT_PREEMPTIBLE=1):"
CUPREEMPT_PREEMPTIBLE=1 "$work/launch_path" steady x "${PROBE_REPS:-2000}" stream
rm -rf "$work"
