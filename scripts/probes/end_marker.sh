#!/usr/bin/env bash
# End marker probe (scripts/probes/end_marker.cu): the host and GPU cost of marking each
# launch's end in its stream with an event or with a stream write, with and without
# programmatic stream serialization. On a GPU machine with nvcc.
# Usage: scripts/probes/end_marker.sh
#   Env: PROBE_SPINS="0 20000" (each block's run time in ns, one run each), PROBE_LAUNCHES,
#   PROBE_ROUNDS, PROBE_BLOCKS.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
nvcc -arch=sm_90 -O2 scripts/probes/end_marker.cu -lcuda -o "$work/end_marker"
for spin in ${PROBE_SPINS:-0 20000}; do
  PROBE_SPIN_NS=$spin "$work/end_marker"
done
