#!/usr/bin/env bash
# Probe: whether CUDA green contexts hold kernels of the program's own module to an SM
# partition (scripts/probes/green_partition.cu; no cupreempt code): in one process, alone and
# two partitions side by side; then two processes under MPS (started here, as root or the GPU's
# owner), each launching on another group of the same split: whether group k is the same SMs
# in every process (their SM lists must not meet) and each keeps its rate. On a GPU machine with
# nvcc (CUDA 12.4 or later).
# Usage: scripts/probes/green_partition.sh   Env: PROBE_SPLIT=64 (SMs per partition),
#   PROBE_SPIN_US=200 (each block's spin), PROBE_PARTS="one mps", PROBE_LAUNCHES=20.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
probe_folders
split=${PROBE_SPLIT:-64}
spin=${PROBE_SPIN_US:-200}
launches=${PROBE_LAUNCHES:-20}
probe_build green_partition -lcuda
for part in ${PROBE_PARTS:-one mps}; do
  case $part in
  one)
    echo "== one process"
    "$work/green_partition" "$split" "$spin"
    ;;
  mps)
    start_mps || { echo "the MPS control daemon cannot be started here"; exit 1; }
    trap stop_mps EXIT
    echo "== under MPS, group 0 alone"
    "$work/green_partition" "$split" "$spin" 0 "$launches" >"$work/g0-alone.txt"
    grep -h "^group 0:" "$work/g0-alone.txt"
    echo "== under MPS, two processes: group 0 and group 1"
    "$work/green_partition" "$split" "$spin" 0 "$launches" >"$work/g0.txt" &
    a=$!
    "$work/green_partition" "$split" "$spin" 1 "$launches" >"$work/g1.txt" &
    b=$!
    wait $a $b
    grep -h "^group [01]:" "$work/g0.txt" "$work/g1.txt"
    python3 - "$work/g0.txt" "$work/g1.txt" "$work/g0-alone.txt" <<'PY'
import sys
sets = []
for path in sys.argv[1:]:
    line = next(l for l in open(path) if l.startswith("group ") and " SMs:" in l)
    sets.append(set(int(x) for x in line.split(":")[1].split()))
print(f"SMs of group 0 in the first process: {len(sets[0])}, of group 1 in the second: "
      f"{len(sets[1])}, in both: {len(sets[0] & sets[1])}")
if any(s == set(range(len(s))) for s in sets):
    print("a group's SM ids are 0..n-1: %smid counts within the partition here (MPS), so these "
          "lists cannot tell whether two processes' groups meet")
if len(sets) > 2:
    print(f"group 0 in another process (alone before): the same SMs: {sets[2] == sets[0]}")
PY
    ;;
  esac
done
