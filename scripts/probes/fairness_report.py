#!/usr/bin/env python3
"""The fairness experiment's table (scripts/probes/daemon_fairness.sh): measured ANTT, STP and
DNTT per case, beside what `cupreempt sim` predicts for the same kernels.

Usage: fairness_report.py [--quantum-us US] ALONE TOGETHER CUPREEMPT LOG_DIR POLICY...
  --quantum-us: the quantum cupreemptd ran with (its default, 2000), given to the simulator
  ALONE:    lines "LENGTH_MS ITERS TURNAROUND_US" (several rounds per length)
  TOGETHER: lines "CASE LENGTH_MS TURNAROUND_US [LATE_US]" (CASE: none or a policy; several
            rounds; LATE_US: how long after its set time the job launched)
  LOG_DIR:  daemon-fairness-POLICY.log files (cupreemptd --verbose), for the preemption cost
            and the switch (GPU stamps the programs report: a yield's last block leaving, then
            the next block entering any kernel; the GPU idles between them)
  --self-test: the arithmetic on made-up numbers.

Metrics as in cupreempt-sched (metrics.rs): NTT = turnaround together / turnaround alone,
ANTT = mean NTT, STP = sum of 1/NTT, DNTT = standard deviation of the NTTs. Each round gives
one value of each metric; the table shows their medians.

What a switch costs, from the makespan: the nine jobs arrive within 8 ms and the GPU always has
one to run, so a round's makespan (first set launch time to the last job's end) is the jobs'
time alone plus what the round lost: per switch (each preemption of a kernel that held SMs, and
each of the n - 1 times a kernel ends and another takes the GPU), (makespan - sum of alone) /
switches. The second table predicts each case again with that as the simulator's switch."""
import json
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict


def metrics(ntts):
    antt = statistics.fmean(ntts)
    dntt = statistics.fmean([(x - antt) ** 2 for x in ntts]) ** 0.5
    return {"antt": antt, "stp": sum(1 / x for x in ntts), "dntt": dntt}


def measured(runs, alone, lengths):
    """The medians over a case's rounds of its metrics (each round: turnarounds in the order of
    `lengths`, over their times alone)."""
    per_round = [metrics([t / alone[ms] for t, ms in zip(r, lengths)]) for r in runs]
    return {k: statistics.median(x[k] for x in per_round) for k in ("antt", "stp", "dntt")}


def alone_times(lines):
    """Median turnaround alone per length."""
    by = defaultdict(list)
    for line in lines:
        f = line.split()
        if len(f) == 3:
            by[f[0]].append(float(f[2]))
    return {k: statistics.median(v) for k, v in by.items()}


def rounds(lines, lengths):
    """Per case, the rounds: each a list of turnarounds in the order of `lengths`."""
    by = defaultdict(list)
    for line in lines:
        f = line.split()
        if len(f) in (3, 4):
            by[f[0]].append((f[1], float(f[2])))
    out = {}
    for case, rows in by.items():
        n = len(lengths)
        out[case] = [[t for _, t in rows[i:i + n]] for i in range(0, len(rows) - n + 1, n)]
    return out


def makespans(lines, lengths):
    """Per case, each round's makespan in µs: job i is set to launch i ms after the first, and
    ends its lateness plus its turnaround after that. Only rounds whose lines give lateness."""
    by = defaultdict(list)
    for line in lines:
        f = line.split()
        if len(f) == 4:
            by[f[0]].append((float(f[2]), float(f[3])))
    n = len(lengths)
    return {case: [max(1000.0 * i + late + t for i, (t, late) in enumerate(rows[k:k + n]))
                   for k in range(0, len(rows) - n + 1, n)]
            for case, rows in by.items()}


def lost_per_switch(makespan, alone_sum, switches):
    """GPU time one switch costs, µs: the makespan beyond the jobs' time alone, per switch."""
    return (makespan - alone_sum) / switches if switches else None


def preemptions(log_text):
    """The preempt commands and yields of a cupreemptd --verbose log, in order: tuples
    ("preempt", µs, key, held) and ("yielded", µs, key), key = (connection, id). `held`: the
    kernel held SMs when the command went out (the client had reported a block entry,
    `GpuTimes` entered_ns, since the kernel's last yield); a kernel preempted as it arrives,
    before any block of it entered, did not."""
    running = set()
    for line in log_text.splitlines():
        m = re.match(r"cupreemptd: \d+ us: connection (\d+): GpuTimes \{ id: (\d+), "
                     r"yielded_ns: (None|Some\((\d+)\)), entered_ns: (None|Some\((\d+)\)) \}", line)
        if m:
            yielded, entered = int(m[4] or 0), int(m[6] or 0)
            if entered > yielded:
                running.add((m[1], m[2]))
            elif yielded:
                running.discard((m[1], m[2]))
            continue
        m = re.match(r"cupreemptd: (\d+) us: to connection (\d+): Preempt \{ id: (\d+)", line)
        if m:
            yield "preempt", int(m[1]), (m[2], m[3]), (m[2], m[3]) in running
            continue
        m = re.match(r"cupreemptd: (\d+) us: connection (\d+): Yielded \{ id: (\d+)", line)
        if m:
            running.discard((m[2], m[3]))
            yield "yielded", int(m[1]), (m[2], m[3])


