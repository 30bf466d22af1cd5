#!/usr/bin/env bash
# Probe: benchmark programs side by side in every launch form (GPU machine, nvcc on PATH).
# For each PROGRAM:SIZE: the original's median, the transformed build with launch plans (the
# default), with nearly every launch the original kernel (CUPREEMPT_SHORT_US=10^9), with every
# launch preemptible (CUPREEMPT_SHORT_US=0), and every launch preemptible
# with fixed chunks (CUPREEMPT_CHUNK). Each line also says whether all checksums agree with the
# original's: a form that computes something else is a bug, whatever its time.
# Usage: scripts/probes/shapes.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR PROGRAM:SIZE...
# Env: PROBE_BUILD (/tmp/cupreempt-shapes; reused if the programs are there), PROBE_RUNS (10),
# PROBE_CHUNKS ("1 8 64").
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
cli=$1
lib=$(realpath "$2")
shift 2
build=${PROBE_BUILD:-/tmp/cupreempt-shapes}
runs=${PROBE_RUNS:-10}
build_missing "$cli" "$lib" "$build" "$@"
# One run: "MEDIAN_MS CHECKSUM".
one() {
  local out
  out=$("$@" "time:$runs" 2>&1)
  echo "$(awk '/^median_ms/ {print $2}' <<<"$out") $(awk '/^checksum/ {print $2}' <<<"$out")"
}
ratio() { awk -v t="$1" -v o="$2" 'BEGIN { if (o > 0 && t > 0) printf "%.2fx", t / o; else print "-" }'; }
for spec in "$@"; do
  IFS=: read -r p size <<<"$spec"
  read -r o sum <<<"$(one "$build/$p.orig" "$size")"
  line="$p $size: original ${o}ms"
  same=yes
  form() {
    local label=$1 t s
    shift
    read -r t s <<<"$(env "$@" "$build/$p.tr" "$size" "time:$runs" 2>&1 |
      awk '/^median_ms/ {m=$2} /^checksum/ {c=$2} END {print m, c}')"
    [ "$s" = "$sum" ] || same="NO ($label: $s)"
    line="$line | $label ${t}ms $(ratio "$t" "$o")"
  }
  form plans CUPREEMPT_NONE=1
  # Nearly every launch the original kernel (each configuration's first launch, and every
  # 128th, run preemptible to time it): what the runtime's launch path costs apart from the
  # persistent form.
  form lean CUPREEMPT_SHORT_US=1000000000
  form preemptible CUPREEMPT_SHORT_US=0
  for c in ${PROBE_CHUNKS:-1 8 64}; do
    form "chunk$c" CUPREEMPT_SHORT_US=0 CUPREEMPT_CHUNK="$c"
  done
  echo "$line | checksums equal: $same"
done
