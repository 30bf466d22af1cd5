#!/usr/bin/env bash
# cupreemptd's priority experiment (docs/daemon.md): turnaround of short urgent kernels of one
# process while another process keeps the GPU busy with long kernels; alone, side by side with
# no scheduler, and with cupreemptd --policy hpf (the urgent process at priority 9, the batch
# one at 0). On a GPU machine with nvcc.
# Usage: scripts/probes/daemon_priority.sh [BIN_DIR]   (BIN_DIR holds cupreempt, cupreemptd and
#   libcupreempt_runtime.so; default target/release)  Env: PROBE_URGENT=200, PROBE_BATCH_S=30.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-target/release}")
work=$(mktemp -d)
"$bin/cupreempt" transform scripts/probes/daemon_priority.cu -o "$work/daemon_priority.cupreempt.cu"
nvcc -arch=sm_90 -O2 -std=c++17 -I cuda_support "$work/daemon_priority.cupreempt.cu" \
  -L "$bin" -Xlinker -rpath -Xlinker "$bin" -lcupreempt_runtime -o "$work/prog"
n=${PROBE_URGENT:-200}
batch_s=${PROBE_BATCH_S:-30}
echo "urgent alone:"
"$work/prog" urgent "$n"
echo "urgent beside batch, no scheduler:"
"$work/prog" batch "$batch_s" & b=$!
sleep 1
"$work/prog" urgent "$n"
kill $b 2>/dev/null; wait $b 2>/dev/null || true
echo "urgent beside batch, cupreemptd --policy hpf:"
"$bin/cupreemptd" --socket "$work/sock" --policy hpf --verbose & d=$!
sleep 0.5
CUPREEMPT_SCHEDULER="$work/sock" CUPREEMPT_PRIORITY=0 "$work/prog" batch "$batch_s" & b=$!
sleep 1
CUPREEMPT_SCHEDULER="$work/sock" CUPREEMPT_PRIORITY=9 "$work/prog" urgent "$n"
kill $b 2>/dev/null; wait $b 2>/dev/null || true
kill -TERM $d; wait $d || true
