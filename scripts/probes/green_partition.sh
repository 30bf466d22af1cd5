#!/usr/bin/env bash
# Probe: whether CUDA green contexts hold kernels of the program's own module to an SM
# partition, alone and two partitions side by side in one process
# (scripts/probes/green_partition.cu; no cupreempt code). On a GPU machine with nvcc (CUDA 12.4
# or later).
# Usage: scripts/probes/green_partition.sh   Env: PROBE_SPLIT=66 (SMs per partition),
#   PROBE_SPIN_US=200 (each block's spin).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
probe_folders
nvcc -arch=sm_90 -O3 scripts/probes/green_partition.cu -o "$work/green_partition" -lcuda
"$work/green_partition" "${PROBE_SPLIT:-66}" "${PROBE_SPIN_US:-200}"
