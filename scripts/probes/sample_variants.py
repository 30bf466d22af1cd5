#!/usr/bin/env python3
"""Probe: where a slow external program's time goes. Runs the original and transformed builds
that scripts/external-suite.sh left in its build folder, one process at a time, under
environment variants, and prints the median of each printed timing per build and variant.

Usage: scripts/probes/sample_variants.py BUILD_DIR SAMPLES_DIR NAME... [-- VAR=VALUE[,VAR=VALUE] ...]
  BUILD_DIR: EXT_BUILD of the suite (default target/external); SAMPLES_DIR: its checkout
  (for test_args.json). Variants after `--` (each one a comma-separated list of assignments,
  `-` for none); default: none, CUDA_MODULE_LOADING=EAGER, CUPREEMPT_SHORT_US=0.
  Env: PROBE_RUNS=5 (runs per build and variant); PROBE_TRACE=1 also prints one transformed
  run's stderr with CUPREEMPT_TRACE_SETUP=1 CUPREEMPT_VERBOSE=1.
"""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import external_suite as ext  # noqa: E402


def run(exe, args, env):
    r = subprocess.run([str(exe), *args], cwd=exe.parent, capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL, env={**os.environ, **env})
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def main():
    argv = sys.argv[1:]
    variants = ["-", "CUDA_MODULE_LOADING=EAGER", "CUPREEMPT_SHORT_US=0"]
    if "--" in argv:
        i = argv.index("--")
        argv, variants = argv[:i], argv[i + 1:]
    if len(argv) < 3:
        raise SystemExit(__doc__)
    build, samples, names = Path(argv[0]).resolve(), Path(argv[1]).resolve(), argv[2:]
    runs = int(os.environ.get("PROBE_RUNS", "5"))
    args_file = samples / "test_args.json"
    cfg = json.loads(args_file.read_text()) if args_file.exists() else {}
    chosen, _ = ext.select_samples(samples, None)
    rels = {rel.name: rel for rel, _ in chosen}
    for name in names:
        rel = rels.get(name)
        if rel is None:
            print(f"{name}: not a chosen sample")
            continue
        exes = {form: ext.find_exe(build / form / "build", rel)
                for form in ("orig", "transformed")}
        if not all(exes.values()):
            print(f"{name}: not built")
            continue
        args = ext.sample_args(cfg, name) or []
        print(f"== {name}")
        for variant in variants:
            env = dict(kv.split("=", 1) for kv in variant.split(",") if "=" in kv)
            values = {form: {} for form in exes}
            for _ in range(runs):
                for form, exe in exes.items():  # alternately, one process at a time
                    rc, out = run(exe, args, env)
                    for key, (v, rate) in ext.timings(out).items():
                        values[form].setdefault(key, []).append(v)
            for key in values["orig"]:
                o = statistics.median(values["orig"][key])
                t = values["transformed"].get(key)
                t = statistics.median(t) if t else float("nan")
                print(f"  [{variant}] {key.split('#')[0][:60]:60s} orig {o:10.4f}"
                      f"  transformed {t:10.4f}  ratio {t / o if o else float('nan'):6.3f}")
        if os.environ.get("PROBE_TRACE"):
            env = {"CUPREEMPT_TRACE_SETUP": "1", "CUPREEMPT_VERBOSE": "1"}
            rc, out = run(exes["transformed"], args, env)
            print("  trace (transformed, stderr and stdout):")
            for line in out.splitlines():
                if "cupreempt" in line or ext.TIMING_LINE.search(line):
                    print("   ", line)


if __name__ == "__main__":
    main()
