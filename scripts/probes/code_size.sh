#!/usr/bin/env bash
# Where a transformed translation unit's machine code goes (sm_90 cubin, no GPU needed): for each
# source, the bytes of the original kernels, of the persistent wrappers, and of the task loop's
# helpers (next_chunk, stay, enter, leave, split), which ptxas copies into every wrapper that
# calls them. Code that a program's first launch loads costs time (scripts/probes/module_load.sh,
# first_use.sh), so this is where the module-size work starts.
# Usage: scripts/probes/code_size.sh CUPREEMPT_BINARY [SOURCE.cu ...]   (default: fixtures/bench/*.cu)
# Needs nvcc (CUPREEMPT_NVCC or PATH) and readelf.
set -euo pipefail
cd "$(dirname "$0")/../.."
cli=$(realpath "$1")
shift
nvcc=${CUPREEMPT_NVCC:-nvcc}
sources=("$@")
[ ${#sources[@]} -gt 0 ] || sources=(fixtures/bench/*.cu)
work=$(mktemp -d)
printf '%-28s %9s %9s %9s %9s %9s\n' source cubin original wrappers helpers helpers/wrapper
for src in "${sources[@]}"; do
  b=$(basename "$src" .cu)
  "$cli" transform "$src" -o "$work/$b.cu" >/dev/null 2>&1 || { echo "$b: transform failed"; continue; }
  "$nvcc" -arch=sm_90 -O3 -std=c++17 -DCUPREEMPT_TRANSFORMED -Icuda_support -I"$(dirname "$src")" \
    -cubin "$work/$b.cu" -o "$work/$b.cubin" 2>/dev/null || { echo "$b: nvcc failed"; continue; }
  # FUNC symbols: "SIZE NAME". Helpers are the clones named $WRAPPER$HELPER, placed in their
  # wrapper's section, whose symbol's size spans them too: a wrapper's own code is its size
  # less its helpers'.
  readelf -sW "$work/$b.cubin" | awk '$4 == "FUNC" { print $3, $NF }' >"$work/$b.syms"
  awk -v b="$b" -v size="$(stat -c %s "$work/$b.cubin")" '
    $2 ~ /\$/ { helpers += $1; next }
    $2 ~ /__cupreempt/ { wrappers += $1; n++; next }
    { original += $1 }
    END { printf "%-28s %9d %9d %9d %9d %9d\n", b, size, original, wrappers - helpers, helpers,
          n ? helpers / n : 0 }' "$work/$b.syms"
done
