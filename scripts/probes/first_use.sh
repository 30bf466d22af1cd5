#!/usr/bin/env bash
# What a transformed translation unit costs a program's first launch, apart from the runtime
# (scripts/probes/first_use.cu says what each form is). Runs each form in PROBE_RUNS fresh
# processes (default 9) with lazy (CUDA's default) and eager module loading, and prints the
# medians of the first and second launch (event-timed and host time) and the fatbin's size.
# On a GPU machine with nvcc.
# Usage: scripts/probes/first_use.sh [BIN_DIR]   (cupreempt and libcupreempt_runtime.so;
#   default target/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
bin=$(realpath "${1:-target/release}")
work=$(mktemp -d)
runs=${PROBE_RUNS:-9}
src=scripts/probes/first_use.cu
flags="-O2 -std=c++17 -gencode arch=compute_90,code=[sm_90,compute_90]"
"$bin/cupreempt" transform "$src" -o "$work/first_use.cupreempt.cu" 2>/dev/null
link="-I cuda_support -L $bin -Xlinker -rpath -Xlinker $bin -lcupreempt_runtime"
nvcc $flags "$src" -o "$work/plain"
nvcc $flags -DCOPIES=2 "$src" -o "$work/plain+2"
nvcc $flags -DDIRECT $link "$work/first_use.cupreempt.cu" -o "$work/direct"
nvcc $flags $link "$work/first_use.cupreempt.cu" -o "$work/transformed"
for name in plain plain+2 direct transformed; do
  fatbin=$(fatbin_bytes "$work/$name")
  # LAZY, EAGER: CUDA's module loading alone (the runtime's early loading off). PREPARED: lazy
  # loading, 20 ms of host work before the first launch; PRELOAD: the same with the runtime's
  # early loading (its default); PRELOAD_NOW: early loading, the first launch right after the
  # context (the load cannot hide behind the program's own work).
  # PRELOAD_LATE: as PRELOAD_NOW, the load held back 2 ms after the context appears
  # (CUPREEMPT_PRELOAD_DELAY_US=2000): the first launch then pays CUDA's lazy load instead.
  for mode in LAZY EAGER PREPARED PRELOAD PRELOAD_NOW PRELOAD_LATE; do
    case $mode in
      LAZY | EAGER) env=(CUDA_MODULE_LOADING=$mode CUPREEMPT_PRELOAD=0) ;;
      PREPARED) env=(CUDA_MODULE_LOADING=LAZY PROBE_PREPARE_MS=20 CUPREEMPT_PRELOAD=0) ;;
      PRELOAD) env=(CUDA_MODULE_LOADING=LAZY PROBE_PREPARE_MS=20) ;;
      PRELOAD_NOW) env=(CUDA_MODULE_LOADING=LAZY) ;;
      PRELOAD_LATE) env=(CUDA_MODULE_LOADING=LAZY CUPREEMPT_PRELOAD_DELAY_US=2000) ;;
    esac
    for _ in $(seq "$runs"); do env "${env[@]}" "$work/$name"; done |
      python3 -c '
import statistics, sys
rows = {}
for l in sys.stdin:
    w = l.split()
    rows.setdefault(w[1], []).append((float(w[3]), float(w[5]), float(w[7])))
first, second = rows["1"], rows["2"]
def med(rs, i): return statistics.median(r[i] for r in rs)
print(f"{sys.argv[1]:12s} fatbin {int(sys.argv[2]):7d} B {sys.argv[3]:5s} first: event {med(first, 0):7.1f} us host {med(first, 1):7.1f} us from context {med(first, 2):8.1f} us | second: event {med(second, 0):6.1f} host {med(second, 1):6.1f}")' \
        "$name" "$fatbin" "$mode"
  done
done