def preempt_cost_us(log_text):
    """Median preempt sent -> yielded heard (per connection and id), over the preemptions of
    kernels that held SMs (`preemptions`). That is the simulator's preemption latency; a kernel
    preempted as it arrives yields at once (there is nothing to wait for) and would make the
    cost look smaller than a switch costs."""
    sent, took = {}, []
    for kind, us, key, *held in preemptions(log_text):
        if kind == "preempt":
            if held[0]:
                sent.setdefault(key, us)
        elif key in sent:
            took.append(us - sent.pop(key))
    return statistics.median(took) if took else None


def preempt_counts(log_text):
    """Preempt commands: all of them, and those sent to kernels that held SMs (`preemptions`).
    The rest went to kernels preempted as they arrived, which the simulator queues instead."""
    held = [h for kind, _, _, *h in preemptions(log_text) if kind == "preempt"]
    return len(held), sum(h[0] for h in held)


DAEMON_QUANTUM_US = 2000.0  # cupreemptd's default --quantum-us (daemon/src/main.rs)


def sim_command(cupreempt, workload, policies, quantum_us, switch_us=0.0):
    """The simulator's command line: the daemon's quantum, not the simulator's default (1000 µs),
    or RR, CFS and FRS are predicted for slices half as long as they ran; the measured switch."""
    return [cupreempt, "sim", "--workload", workload, "--compare", ",".join(policies),
            "--quantum-us", f"{quantum_us:g}", "--switch-us", f"{switch_us:g}",
            "--format", "json"]


def switch_gaps_us(log_text):
    """The GPU's idle gaps at switches, µs: in GPU-clock order of every reported stamp, each
    block entry (a start or a resume) that directly follows a yield, minus that yield."""
    stamps = []
    for line in log_text.splitlines():
        m = re.search(r"GpuTimes \{ id: \d+, yielded_ns: (None|Some\((\d+)\)), "
                      r"entered_ns: (None|Some\((\d+)\)) \}", line)
        if not m:
            continue
        if m[2]:
            stamps.append((int(m[2]), "yield"))
        if m[4]:
            stamps.append((int(m[4]), "enter"))
    stamps.sort()
    return [(b - a) / 1000 for (a, ka), (b, kb) in zip(stamps, stamps[1:])
            if ka == "yield" and kb == "enter"]


def predicted(cupreempt, alone, lengths, policies, preempt_us, quantum_us, switch_us=0.0):
    """`cupreempt sim` on the nine kernels: arrivals 1 ms apart, standalone work = alone."""
    kernels = [{"arrival": 1000.0 * i, "work": alone[ms], "preempt_latency": preempt_us}
               for i, ms in enumerate(lengths)]
    with tempfile.TemporaryDirectory() as d:
        workload = f"{d}/workload.json"
        with open(workload, "w") as f:
            json.dump({"kernels": kernels}, f)
        out = subprocess.run(sim_command(cupreempt, workload, policies, quantum_us, switch_us),
                             capture_output=True, text=True, check=True)
    return {r["policy"]: r["metrics"] for r in json.loads(out.stdout)}


