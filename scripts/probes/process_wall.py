#!/usr/bin/env python3
"""Probe: whole-process wall time of a program built original and transformed (e.g. a sample
of the external suite), and of the transformed one under variants that each take one suspect
away: the runtime's 32 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS=8), every launch
preemptible (CUPREEMPT_SHORT_US=0), eager module loading. Medians of PROBE_RUNS runs.
Usage: scripts/probes/process_wall.py ORIGINAL_EXE TRANSFORMED_EXE [ARGS...]"""
import os
import statistics
import subprocess
import sys
import time

orig, tr, args = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3:]
runs = int(os.environ.get("PROBE_RUNS", "5"))


def wall(exe, **env):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([exe, *args], cwd=os.path.dirname(exe), env={**os.environ, **env},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


rows = [
    ("original", orig, {}),
    ("transformed", tr, {}),
    ("transformed, 8 hardware queues", tr, {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    ("original, 32 hardware queues", orig, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}),
    ("transformed, every launch preemptible", tr, {"CUPREEMPT_SHORT_US": "0"}),
    ("transformed, eager module loading", tr, {"CUDA_MODULE_LOADING": "EAGER"}),
    ("original, eager module loading", orig, {"CUDA_MODULE_LOADING": "EAGER"}),
]
for label, exe, env in rows:
    print(f"{label:40s} {wall(exe, **env):7.3f} s", flush=True)
