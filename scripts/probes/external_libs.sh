#!/usr/bin/env bash
# Probe: the external suite under two runtime libraries, with one build of the programs. The
# transformed programs find the library through their rpath, so the second pass swaps in the
# other library and reruns the same binaries (EXT_SKIP_BUILD; EXT_RERUN, or the suite would
# hand back the first pass's results kept per program): for a change to the runtime
# alone (its launch plans, say), both columns come from one machine and one build.
# Usage: scripts/probes/external_libs.sh SAMPLES_DIR BIN_DIR_A LIB_DIR_B
#   BIN_DIR_A: cupreempt and libcupreempt_runtime.so (the build and pass A); LIB_DIR_B: the
#   libcupreempt_runtime.so of pass B.
# Env: as scripts/external-suite.sh (EXT_ONLY, EXT_RUNS, EXT_SHARD, EXT_BUDGET_S, ...); OUT
# (default target/external-libs): A and B's tables in OUT/a and OUT/b, and a side-by-side
# table on stdout (each program's ratio to its original under A and under B, and the geomean
# over the programs that have a ratio in both; a pass stopped early still counts what it ran).
set -uo pipefail
cd "$(dirname "$0")/../.."
samples=${1:?usage: scripts/probes/external_libs.sh SAMPLES_DIR BIN_DIR_A LIB_DIR_B}
a=$(realpath "${2:?BIN_DIR_A}")
b=$(realpath "${3:?LIB_DIR_B}")
out=${OUT:-target/external-libs}
mkdir -p "$out"
work=$(mktemp -d)
cp "$a/cupreempt" "$a/libcupreempt_runtime.so" "$work/"
EXT_RERUN=1 OUT="$out/a" scripts/external-suite.sh "$samples" "$work/cupreempt" "$work" >"$out/a.console" 2>&1
cp "$b/libcupreempt_runtime.so" "$work/"
EXT_SKIP_BUILD=1 EXT_RERUN=1 OUT="$out/b" scripts/external-suite.sh "$samples" "$work/cupreempt" "$work" \
  >"$out/b.console" 2>&1
python3 scripts/probes/external_libs_report.py "$out/a/external-results.json" \
  "$out/b/external-results.json"
