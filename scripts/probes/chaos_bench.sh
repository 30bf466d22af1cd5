#!/usr/bin/env bash
# Chaos mode over the benchmark programs (fixtures/bench): every program at every size, the
# original once and the transformed build under CUPREEMPT_CHAOS=SEED,MEAN_US (the runtime
# preempts and resumes its own launches at random, docs/runtime.md "Chaos mode"), one process
# at a time. Each program's first run prints the hash of every output byte and its host
# self-check; the transformed build's hash must equal the original's and its self-check must
# pass, and the chaos thread's exit line says how many preemptions it made (a pair with none
# tested nothing; said as "no preemption"). Prints one line per pair and a last line
# `chaos_bench: N of M identical (P with preemptions)`; exit status 1 if any differs or fails.
# Usage: scripts/probes/chaos_bench.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR [SEED[,MEAN_US]]
# Env: BENCH_PROGRAMS, BENCH_SIZES (default: all programs, large small trivial), BENCH_BUILD
# (reuse a scripts/bench-build.sh folder), PROBE_TIMEOUT (seconds per run, default 120).
set -uo pipefail
cd "$(dirname "$0")/../.."
cli=$1 lib=$2 chaos=${3:-7,20}
programs=${BENCH_PROGRAMS:-$(ls fixtures/bench/*.cu | xargs -n1 basename | sed 's/\.cu$//')}
sizes=${BENCH_SIZES:-large small trivial}
build=${BENCH_BUILD:-$(mktemp -d)}
limit=${PROBE_TIMEOUT:-120}
missing=$(for p in $programs; do [ -x "$build/$p.tr" ] || echo "$p"; done)
[ -z "$missing" ] || bash scripts/bench-build.sh "$cli" "$lib" "$build" $missing
same=0 total=0 preempted=0 status=0
for p in $programs; do
  for size in $sizes; do
    total=$((total + 1))
    orig=$(timeout "$limit" "$build/$p.orig" "$size" time:3 2>&1)
    tr=$(CUPREEMPT_CHAOS=$chaos CUPREEMPT_VERBOSE=1 timeout "$limit" "$build/$p.tr" "$size" time:3 2>&1)
    rc=$?
    want=$(grep -m1 -o 'checksum [0-9a-fx]*' <<<"$orig")
    got=$(grep -m1 -o 'checksum [0-9a-fx]*' <<<"$tr")
    exit_line=$(grep '^cupreempt: chaos: ' <<<"$tr" | grep -v 'so far' | tail -1)
    n=$(grep -oP '^cupreempt: chaos: \d+ launches, \K\d+(?= preemptions)' <<<"$exit_line")
    verdict=DIFFERENT
    if [ $rc -ne 0 ]; then
      verdict="FAILED (exit $rc)"
    elif [ -n "$want" ] && [ "$want" = "$got" ] && grep -q 'selfcheck ok' <<<"$tr"; then
      verdict=identical
      same=$((same + 1))
    fi
    [ "$verdict" = identical ] || status=1
    [ "${n:-0}" -gt 0 ] && preempted=$((preempted + 1))
    echo "$p $size: $verdict, ${n:-no} preemptions ($(cut -d: -f3- <<<"$exit_line" | cut -d';' -f1 | sed 's/^ //'))"
  done
done
echo "chaos_bench: $same of $total identical ($preempted with preemptions) under CUPREEMPT_CHAOS=$chaos"
exit $status
