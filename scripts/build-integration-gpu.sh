#!/usr/bin/env bash
# Build integration on a GPU machine with nvcc, CMake and make: builds examples/cmake-project
# through the CMake package (cupreempt as the compiler launcher) and without cupreempt, and
# examples/make-project through `cupreempt nvcc`; runs each (random inputs, every element checked
# against the host; the cupreempt builds preempt the float launch mid-run and resume it), and
# the CMake build once more under compute-sanitizer memcheck. Exit status 1 if anything failed.
# Usage: scripts/build-integration-gpu.sh [CUPREEMPT_BINARY]   (default target/release/cupreempt;
#   libcupreempt_runtime.so must lie next to it)
set -uo pipefail
cd "$(dirname "$0")/.."
cli=$(realpath "${1:-target/release/cupreempt}")
work=${WORK:-$(mktemp -d)}
status=0
step() { echo "== $*"; "$@" || { echo "FAIL: $*"; status=1; }; }
step cmake -S examples/cmake-project -B "$work/cmake" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -Dcupreempt_DIR="$PWD/cmake" -DCUPREEMPT_EXECUTABLE="$cli"
step cmake --build "$work/cmake" -j 8
step "$work/cmake/scale_add"
step cmake -S examples/cmake-project -B "$work/plain" -DCMAKE_CUDA_ARCHITECTURES=90 -DWITH_CUPREEMPT=OFF
step cmake --build "$work/plain" -j 8
step "$work/plain/scale_add"
step make -C examples/make-project CUPREEMPT="$cli" NVCC=nvcc BUILD="$work/make"
step "$work/make/scale_add"
step compute-sanitizer --tool memcheck --error-exitcode 9 "$work/cmake/scale_add" 1048576
exit $status
