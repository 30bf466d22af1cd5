#!/usr/bin/env python3
"""Turns the logs of scripts/bench-gpu.sh into $OUT/bench/results.md and timeline.svg."""
import math
import pathlib
import sys

from bench_log import parse, preemptible

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-out")
logs = out / "logs"
dest = out / "bench"
dest.mkdir(parents=True, exist_ok=True)


def num(kv, key):
    try:
        return float(kv[key])
    except (KeyError, ValueError):
        return math.nan


def fmt(v, spec=".3f"):
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


programs = sorted({p.name.split(".")[0] for p in logs.glob("*.orig.txt")})
sizes = ["large", "small", "trivial"]
rows, overheads, failures = [], [], []
corun, storms = [], []
for prog in programs:
    for size in sizes:
        o, t = parse(logs / f"{prog}.{size}.orig.txt"), parse(logs / f"{prog}.{size}.tr.txt")
        if not o and not t:
            continue
        same = o.get("checksum") is not None and o.get("checksum") == t.get("checksum")
        ok = same and o.get("selfcheck") == "ok" and t.get("selfcheck") == "ok" and t.get("mismatches") == "0"
        if not ok:
            failures.append(f"{prog} {size}")
        om, tm = num(o, "median_ms"), num(t, "median_ms")
        ov = (tm / om - 1) * 100 if om > 0 else math.nan
        if not math.isnan(ov):
            overheads.append((tm / om, prog, size))
        rows.append(
            f"| {prog} | {size} | {'yes' if same else '**NO**'} | {fmt(om)} | {fmt(tm)} | {fmt(ov, '+.1f')} "
            f"| {fmt(num(t, 'latency_task_us'), '.1f')} | {fmt(num(t, 'latency_gpu_p50_us'), '.0f')} / {fmt(num(t, 'latency_gpu_p99_us'), '.0f')} "
            f"| {fmt(num(t, 'latency_host_p50_us'), '.0f')} / {fmt(num(t, 'latency_host_p99_us'), '.0f')} "
            f"| {t.get('latency_preempted_midway', '—')}/{t.get('latency_runs', '—')} "
            f"| {preemptible(t)} |"
        )
        if "urgent_temporal_ms" in t:
            corun.append((prog, t))
        if "storm_cycles" in t:
            storms.append((prog, t))

lines = ["# GPU benchmarks", ""]
dev = out / "device.txt"
if dev.exists():
    lines += ["```", dev.read_text().strip(), "```", ""]
lines += [
    "Overhead: transformed vs original, median of the timed runs each (CUDA events around the "
    "whole run). Latency: request -> last block of the victim gone (GPU clock: event on the "
    "control stream before the command, %globaltimer stamp of the last block's yield) and request -> `wait_yielded` "
    "returned (host clock), p50 / p99 over runs preempted at random moments; `task` is the mean "
    "task time. Identical: the checksum of all outputs of the transformed build equals the "
    "original's, and every later run (timed, preempted, stormed) reproduced it. Preemptible: "
    "the timed runs' launches that the runtime planned preemptible, of all (the others ran the "
    "original kernel: one wave, short, a timed trial, ...; docs/runtime.md).",
    "",
    "| program | size | identical | original ms | transformed ms | overhead % | task µs | GPU latency p50/p99 µs | host latency p50/p99 µs | preempted midway | preemptible launches |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
    *rows,
    "",
]
if overheads:
    geo = math.exp(sum(math.log(r) for r, _, _ in overheads) / len(overheads))
    worst = max(overheads)
    lines.append(
        f"Overhead over {len(overheads)} program×size pairs: geomean {100 * (geo - 1):+.2f}%, "
        f"worst {100 * (worst[0] - 1):+.2f}% ({worst[1]} {worst[2]})."
    )
    for size in sizes:
        sel = [r for r, _, s in overheads if s == size]
        if sel:
            g = math.exp(sum(math.log(r) for r in sel) / len(sel))
            lines.append(f"- {size}: geomean {100 * (g - 1):+.2f}%, worst {100 * (max(sel) - 1):+.2f}%")
    lines.append("")
