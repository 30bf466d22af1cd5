#!/usr/bin/env bash
# Probe: hardware counters of one launch of a benchmark program's kernel, original beside
# transformed (GPU machine, nvcc and ncu on PATH): time, instructions, occupancy, memory and the
# warps' stall reasons (cycles per issued instruction), to tell where a kernel's extra time goes.
# Usage: scripts/probes/kernel_metrics.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR PROGRAM:SIZE[:KERNEL]...
# (KERNEL: the kernel to look at, default the program's first __global__ function.)
# Env: PROBE_BUILD (/tmp/cupreempt-metrics; reused if the programs are there), PROBE_SKIP (3:
# launches of that kernel skipped first).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
cli=$1
lib=$2
shift 2
build=${PROBE_BUILD:-/tmp/cupreempt-metrics}
build_missing "$cli" "$lib" "$build" "$@"
stalls="barrier long_scoreboard short_scoreboard membar wait not_selected math_pipe_throttle mio_throttle lg_throttle no_instruction branch_resolving dispatch_stall sleeping selected"
metrics="gpu__time_duration.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,launch__registers_per_thread,launch__grid_size"
for s in $stalls; do metrics="$metrics,smsp__average_warp_latency_issue_stalled_$s.ratio"; done
for spec in "$@"; do
  IFS=: read -r p size kernel <<<"$spec"
  [ -n "$kernel" ] || kernel=$(first_kernel "$p")
  for b in orig tr; do
    ncu_csv --metrics "$metrics" --kernel-name "regex:^${kernel}(__cupreempt(_r32)?)?$" \
      --launch-skip "${PROBE_SKIP:-3}" --launch-count 1 "$build/$p.$b" "$size" time:3 \
      >"$build/$p.$size.$kernel.$b.csv"
  done
  python3 - "$build/$p.$size.$kernel.orig.csv" "$build/$p.$size.$kernel.tr.csv" "$p $size $kernel" <<'EOF'
import csv, sys
def load(path):
    with open(path) as f:
        return {r[-3]: r[-1].replace(",", "") for r in csv.reader(f) if len(r) > 5}
o, t = load(sys.argv[1]), load(sys.argv[2])
print(f"== {sys.argv[3]}: original | transformed")
for k in o:
    if k in ("Metric Name",):
        continue
    name = k.replace("smsp__average_warp_latency_issue_stalled_", "stall ").replace(".ratio", "")
    print(f"  {name:60s} {o[k]:>16s} {t.get(k, '-'):>16s}")
EOF
done
