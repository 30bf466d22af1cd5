#!/usr/bin/env bash
# GPU checks for the transformer (run on a machine with an NVIDIA GPU and nvcc on PATH).
#   1. tests/gpu.rs: every GPU-TEST fixture, original vs transformed, bit for bit, with
#      temporal/spatial preemption and resumption; compute-sanitizer on the hazard fixtures.
#   2. a transformed program with a main() built with nvcc and run through cupreempt::launch.
# Usage: scripts/gpu-check.sh [GPU_TEST_BINARY] [CUPREEMPT_BINARY]
# Without arguments it builds both with cargo. Logs go to $OUT (or target/gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-target/gpu-out}
mkdir -p "$out"
gpu_test=${1:-}
cli=${2:-}
if [ -z "$gpu_test" ]; then
  gpu_test=$(cargo test --release --test gpu --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*gpu-[^"]*\)".*/\1/p' | tail -n 1)
fi
if [ -z "$cli" ]; then
  cargo build --release --bin cupreempt && cli=target/release/cupreempt
fi
{ nvidia-smi -L; nvcc --version | tail -n 1; date -u; } | tee "$out/device.txt"

status=0
# SANITIZE=1 adds compute-sanitizer (memcheck, racecheck, synccheck) on the hazard fixtures.
env CUPREEMPT_ROOT=$PWD ${SANITIZE:+CUPREEMPT_SANITIZE=1} CUPREEMPT_GPU_OUT=/tmp/cupreempt-gpu CUPREEMPT_NVCC=$(command -v nvcc) \
  "$gpu_test" --nocapture >"$out/gpu-test.log" 2>&1 || status=1
grep -E "^(PASS|FAIL|  ok|  FAIL|sanitizer)|test result" "$out/gpu-test.log"

# End to end: a whole program, transformed, compiled and run with no scheduler attached.
e2e=/tmp/cupreempt-e2e
mkdir -p $e2e
if "$cli" transform fixtures/multiple_kernels.cu -o $e2e/mk.cu &&
  nvcc -arch=sm_90 -std=c++17 -Icuda_support $e2e/mk.cu -o $e2e/mk &&
  $e2e/mk; then
  echo "PASS end-to-end multiple_kernels (transformed program through cupreempt::launch)"
else
  echo "FAIL end-to-end multiple_kernels"
  status=1
fi | tee -a "$out/gpu-test.log"
exit $status
