#!/usr/bin/env bash
# Probe (GPU machine, nvcc on PATH): what raising a kernel's own __launch_bounds__ in its
# capped wrapper buys (scripts/probes/own_bounds.cu). Builds the probe as written and
# transformed, prints each build's registers (ptxas) and times: as written, transformed
# (launch.cuh picks the capped wrapper), transformed with the plain wrapper (CUPREEMPT_NO_R32=1),
# each run alone, in turn, PROBE_ROUNDS times (3).
# Usage: scripts/probes/own_bounds.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
cli=$1
lib=$(realpath "$2")
build=${PROBE_BUILD:-/tmp/cupreempt-own-bounds}
rm -rf "$build" && mkdir -p "$build"
"$cli" transform scripts/probes/own_bounds.cu -o "$build/tr.cu"
nvcc -arch=sm_90 -O3 -std=c++17 -Xptxas -v scripts/probes/own_bounds.cu -o "$build/orig" 2>&1 |
  grep -A1 "Compiling entry" | grep -o "Used [0-9]* registers" | sed 's/^/original: /'
nvcc -arch=sm_90 -O3 -std=c++17 -Xptxas -v -Icuda_support "$build/tr.cu" -o "$build/tr" \
  -L"$lib" -lcupreempt_runtime -Xlinker -rpath="$lib" 2>&1 |
  awk '/Compiling entry/ { n = $0 } /Used [0-9]+ registers/ { match(n, /chase[A-Za-z_0-9]*/); match($0, /Used [0-9]+ registers/); print substr(n, RSTART, 20) ": " substr($0, RSTART, RLENGTH) }'
for r in $(seq "${PROBE_ROUNDS:-3}"); do
  echo "round $r"
  echo "  original: $("$build/orig" | tr '\n' ' ')"
  echo "  capped:   $(CUPREEMPT_PREEMPTIBLE=1 "$build/tr" | tr '\n' ' ')"
  echo "  plain:    $(CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_NO_R32=1 "$build/tr" | tr '\n' ' ')"
done
