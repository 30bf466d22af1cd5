#!/usr/bin/env bash
# Module size against first-launch time (scripts/probes/module_load.cu). On a GPU machine with
# nvcc. Prints, per build, the fatbin's size and the median host time of the first launch over
# PROBE_RUNS fresh processes (default 9), with lazy (default) and eager module loading; then
# the same kernels as cubins loaded through the driver API, where the CUDA runtime registers
# nothing (scripts/probes/module_parts.cu), part by part.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
work=$(mktemp -d)
runs=${PROBE_RUNS:-9}
build() {  # NAME KERNELS FMAS GENCODE...
  local name=$1 n=$2 fmas=$3
  shift 3
  nvcc -O2 "$@" -DBALLAST="$n" -DFMAS="$fmas" scripts/probes/module_load.cu -o "$work/$name"
}
sass="-gencode arch=compute_90,code=sm_90"
build none 0 1000 $sass
build 4x16k 4 1000 $sass
build 16x16k 16 1000 $sass
build 64x16k 64 1000 $sass
build 4x64k 4 4000 $sass
build 64x4k 64 250 $sass
build 16x16k+ptx 16 1000 -gencode "arch=compute_90,code=[sm_90,compute_90]"
# The same ballast in a translation unit of its own (another module): never loaded lazily.
nvcc -O2 $sass -DBALLAST=16 -DFMAS=1000 -DBALLAST_ONLY -c scripts/probes/module_load.cu -o "$work/ballast.o"
nvcc -O2 $sass -DBALLAST=16 -DFMAS=1000 -DBALLAST_ELSEWHERE -c scripts/probes/module_load.cu -o "$work/main.o"
nvcc $sass "$work/main.o" "$work/ballast.o" -o "$work/16x16k-elsewhere"
names="none 4x16k 16x16k 64x16k 4x64k 64x4k 16x16k+ptx 16x16k-elsewhere"
for name in $names; do
  fatbin=$(fatbin_bytes "$work/$name")
  for mode in LAZY EAGER; do
    for _ in $(seq "$runs"); do CUDA_MODULE_LOADING=$mode "$work/$name"; done |
      python3 -c '
import statistics, sys
v = [float(l.split()[1]) for l in sys.stdin]
print(f"{sys.argv[1]:11s} fatbin {int(sys.argv[2]):8d} B  {sys.argv[3]:5s} first launch median {statistics.median(v):8.1f} us (min {min(v):.1f}, max {max(v):.1f})")' "$name" "$fatbin" "$mode"
  done
done
# The driver's part: the same ballast as cubins, nothing registered with the CUDA runtime.
nvcc -O2 $sass scripts/probes/module_parts.cu -lcuda -o "$work/module_parts"
for spec in none:0:1000 16x16k:16:1000 64x4k:64:250 64x16k:64:1000; do
  IFS=: read -r name n fmas <<<"$spec"
  nvcc -O2 -cubin $sass -DBALLAST="$n" -DFMAS="$fmas" scripts/probes/module_load.cu -o "$work/$name.cubin"
  entries=$(for i in $(seq "$n"); do printf '_Z7ballastILi%dEEvPf ' "$i"; done)
  for mode in LAZY EAGER; do
    for _ in $(seq "$runs"); do CUDA_MODULE_LOADING=$mode "$work/module_parts" "$work/$name.cubin" $entries; done |
      python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin]
parts = {rows[0][i]: statistics.median(float(r[i + 1]) for r in rows) for i in range(0, len(rows[0]), 2)}
print(f"driver {sys.argv[1]:8s} {sys.argv[2]:5s} " + "  ".join(f"{k} {v:7.1f}" for k, v in parts.items()) + " us (medians)")' "$name" "$mode"
  done
done
