#!/usr/bin/env bash
# Probe: what each of the task loop's bookkeeping steps costs a short launch (GPU machine, nvcc
# on PATH). Builds the benchmark programs against copies of cuda_support/ with one step cut
# out of task_loop.cuh each, and times every launch preemptible (CUPREEMPT_SHORT_US=0), with
# adaptive chunks and with CUPREEMPT_CHUNK=8. The cut builds are wrong on purpose (they break
# preemption or progress), so they are for timing only: a step whose removal saves time is
# where a short launch's time goes. The checksums of the plain timed runs still must agree.
# Usage: scripts/probes/loop_costs.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR PROGRAM:SIZE...
# Env: PROBE_BUILD (/tmp/cupreempt-loop-costs), PROBE_RUNS (10), PROBE_BASE (another
# cuda_support/ folder, e.g. an older version's, built and timed as the variant "base").
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
cli=$1
lib=$(realpath "$2")
shift 2
build=${PROBE_BUILD:-/tmp/cupreempt-loop-costs}
runs=${PROBE_RUNS:-10}
programs=$(printf '%s\n' "$@" | cut -d: -f1 | sort -u)
# The cuts of task_loop.cuh (scripts/probes/task_loop_cuts.py, which refuses a cut that no longer
# changes the file), beside the whole loop ("full") and PROBE_BASE ("base").
cuts=(no-enter-fence no-host-lanes no-lanes no-progress no-host-progress no-started no-spin)
python3 scripts/probes/task_loop_cuts.py "$build/cuts" "${cuts[@]}" >/dev/null || exit 1
cuts=(full "${cuts[@]}")
[ -z "${PROBE_BASE:-}" ] || cuts=(base "${cuts[@]}")
for name in "${cuts[@]}"; do
  case $name in
    full) inc=$PWD/cuda_support ;;
    base) inc=$(realpath "$PROBE_BASE") ;;
    *) inc=$build/cuts/$name ;;
  esac
  BENCH_INCLUDE="$inc" build_missing "$cli" "$lib" "$build/$name" $programs
done
time_of() { env "$@" "time:$runs" 2>&1 | awk '/^median_ms/ {m=$2} /^checksum/ {c=$2} END {print m, c}'; }
for spec in "$@"; do
  IFS=: read -r p size <<<"$spec"
  read -r o sum <<<"$(time_of "$build/full/$p.orig" "$size")"
  echo "$p $size: original ${o}ms"
  for name in "${cuts[@]}"; do
    read -r a sa <<<"$(time_of CUPREEMPT_SHORT_US=0 "$build/$name/$p.tr" "$size")"
    read -r c sc <<<"$(time_of CUPREEMPT_SHORT_US=0 CUPREEMPT_CHUNK=8 "$build/$name/$p.tr" "$size")"
    ok=yes
    [ "$sa" = "$sum" ] && [ "$sc" = "$sum" ] || ok="NO ($sa $sc)"
    printf '  %-17s adaptive %9sms %6s | chunk 8 %9sms %6s | checksums equal: %s\n' "$name" \
      "$a" "$(awk -v t="$a" -v o="$o" 'BEGIN{printf "%.2fx", t/o}')" \
      "$c" "$(awk -v t="$c" -v o="$o" 'BEGIN{printf "%.2fx", t/o}')" "$ok"
  done
done
