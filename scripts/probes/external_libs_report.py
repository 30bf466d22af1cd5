#!/usr/bin/env python3
"""Side by side: two external-suite passes (scripts/probes/external_libs.sh), each program's
status and ratio to its original under A and under B, and the geomeans over the programs that
have a ratio in both.

Usage: external_libs_report.py A_RESULTS.json B_RESULTS.json
       external_libs_report.py --self-test"""
import json
import math
import sys


def rows(path):
    try:
        with open(path) as f:
            return {r["name"]: r for r in json.load(f).get("rows", [])}
    except (OSError, ValueError):
        return {}


def table(a, b):
    lines = ["| program | A | ratio A | B | ratio B |", "| --- | --- | ---: | --- | ---: |"]
    both = []
    for name in sorted(set(a) | set(b)):
        ra, rb = a.get(name, {}), b.get(name, {})
        xa, xb = ra.get("ratio"), rb.get("ratio")
        cell = lambda x: f"{x:.3f}x" if isinstance(x, (int, float)) and x > 0 else "—"
        lines.append(f"| {name} | {ra.get('status', '—')} | {cell(xa)} | {rb.get('status', '—')} | {cell(xb)} |")
        if isinstance(xa, (int, float)) and isinstance(xb, (int, float)) and xa > 0 and xb > 0:
            both.append((xa, xb))
    if both:
        geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
        lines.append(
            f"Geomean over {len(both)} programs: A {geo([x for x, _ in both]):.3f}x, "
            f"B {geo([y for _, y in both]):.3f}x")
    else:
        lines.append("No program has a ratio in both passes.")
    return "\n".join(lines)


def self_test():
    a = {"p": {"status": "identical", "ratio": 2.0}, "q": {"status": "identical", "ratio": 0.5},
         "r": {"status": "identical", "ratio": None}}
    b = {"p": {"status": "identical", "ratio": 1.0}, "q": {"status": "DIFFERENT", "ratio": 0.5}}
    t = table(a, b)
    assert "| p | identical | 2.000x | identical | 1.000x |" in t, t
    assert "| q | identical | 0.500x | DIFFERENT | 0.500x |" in t, t
    assert "| r | identical | — | — | — |" in t, t
    assert "Geomean over 2 programs: A 1.000x, B 0.707x" in t, t
    assert "No program" in table({}, b)
    print("external_libs_report self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) == 3:
        print(table(rows(sys.argv[1]), rows(sys.argv[2])))
    else:
        sys.exit(__doc__)
