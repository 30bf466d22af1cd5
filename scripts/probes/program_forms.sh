#!/usr/bin/env bash
# Real programs in every form the runtime can run them: each program of a HeCBench-shaped
# checkout (SRC/NAME-cuda with a Makefile that compiles with $(CC) for -arch=$(ARCH)) is built
# as written and through the compiler launcher, then run as written, transformed unscheduled
# (rule 7: every launch runs the original), with every launch preemptible
# (CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_SETUP=wait CUPREEMPT_SHORT_US=0) and under
# CUPREEMPT_CHAOS=SEED,MEAN_US, one process at a time. Each run's output, with the lines that
# name a time, rate, speed or resource usage left out, is hashed; a form whose hash differs from the
# original's is DIFFERENT. The runtime's own exit lines (launches planned, chaos preemptions)
# are printed beside each run: a form that ran no launch preemptible tested nothing.
# Usage: scripts/probes/program_forms.sh SRC BIN_DIR NAME[=ARGS]...
#   SRC: the checkout's src folder; BIN_DIR: cupreempt and libcupreempt_runtime.so;
#   NAME=ARGS: run ./main with ARGS (from the program's folder), else its Makefile's run lines.
# Env: PROBE_CHAOS=7,20, PROBE_TIMEOUT=40 (seconds per run), ARCH=sm_90. Needs a GPU.
# Exit status 1 if any output differs or a transformed build fails where the original builds.
set -uo pipefail
src=$(realpath "$1") bin=$(realpath "$2")
shift 2
chaos=${PROBE_CHAOS:-7,20} limit=${PROBE_TIMEOUT:-40} arch=${ARCH:-sm_90}
work=$(mktemp -d)
mkdir -p "$work/front"
ln -s "$bin/cupreempt" "$work/front/nvcc"
export CUPREEMPT_RUNTIME_DIR=$bin
status=0
# Lines left out of the comparison: times, rates (a unit per second), and resource reports (a process's memory
# usage grows by the runtime library's; device memory by the wrappers' code).
timing='time|throughput|bandwidth|gflop|[0-9.]+ *\(?(ms|us|s)\b|[a-z]+/s\b|sec|speed|elapsed|perf|usage'
for spec in "$@"; do
  name=${spec%%=*}
  [ -d "$src/$name-cuda" ] || { echo "$name: no folder $src/$name-cuda"; status=1; continue; }
  # Sibling folders keep their relative paths (run lines name ../other/file).
  cp -r "$src/$name-cuda" "$work/$name"
  cp -r "$src/$name-cuda" "$work/$name.orig"
  (cd "$work/$name.orig" && make CC=nvcc ARCH="$arch" >build.log 2>&1) || {
    echo "$name: does not build as written"
    continue
  }
  (cd "$work/$name" && CUPREEMPT_VERBOSE=1 make CC="$work/front/nvcc" ARCH="$arch" >build.log 2>&1) || {
    echo "$name: DOES NOT BUILD transformed"
    tail -5 "$work/$name/build.log"
    status=1
    continue
  }
  # Units whose wrappers the launcher compiled into a module of their own, and those kept whole.
  echo "$name: units split $(grep -c 'in a module of their own' "$work/$name/build.log"), whole $(grep -c 'wrappers kept in the unit' "$work/$name/build.log")"
  grep -h 'wrappers kept in the unit' "$work/$name/build.log" | sed 's/^/  /'
  if [ "$spec" != "$name" ]; then
    runs=("./main ${spec#*=}")
  else
    mapfile -t runs < <(sed -n '/^run:/,/^$/p' "$work/$name.orig/Makefile" | grep -F './$(program)' | grep -v '^[[:space:]]*#' |
      sed 's/\$(LAUNCHER) *//; s/\$(program)/main/; s/^[[:space:]]*//')
  fi
  i=0
  for line in "${runs[@]}"; do
    i=$((i + 1))
    want=
    for form in original unscheduled preemptible chaos; do
      dir=$work/$name
      case $form in
        original) dir=$work/$name.orig envs=(X=1) ;;
        unscheduled) envs=(CUPREEMPT_VERBOSE=1) ;;
        preemptible) envs=(CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_SETUP=wait CUPREEMPT_SHORT_US=0
          CUPREEMPT_VERBOSE=1) ;;
        chaos) envs=(CUPREEMPT_CHAOS=$chaos CUPREEMPT_VERBOSE=1) ;;
      esac
      (cd "$dir" && env "${envs[@]}" timeout -s KILL "$limit" bash -c "$line" \
        >"$work/out" 2>"$work/err")
      rc=$?
      hash=$(grep -viE "$timing" "$work/out" | md5sum | cut -c1-12)
      [ -n "$want" ] || want="$rc $hash"
      verdict=identical
      [ "$rc $hash" = "$want" ] || { verdict=DIFFERENT; status=1; }
      said=$(grep -E 'launches planned|chaos:' "$work/err" | grep -v 'so far' | cut -c1-150 |
        tr '\n' ' ')
      echo "$name #$i $form: rc $rc, $verdict ${said:+($said)}"
    done
  done
done
rm -rf "$work"
exit $status
