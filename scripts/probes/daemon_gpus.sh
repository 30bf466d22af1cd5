#!/usr/bin/env bash
# cupreemptd's experiment on several GPUs (docs/daemon.md, "Measured: several GPUs"): batch
# processes keep two GPUs busy with long kernels while latency-critical jobs arrive one after
# the other; each job's turnaround p50/p99 against the same job with no batch work, the batch
# processes' throughput, and what a kill-and-restart revocation (TReM's) would have thrown
# away. Cases (PROBE_CASES): alone (the jobs with no batch work), none (no scheduler, every
# process on GPU i mod 2, as a user spreads them), partition (as none, batch processes limited
# to 90% of the SMs under MPS), hpf and reserve (every process through `cupreemptd run` on
# `cupreemptd --gpus 2`: the daemon places them and each GPU's policy preempts its batch
# kernels, whole (hpf) or off PROBE_RESERVE_SMS SMs (reserve)). Under MPS (PROBE_MODES=mps, the
# default) or with each process its own context (contexts). On a machine with two GPUs and nvcc.
# Usage: scripts/probes/daemon_gpus.sh [BIN_DIR]   (cupreempt, cupreemptd, libcupreempt_runtime.so)
# Env: PROBE_BATCH_JOBS=4, PROBE_URGENT_JOBS=4, PROBE_URGENT=300 (launches per job),
#   PROBE_BATCH_S=8, PROBE_GAP_S=0.5 (between the jobs' arrivals, the first 1 s after the
#   batch), PROBE_ROUNDS=1, PROBE_LOG=DIR (console and daemon logs), PROBE_RESERVE_SMS=13,
#   PROBE_SM_LOG_DIR=DIR (each batch process's per-launch SM log, daemon_priority.cu's
#   PROBE_SM_LOG, in DIR/MODE-CASE-ROUND-batchJ.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
if [ "$gpus" -lt 2 ]; then
  echo "daemon_gpus.sh: needs two GPUs; this machine has $gpus" >&2
  exit 2
fi
daemon_probe_setup "${1:-}"
nb=${PROBE_BATCH_JOBS:-4} nu=${PROBE_URGENT_JOBS:-4} n=${PROBE_URGENT:-300}
batch_s=${PROBE_BATCH_S:-8} gap=${PROBE_GAP_S:-0.5}
# Every batch process runs kernels of the same length: calibrated once, alone.
export PROBE_ITERS
PROBE_ITERS=$(CUDA_VISIBLE_DEVICES=0 "$work/prog" calibrate 20000 | awk '/^iters/ {print $2}')
echo "batch kernel: $PROBE_ITERS iterations (about 20 ms alone)"

# One case: batch processes (unless alone) and the urgent jobs, each started by `launcher I
# KIND` (which prints the command prefix for process I), output lines prefixed with the case.
# Usage: run_case NAME WITH_BATCH BATCH_ENV
run_case() {
  local name=$1 with_batch=$2 batch_env=$3 pids=() j
  if [ "$with_batch" = 1 ]; then
    for j in $(seq 0 $((nb - 1))); do
      # shellcheck disable=SC2046
      local sm_log=
      [ -z "${PROBE_SM_LOG_DIR:-}" ] || sm_log=PROBE_SM_LOG=$PROBE_SM_LOG_DIR/$mode-$name-$round-batch$j.txt
      (env $batch_env $sm_log $(launcher "$j" batch) "$work/prog" batch "$batch_s" |
        sed "s/^/$mode $name batch $j: /") &
      pids+=($!)
    done
  fi
  sleep 1
  for j in $(seq 0 $((nu - 1))); do
    # shellcheck disable=SC2046
    ($(launcher "$j" urgent) "$work/prog" urgent "$n" | sed "s/^/$mode $name urgent $j: /") &
    pids+=($!)
    sleep "$gap"
  done
  wait "${pids[@]}"
}
# Without a daemon: process I on GPU I mod 2.
plain() { echo "env CUDA_VISIBLE_DEVICES=$(($1 % 2))"; }
# Through the daemon on $sock: batch at priority 0, urgent at 9.
placed() {
  local p=0
  [ "$2" = urgent ] && p=9
  echo "$bin/cupreemptd run --socket $sock --priority $p --"
}

with_daemon() {
  local name=$1
  shift
  sock=$work/sock-$name-$mode
  "$bin/cupreemptd" --socket "$sock" --gpus 2 "$@" --verbose 2>"$logs/daemon-$name-$mode-$round.log" &
  local d=$!
  sleep 0.5
  run_case "$name" 1 ""
  kill -TERM "$d"
  wait "$d" || true
}

wanted() { [[ " ${PROBE_CASES:-alone none partition hpf reserve} " == *" $1 "* ]]; }
cases() {
  launcher() { plain "$@"; }
  if wanted alone; then run_case alone 0 ""; fi
  if wanted none; then run_case none 1 ""; fi
  if [ "$mode" = mps ] && wanted partition; then
    run_case partition 1 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90"
  fi
  launcher() { placed "$@"; }
  if wanted hpf; then with_daemon hpf --policy hpf; fi
  if [ "$mode" = mps ] && wanted reserve; then
    with_daemon reserve --policy reserve --reserve-sms "${PROBE_RESERVE_SMS:-13}"
  fi
}

{
  for mode in ${PROBE_MODES:-mps}; do
    if [ "$mode" = mps ] && ! start_mps; then
      echo "$mode: the MPS control daemon cannot be started here"
      continue
    fi
    for round in $(seq "${PROBE_ROUNDS:-1}"); do cases; done
    if [ "$mode" = mps ]; then
      stop_mps
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  done
} | tee "$logs/console.txt"
python3 scripts/probes/gpus_report.py "$logs/console.txt" "$logs"/daemon-*.log
