#!/usr/bin/env bash
# Outputs of a 2-D wavelet library nobody here wrote, as written and transformed (GPU machine,
# nvcc on PATH): Rodinia's or Altis' dwt2d, whose kernels call member functions that read
# blockIdx through an object in shared memory (docs/transformation.md, "Members, functors and
# cooperative groups"). Copies DWT_DIR (the folder holding dwt_cuda/), transforms the copy,
# builds scripts/probes/dwt_check.cu against each, runs both (every launch preemptible in the
# transformed one, then under chaos mode) and compares the printed hashes.
# Usage: scripts/probes/dwt_check.sh DWT_DIR CUPREEMPT_BINARY RUNTIME_LIB_DIR
# Env: DWT_FLAGS (more nvcc flags: -DDWT_ALTIS and its common folders' -I for Altis' copy, whose
# forward 5/3 transform takes two flags more).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(realpath "$1")
cli=$2
lib=$(realpath "$3")
build=${PROBE_BUILD:-/tmp/cupreempt-dwt}
rm -rf "$build" && mkdir -p "$build"
cp -r "$src/dwt_cuda" "$build/orig"
cp -r "$src/dwt_cuda" "$build/tr"
"$cli" transform --in-place --keep-going "$build/tr" >"$build/transform.txt" 2>&1
tail -n 1 "$build/transform.txt"
units="fdwt53.cu fdwt97.cu rdwt53.cu rdwt97.cu common.cu"
for v in orig tr; do
  (cd "$build/$v" && nvcc -arch=sm_90 -O2 -std=c++17 -w ${DWT_FLAGS:-} -I. -I"$OLDPWD/cuda_support" $units \
    "$OLDPWD/scripts/probes/dwt_check.cu" -o ../$v.exe \
    -L"$lib" -lcupreempt_runtime -Xlinker -rpath="$lib")
done
"$build/orig.exe" >"$build/orig.txt"
CUPREEMPT_SHORT_US=0 CUPREEMPT_VERBOSE=1 "$build/tr.exe" >"$build/tr.txt" 2>"$build/tr.err"
CUPREEMPT_CHAOS=7,20 "$build/tr.exe" >"$build/chaos.txt" 2>"$build/chaos.err"
grep -h "launches planned\|chaos" "$build/tr.err" "$build/chaos.err" || true
if ! grep "levels" "$build/orig.txt" | grep -qv " no error$" && cmp -s "$build/orig.txt" "$build/tr.txt" &&
  cmp -s "$build/orig.txt" "$build/chaos.txt"; then
  echo "dwt_check: identical ($(wc -l <"$build/orig.txt") runs)"
else
  diff "$build/orig.txt" "$build/tr.txt" | head -n 5 || true
  diff "$build/orig.txt" "$build/chaos.txt" | head -n 5 || true
  echo "dwt_check: DIFFERENT"
  exit 1
fi
