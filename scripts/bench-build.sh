#!/usr/bin/env bash
# Builds benchmark programs of fixtures/bench/, in parallel: for each PROGRAM, BUILD/PROGRAM.orig
# (the original) and BUILD/PROGRAM.tr (transformed by CUPREEMPT_BINARY, linked with the runtime
# in RUNTIME_LIB_DIR), logs in BUILD/PROGRAM.*.log. Prints "BUILD FAILED p" and the logs' head
# for a program that does not build. Used by bench-gpu.sh and the probes; needs nvcc on PATH.
# Usage: scripts/bench-build.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR BUILD PROGRAM...
# Env (probes): BENCH_INCLUDE, the device headers for the transformed build (default
# cuda_support/); BENCH_TR_FLAGS, more nvcc flags for it (e.g. -maxrregcount=32); BENCH_SRC,
# the folder of the programs' sources (default fixtures/bench; bench.cuh is always found).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cli=$1
lib=$(realpath "$2")
build=$3
shift 3
mkdir -p "$build"
flags="-arch=sm_90 -std=c++17 -O3 -I$root/fixtures/bench"
src=${BENCH_SRC:-fixtures/bench}
for p in "$@"; do
  (
    "$cli" transform "$src/$p.cu" -o "$build/$p.t.cu" 2>"$build/$p.transform.log" &&
      nvcc $flags "$src/$p.cu" -o "$build/$p.orig" >"$build/$p.orig.log" 2>&1 &&
      nvcc $flags ${BENCH_TR_FLAGS:-} -DCUPREEMPT_TRANSFORMED -I"${BENCH_INCLUDE:-$root/cuda_support}" \
        "$build/$p.t.cu" -o "$build/$p.tr" \
        -L"$lib" -lcupreempt_runtime -Xlinker -rpath="$lib" >"$build/$p.tr.log" 2>&1 ||
      { echo "BUILD FAILED $p"; cat "$build/$p".*.log | head -20; }
  ) &
done
wait
