#!/usr/bin/env bash
# Makefile suite: public CUDA programs with a Makefile each (a checkout of zjin-lcf/HeCBench,
# whose Makefiles use $(CC) and $(ARCH) and have a `run` target, or of cavazos-lab/PolyBench-ACC,
# whose Makefiles call nvcc by name and have no run target; never copied into this repository),
# each built as it is and through the compiler launcher (`make CC=DIR/nvcc` with DIR first on
# PATH, DIR/nvcc a link to cupreempt), run one at a time on the GPU with its `run` target's
# arguments (or the one program its build made, with none), outputs compared and the programs'
# own printed timings set side by side with the ratio and the geomean (scripts/external_suite.py's
# rules). Writes $OUT/external.md. Flags for both builds go in NVCC_APPEND_FLAGS (nvcc's own).
# Needs a GPU, nvcc, make and python3.
# Usage: scripts/makefile-suite.sh CHECKOUT [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]
#   (without a binary, cupreempt and the runtime are built here with cargo)
# Env: EXT_PROGRAMS=src/*-cuda (the program folders, a glob under CHECKOUT), EXT_ONLY=REGEX,
#      EXT_SHARD=k/n, EXT_RUNS=3, EXT_ARCH=90, EXT_TIMEOUT=120 (seconds per run),
#      EXT_BUDGET_S (start no program later), EXT_BUILD (default target/makefile-suite),
#      EXT_SKIP_BUILD=1, EXT_RERUN=1, EXT_JOBS (parallel builds), OUT (default $EXT_BUILD/out),
#      EXT_LONG_S=20 (a program whose first run takes longer is listed, not measured),
#      EXT_BUILD_ONLY=1 (build both ways and report, no GPU needed),
#      EXT_TIMING_ONLY=REGEX (count only the printed timings whose line matches, e.g. '^GPU'),
#      EXT_RUN_LIST=FILE (`NAME FOLDER/EXECUTABLE ARGS...` lines, scripts/suites/*.txt: build those
#      executables in those folders and run those commands instead of each folder's run target).
set -euo pipefail
checkout=$(realpath "${1:?usage: scripts/makefile-suite.sh CHECKOUT [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]}")
cd "$(dirname "$0")/.."
source scripts/suite_common.sh
suite_binaries "${2:-}" "${3:-}"
suite_header checkout "$checkout"
exec python3 scripts/makefile_suite.py "$checkout" "$cli" "$lib"
