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
# Compiled through the launcher, linked by the host compiler without the runtime (a Makefile's
# `g++ -o prog *.o -lcudart`): the program loads the runtime itself (runtime_library.h), and
# its launches run preemptible under chaos mode with every output exact.
toolkit=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
host_linked() {
  "$cli" nvcc -arch=sm_90 -O2 -c tests/gpu/host_linked.cu -o "$work/host_linked.o" &&
    g++ -o "$work/host_linked" "$work/host_linked.o" -L"$toolkit/lib64" -lcudart &&
    ! nm -u "$work/host_linked.o" | grep cupreempt_rt_ &&
    CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_CHAOS=7,20 CUPREEMPT_VERBOSE=1 "$work/host_linked" \
      > "$work/host_linked.log" 2>&1
  local rc=$?
  grep -E "host_linked:|launches planned|chaos" "$work/host_linked.log"
  [ $rc -eq 0 ] && grep -q "40 launches, 0 wrong" "$work/host_linked.log" &&
    grep -Eq "launches planned: preemptible [1-9]" "$work/host_linked.log"
}
step host_linked
exit $status
