#!/usr/bin/env bash
# External suite: public CUDA sample programs (a checkout of NVIDIA/cuda-samples, BSD-3; never
# copied into this repository) built as they are and after `cupreempt transform --keep-going`,
# run one at a time on the GPU, outputs compared (printed timings and lines the program itself
# varies are masked), and each program's own printed timings set side by side with the ratio
# and the geomean. Writes $OUT/external.md (the table for docs/bench/external.md).
# Needs a GPU, nvcc, CMake (and ninja, if present) and python3.
# Usage: scripts/external-suite.sh SAMPLES_DIR [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]
#   (without a binary, cupreempt and the runtime are built here with cargo)
# Env: EXT_RUNS=3 (runs of each build), EXT_ONLY=REGEX (sample names), EXT_ARCH=90,
#      EXT_MODE=launcher (compile through `cupreempt nvcc`, CMAKE_CUDA_COMPILER_LAUNCHER, as
#      cupreempt_enable does; default: `cupreempt transform --in-place`, then plain nvcc),
#      EXT_BUILD (build folder, default target/external), EXT_SKIP_BUILD=1 (rerun only),
#      EXT_TIMEOUT=120 (seconds per run), EXT_DIFF_RERUNS=6 (more runs of the original
#      where outputs differ, to find lines it varies on its own), EXT_BUDGET_S (start no program later than this many
#      seconds after the start, the build included), EXT_SHARD=k/n (every n-th program from the k-th), OUT (default $EXT_BUILD/out),
#      EXT_CONFIRM_OVER=1.05 and EXT_CONFIRM_RUNS=9 (a program whose ratio is over the first is
#      measured again with that many runs of each build, and the row says so).
# Results: $OUT/external-results.json after every program; several runs' results (shards) make
# one table with: python3 scripts/external_suite.py --report OUT_DIR RESULTS.json...
set -euo pipefail
samples=${1:?usage: scripts/external-suite.sh SAMPLES_DIR [CUPREEMPT_BINARY [RUNTIME_LIB_DIR]]}
samples=$(realpath "$samples")
cd "$(dirname "$0")/.."
source scripts/suite_common.sh
suite_binaries "${2:-}" "${3:-}"
suite_header samples "$samples"
echo "command: EXT_RUNS=${EXT_RUNS:-3} EXT_MODE=${EXT_MODE:-transform} scripts/external-suite.sh SAMPLES_DIR"
exec python3 scripts/external_suite.py "$samples" "$cli" "$lib"
