#!/usr/bin/env bash
# Where a transformed unit's compile time goes (no GPU needed): for each source, nvcc's phases
# (`nvcc --time`: host preprocessing, cudafe++, cicc, ptxas, the host compile) as written and
# after `cupreempt transform`, the fastest of RUNS compiles each, in ms; first a unit with one
# trivial kernel alone and with `#include "cupreempt.cuh"` added, which is what every
# transformed unit pays before its own kernels and launches (docs/build.md, "Compile time").
# Usage: scripts/probes/compile_phases.sh CUPREEMPT_BINARY [SOURCE.cu ...] [-- NVCC_FLAGS...]
#   (default sources: fixtures/bench/*.cu; default flags: -O3 -arch=sm_90 -std=c++17)
# Needs nvcc (CUPREEMPT_NVCC or PATH). RUNS (default 3). Run on an idle machine: the figures
# are CPU time of one compile at a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
cli=$(realpath "$1")
shift
nvcc=${CUPREEMPT_NVCC:-nvcc}
runs=${RUNS:-3}
sources=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sources+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-O3 -arch=sm_90 -std=c++17)
[ ${#sources[@]} -gt 0 ] || sources=(fixtures/bench/*.cu)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# phases SOURCE EXTRA_FLAGS...: "pp cudafe cicc ptxas host total" of the fastest compile.
phases() {
  local src=$1
  shift
  local r
  for r in $(seq "$runs"); do
    rm -f "$work/t.csv"
    "$nvcc" "${flags[@]}" -Icuda_support "$@" -c "$src" -o "$work/t.o" --time "$work/t.csv" \
      >/dev/null 2>&1 || { echo "FAILED"; return; }
    awk -F, 'NR > 1 { p = $2; gsub(/^ +| +$/, "", p); t[p] += $7 }
      END {
        pp = t["gcc (preprocessing 4)"] + t["gcc (preprocessing 1)"]
        host = t["gcc (compiling)"]
        total = pp + t["cudafe++"] + t["cicc"] + t["ptxas"] + host
        printf "%d %d %d %d %d %d\n", pp, t["cudafe++"], t["cicc"], t["ptxas"], host, total
      }' "$work/t.csv"
  done | sort -n -k6 | head -1
}

row() { printf '%-44s %6s %7s %6s %6s %6s %7s\n' "$@"; }
row unit pp cudafe cicc ptxas host total
printf '#include <cstdio>\n__global__ void k(float* p) { p[0] = 1; }\nvoid f(float* p) { k<<<1, 1>>>(p); }\n' \
  >"$work/plain.cu"
{ echo '#include "cupreempt.cuh"'; cat "$work/plain.cu"; } >"$work/header.cu"
# shellcheck disable=SC2046
row "one kernel" $(phases "$work/plain.cu")
# shellcheck disable=SC2046
row "one kernel + cupreempt.cuh" $(phases "$work/header.cu")
for src in "${sources[@]}"; do
  b=$(basename "$src" .cu)
  dir=$(dirname "$src")
  "$cli" transform "$src" -o "$work/$b.t.cu" >/dev/null 2>&1 || { echo "$b: transform failed"; continue; }
  # shellcheck disable=SC2046
  row "$b" $(phases "$src" -I"$dir")
  # shellcheck disable=SC2046
  row "$b transformed" $(phases "$work/$b.t.cu" -I"$dir")
done
