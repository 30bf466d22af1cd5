#!/usr/bin/env bash
# Synced launches probe (scripts/probes/synced_launches.cu): host time per launch that the
# program waits for at once, as written against transformed (unscheduled: rule 7 runs the
# original kernel), processes alternated; each transformed process also times a launch as
# written beside its own, so that the runtime's presence and the launch shim are told apart.
# On a GPU machine with nvcc.
# Usage: scripts/probes/synced_launches.sh [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]
#   Env: PROBE_PROCS=5 (processes per build and variant), PROBE_STEPS, PROBE_ROUNDS, PROBE_N;
#   PROBE_VARIANTS="NAME=VAR=VALUE,VAR=VALUE ..." more runs of the transformed build under
#   those settings (e.g. nopreload=CUPREEMPT_PRELOAD=0).
set -euo pipefail
cd "$(dirname "$0")/../.."
cli=${1:-target/release/cupreempt}
lib=$(realpath "${2:-$(dirname "$cli")}")
work=$(mktemp -d)
nvcc -arch=sm_90 -O3 scripts/probes/synced_launches.cu -o "$work/as_written"
"$cli" transform scripts/probes/synced_launches.cu -o "$work/synced_launches.cupreempt.cu"
nvcc -arch=sm_90 -O3 -I cuda_support "$work/synced_launches.cupreempt.cu" \
  -L "$lib" -Xlinker -rpath -Xlinker "$lib" -lcupreempt_runtime -o "$work/transformed"
for i in $(seq "${PROBE_PROCS:-5}"); do
  "$work/as_written" | sed 's/^/as_written /'
  "$work/transformed" | sed 's/^/transformed /'
  for v in ${PROBE_VARIANTS:-}; do
    env $(echo "${v#*=}" | tr ',' ' ') "$work/transformed" | sed "s/^/${v%%=*} /"
  done
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    build, form, _, value = line.split()
    rows.setdefault((build, form), []).append(float(value))
for (build, form), v in sorted(rows.items()):
    print(f"median {build:12s} {form:16s} {statistics.median(v):7.3f} us per launch and wait")
PY
