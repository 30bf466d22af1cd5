#!/usr/bin/env bash
# Probe (nvcc, no GPU): the machine code of scripts/probes/persistent_forms.cu's task loop on
# pathfinder's task (-DPROBE_PATHFINDER_TASK), built against the tree's cuda_support/ and
# against each named cut of scripts/probes/task_loop_cuts.py: per kernel (the wrapper and the
# plain claim loop), ptxas's registers and stack, the instructions between consecutive
# barriers (a row of the pyramid is two of them), and how many times the column's hash
# product (`IMAD ... -0x7a143589`, col * 0x85ebca77) appears: once where the compiler keeps it
# for the whole task, once per unrolled row where it computes it again in every row.
# Usage: scripts/probes/wrapper_hoist.sh [CUT...]   (nvcc on PATH, or CUPREEMPT_NVCC)
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc=${CUPREEMPT_NVCC:-nvcc}
cuobjdump=$(dirname "$(command -v "$nvcc")")/cuobjdump
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ $# -eq 0 ] || python3 scripts/probes/task_loop_cuts.py "$work/cuts" "$@" >/dev/null
report() {  # NAME INCLUDE_DIR
  "$nvcc" -O3 -arch=sm_90 -std=c++17 -DPROBE_PATHFINDER_TASK -I "$2" -Xptxas -v -cubin \
    -o "$work/$1.cubin" scripts/probes/persistent_forms.cu 2>"$work/$1.ptxas"
  local kernel label fn used
  for kernel in wrapped=_Z7wrapped16cupreempt_launchPK6float2PS0_ffij \
                claim=_Z5claimILj1ELb0ELi0ELb0EEvPK6float2PS0_ffijPj; do
    label=${kernel%%=*} fn=${kernel#*=}
    used=$(grep -A3 "entry function '$fn'" "$work/$1.ptxas" | grep -o 'Used [0-9]* registers.*' | head -1)
    "$cuobjdump" -sass -fun "$fn" "$work/$1.cubin" | python3 -c '
import re, sys
ins = [m.group(1) for m in (re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?);", l) for l in sys.stdin) if m]
bars = [i for i, s in enumerate(ins) if s.startswith("BAR.SYNC")]
gaps = [bars[k + 1] - bars[k] for k in range(len(bars) - 1)]
hash_sites = sum("-0x7a143589" in s for s in ins)
print(f"  {sys.argv[1]:7} {len(ins)} instructions, hash product x{hash_sites}, between barriers {gaps}")
' "$label"
    echo "    ptxas: $used"
  done
}
echo "== tree"
report tree cuda_support
for c in "$@"; do
  echo "== cut $c"
  report "$c" "$work/cuts/$c"
done
