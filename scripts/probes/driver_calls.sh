#!/usr/bin/env bash
# Driver calls probe (scripts/probes/driver_calls.cu): the host time of each driver and runtime
# call a launch through cupreempt may make, each repeated alone. On a GPU machine with nvcc.
# Usage: scripts/probes/driver_calls.sh [CALLS_PER_ROUND [ROUNDS]]
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
nvcc -arch=sm_90 -O2 -std=c++17 scripts/probes/driver_calls.cu -lcuda -o "$work/driver_calls"
"$work/driver_calls" "$@"
