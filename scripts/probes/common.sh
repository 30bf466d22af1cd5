# Shared by the probes (sourced). The benchmarked kernel of fixtures/bench/PROGRAM.cu: its
# first __global__ function.
first_kernel() { grep -m1 -oP '__global__\s+void\s+\K\w+' "fixtures/bench/$1.cu"; }
# ncu on one benchmark executable, clocks left alone, CSV in base units; extra ncu flags first.
ncu_csv() { ncu --clock-control none --csv --print-units base "$@" 2>/dev/null; }
# Bytes of device code (the .nv_fatbin section) in an executable.
fatbin_bytes() {
  readelf -SW "$1" | python3 -c '
import sys
for l in sys.stdin:
    if "nv_fatbin" in l: print(int(l.split("]")[1].split()[4], 16))'
}
