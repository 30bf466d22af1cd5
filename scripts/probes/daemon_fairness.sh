#!/usr/bin/env bash
# cupreemptd's fairness experiment (issue 17, experiment 2; docs/daemon.md): nine processes,
# one kernel each of a different length (PROBE_LENGTHS_MS), launched 1 ms apart under MPS
# (started here, as root or the GPU's owner). Each length is calibrated and timed alone first;
# then the nine run together with no scheduler and under cupreemptd with each policy of
# PROBE_POLICIES. For every run: measured ANTT, STP and DNTT (NTT = turnaround together /
# turnaround alone), beside what `cupreempt sim` predicts for the same nine kernels with the
# preemption cost the daemon measured (its log: preempt sent -> yielded heard, median), and
# again with each case's switch cost taken from its makespan (fairness_report.py).
# Usage: scripts/probes/daemon_fairness.sh [BIN_DIR]   (cupreempt, cupreemptd,
#   libcupreempt_runtime.so; default target/release)
# Env: PROBE_LENGTHS_MS="2 3 5 8 12 18 27 40 60", PROBE_POLICIES="fifo hpf sjf srt rr ffs cfs frs",
#      PROBE_ROUNDS=3 (runs of each case; medians of the metrics), PROBE_LOG=DIR (daemon logs,
#      and alone.txt and together.txt for `fairness_report.py` again),
#      PROBE_QUANTUM_US=2000 (cupreemptd's --quantum-us, and the simulator's),
#      PROBE_PREEMPT_US (cupreemptd's --preempt-us, the preemption cost assumed before one is
#      measured; each round starts a fresh daemon; default: the daemon's own).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
daemon_probe_setup "${1:-}"
lengths=${PROBE_LENGTHS_MS:-2 3 5 8 12 18 27 40 60}
policies=${PROBE_POLICIES:-fifo hpf sjf srt rr ffs cfs frs}
rounds=${PROBE_ROUNDS:-3}
quantum=${PROBE_QUANTUM_US:-2000}
# Every job launch preemptible: the setup done at the warm-up launch, no launch run as the
# original for being short (the warm-up is).
export CUPREEMPT_SETUP=wait CUPREEMPT_SHORT_US=0
start_mps || { echo "the MPS control daemon cannot be started here"; exit 1; }
trap stop_mps EXIT

# Alone: iterations for each length, then its turnaround alone (median of the rounds).
: >"$work/alone.txt"
for ms in $lengths; do
  iters=$("$work/prog" calibrate $((ms * 1000)) | sed -n 's/^iters \([0-9]*\)$/\1/p')
  for r in $(seq "$rounds"); do
    "$work/prog" job "$iters" "$(($(now_us) + 1500000))" | sed -n "s/^job: turnaround_us \([0-9.]*\).*/$ms $iters \1/p"
  done >>"$work/alone.txt"
done

together() {  # LABEL [ENV...]: the nine processes, launching 1 ms apart from 3 s from now
  local label=$1
  shift
  local at i=0 pids=()
  at=$(($(now_us) + 3000000))
  for ms in $lengths; do
    local iters
    iters=$(awk -v ms="$ms" '$1 == ms { print $2; exit }' "$work/alone.txt")
    # Each job says its length (CUPREEMPT_ESTIMATE_US, as a batch system's job length would):
    # the shortest-first policies order by it, as the simulator's prediction does.
    env "$@" CUPREEMPT_ESTIMATE_US=$((ms * 1000)) "$work/prog" job "$iters" $((at + i * 1000)) \
      >"$work/job-$i.txt" &
    pids+=($!)
    i=$((i + 1))
  done
  wait "${pids[@]}"
  i=0
  for ms in $lengths; do
    # Turnaround and lateness (the launch after its set time): the round's makespan.
    echo "$label $ms $(sed -n 's/^job: turnaround_us \([0-9.]*\) late_us \([-0-9.]*\).*/\1 \2/p' "$work/job-$i.txt")"
    i=$((i + 1))
  done
}

: >"$work/together.txt"
for r in $(seq "$rounds"); do
  together none >>"$work/together.txt"
  for policy in $policies; do
    "$bin/cupreemptd" --socket "$work/sock" --policy "$policy" --quantum-us "$quantum" \
      ${PROBE_PREEMPT_US:+--preempt-us "$PROBE_PREEMPT_US"} --verbose \
      2>>"$logs/daemon-fairness-$policy.log" &
    d=$!
    sleep 0.5
    together "$policy" CUPREEMPT_SCHEDULER="$work/sock" >>"$work/together.txt"
    kill -TERM $d
    wait $d || true
  done
done
# The measured turnarounds beside the daemon logs, so that the report can be made again
# (another model of the costs) without the GPU.
cp "$work/alone.txt" "$work/together.txt" "$logs/" 2>/dev/null || true
python3 scripts/probes/fairness_report.py --quantum-us "$quantum" "$work/alone.txt" "$work/together.txt" \
  "$bin/cupreempt" "$logs" $policies
