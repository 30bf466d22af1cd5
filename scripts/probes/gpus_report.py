#!/usr/bin/env python3
"""Report of scripts/probes/daemon_gpus.sh: per mode and case, the urgent jobs' turnaround
(median over jobs and rounds of each job's p50, and each job's p99), how many jobs met the SLA
(p99 at most 1.2x the same job's p99 alone in the same round), the batch processes' kernels
completed, and from the daemon's logs the revocations: preemptions of every SM of a batch
kernel (priority 0), and the GPU time a kill-and-restart revocation would have thrown away (for
each, the time the kernel had run since its launch or its last resume).

Usage: gpus_report.py CONSOLE [DAEMON_LOG...]   |   gpus_report.py --self-test
Daemon logs are named daemon-CASE-MODE-ROUND.log."""
import collections
import re
import statistics
import sys

SLA = 1.2
LINE = re.compile(r"^(\S+) (\S+) (urgent|batch) (\d+): (.*)$")
URGENT = re.compile(r"urgent: n \d+ p50_us ([\d.]+) p99_us ([\d.]+)")
BATCH = re.compile(r"batch: (\d+) launches")


def console(lines):
    """{(mode, case): [round: {"urgent": {job: (p50, p99)}, "batch": {job: launches}}]}. A
    case's round starts again when a job number it has already seen comes back."""
    runs = collections.defaultdict(list)
    for line in lines:
        m = LINE.match(line.rstrip("\n"))
        if not m:
            continue
        mode, case, kind, job, rest = m[1], m[2], m[3], int(m[4]), m[5]
        rounds = runs[(mode, case)]
        if not rounds or job in rounds[-1][kind]:
            rounds.append({"urgent": {}, "batch": {}})
        if kind == "urgent" and (u := URGENT.search(rest)):
            rounds[-1]["urgent"][job] = (float(u[1]), float(u[2]))
        elif kind == "batch" and (b := BATCH.search(rest)):
            rounds[-1]["batch"][job] = int(b[1])
    return runs


EVENT = re.compile(r"cupreemptd: (\d+) us: (to )?connection (\d+): (Launch|Preempt|Resume) \{ id: (\d+)(.*)")


def revocations(lines):
    """(count, µs a kill-and-restart would discard) over whole-GPU preemptions of batch
    kernels (priority 0) in one daemon log."""
    priority, since = {}, {}
    count, wasted = 0, 0.0
    for line in lines:
        m = EVENT.search(line)
        if not m:
            continue
        t, key, what, rest = float(m[1]), (m[3], m[5]), m[4], m[6]
        if what == "Launch":
            p = re.search(r"priority: (\d+)", rest)
            priority[key] = int(p[1]) if p else 0
            since[key] = t
        elif what == "Resume":
            since[key] = t
        elif what == "Preempt" and "sms: None" in rest and priority.get(key) == 0:
            count += 1
            if key in since:
                wasted += t - since.pop(key)
    return count, wasted


def report(console_lines, logs):
    runs = console(console_lines)
    out = []
    for (mode, case), rounds in runs.items():
        alone = runs.get((mode, "alone"), [])
        p50s = [u[0] for r in rounds for u in r["urgent"].values()]
        p99s = [u[1] for r in rounds for u in r["urgent"].values()]
        met = total = 0
        for i, r in enumerate(rounds):
            ref = alone[i]["urgent"] if i < len(alone) else {}
            for job, (_, p99) in r["urgent"].items():
                if job in ref:
                    total += 1
                    met += p99 <= SLA * ref[job][1]
        batch = [sum(r["batch"].values()) for r in rounds if r["batch"]]
        row = f"{mode} {case}: urgent p50 {statistics.median(p50s):.0f} us, p99s {', '.join(f'{x:.0f}' for x in p99s)} us"
        if case != "alone":
            row += f"; SLA (p99 <= {SLA}x alone) met by {met} of {total}"
        if batch:
            row += f"; batch kernels completed per round {', '.join(map(str, batch))}"
        revoked = [revocations(text) for name, text in logs if name.startswith(f"daemon-{case}-{mode}-")]
        if revoked:
            n = sum(c for c, _ in revoked)
            w = sum(x for _, x in revoked)
            row += f"; {n} whole-GPU preemptions of batch kernels, {w / 1e3:.1f} ms of their GPU time a kill-and-restart would discard"
        out.append(row)
    return out


def self_test():
    lines = [
        "mps alone urgent 0: urgent: n 300 p50_us 120.0 p99_us 200.0 mean_us 130.0",
        "mps alone urgent 1: urgent: n 300 p50_us 110.0 p99_us 100.0 mean_us 130.0",
        "mps hpf batch 0: batch: 40 launches (iters 9)",
        "mps hpf batch 1: batch: 38 launches (iters 9)",
        "mps hpf urgent 0: urgent: n 300 p50_us 125.0 p99_us 230.0 mean_us 130.0",
        "mps hpf urgent 1: urgent: n 300 p50_us 125.0 p99_us 130.0 mean_us 130.0",
        "unrelated line",
    ]
    log = [
        "cupreemptd: 100 us: connection 3: Launch { id: 1, kernel: \"b\", tasks: 5, priority: 0, weight: 1.0 }",
        "cupreemptd: 900 us: connection 4: Launch { id: 1, kernel: \"u\", tasks: 5, priority: 9, weight: 1.0 }",
        "cupreemptd: 900 us: to connection 3: Preempt { id: 1, sms: None }",
        "cupreemptd: 1100 us: to connection 3: Resume { id: 1, sms: None }",
        "cupreemptd: 1600 us: to connection 3: Preempt { id: 1, sms: None }",
        "cupreemptd: 1700 us: to connection 4: Preempt { id: 1, sms: None }",
        "cupreemptd: 1800 us: to connection 3: Preempt { id: 1, sms: Some([120, 121]) }",
    ]
    assert revocations(log) == (2, 800.0 + 500.0), revocations(log)
    rows = report(lines, [("daemon-hpf-mps-1.log", log)])
    assert rows[0].startswith("mps alone: urgent p50 115 us"), rows
    assert "SLA" not in rows[0]
    # Job 0: 230 > 1.2 x 200 = 240? no: 230 <= 240, met; job 1: 130 > 120, missed.
    assert "met by 1 of 2" in rows[1], rows
    assert "completed per round 78" in rows[1], rows
    assert "2 whole-GPU preemptions" in rows[1] and "1.3 ms" in rows[1], rows
    # A second round of a case starts when a job number comes back.
    two = console(lines[:2] + lines[:2])
    assert len(two[("mps", "alone")]) == 2
    print("gpus_report self-test ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    logs = [(p.rsplit("/", 1)[-1], open(p).read().splitlines()) for p in sys.argv[2:]]
    for row in report(open(sys.argv[1]).read().splitlines(), logs):
        print(row)
