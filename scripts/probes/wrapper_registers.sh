#!/usr/bin/env bash
# Registers and stack of every benchmark program's persistent wrappers against the original
# kernels (ptxas -v; needs nvcc, no GPU). The wrapper should keep the original's occupancy.
# Usage: scripts/probes/wrapper_registers.sh CUPREEMPT_BINARY
set -uo pipefail
cd "$(dirname "$0")/../.."
cli=$1
nvcc=${CUPREEMPT_NVCC:-nvcc}
tmp=$(mktemp -d)
for p in fixtures/bench/*.cu; do
  b=$(basename "$p" .cu)
  "$cli" transform "$p" -o "$tmp/$b.t.cu" 2>/dev/null || { echo "$b: transform failed"; continue; }
  "$nvcc" -arch=sm_90 -O3 -std=c++17 -DCUPREEMPT_TRANSFORMED -Icuda_support -Ifixtures/bench \
    -Xptxas -v -c "$tmp/$b.t.cu" -o "$tmp/$b.o" 2>&1 |
    awk -v b="$b" '/Compiling entry function/ { name = $0; sub(/.*function .?_Z[0-9]+/, "", name); sub(/[^A-Za-z_].*/, "", name) }
      /Used [0-9]+ registers/ && name !~ /^(urgent_kernel|hash_words|N5bench)/ { match($0, /Used [0-9]+ registers/); printf "%s %s: %s\n", b, name, substr($0, RSTART + 5, RLENGTH - 15) }
      /stack frame/ && $1 != "0" && name != "" { print b, name, "stack:", $0 }'
done
rm -rf "$tmp"
