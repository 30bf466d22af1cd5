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
#   PROBE_CASES="alone none stream partition hpf reserve" (those cases only; also
#   alone-reserve: the urgent process alone under the reserve daemon; alone-preemptible: alone
#   with every launch preemptible, no daemon),
#   PROBE_LOG=DIR (the daemon's --verbose log of each mode goes to DIR/daemon-MODE.log),
#   PROBE_ROUNDS=1 (rounds of all cases, interleaved; with more than one, each case's medians).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
daemon_probe_setup "${1:-}"
n=${PROBE_URGENT:-200}
batch_s=${PROBE_BATCH_S:-30}

# One case: the batch process with the environment BATCH_ENV, the urgent one with URGENT_ENV
# 1 s later; the batch process is stopped (SIGTERM, after its kernel) once the urgent one ends.
# Usage: pair "VAR=VALUE ..." "VAR=VALUE ..."   (either may be empty)
pair() {
  env $1 "$work/prog" batch "$batch_s" &
  local b=$!
  sleep 1
  env $2 "$work/prog" urgent "$n"
  kill $b 2>/dev/null
  wait $b 2>/dev/null || true
}

# cupreemptd with ARGS on $work/sock-NAME, its --verbose log in $logs/daemon-NAME.log; sets sock,
# log and daemon. Usage: start_daemon NAME ARGS...; stop it with stop_daemon.
start_daemon() {
  local name=$1
  shift
  sock=$work/sock-$name log=$logs/daemon-$name.log
  "$bin/cupreemptd" --socket "$sock" "$@" --verbose 2>"$log" &
  daemon=$!
  sleep 0.5
}
stop_daemon() {
  kill -TERM "$daemon"
  wait "$daemon" || true
}

# A case under cupreemptd with ARGS (the urgent process at priority 9, the batch one at 0).
# Usage: beside_daemon NAME ARGS...
beside_daemon() {
  local name=$1
  shift
  echo "[$mode] urgent beside batch, cupreemptd $*:"
  start_daemon "$name" "$@"
  pair "CUPREEMPT_SCHEDULER=$sock CUPREEMPT_PRIORITY=0" "CUPREEMPT_SCHEDULER=$sock CUPREEMPT_PRIORITY=9"
  stop_daemon
  echo "[$mode] daemon: $(grep -c 'Preempt' "$log") preempt commands, $(grep -c 'Yielded' "$log") yields reported, $(grep -c 'Resume' "$log") resumes, $(grep -c 'KeepOff { sms: \[[0-9]' "$log") standing orders, $(grep -c 'kept_off: \[[0-9]' "$log") launches started kept off"
}

# Whether case NAME is among PROBE_CASES (all when unset).
wanted() { [[ " ${PROBE_CASES:-alone none stream partition hpf reserve} " == *" $1 "* ]]; }

cases() {
  local mode=$1
  if wanted alone; then
    echo "[$mode] urgent alone:"
    "$work/prog" urgent "$n"
  fi
  # Every launch in the persistent form, no scheduler (what a scheduled process's launches
  # cost without its client thread).
  if wanted alone-preemptible; then
    echo "[$mode] urgent alone, every launch preemptible (CUPREEMPT_SHORT_US=0):"
    CUPREEMPT_SHORT_US=0 "$work/prog" urgent "$n"
  fi
  if wanted none; then
    echo "[$mode] urgent beside batch, no scheduler:"
    pair "" ""
  fi
  if wanted stream; then
    echo "[$mode] urgent beside batch, no scheduler, urgent kernels on a stream of the greatest priority:"
    pair "" "PROBE_HIGH_PRIORITY=1"
  fi
  if [ "$mode" = mps ] && wanted partition; then
    echo "[$mode] urgent beside batch, no scheduler, batch limited to 90% of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE):"
    pair "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90" ""
  fi
  if wanted hpf; then beside_daemon "$mode" --policy hpf; fi
  # The urgent process alone under the reserve daemon: what being scheduled costs it (every
  # launch of a scheduled process is preemptible and reported).
  if [ "$mode" = mps ] && wanted alone-reserve; then
    echo "[$mode] urgent alone, cupreemptd --policy reserve:"
    start_daemon "alone-reserve-$mode" --policy reserve --reserve-sms "${PROBE_RESERVE_SMS:-13}"
    env CUPREEMPT_SCHEDULER="$sock" CUPREEMPT_PRIORITY=9 "$work/prog" urgent "$n"
    stop_daemon
  fi
  # The reserve holds from the urgent program's first launch on (it connects then).
  if [ "$mode" = mps ] && wanted reserve; then
    beside_daemon "reserve-$mode" --policy reserve --reserve-sms "${PROBE_RESERVE_SMS:-13}"
  fi
}

# PROBE_ROUNDS rounds of the cases, one after the other (the machine's own p99 moves between
# minutes; interleaved rounds compare the cases under the same conditions), then each case's
# median p50 and p99 over the rounds.
rounds() {
  local mode=$1 r
  for r in $(seq "${PROBE_ROUNDS:-1}"); do
    [ "${PROBE_ROUNDS:-1}" = 1 ] || echo "[$mode] round $r"
    cases "$mode"
  done
}
{
for mode in ${PROBE_MODES:-contexts mps}; do
  case $mode in
    contexts) rounds contexts ;;
    mps)
      if ! start_mps; then
        echo "[mps] the MPS control daemon cannot be started here"
        continue
      fi
      rounds mps || echo "[mps] failed"
      stop_mps
      sleep 1
      cat "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null | tail -n 5
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
done
} | tee "$work/console.txt"
if [ "${PROBE_ROUNDS:-1}" != 1 ]; then
  echo "medians over ${PROBE_ROUNDS} rounds (p50 / p99 us):"
  python3 - "$work/console.txt" <<'PY'
import collections, re, statistics, sys
case, got = None, collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("[") and line.rstrip().endswith(":"):
        case = line.strip()
    m = re.match(r"urgent: n \d+ p50_us ([\d.]+) p99_us ([\d.]+)", line)
    if m and case:
        got[case].append((float(m[1]), float(m[2])))
for case, v in got.items():
    p50 = statistics.median(x for x, _ in v)
    p99 = statistics.median(y for _, y in v)
    print(f"  {case} {p50:.0f} / {p99:.0f} (p99s: {', '.join(f'{y:.0f}' for _, y in v)})")
PY
fi
