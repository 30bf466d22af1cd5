#!/usr/bin/env bash
# Under MPS, can a transformed program that exits break other programs' kernels?
# (docs/daemon.md, "MPS and exiting clients"). Nine processes start together under MPS, each
# one `daemon_priority.cu job-cold` launch of 38-350 ms (1 ms apart at a set time); the first
# four exit while the others still run. Each trial names the nine programs: T transformed, P
# the same source built as it is. Prints per process + (its kernel ended) or X (it failed),
# and the fatal GPU errors in the MPS server's log. Cases: TTTTPPPPP (do transformed programs'
# exits hurt plain ones), all transformed with lazy module loading, with
# CUDA_MODULE_LOADING=EAGER, with CUPREEMPT_SETUP=wait, and all plain.
# Usage: scripts/probes/mps_exit.sh [BIN_DIR]   Env: PROBE_ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
daemon_probe_setup "${1:-}"
nvcc -arch=sm_90 -O2 -std=c++17 scripts/probes/daemon_priority.cu -o "$work/plain"
trial() { # LABEL PROGRAMS(9 letters, T or P) [ENV...]
  local label=$1 kinds=$2 at i k pids=() line=""
  shift 2
  start_mps
  at=$(($(now_us) + 2500000))
  for i in $(seq 9); do
    k=${kinds:$((i - 1)):1}
    [ "$k" = T ] && prog=$work/prog || prog=$work/plain
    env "$@" "$prog" job-cold $((i * 20000)) $((at + i * 1000)) >"$work/out-$i.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  for i in $(seq 9); do
    k=${kinds:$((i - 1)):1}
    grep -q turnaround "$work/out-$i.txt" && line+="$k+ " || line+="${k}X "
  done
  stop_mps
  sleep 1
  echo "$label: $line fatal GPU errors: $(grep -c 'fatal GPU error' "$work/mps-log/server.log" || true)"
  rm -rf "$work/mps-log"/*
  unset CUDA_MPS_PIPE_DIRECTORY
}
for r in $(seq "${PROBE_ROUNDS:-3}"); do
  trial "transformed exit first, round $r" TTTTPPPPP
  trial "all transformed, round $r" TTTTTTTTT
  trial "all transformed, eager loading, round $r" TTTTTTTTT CUDA_MODULE_LOADING=EAGER
  trial "all transformed, setup waits, round $r" TTTTTTTTT CUPREEMPT_SETUP=wait
  trial "all plain, round $r" PPPPPPPPP
done
