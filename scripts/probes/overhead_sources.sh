#!/usr/bin/env bash
# Probe: where the transformed programs' steady-state overhead comes from (GPU machine, nvcc on
# PATH). For each program in PROBE_PROGRAMS at PROBE_SIZE: the original's median time, then the
# transformed build's with several chunk budgets (CUPREEMPT_BUDGET_NS) and fixed chunk sizes
# (CUPREEMPT_CHUNK). If the overhead falls as chunks get longer, the cost is per chunk (the
# leader's claim and control-word look while the block waits at a barrier); if it stays, it is
# per task or in the body. Optionally (PROBE_NCU=1) ncu metrics of one launch of each build.
# Usage: scripts/probes/overhead_sources.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR
# Env: PROBE_PROGRAMS, PROBE_SIZE (large), PROBE_RUNS (10), PROBE_BUDGETS, PROBE_CHUNKS, PROBE_NCU.
set -uo pipefail
cd "$(dirname "$0")/../.."
cli=$1
lib=$(realpath "$2")
build=${PROBE_BUILD:-/tmp/cupreempt-probe}
programs=${PROBE_PROGRAMS:-black_scholes convolution_separable pathfinder nearest_neighbor reduction vector_add}
size=${PROBE_SIZE:-large}
runs=${PROBE_RUNS:-10}
bash scripts/bench-build.sh "$cli" "$lib" "$build" $programs
median() { "$@" "$size" "time:$runs" 2>&1 | awk '/^median_ms/ {print $2}'; }
for p in $programs; do
  o=$(median "$build/$p.orig")
  line="$p $size orig $o"
  for b in ${PROBE_BUDGETS:-20000 80000 320000}; do
    t=$(CUPREEMPT_BUDGET_NS=$b median "$build/$p.tr")
    line="$line | budget $b: $t ($(awk -v t="$t" -v o="$o" 'BEGIN{printf "%+.1f%%", (t/o-1)*100}'))"
  done
  for c in ${PROBE_CHUNKS:-1 8 64}; do
    t=$(CUPREEMPT_CHUNK=$c median "$build/$p.tr")
    line="$line | chunk $c: $t ($(awk -v t="$t" -v o="$o" 'BEGIN{printf "%+.1f%%", (t/o-1)*100}'))"
  done
  echo "$line"
done
if [ -n "${PROBE_NCU:-}" ]; then
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read.sum
  for p in $programs; do
    for b in orig tr; do
      echo "== ncu $p $b"
      ncu --launch-skip 3 --launch-count 1 --metrics "$metrics" "$build/$p.$b" "$size" time:1 2>&1 |
        grep -E "^\s+(gpu__|sm__|dram__|smsp__|launch__|lts__)|  [a-z_]+.*\(" | head -20
    done
  done
fi
