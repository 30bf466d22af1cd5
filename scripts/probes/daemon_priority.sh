#!/usr/bin/env bash
# cupreemptd's priority experiment (docs/daemon.md): turnaround of short urgent kernels of one
# process while another process keeps the GPU busy with long kernels; alone, side by side with
# no scheduler (also with the urgent kernels on a stream of the greatest priority, and under MPS
# with the batch process limited to 90% of the SMs: the baselines a user has), and with
# cupreemptd --policy hpf (the urgent process at priority 9, the batch one at 0), and under MPS
# cupreemptd --policy reserve --reserve-sms PROBE_RESERVE_SMS (13, what 90% leaves). Each mode of PROBE_MODES: `contexts` (each process its own context: the GPU
# time-slices between them) and `mps` (an MPS control daemon started here for the run, as root
# or as the GPU's owner: the processes' kernels share the SMs). On a GPU machine with nvcc.
# Usage: scripts/probes/daemon_priority.sh [BIN_DIR]   (BIN_DIR holds cupreempt, cupreemptd and
#   libcupreempt_runtime.so; default target/release)
# Env: PROBE_URGENT=200 (urgent launches), PROBE_BATCH_S=30, PROBE_MODES="contexts mps",
#   PROBE_LOG=DIR (the daemon's --verbose log of each mode goes to DIR/daemon-MODE.log).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
daemon_probe_setup "${1:-}"
n=${PROBE_URGENT:-200}
batch_s=${PROBE_BATCH_S:-30}

# The three cases; the batch process starts 1 s before the urgent one.
cases() {
  local mode=$1
  echo "[$mode] urgent alone:"
  "$work/prog" urgent "$n"
  echo "[$mode] urgent beside batch, no scheduler:"
  "$work/prog" batch "$batch_s" & local b=$!
  sleep 1
  "$work/prog" urgent "$n"
  kill $b 2>/dev/null; wait $b 2>/dev/null || true
  echo "[$mode] urgent beside batch, no scheduler, urgent kernels on a stream of the greatest priority:"
  "$work/prog" batch "$batch_s" & b=$!
  sleep 1
  PROBE_HIGH_PRIORITY=1 "$work/prog" urgent "$n"
  kill $b 2>/dev/null; wait $b 2>/dev/null || true
  if [ "$mode" = mps ]; then
    echo "[$mode] urgent beside batch, no scheduler, batch limited to 90% of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE):"
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90 "$work/prog" batch "$batch_s" & b=$!
    sleep 1
    "$work/prog" urgent "$n"
    kill $b 2>/dev/null; wait $b 2>/dev/null || true
  fi
  echo "[$mode] urgent beside batch, cupreemptd --policy hpf:"
  "$bin/cupreemptd" --socket "$work/sock-$mode" --policy hpf --verbose 2>"$logs/daemon-$mode.log" & local d=$!
  sleep 0.5
  CUPREEMPT_SCHEDULER="$work/sock-$mode" CUPREEMPT_PRIORITY=0 "$work/prog" batch "$batch_s" & b=$!
  sleep 1
  CUPREEMPT_SCHEDULER="$work/sock-$mode" CUPREEMPT_PRIORITY=9 "$work/prog" urgent "$n"
  kill $b 2>/dev/null; wait $b 2>/dev/null || true
  kill -TERM $d; wait $d || true
  echo "[$mode] daemon: $(grep -c 'Preempt' "$logs/daemon-$mode.log") preempt commands, $(grep -c 'Yielded' "$logs/daemon-$mode.log") yields reported"
  if [ "$mode" = mps ]; then
    local r=${PROBE_RESERVE_SMS:-13}
    echo "[$mode] urgent beside batch, cupreemptd --policy reserve --reserve-sms $r:"
    "$bin/cupreemptd" --socket "$work/sock-r-$mode" --policy reserve --reserve-sms "$r" --verbose \
      2>"$logs/daemon-reserve-$mode.log" & d=$!
    sleep 0.5
    # The reserve holds from the urgent program's first launch on (it connects then).
    CUPREEMPT_SCHEDULER="$work/sock-r-$mode" CUPREEMPT_PRIORITY=0 "$work/prog" batch "$batch_s" & b=$!
    sleep 1
    CUPREEMPT_SCHEDULER="$work/sock-r-$mode" CUPREEMPT_PRIORITY=9 "$work/prog" urgent "$n"
    kill $b 2>/dev/null; wait $b 2>/dev/null || true
    kill -TERM $d; wait $d || true
    echo "[$mode] daemon: $(grep -c 'Preempt' "$logs/daemon-reserve-$mode.log") preempt commands, $(grep -c 'Resume' "$logs/daemon-reserve-$mode.log") resumes"
  fi
}

for mode in ${PROBE_MODES:-contexts mps}; do
  case $mode in
    contexts) cases contexts ;;
    mps)
      if ! start_mps; then
        echo "[mps] the MPS control daemon cannot be started here"
        continue
      fi
      cases mps || echo "[mps] failed"
      stop_mps
      sleep 1
      cat "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null | tail -n 5
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
done
