#!/usr/bin/env bash
# Probe: where cupreempt's task loop loses time against a minimal persistent loop, in one run
# (GPU machine, nvcc on PATH). Builds scripts/probes/persistent_forms.cu against the tree's
# cuda_support/ and against each cut copy that scripts/probes/task_loop_cuts.py writes, runs
# each build (TASKS INNER ROUNDS CHUNK), and prints every form's ratio to the original: the
# hand-made forms once, the run_tasks forms per cut.
# Usage: scripts/probes/persistent_bisect.sh [TASKS [INNER [ROUNDS [CHUNK [BUDGET_NS]]]]]
#   (defaults 16384 256 5 0; PROBE_CUTS="name ..." for some cuts only, default all of them;
#   PROBE_NVCC_FLAGS, more nvcc flags for every build, e.g. -DPROBE_BARRIER_TASK)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
args=("${1:-16384}" "${2:-256}" "${3:-5}" "${4:-0}" "${5:-0}")
python3 scripts/probes/task_loop_cuts.py "$work/cuts" ${PROBE_CUTS:-} >/dev/null
build() {
  nvcc -O3 -arch=sm_90 -std=c++17 ${PROBE_NVCC_FLAGS:-} -I "$2" scripts/probes/persistent_forms.cu \
    -o "$work/pf-$1"
}
build tree cuda_support &
for c in "$work"/cuts/*; do build "$(basename "$c")" "$c" & done
wait
echo "== tree (hand-made forms and run_tasks as it is)"
"$work/pf-tree" "${args[@]}"
for c in "$work"/cuts/*; do
  name=$(basename "$c")
  echo "== cut $name"
  # The run_tasks forms' lines, with the stamps' lines before them in a -DPROBE_STAMPS build.
  timeout 60 "$work/pf-$name" "${args[@]}" |
    awk '/^  / {buf = buf $0 "\n"; next} /^run_tasks/ {printf "%s%s\n", buf, $0; found = 1}
         {buf = ""} END {if (!found) print "  (failed or timed out)"}'
done
