#!/usr/bin/env bash
# cupreemptd's shares experiment (docs/daemon.md): two processes that keep the GPU busy with
# long kernels (scripts/probes/daemon_priority.cu's `batch` mode, 20 ms kernels of 100 us
# blocks), side by side under MPS (started here, as root or the GPU's owner): each alone, both
# with no scheduler, and both under cupreemptd with each policy of PROBE_POLICIES (weights 2:1
# for the first and the second). Prints each process's kernels finished in PROBE_SECONDS: its
# share of the GPU's throughput. On a GPU machine with nvcc.
# Usage: scripts/probes/daemon_shares.sh [BIN_DIR]   (cupreempt, cupreemptd,
#   libcupreempt_runtime.so; default target/release)
# Env: PROBE_SECONDS=8, PROBE_POLICIES="shares ffs spatial", PROBE_LOG=DIR (daemon logs, and
#   each process's launches: time, and the SMs its tasks ran on).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
daemon_probe_setup "${1:-}"
secs=${PROBE_SECONDS:-8}
start_mps || { echo "the MPS control daemon cannot be started here"; exit 1; }
trap stop_mps EXIT
alone=$("$work/prog" batch "$secs")
echo "alone: $alone"
nalone=$(echo "$alone" | sed -n 's/.*batch: \([0-9]*\) launches.*/\1/p')
# Both processes run the alone run's kernels (calibrating side by side would halve them).
export PROBE_ITERS=$(echo "$alone" | sed -n 's/.*iters \([0-9]*\).*/\1/p')
pair() {  # LABEL [ENV...]: the two processes at once
  local label=$1
  shift
  local tag=${label// /-}
  env "$@" CUPREEMPT_WEIGHT=2 PROBE_SM_LOG="$logs/sms-$tag-first.log" "$work/prog" batch "$secs" >"$work/a.txt" &
  local a=$!
  env "$@" CUPREEMPT_WEIGHT=1 PROBE_SM_LOG="$logs/sms-$tag-second.log" "$work/prog" batch "$secs" >"$work/b.txt" &
  local b=$!
  wait $a $b
  local na nb
  na=$(sed -n 's/.*batch: \([0-9]*\) launches.*/\1/p' "$work/a.txt")
  nb=$(sed -n 's/.*batch: \([0-9]*\) launches.*/\1/p' "$work/b.txt")
  echo "$label: first (weight 2) $(cat "$work/a.txt"); second (weight 1) $(cat "$work/b.txt")"
  awk -v a="$na" -v b="$nb" -v alone="$nalone" 'BEGIN { if (a + b > 0 && alone > 0)
    printf "  share of the first: %.3f (weights: 0.667); both together: %.3f of one alone\n",
      a / (a + b), (a + b) / alone }'
}
pair "no scheduler"
for policy in ${PROBE_POLICIES:-shares ffs spatial}; do
  "$bin/cupreemptd" --socket "$work/sock-$policy" --policy "$policy" --verbose \
    2>"$logs/daemon-shares-$policy.log" &
  d=$!
  sleep 0.5
  pair "cupreemptd --policy $policy" CUPREEMPT_SCHEDULER="$work/sock-$policy"
  kill -TERM $d
  wait $d || true
  echo "  daemon: $(grep -c 'Preempt' "$logs/daemon-shares-$policy.log") preempt commands"
done