def table(alone, together, lengths, predictions, costs, switches, counts=None):
    """`counts`: per case, the preempt commands of its logs (preempt_counts), for the
    preemptions per round beside the simulator's."""
    counts = counts or {}
    lines = ["| case | measured ANTT | STP | DNTT | predicted ANTT | STP | DNTT | ANTT error | preempt cost µs | switch µs | preemptions per round (of kernels on the GPU) / predicted |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case, runs in together.items():
        m = measured(runs, alone, lengths)
        # No scheduler: persistent kernels hold every SM they reach until they end, and the
        # hardware hands out grids in launch order, so FIFO is the simulator's stand-in.
        p = predictions.get("fifo" if case == "none" else case)
        pred = (f"{p['antt']:.3f} | {p['stp']:.3f} | {p['dntt']:.3f} | "
                f"{100 * (p['antt'] - m['antt']) / m['antt']:+.1f}%") if p else "— | — | — | —"
        cost, switch = costs.get(case), switches.get(case)
        count = "—"
        if case in counts and runs:
            total, held = counts[case]
            predicted_n = p.get("preemptions") if p else None
            count = (f"{total / len(runs):.0f} ({held / len(runs):.0f}) / "
                     f"{'—' if predicted_n is None else predicted_n}")
        lines.append(f"| {case} | {m['antt']:.3f} | {m['stp']:.3f} | {m['dntt']:.3f} | {pred} | "
                     f"{'—' if cost is None else f'{cost:.0f}'} | "
                     f"{'—' if switch is None else f'{switch:.0f}'} | {count} |")
    return "\n".join(lines)


def own_costs(costs, switches, pooled_cost, pooled_switch):
    """Each policy's preemption cost and switch for its prediction: what its own run measured,
    else (a policy that preempted nothing that held SMs, or switched nothing) the pooled
    medians. A time slice's switch (a yield, then another kernel's resumed instance starting)
    is not a run-to-completion policy's (an end, then the next launch), so one median for all
    would misstate both."""
    return {p: (pooled_cost if costs.get(p) is None else costs[p],
                pooled_switch if switches.get(p) is None else switches[p])
            for p in costs}


def self_test():
    m = metrics([1.0, 2.0, 4.0])
    assert abs(m["antt"] - 7 / 3) < 1e-12 and abs(m["stp"] - 1.75) < 1e-12, m
    assert alone_times(["2 10 2000", "2 10 2200", "2 10 2100"]) == {"2": 2100.0}
    r = rounds(["none 2 3000", "none 3 4000", "none 2 3100", "none 3 4100"], ["2", "3"])
    assert r == {"none": [[3000.0, 4000.0], [3100.0, 4100.0]]}, r
    entered = "cupreemptd: {} us: connection {}: GpuTimes {{ id: {}, yielded_ns: None, entered_ns: Some({}) }}\n"
    log = (entered.format(50, 1, 1, 1000)
           + "cupreemptd: 100 us: to connection 1: Preempt { id: 1, sms: None }\n"
           "cupreemptd: 450 us: connection 1: Yielded { id: 1 }\n"
           # preempted as it arrives, no block entered yet: not a switch's cost
           "cupreemptd: 460 us: to connection 3: Preempt { id: 1, sms: None }\n"
           "cupreemptd: 470 us: connection 3: Yielded { id: 1 }\n"
           + entered.format(800, 2, 4, 5000)
           + "cupreemptd: 900 us: to connection 2: Preempt { id: 4, sms: None }\n"
           "cupreemptd: 1150 us: connection 2: Yielded { id: 4 }\n"
           # connection 1's kernel preempted again before it re-entered: not counted either
           "cupreemptd: 1200 us: to connection 1: Preempt { id: 1, sms: None }\n"
           "cupreemptd: 1210 us: connection 1: Yielded { id: 1 }\n")
    assert preempt_cost_us(log) == 300, preempt_cost_us(log)
    assert preempt_counts(log) == (4, 2), preempt_counts(log)
    cmd = sim_command("cupreempt", "w.json", ["rr", "fifo"], 2000.0, 150.0)
    assert cmd[cmd.index("--quantum-us") + 1] == "2000", cmd
    assert cmd[cmd.index("--switch-us") + 1] == "150", cmd
    log = ("cupreemptd: 10 us: connection 1: GpuTimes { id: 1, yielded_ns: None, entered_ns: Some(1000000) }\n"
           "cupreemptd: 20 us: connection 2: GpuTimes { id: 1, yielded_ns: None, entered_ns: Some(1100000) }\n"
           "cupreemptd: 30 us: connection 1: GpuTimes { id: 1, yielded_ns: Some(2000000), entered_ns: None }\n"
           "cupreemptd: 40 us: connection 2: GpuTimes { id: 1, yielded_ns: None, entered_ns: Some(2150000) }\n"
           "cupreemptd: 50 us: connection 2: GpuTimes { id: 1, yielded_ns: Some(3000000), entered_ns: Some(2900000) }\n"
           "cupreemptd: 60 us: connection 1: GpuTimes { id: 1, yielded_ns: None, entered_ns: Some(3040000) }\n")
    assert switch_gaps_us(log) == [150.0, 40.0], switch_gaps_us(log)
    t = table({"2": 2000.0, "3": 3000.0}, {"none": [[4000.0, 3000.0]]}, ["2", "3"], {}, {}, {})
    assert "| none | 1.500 | 1.500 | 0.500 |" in t, t
    t = table({"2": 2000.0}, {"rr": [[4000.0]]}, ["2"], {"rr": metrics([2.2])}, {"rr": 300.0},
              {"rr": 420.0})
    assert t.endswith("| rr | 2.000 | 0.500 | 0.000 | 2.200 | 0.455 | 0.000 | +10.0% | 300 | 420 | — |"), t
    predicted_rr = dict(metrics([2.2]), preemptions=5)
    t = table({"2": 2000.0}, {"rr": [[4000.0], [4000.0]]}, ["2"], {"rr": predicted_rr},
              {"rr": 300.0}, {"rr": 420.0}, {"rr": (14, 10)})
    assert t.endswith("| 300 | 420 | 7 (5) / 5 |"), t
    own = own_costs({"rr": 300.0, "fifo": None}, {"rr": None, "fifo": 90.0}, 250.0, 200.0)
    assert own == {"rr": (300.0, 200.0), "fifo": (250.0, 90.0)}, own
    spans = makespans(["none 2 3000 10", "none 3 4000 20", "none 2 2900 0", "none 3 5000 0",
                       "rr 2 3000"], ["2", "3"])
    # round 1: max(0 + 10 + 3000, 1000 + 20 + 4000); round 2: max(2900, 6000); rr: no lateness
    assert spans == {"none": [5020.0, 6000.0]}, spans
    assert lost_per_switch(6000.0, 5000.0, 4) == 250.0
    assert lost_per_switch(6000.0, 5000.0, 0) is None
    print("fairness_report self-test: ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    args = argv[1:]
    quantum_us = DAEMON_QUANTUM_US
    if args[:1] == ["--quantum-us"]:
        quantum_us, args = float(args[1]), args[2:]
    alone_file, together_file, cupreempt, log_dir, *policies = args
    alone = alone_times(open(alone_file).read().splitlines())
    lengths = list(dict.fromkeys(l.split()[0] for l in open(alone_file) if l.strip()))
    together = rounds(open(together_file).read().splitlines(), lengths)
    costs, switches, gaps, counts = {}, {}, [], {}
    for p in policies:
        try:
            text = open(f"{log_dir}/daemon-fairness-{p}.log").read()
        except OSError:
            costs[p] = switches[p] = None
            continue
        counts[p] = preempt_counts(text)
        costs[p] = preempt_cost_us(text)
        own = switch_gaps_us(text)
        switches[p] = statistics.median(own) if own else None
        gaps += own
    measured = [c for c in costs.values() if c is not None]
    cost = statistics.median(measured) if measured else 0.0
    switch = statistics.median(gaps) if gaps else 0.0
    costs.setdefault("fifo", None)
    switches.setdefault("fifo", None)
    predictions = {}
    for p, (c, sw) in own_costs(costs, switches, cost, switch).items():
        predictions[p] = predicted(cupreempt, alone, lengths, [p], c, quantum_us, sw)[p]
    print(f"Each policy's prediction takes the preemption cost and switch its own run measured "
          f"(columns); where a run measured none, the medians over all runs: preemption "
          f"{cost:.0f} µs (kernels that held SMs), switch {switch:.0f} µs ({len(gaps)} GPU idle "
          f"gaps the programs' stamps show); quantum {quantum_us:g} µs\n")
    print(table(alone, together, lengths, predictions, costs, switches, counts))
    print("\nThe `none` row is predicted by `fifo` (no scheduler: grids are handed out in launch order\n"
          "and a persistent kernel keeps every SM it reaches until it ends).")
    spans = makespans(open(together_file).read().splitlines(), lengths)
    if spans:
        print(switch_table(cupreempt, alone, lengths, together, spans, counts, own_costs(
            costs, switches, cost, switch), quantum_us))
    return 0


def switch_table(cupreempt, alone, lengths, together, spans, counts, own, quantum_us):
    """Each case's switch cost from its makespans (`lost_per_switch`), and the simulator's
    prediction with it."""
    alone_sum = sum(alone[ms] for ms in lengths)
    lines = ["\nWith each case's switch taken from its makespan (sum of the jobs' time alone "
             f"{alone_sum:.0f} µs):\n",
             "| case | makespan µs | switches per round | lost per switch µs | measured ANTT / STP "
             "/ DNTT | predicted ANTT / STP / DNTT | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case, runs in together.items():
        if case not in spans or not runs:
            continue
        span = statistics.median(spans[case])
        held = counts[case][1] / len(runs) if case in counts else 0.0
        switches_per_round = held + len(lengths) - 1
        lost = lost_per_switch(span, alone_sum, switches_per_round)
        m = measured(runs, alone, lengths)
        policy = "fifo" if case == "none" else case
        preempt = own.get(policy, (0.0, 0.0))[0]
        p = predicted(cupreempt, alone, lengths, [policy], preempt, quantum_us,
                      max(lost, 0.0))[policy]
        keys = ("antt", "stp", "dntt")
        lines.append(f"| {case} | {span:.0f} | {switches_per_round:.0f} | {lost:.0f} | "
                     + " / ".join(f"{m[k]:.3f}" for k in keys) + " | "
                     + " / ".join(f"{p[k]:.3f}" for k in keys) + " | "
                     + " / ".join(f"{100 * (p[k] - m[k]) / m[k]:+.1f}%" for k in keys) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
