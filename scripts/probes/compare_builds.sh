#!/usr/bin/env bash
# Probe: the same benchmark programs built by several versions of cupreempt (GPU machine, nvcc
# on PATH), to tell whether a change to the task loop or the runtime pays. Each VARIANT is
# NAME=CUPREEMPT_BINARY,RUNTIME_LIB_DIR[,NVCC_FLAGS[,ENV]]: the binary transforms and writes the
# device headers it ships (`cupreempt headers`), the library is linked, and the programs run
# with ENV's assignments (space-separated, e.g. CUPREEMPT_OVERLAP=0) in their environment. Prints, per program and
# size, the original's median and each variant's, with the overhead and, for builds that print
# their plan counts, how many timed launches ran preemptible.
# Usage: scripts/probes/compare_builds.sh VARIANT...
# Env: PROBE_PROGRAMS, PROBE_SIZES (large small trivial), PROBE_RUNS (10), PROBE_BUILD.
set -uo pipefail
cd "$(dirname "$0")/../.."
# The persistent form's cost as a scheduled process pays it: without a scheduler daemon every
# launch the shim plans would run the original kernel (docs/runtime.md, rule 7).
export CUPREEMPT_PREEMPTIBLE=${CUPREEMPT_PREEMPTIBLE:-1}
build=${PROBE_BUILD:-/tmp/cupreempt-compare}
programs=${PROBE_PROGRAMS:-black_scholes convolution_separable pathfinder reduction vector_add}
runs=${PROBE_RUNS:-10}
names=()
declare -A envs
for v in "$@"; do
  name=${v%%=*}
  IFS=, read -r cli lib flags env <<<"${v#*=}"
  names+=("$name")
  envs[$name]=${env:-}
  mkdir -p "$build/$name"
  "$cli" headers --out "$build/$name/include" >/dev/null
  # Older binaries' `headers` command does not install runtime.h.
  [ -f "$build/$name/include/cupreempt/runtime.h" ] ||
    cp cuda_support/cupreempt/runtime.h "$build/$name/include/cupreempt/"
  BENCH_INCLUDE="$build/$name/include" BENCH_TR_FLAGS="${flags:-}" \
    bash scripts/bench-build.sh "$cli" "$lib" "$build/$name" $programs
done
# The median, and where the build prints its plan counts, the timed launches planned
# preemptible of all ("P/N"): an overhead measured on original launches is none.
median() {
  local log
  log=$(mktemp)
  "$@" time:"$runs" >"$log" 2>&1
  python3 scripts/bench_log.py "$log"
  rm -f "$log"
}
for p in $programs; do
  for size in ${PROBE_SIZES:-large small trivial}; do
    o=$(median "$build/${names[0]}/$p.orig" "$size")
    line="$p $size orig $o"
    for name in "${names[@]}"; do
      # shellcheck disable=SC2086 # ENV's assignments, split on purpose
      read -r t pre <<<"$(median env ${envs[$name]} "$build/$name/$p.tr" "$size")"
      line="$line | $name $t ($(awk -v t="$t" -v o="$o" 'BEGIN{printf "%+.1f%%", (t/o-1)*100}')${pre:+, $pre preemptible})"
    done
    echo "$line"
  done
done
