#!/usr/bin/env bash
# Probe: the command's trip from the control stream to the blocks of a kernel that fills the
# GPU (scripts/probes/command_path.cu; no cupreempt code): first, median and last block to see
# a word written by cuStreamWriteValue32 on a stream of the greatest priority, after the event
# recorded before it, with each block looking every LOOK_NS ns. On a GPU machine with nvcc.
# Usage: scripts/probes/command_path.sh   Env: PROBE_LOOKS="0 5000 20000", PROBE_RUNS=30.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
probe_folders
probe_build command_path -lcuda
for look in ${PROBE_LOOKS:-0 5000 20000}; do
  "$work/command_path" "$look" "${PROBE_RUNS:-30}"
done
