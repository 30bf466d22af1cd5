#!/usr/bin/env bash
# GPU benchmark driver for the programs in fixtures/bench/ (on a machine with an NVIDIA GPU and
# nvcc on PATH). For every program and size (large, small, trivial):
#   - original and transformed builds; the transformed one linked with the runtime (C ABI);
#   - both print the checksum of their outputs: they must be bit-identical;
#   - steady-state time of both (median of BENCH_RUNS runs, CUDA events) -> overhead;
#   - preemption latency (transformed): request -> last block gone (GPU clock, events) and
#     request -> wait_yielded returned (host clock), p50/p99 over BENCH_LATENCY runs;
#   - large: co-run with an urgent kernel, without / with temporal / with spatial preemption;
#   - small: a storm of BENCH_STORM preempt/resume cycles at random moments;
# then one storm under compute-sanitizer memcheck, a timeline of one co-run, and the report
# (scripts/bench_report.py): docs-ready markdown table and SVG plot in $OUT/bench/; with
# BENCH_TR_FLAGS=-DCUPREEMPT_YIELD_LOG also the latency's split (scripts/probes/yield_split.py).
# Usage: scripts/bench-gpu.sh [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]  (default: built with cargo)
# Env: BENCH_PROGRAMS="matmul ...", BENCH_SIZES="large small trivial", BENCH_RUNS=20,
#      BENCH_LATENCY=30, BENCH_STORM=1000, OUT (default target/bench-out), BENCH_BUILD (build dir).
set -uo pipefail
cd "$(dirname "$0")/.."
# The persistent form's cost as a scheduled process pays it: without a scheduler daemon every
# launch the shim plans would run the original kernel (docs/runtime.md, rule 7).
export CUPREEMPT_PREEMPTIBLE=${CUPREEMPT_PREEMPTIBLE:-1}
out=${OUT:-target/bench-out}
cli=${1:-}
lib=${2:-}
if [ -z "$cli" ]; then
  cargo build --release --workspace -q && cli=target/release/cupreempt && lib=target/release
fi
lib=$(realpath "${lib:-target/release}")
build=${BENCH_BUILD:-/tmp/cupreempt-bench-build}
logs=$out/logs
mkdir -p "$build" "$logs"
programs=${BENCH_PROGRAMS:-$(ls fixtures/bench/*.cu | xargs -n1 basename | sed 's/\.cu$//')}
programs=$(echo $programs)
sizes=${BENCH_SIZES:-large small trivial}
runs=${BENCH_RUNS:-20}
latency=${BENCH_LATENCY:-30}
storm=${BENCH_STORM:-1000}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo "nvcc: $(nvcc --version | tail -n 1)"
  echo "command: BENCH_PROGRAMS='$programs' BENCH_SIZES='$sizes' BENCH_RUNS=$runs BENCH_LATENCY=$latency BENCH_STORM=$storm scripts/bench-gpu.sh"
} >"$out/device.txt"
cat "$out/device.txt"

bash scripts/bench-build.sh "$cli" "$lib" "$build" $programs

status=0
run() {  # run LOG TIMEOUT COMMAND...
  local log=$1 limit=$2
  shift 2
  timeout -s KILL "$limit" "$@" >"$log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && { echo "FAIL (exit $rc): $*"; tail -5 "$log"; status=1; }
  return 0
}
for p in $programs; do
  [ -x "$build/$p.tr" ] || { status=1; continue; }
  for size in $sizes; do
    modes="time:$runs,latency:$latency"
    [ "$size" = large ] && modes="$modes,corun:10"
    [ "$size" = small ] && modes="$modes,storm:$storm"
    run "$logs/$p.$size.orig.txt" 300 "$build/$p.orig" "$size" "time:$runs"
    run "$logs/$p.$size.tr.txt" 300 "$build/$p.tr" "$size" "$modes"
    echo "$p $size: $(grep -h '^checksum\|^median_ms' "$logs/$p.$size.orig.txt" "$logs/$p.$size.tr.txt" | tr '\n' ' ')"
  done
done

if [ -z "${BENCH_SKIP_EXTRAS:-}" ]; then
  run "$logs/sanitizer.txt" 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$build/matmul.tr" small storm:30
  grep -h "ERROR SUMMARY" "$logs/sanitizer.txt"
  run "$logs/timeline.txt" 120 "$build/matmul.tr" large timeline
fi
python3 scripts/bench_report.py "$out" || status=1
# Builds with -DCUPREEMPT_YIELD_LOG (BENCH_TR_FLAGS): the latency's split, per program.
if grep -qs '^yield_log ' "$logs"/*.tr.txt; then
  python3 scripts/probes/yield_split.py "$logs"/*.tr.txt | sed "s|$logs/||" | tee "$out/bench/yield_split.md"
fi
# One archive instead of many small files (what a remote runner brings back).
tar czf "$out/logs.tgz" -C "$out" logs device.txt && rm -rf "$logs"
exit $status
