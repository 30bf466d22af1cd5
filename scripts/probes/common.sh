# Probes measure the persistent form's cost as a scheduled process pays it: without a
# scheduler daemon every launch the shim plans would run the original kernel (docs/runtime.md,
# rule 7).
export CUPREEMPT_PREEMPTIBLE=${CUPREEMPT_PREEMPTIBLE:-1}
# Shared by the probes (sourced). The benchmarked kernel of fixtures/bench/PROGRAM.cu: its
# first __global__ function.
first_kernel() { grep -m1 -oP '__global__\s+void\s+\K\w+' "fixtures/bench/$1.cu"; }
# The benchmark programs of PROGRAM[:SIZE...] specs built into BUILD (scripts/bench-build.sh)
# where BUILD/PROGRAM.tr is not there yet. Usage: build_missing CLI LIB BUILD SPEC...
build_missing() {
  local cli=$1 lib=$2 build=$3 missing
  shift 3
  missing=$(printf '%s\n' "$@" | cut -d: -f1 | sort -u | while read -r p; do
    [ -x "$build/$p.tr" ] || echo "$p"
  done)
  [ -z "$missing" ] || bash scripts/bench-build.sh "$cli" "$lib" "$build" $missing
}
# ncu on one benchmark executable, clocks left alone, CSV in base units; extra ncu flags first.
ncu_csv() { ncu --clock-control none --csv --print-units base "$@" 2>/dev/null; }
# Bytes of device code (the .nv_fatbin section) in an executable.
fatbin_bytes() {
  readelf -SW "$1" | python3 -c '
import sys
for l in sys.stdin:
    if "nv_fatbin" in l: print(int(l.split("]")[1].split()[4], 16))'
}
# A probe's folders: work (a fresh folder) and logs (PROBE_LOG, else work; start_mps and
# stop_mps keep the MPS daemon's log there).
probe_folders() {
  work=$(mktemp -d)
  logs=${PROBE_LOG:-$work}
  mkdir -p "$logs"
}
# A plain CUDA probe, scripts/probes/NAME.cu, built as $work/NAME (after probe_folders);
# further nvcc flags after the name. Usage: probe_build NAME [FLAGS...]
probe_build() { nvcc -arch=sm_90 -O3 "scripts/probes/$1.cu" -o "$work/$1" "${@:2}"; }
# The daemon probes' start: bin (BIN_DIR, default target/release), the probe's folders, and
# scripts/probes/daemon_priority.cu transformed and linked with that runtime as $work/prog.
daemon_probe_setup() {
  bin=$(realpath "${1:-target/release}")
  probe_folders
  "$bin/cupreempt" transform scripts/probes/daemon_priority.cu -o "$work/prog.cu"
  nvcc -arch=sm_90 -O2 -std=c++17 -I cuda_support "$work/prog.cu" \
    -L "$bin" -Xlinker -rpath -Xlinker "$bin" -lcupreempt_runtime -o "$work/prog"
}
# An MPS control daemon for this run, its pipe and log under $work (as root or the GPU's
# owner); fails where it cannot be started. stop_mps ends it.
start_mps() {
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d && sleep 1
}
stop_mps() {
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
  [ "$logs" = "$work" ] || cp -r "$CUDA_MPS_LOG_DIRECTORY" "$logs/mps-log" 2>/dev/null || true
}
# The system's monotonic clock in µs (what daemon_priority.cu's job mode waits for).
now_us() { python3 -c 'import time; print(int(time.monotonic() * 1e6))'; }