if corun:
    lines += [
        "## Co-run: urgent kernel (16 blocks) arriving 30% into the large victim",
        "",
        "Medians of 10. Turnaround: urgent kernel enqueued -> done (GPU clock). Victim: its whole run.",
        "",
        "| program | urgent alone | no preemption | temporal | spatial (16 SMs) | after the victim yielded | victim alone | victim (none / temporal / spatial) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for prog, t in corun:
        ua = num(t, "urgent_alone_ms")

        def rel(k):
            v = num(t, k)
            return f"{v:.3f} ({v / ua:.2f}×)" if ua > 0 else fmt(v)

        lines.append(
            f"| {prog} | {fmt(ua)} | {rel('urgent_none_ms')} | {rel('urgent_temporal_ms')} | {rel('urgent_spatial_ms')} | {rel('urgent_yielded-first_ms')} "
            f"| {fmt(num(t, 'victim_alone_ms'))} | {fmt(num(t, 'victim_none_ms'))} / {fmt(num(t, 'victim_temporal_ms'))} / {fmt(num(t, 'victim_spatial_ms'))} |"
        )
    lines.append("")
if storms:
    lines += [
        "## Preemption storm (small size)",
        "",
        "Preempt (all SMs), wait until yielded, resume, at random moments (0-20 µs apart), over repeated runs; "
        "every run's outputs compared with the unpreempted run's.",
        "",
        "| program | cycles | cycles that caught the kernel midway | runs | GPU latency p50/p99 µs | runs with different output |",
        "|---|---|---|---|---|---|",
    ]
    for prog, t in storms:
        lines.append(
            f"| {prog} | {t.get('storm_cycles')} | {t.get('storm_preempted_midway')} | {t.get('storm_runs')} "
            f"| {fmt(num(t, 'storm_gpu_p50_us'), '.0f')} / {fmt(num(t, 'storm_gpu_p99_us'), '.0f')} | {t.get('mismatches')} |"
        )
    lines.append("")
san = logs / "sanitizer.txt"
if san.exists():
    summary = [l for l in san.read_text(errors="replace").splitlines() if "ERROR SUMMARY" in l]
    lines += [f"compute-sanitizer memcheck, matmul small, storm of 30 cycles: {' '.join(summary) or 'no summary'}", ""]
if failures:
    lines += ["**Failures:** " + ", ".join(failures), ""]
(dest / "results.md").write_text("\n".join(lines))

# Timeline: the victim's progress over time, one curve per kind of preemption.
tl = logs / "timeline.txt"
if tl.exists():
    series, marks = {}, {}
    for line in tl.read_text(errors="replace").splitlines():
        p = line.split()
        if p[:1] == ["tl"] and len(p) == 5:
            series.setdefault(p[1], []).append((float(p[2]), float(p[3]) / max(float(p[4]), 1)))
        elif p[:1] == ["mark"] and len(p) == 4:
            marks.setdefault(p[1], []).append((float(p[2]), p[3]))
    w, h, pad = 760, 300, 50
    tmax = max((t for s in series.values() for t, _ in s), default=1.0)
    colors = {"none": "#888", "temporal": "#d62728", "spatial": "#1f77b4"}
    x = lambda t: pad + (w - 2 * pad) * t / tmax
    y = lambda f: h - pad - (h - 2 * pad) * f
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">time since the victim launch (µs)</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">victim kernel: tasks done</text>',
           f'<text x="{w / 2}" y="20" text-anchor="middle">matmul (large) co-run with an urgent 16-block kernel</text>']
    for i in range(5):
        t = tmax * i / 4
        svg.append(f'<text x="{x(t)}" y="{h - pad + 14}" text-anchor="middle">{t:.0f}</text>')
    for k, pts in series.items():
        c = colors.get(k, "black")
        path = " ".join(f"{x(t):.1f},{y(f):.1f}" for t, f in pts)
        svg.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{path}"/>')
        for t, what in marks.get(k, []):
            if what.startswith("urgent"):
                svg.append(f'<line x1="{x(t):.1f}" y1="{pad}" x2="{x(t):.1f}" y2="{h - pad}" stroke="{c}" stroke-dasharray="3,3"/>')
    for i, k in enumerate(series):
        svg.append(f'<text x="{pad + 10}" y="{pad + 14 * (i + 1)}" fill="{colors.get(k, "black")}">{k} (dashed: urgent arrives / done)</text>')
    svg.append("</svg>")
    (dest / "timeline.svg").write_text("\n".join(svg))
print((dest / "results.md").read_text())
sys.exit(1 if failures else 0)
