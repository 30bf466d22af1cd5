#!/usr/bin/env bash
# Setup interference probe (scripts/probes/setup_interference.cu): how much each of the
# runtime's one-time setup steps, made by another thread at the same moment, adds to a
# program's first timed kernel launch, and whether on the host (launch_call_us) or on the GPU
# (kernel_ms against event_ms). On a GPU machine with nvcc.
# Usage: scripts/probes/setup_interference.sh
#   Env: PROBE_PROCS=7 (fresh processes per variant, the variants interleaved),
#        PROBE_ITERS=350000 (the kernel's FMAs per thread, about 2 ms on the H100),
#        PROBE_VARIANTS (default: every variant), NVCC=nvcc.
set -euo pipefail
cd "$(dirname "$0")/../.."
variants=${PROBE_VARIANTS:-"none streams devmem pinned events all all_after pinned_before"}
work=$(mktemp -d)
"${NVCC:-nvcc}" -arch=sm_90 -O2 -std=c++17 scripts/probes/setup_interference.cu -lcuda \
  -o "$work/setup_interference"
echo "each line one process (host times in us since t0, just before the record of start; GPU times in ms):"
for i in $(seq "${PROBE_PROCS:-7}"); do
  for v in $variants; do
    "$work/setup_interference" "$v" "${PROBE_ITERS:-350000}"
  done
done | tee "$work/runs.txt"
echo "medians per variant (steps: name start..end in us since t0):"
python3 - "$work/runs.txt" $variants <<'PY'
import statistics, sys
keys = ["event_ms", "kernel_ms", "launch_call_us", "second_ms"]
vals, steps = {}, {}
for line in open(sys.argv[1]):
    variant, *rest = line.split()
    cut = rest.index("setup_steps:")
    kv, st = rest[:cut], rest[cut + 1:]
    for k, v in zip(kv[::2], kv[1::2]):
        vals.setdefault((variant, k), []).append(float(v))
    for name, a, b in zip(st[::3], st[1::3], st[2::3]):
        steps.setdefault(variant, {}).setdefault(name, []).append((float(a), float(b)))
med = statistics.median
for variant in sys.argv[2:]:
    if (variant, "event_ms") not in vals:
        continue
    cols = " ".join(f"{k} {med(vals[(variant, k)]):{'8.3f' if k.endswith('_ms') else '8.1f'}}"
                    for k in keys)
    print(f"{variant:13s} {cols}")
    for name, se in steps.get(variant, {}).items():
        print(f"{'':13s}   {name:14s} {med(a for a, _ in se):9.1f} .. {med(b for _, b in se):9.1f}")
PY
rm -rf "$work"
