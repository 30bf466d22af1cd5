#!/usr/bin/env bash
# The runtime's own instructions per preemptible launch, without a GPU: runs
# tests/launch_host_path.rs (the runtime on the stub driver, tests/driver_stub) under callgrind
# and divides the instructions of its launches by their count. Deterministic where host time is
# not, so a change to the launch path can be judged on any machine; the stub's own copies (a
# slab's zeroing copies real bytes there, where the GPU's copy engine would) are left out.
# Usage: scripts/probes/host_path_instructions.sh   (needs valgrind; prints the top functions)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --release --test launch_host_path --no-run 2>/dev/null
bin=$(cargo test --release --test launch_host_path --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("profile", {}).get("test") and m.get("executable") and "launch_host_path" in m["executable"]:
        print(m["executable"])')
work=$(mktemp -d)
(cd "$work" && valgrind --tool=callgrind --trace-children=yes \
  --trace-children-skip='*/cc,*/gcc*,*/ld,*/as,*collect2*,*cc1*' \
  "$bin" preemptible_launch_on_a_stub_driver --exact --nocapture >/dev/null 2>&1)
# The child (the largest profile) made the launches: 2,000 warm-up and 20,000 counted.
profile=$(ls -S "$work"/callgrind.out.* | head -1)
callgrind_annotate "$profile" 2>/dev/null > "$work/self.txt"
callgrind_annotate --inclusive=yes "$profile" 2>/dev/null > "$work/inclusive.txt"
python3 - "$work/self.txt" "$work/inclusive.txt" <<'PY'
import re, sys
def rows(path):
    for line in open(path):
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)", line)
        if m:
            yield int(m.group(1).replace(",", "")), m.group(2)
total = next(n for n, name in rows(sys.argv[1]) if "PROGRAM TOTALS" in name)
# The stub's zeroing copy, with the bytes it copies: the stub's function, inclusive.
stub_copy = max((n for n, name in rows(sys.argv[2])
                 if name.startswith("???:cuMemcpyHtoDAsync_v2") and "driver_stub" in name), default=0)
launches = 22000
print(f"runtime instructions per launch (stub driver, its zeroing copies left out): "
      f"{(total - stub_copy) / launches:.0f}")
print("most instructions per launch, by function (self):")
shown = 0
for n, name in rows(sys.argv[1]):
    if "PROGRAM TOTALS" in name:
        continue
    if "memcpy" in name or "memmove" in name:
        n -= stub_copy
    print(f"  {n / launches:8.0f}  {name[:110]}")
    shown += 1
    if shown == 12:
        break
PY
