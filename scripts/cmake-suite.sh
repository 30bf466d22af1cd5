#!/usr/bin/env bash
# CMake suite: a public CUDA project whose programs build from one top-level CMakeLists.txt (a
# checkout of utcs-scea/altis, say; never copied into this repository), built as written and
# through the compiler launcher, each command of a run list (scripts/suites/NAME.txt) run with
# both builds one at a time, outputs compared and the programs' own printed timings set side by
# side (scripts/external_suite.py's rules). Writes $OUT/external.md.
# Needs a GPU, nvcc, CMake (and ninja, if present) and python3.
# Usage: scripts/cmake-suite.sh CHECKOUT RUN_LIST [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]
#   (without a binary, cupreempt and the runtime are built here with cargo)
# Env: see scripts/cmake_suite.py (EXT_RUNS, EXT_ONLY, EXT_ARCH, EXT_CMAKE_ARGS, ...).
set -euo pipefail
usage="usage: scripts/cmake-suite.sh CHECKOUT RUN_LIST [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]"
checkout=$(realpath "${1:?$usage}")
list=$(realpath "${2:?$usage}")
cd "$(dirname "$0")/.."
source scripts/suite_common.sh
suite_binaries "${3:-}" "${4:-}"
suite_header checkout "$checkout"
echo "run list: $list"
exec python3 scripts/cmake_suite.py "$checkout" "$cli" "$lib" "$list"
