#!/usr/bin/env python3
"""Probe: real programs under chaos mode. Takes the build folder that scripts/makefile-suite.sh
left (EXT_BUILD: `orig/` and `transformed/` trees with each program's `cupreempt-run.sh`) and
runs, one process at a time, each program's original twice and its transformed build once
with `CUPREEMPT_CHAOS=SEED,MEAN_US` (the runtime preempts and resumes its own launches at random
moments, runtime.md "Chaos mode") and `CUPREEMPT_VERBOSE=1`. Outputs are compared as the suite
compares them (timing lines' numbers masked, lines the original's two runs print differently
masked; the runtime's own `cupreempt:` lines left out), and the runtime's count of launches
planned preemptible is printed beside each verdict: a program none of whose launches was
preemptible tested nothing.

Usage: scripts/probes/chaos_suite.py BUILD_DIR [SEED[,MEAN_US]] [NAME_REGEX]
  Env: PROBE_TIMEOUT=60 (seconds per run); EXT_RUN_LIST=FILE, the run list the suite ran
  (scripts/suites/*.txt, e.g. llm.c's dev/cuda): its commands instead of the programs' run
  scripts. Needs a GPU.
"""
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import external_suite as ext  # noqa: E402

PLANNED = re.compile(r"cupreempt: (\d+) launches planned: (.*)")


def planned(text: str):
    """(launches planned, of them preemptible) from the runtime's exit line; (0, 0) without."""
    total = preemptible = 0
    for m in PLANNED.finditer(text):
        total += int(m.group(1))
        p = re.search(r"\bpreemptible (\d+)", m.group(2))
        preemptible += int(p.group(1)) if p else 0
    return total, preemptible


def own_lines(text: str) -> str:
    """The program's output without the runtime's own lines."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("cupreempt:"))


def verdict(o_runs, t_run):
    """'identical' or the first differing line, as the suite would say."""
    unstable = ext.unstable_lines(o_runs)
    t = (t_run[0], own_lines(t_run[1]), t_run[2])
    if ext.first_differing(o_runs[0], [t], unstable) is None:
        return "identical"
    if t[0] != o_runs[0][0]:
        return f"DIFFERENT (exit {t[0]} against {o_runs[0][0]})"
    rows = ext.differing_lines(o_runs[0][1], t[1], unstable, most=1)
    return f"DIFFERENT line {rows[0][0]}: {rows[0][1]!r} against {rows[0][2]!r}" if rows else "DIFFERENT"


def suite_status(build: Path, name: str):
    """The suite's verdict on a program where it ran it (`BUILD/results/NAME.json`), else None."""
    f = build / "results" / f"{name}.json"
    try:
        return json.loads(f.read_text()).get("status")
    except (OSError, ValueError):
        return None


def commands(build: Path):
    """(label, name, original, transformed, arguments) of each program to run: the run list's
    commands (EXT_RUN_LIST) or each program folder's run script."""
    if run_list := os.environ.get("EXT_RUN_LIST"):
        for name, exe, args in ext.parse_run_list(Path(run_list).read_text()):
            yield name, name, build / "orig" / exe, build / "transformed" / exe, args
        return
    for script_o in sorted(build.glob("orig/**/cupreempt-run.sh")):
        rel = script_o.parent.relative_to(build / "orig")
        yield rel, rel.name, script_o, build / "transformed" / rel / "cupreempt-run.sh", []


def self_test():
    text = "x\ncupreempt: 390 launches planned: preemptible 12, one_wave 300, short 78\n"
    assert planned(text) == (390, 12), planned(text)
    assert planned("nothing") == (0, 0)
    assert own_lines(text) == "x"
    o = [(0, "sum 10\ntime 1.0 ms\n", 1.0), (0, "sum 10\ntime 1.2 ms\n", 1.0)]
    assert verdict(o, (0, "sum 10\ntime 3.0 ms\ncupreempt: chaos\n", 1.0)) == "identical"
    assert verdict(o, (0, "sum 11\ntime 3.0 ms\n", 1.0)).startswith("DIFFERENT line 1")
    assert verdict(o, (1, "sum 10\ntime 3.0 ms\n", 1.0)).startswith("DIFFERENT (exit")
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        (Path(t) / "results").mkdir()
        (Path(t) / "results" / "a-cuda.json").write_text('{"status": "runs longer than 20 s"}')
        assert suite_status(Path(t), "a-cuda") == "runs longer than 20 s"
        assert suite_status(Path(t), "b-cuda") is None
        for tree in ("orig", "transformed"):
            (Path(t) / tree / "a-cuda").mkdir(parents=True)
            (Path(t) / tree / "a-cuda" / "cupreempt-run.sh").write_text("")
        assert [c[1] for c in commands(Path(t))] == ["a-cuda"]
        (Path(t) / "list.txt").write_text("x_1 dev/x 1\n")
        os.environ["EXT_RUN_LIST"] = str(Path(t) / "list.txt")
        try:
            assert list(commands(Path(t))) == [("x_1", "x_1", Path(t) / "orig/dev/x",
                                                  Path(t) / "transformed/dev/x", ["1"])]
        finally:
            del os.environ["EXT_RUN_LIST"]
        # The runtime's lines reach the count only when the run keeps them.
        script = Path(t) / "say.sh"
        script.write_text("#!/bin/sh\necho 'cupreempt: 3 launches planned: preemptible 2' >&2\n")
        script.chmod(0o755)
        assert planned(ext.run_once(script, [], 10, Path(t))[1]) == (0, 0)
        assert planned(ext.run_once(script, [], 10, Path(t), runtime_lines=True)[1]) == (3, 2)
    print("chaos_suite self-test: ok")


def main():
    argv = sys.argv[1:]
    if argv == ["--self-test"]:
        return self_test()
    if not argv:
        raise SystemExit(__doc__)
    build = Path(argv[0]).resolve()
    chaos = argv[1] if len(argv) > 1 else "7"
    only = re.compile(argv[2]) if len(argv) > 2 else None
    timeout = float(os.environ.get("PROBE_TIMEOUT", "60"))
    counts = {"identical": 0, "different": 0, "untested": 0}
    for rel, name, exe_o, exe_t, args in commands(build):
        if not exe_t.exists() or (only and not only.search(str(rel))):
            continue
        if suite_status(build, name) not in (None, "identical"):
            continue  # the suite did not compare it (long, missing input): nor does chaos
        o_runs = [ext.run_once(exe_o, args, timeout, build / "orig") for _ in range(2)]
        if any(r[0] == "timeout" for r in o_runs):
            print(f"{rel}: original times out")
            continue
        t_run = ext.run_once(exe_t, args, timeout * 3, build / "transformed",
                             env={"CUPREEMPT_CHAOS": chaos, "CUPREEMPT_VERBOSE": "1"},
                             runtime_lines=True)
        total, preemptible = planned(t_run[1])
        v = "transformed times out" if t_run[0] == "timeout" else verdict(o_runs, t_run)
        key = "identical" if v == "identical" else "different"
        if preemptible == 0:
            key = "untested" if v == "identical" else key
        counts[key] += 1
        print(f"{rel}: {v}; {preemptible} of {total} launches preemptible; "
              f"{o_runs[0][2]:.2f} s original, {t_run[2]:.2f} s under chaos", flush=True)
    print(f"chaos {chaos}: {counts['identical']} identical with preemptible launches, "
          f"{counts['different']} different, {counts['untested']} identical with none preemptible")
    return 1 if counts["different"] else 0


if __name__ == "__main__":
    sys.exit(main())
