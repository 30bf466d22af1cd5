#!/usr/bin/env bash
# Probe: where in the machine code the warps of one launch wait, original beside transformed
# (GPU machine, nvcc and ncu on PATH). ncu samples each warp's program counter and stall reason;
# this prints, per build, the total samples, the share of the top stall reasons, and the SASS
# instructions that collect the most samples, with the kernel's occupancy limits, so that an
# overhead can be placed on an instruction (the task loop's barrier, a body's barrier, a load).
# Usage: scripts/probes/stall_sites.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR PROGRAM:SIZE[:KERNEL]...
# Env: PROBE_BUILD (/tmp/cupreempt-metrics; reused if the programs are there), PROBE_SKIP (20:
# launches of the kernel skipped first, so that the transformed build runs its wrapper),
# PROBE_TOP (12: instructions listed).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/probes/common.sh
cli=$1
lib=$2
shift 2
build=${PROBE_BUILD:-/tmp/cupreempt-metrics}
build_missing "$cli" "$lib" "$build" "$@"
limits="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,launch__shared_mem_per_block_static,launch__shared_mem_config_size,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__occupancy_limit_blocks,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum,sm__ctas_launched.min,sm__ctas_launched.max,smsp__pcsamp_sample_count"
for spec in "$@"; do
  IFS=: read -r p size kernel <<<"$spec"
  [ -n "$kernel" ] || kernel=$(first_kernel "$p")
  for b in orig tr; do
    rep="$build/$p.$size.$kernel.$b"
    rm -f "$rep.ncu-rep"
    ncu --clock-control none --section SourceCounters --section WarpStateStats \
      --metrics "$limits" --kernel-name "regex:^${kernel}(__cupreempt(_r32)?)?$" \
      --launch-skip "${PROBE_SKIP:-20}" --launch-count 1 -o "$rep" \
      "$build/$p.$b" "$size" time:3 >/dev/null 2>&1
    ncu -i "$rep.ncu-rep" --csv --print-units base --page raw \
      --metrics "$limits" >"$rep.raw.csv" 2>/dev/null
    ncu -i "$rep.ncu-rep" --csv --page source --print-source sass >"$rep.sass.csv" 2>/dev/null
    python3 - "$rep.raw.csv" "$rep.sass.csv" "$p $size $b" "${PROBE_TOP:-12}" <<'EOF'
import csv, sys
raw, sass, title, top = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
print(f"== {title}")
with open(raw) as f:
    rows = [r for r in csv.reader(f) if len(r) > 3]
if len(rows) >= 2:
    head, vals = rows[0], rows[-1]
    for h, v in zip(head, vals):
        if h.startswith(("gpu__", "launch__", "sm__", "smsp__pcsamp", "Kernel Name")):
            print(f"  {h:55s} {v}")
with open(sass) as f:
    rows = [r for r in csv.reader(f)]
hi = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
if hi is None:
    print("  (no source page)")
    sys.exit(0)
head = rows[hi]
col = {h: i for i, h in enumerate(head)}
samp = next((h for h in head if h.startswith("Warp Stall Sampling (All")), None)
reasons = [h for h in head if h.startswith("stall_") or h.endswith("Stall") or "(stall" in h.lower()]
def num(r, h):
    try:
        return float(r[col[h]].replace(",", ""))
    except (ValueError, IndexError, KeyError):
        return 0.0
body = [r for r in rows[hi + 1:] if len(r) == len(head)]
total = sum(num(r, samp) for r in body) if samp else 0
print(f"  samples {total:.0f}; columns with reasons: {len(reasons)}")
if reasons:
    sums = sorted(((sum(num(r, h) for r in body), h) for h in reasons), reverse=True)
    print("  top reasons: " + ", ".join(f"{h} {s / max(total, 1):.1%}" for s, h in sums[:6] if s))
for r in sorted(body, key=lambda r: -num(r, samp))[:top]:
    why = sorted(((num(r, h), h) for h in reasons), reverse=True)[:2]
    whys = " ".join(f"{h}={v:.0f}" for v, h in why if v)
    print(f"  {r[col['Address']]:>8s} {num(r, samp) / max(total, 1):6.1%}  {r[col['Source']].strip()[:60]:60s} {whys}")
EOF
  done
done
