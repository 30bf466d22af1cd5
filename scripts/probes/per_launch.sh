#!/usr/bin/env bash
# Probe: is the transformed programs' overhead inside the kernels or between them? (GPU machine,
# nvcc and ncu on PATH.) For each PROGRAM:SIZE, ncu times each launch of the benchmarked kernel
# (gpu__time_duration, launches 3..3+N of the timed runs, clocks left alone), original and
# transformed; the per-launch medians are set beside the whole run's median (CUDA events, no
# ncu). If the kernels' durations differ as much as the runs, the cost is inside the kernels;
# if not, it lies between them (launch path, events, the start and end of a grid).
# Usage: scripts/probes/per_launch.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR PROGRAM:SIZE...
# Env: PROBE_BUILD (/tmp/cupreempt-per-launch), PROBE_LAUNCHES (12), PROBE_RUNS (10);
# PROBE_VARIANTS: more transformed builds, "NAME=FLAG,FLAG ..." (nvcc flags, e.g. -DNAME=1 for
# a switch in a patched task_loop.cuh), each timed beside the default one.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
cli=$1
lib=$2
shift 2
build=${PROBE_BUILD:-/tmp/cupreempt-per-launch}
launches=${PROBE_LAUNCHES:-12}
runs=${PROBE_RUNS:-10}
programs=$(printf '%s\n' "$@" | cut -d: -f1 | sort -u)
bash scripts/bench-build.sh "$cli" "$lib" "$build" $programs
variants=()
for v in ${PROBE_VARIANTS:-}; do
  name=${v%%=*}
  variants+=("$name")
  BENCH_TR_FLAGS="${v#*=}" BENCH_TR_FLAGS="${BENCH_TR_FLAGS//,/ }" \
    bash scripts/bench-build.sh "$cli" "$lib" "$build/$name" $programs
done
# Median duration (µs) and count of the launches of kernels named PROGRAM's kernel, from ncu's CSV.
ncu_median() {
  local exe=$1 size=$2 kernel=$3
  ncu_csv --metrics gpu__time_duration.sum --kernel-name "regex:^${kernel}" --launch-skip 3 \
    --launch-count "$launches" "$exe" "$size" time:3 |
    python3 -c '
import csv, statistics, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 5 and r[-3] == "gpu__time_duration.sum"]
v = [float(r[-1].replace(",", "")) / 1000 for r in rows]
names = sorted({r[4].split("(")[0] for r in rows})
print(f"{statistics.median(v):.2f} us x{len(v)} [{" ".join(names)}]" if v else "none")'
}
run_median() { "$@" time:"$runs" 2>&1 | awk '/^median_ms/ {print $2}'; }
for ps in "$@"; do
  p=${ps%%:*}
  size=${ps#*:}
  # The benchmarked kernel: the first __global__ function of the program.
  kernel=$(first_kernel "$p")
  echo "$p $size: run median orig $(run_median "$build/$p.orig" "$size") ms," \
    "tr $(run_median "$build/$p.tr" "$size") ms; kernel $kernel per launch:" \
    "orig $(ncu_median "$build/$p.orig" "$size" "$kernel")," \
    "tr $(ncu_median "$build/$p.tr" "$size" "$kernel")"
  for name in "${variants[@]}"; do
    echo "  $name: run median $(run_median "$build/$name/$p.tr" "$size") ms;" \
      "per launch $(ncu_median "$build/$name/$p.tr" "$size" "$kernel")"
  done
done
