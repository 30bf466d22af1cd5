#!/usr/bin/env python3
"""Splits preemption latency into the command's way and the blocks' looks.

Reads the `yield_log` lines that fixtures/bench/bench.cuh prints in a build with
-DCUPREEMPT_YIELD_LOG (one per preempted run of `latency:N`) from bench logs
(`scripts/bench-gpu.sh` keeps them in OUT/logs/PROGRAM.SIZE.tr.txt) and prints, per log,
p50 / p90 / max over the runs of:
  us      request -> the last block's decision (the runtime's GPU latency)
  head    request -> the first block's decision (the command's way to the GPU and one look)
  spread  first -> last decision
  blk90   first decision -> the 90th percentile block's decision
  call    host time in cupreempt_rt_preempt
Usage: yield_split.py LOG...   (or --self-test)
"""
import sys


def parse(lines):
    rows = []
    for line in lines:
        w = line.split()
        if not w or w[0] != "yield_log":
            continue
        kv = dict(zip(w[1::2], w[2::2]))
        rows.append({k: float(v) for k, v in kv.items()})
    return rows


def stats(values):
    v = sorted(values)
    n = len(v)
    return v[(n - 1) // 2], v[min(n - 1, int(0.9 * n))], v[-1]


COLUMNS = [("us", "us"), ("head", "head"), ("spread", "spread"), ("blk90", "p90"), ("call", "call")]


def table(named_rows):
    out = ["| log | runs | " + " | ".join(f"{c} p50/p90/max" for c, _ in COLUMNS) + " |",
           "|---|---:|" + "---:|" * len(COLUMNS)]
    for name, rows in named_rows:
        if not rows:
            out.append(f"| {name} | 0 |" + " |" * len(COLUMNS))
            continue
        cells = []
        for _, key in COLUMNS:
            cells.append("%.1f / %.1f / %.1f" % stats([r[key] for r in rows]))
        out.append(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def self_test():
    lines = ["x 1", "yield_log us 30.0 head 10.0 spread 20.0 blocks 1056 p50 3.0 p90 9.0 call 4.0",
             "yield_log us 10.0 head 6.0 spread 4.0 blocks 1056 p50 1.0 p90 2.0 call 2.0",
             "yield_log us 20.0 head 8.0 spread 12.0 blocks 1056 p50 2.0 p90 5.0 call 3.0"]
    rows = parse(lines)
    assert len(rows) == 3 and rows[0]["head"] == 10.0
    assert stats([r["us"] for r in rows]) == (20.0, 30.0, 30.0)
    assert stats([4.0, 1.0, 3.0, 2.0]) == (2.0, 4.0, 4.0)  # the lower middle of an even count
    t = table([("a", rows), ("b", [])])
    assert "| a | 3 | 20.0 / 30.0 / 30.0 | 8.0 / 10.0 / 10.0 |" in t, t
    assert "| b | 0 |" in t
    print("yield_split self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    if not sys.argv[1:]:
        sys.exit(__doc__)
    named = []
    for path in sys.argv[1:]:
        with open(path) as f:
            named.append((path, parse(f)))
    print(table(named))
