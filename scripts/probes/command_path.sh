#!/usr/bin/env bash
# Probe: the command's trip from the control stream to the blocks of a kernel that fills the
# GPU (scripts/probes/command_path.cu; no cupreempt code): first, median and last block to see
# a word written by cuStreamWriteValue32 on a stream of the greatest priority, after the event
# recorded before it, with each block looking every LOOK_NS ns. On a GPU machine with nvcc.
# With PROBE_LOADS="0 1" also while the blocks' other warps stream memory, and PROBE_OPS="w rt b"
# for what the host enqueues after the event (command_path.cu's first lines); host times too.
# Usage: scripts/probes/command_path.sh   Env: PROBE_LOOKS="0 5000 20000", PROBE_RUNS=30,
#        PROBE_LOADS=0, PROBE_OPS=w.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
probe_folders
probe_build command_path -lcuda
for load in ${PROBE_LOADS:-0}; do
  for ops in ${PROBE_OPS:-w}; do
    for look in ${PROBE_LOOKS:-0 5000 20000}; do
      "$work/command_path" "$look" "${PROBE_RUNS:-30}" "$load" "$ops"
    done
  done
done
