#!/usr/bin/env bash
# Probe: does a benchmark program's overhead grow with the work per launch or stay per launch?
# Builds copies of fixtures/bench/PROGRAM.cu with one sed expression each (e.g. a grid size),
# original and transformed, and prints each variant's medians and the difference per launch.
# Usage: scripts/probes/size_sweep.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR PROGRAM SIZE LAUNCHES SED...
#   LAUNCHES: launches of the timed kernel per run (to turn the difference into µs per launch);
#   SED: a sed expression applied to the program's source, `-` for the source as it is.
# Env: PROBE_RUNS (15), PROBE_BUILD (/tmp/cupreempt-sweep). Needs nvcc on PATH.
set -uo pipefail
cd "$(dirname "$0")/../.."
# The persistent form's cost as a scheduled process pays it: without a scheduler daemon every
# launch the shim plans would run the original kernel (docs/runtime.md, rule 7).
export CUPREEMPT_PREEMPTIBLE=${CUPREEMPT_PREEMPTIBLE:-1}
cli=$1 lib=$(realpath "$2") p=$3 size=$4 launches=$5
shift 5
build=${PROBE_BUILD:-/tmp/cupreempt-sweep}
i=0
for expr in "$@"; do
  d=$build/v$i
  mkdir -p "$d"
  if [ "$expr" = - ]; then cp "fixtures/bench/$p.cu" "$d/$p.cu"; else sed "$expr" "fixtures/bench/$p.cu" >"$d/$p.cu"; fi
  BENCH_SRC=$d bash scripts/bench-build.sh "$cli" "$lib" "$d" "$p" &
  i=$((i + 1))
done
wait
median() { "$@" time:"${PROBE_RUNS:-15}" 2>&1 | awk '/^median_ms/ {print $2}'; }
i=0
for expr in "$@"; do
  d=$build/v$i
  o=$(median "$d/$p.orig" "$size") t=$(median "$d/$p.tr" "$size")
  python3 -c "
o, t = float('${o:-nan}'), float('${t:-nan}')
print(f'{\"$expr\":40s} original {o:.4f} ms  transformed {t:.4f} ms  {100 * (t / o - 1):+.1f}%  {(t - o) * 1000 / $launches:+.1f} us per launch')"
  i=$((i + 1))
done
