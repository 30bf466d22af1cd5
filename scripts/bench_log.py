#!/usr/bin/env python3
"""The benchmark programs' logs (fixtures/bench/bench.cuh): "key value" lines, and the
runtime's plans of the timed runs' launches ("plans OUTCOME N ..."). One parser for
scripts/bench_report.py and scripts/probes/compare_builds.sh.

Usage: scripts/bench_log.py LOG   prints the log's median_ms and, where the log has plan
                                  counts, the launches planned preemptible of all ("P/N")
       scripts/bench_log.py --self-test
"""
import sys


def parse_text(text):
    """The first value of each key, and the first plans line as {outcome: count}."""
    kv = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            kv.setdefault(parts[0], parts[1])
        elif parts[:1] == ["plans"] and len(parts) % 2 == 1:
            try:
                kv.setdefault("plans", dict(zip(parts[1::2], map(int, parts[2::2]))))
            except ValueError:
                pass  # not a plans line of the runtime's
    return kv


def parse(path):
    """parse_text of the file at `path` (a pathlib.Path), or {} where there is none."""
    return parse_text(path.read_text(errors="replace")) if path.exists() else {}


def preemptible(kv):
    """Timed launches planned preemptible, of all: "P/N", or "—" without plan counts."""
    plans = kv.get("plans")
    if not plans:
        return "—"
    return f"{plans.get('preemptible', 0)}/{sum(plans.values())}"


def self_test():
    log = "\n".join([
        "program stencil",
        "median_ms 0.8755",
        "median_ms 9.9",  # a later value of the same key: the first counts
        "plans preemptible 6 capture 0 setup 2 one_wave 0 short 32 predicted 0 trial 0 "
        "trial_running 0 error 0 lower_priority 0",
        "chunks 1 2 3",  # three words: neither a pair nor a plans line
    ])
    kv = parse_text(log)
    assert kv["median_ms"] == "0.8755", kv
    assert preemptible(kv) == "6/40", preemptible(kv)
    assert preemptible(parse_text("median_ms 1.0")) == "—"
    assert "plans" not in parse_text("plans preemptible x setup 2"), "a plans line of words"
    assert summary(kv) == "0.8755 6/40", summary(kv)
    assert summary(parse_text("median_ms 1.5")) == "1.5"
    print("bench_log self-test: ok")


def summary(kv):
    """What compare_builds.sh shows for one run: the median, and "P/N" where there are plans."""
    p = preemptible(kv)
    return kv.get("median_ms", "") + ("" if p == "—" else f" {p}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) == 2:
        import pathlib
        print(summary(parse(pathlib.Path(sys.argv[1]))))
    else:
        raise SystemExit(__doc__)
