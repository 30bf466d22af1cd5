#!/usr/bin/env python3
"""Runs a program built with cupreempt under chaos mode (CUPREEMPT_CHAOS=SEED,MEAN_US), one seed
at a time, and takes a run that outlasts the time limit for a hang: before it kills the program
it writes where every thread waits (Linux's /proc: state, kernel wait channel, system call) and,
where cuda-gdb is found, every host thread's stack and the GPU's kernels, blocks and warps. That
is what found the runtime's waits inside the driver while a kernel was preempted (docs/runtime.md,
"No wait inside the driver while preempted"): a hang shows which call of which thread waits.

    python3 scripts/chaos_hang.py [--seeds 7,8,9,10] [--mean-us 20] [--timeout 30]
        [--out DIR] -- PROGRAM [ARGS...]

Per seed, DIR/seed-N.log holds the program's output (with CUPREEMPT_VERBOSE=1: the chaos
thread's counts, and every 10 s what it does); a hang adds DIR/seed-N.hang.txt. Prints one
line per seed; exits 1 if a run hung, 2 if one failed, else 0. CHAOS_DEBUGGER names the
debugger (default cuda-gdb on PATH; an empty value: none).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SYSCALLS = {"202": "futex", "16": "ioctl", "7": "poll", "35": "nanosleep", "230": "clock_nanosleep",
            "0": "read", "232": "epoll_wait"}


def threads(pid):
    """One line per thread: name, state, wait channel, system call (or `running`)."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        def read(name):
            try:
                return (task / name).read_text().strip()
            except OSError:
                return "?"
        stat = read("stat")
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        call = read("syscall").split()[0] if read("syscall") else "?"
        out.append(f"{read('comm')} {state} wchan={read('wchan') or '0'} "
                   f"{SYSCALLS.get(call, call if call == 'running' else 'syscall ' + call)}")
    return out


def debugger():
    name = os.environ.get("CHAOS_DEBUGGER")
    if name is not None:
        return name.split() if name else None
    found = shutil.which("cuda-gdb")
    return [found] if found else None


def describe_hang(pid, dbg, limit=90):
    """Where the hung process waits: /proc, then the debugger's view if there is one."""
    text = ["threads (/proc):", *("  " + t for t in threads(pid))]
    if dbg:
        cmd = [*dbg, "-p", str(pid), "-batch", "-ex", "set pagination off",
               "-ex", "thread apply all bt 40", "-ex", "info cuda kernels",
               "-ex", "info cuda blocks", "-ex", "info cuda warps"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            text += ["", f"$ {' '.join(cmd)}", r.stdout, r.stderr]
        except (OSError, subprocess.TimeoutExpired) as e:
            text += ["", f"{cmd[0]}: {e}"]
    return "\n".join(text) + "\n"


def run_seed(program, seed, mean_us, timeout, out, dbg):
    """One run under chaos: ('ok' | 'failed' | 'HUNG', seconds)."""
    env = dict(os.environ, CUPREEMPT_CHAOS=f"{seed},{mean_us}")
    env.setdefault("CUPREEMPT_VERBOSE", "1")
    log = out / f"seed-{seed}.log"
    start = time.monotonic()
    with open(log, "wb") as f:
        p = subprocess.Popen(program, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
            return ("ok" if rc == 0 else f"failed (exit {rc})"), time.monotonic() - start
        except subprocess.TimeoutExpired:
            (out / f"seed-{seed}.hang.txt").write_text(describe_hang(p.pid, dbg))
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "HUNG", time.monotonic() - start


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="7,8,9,10")
    ap.add_argument("--mean-us", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--out", default="chaos-hang")
    ap.add_argument("program", nargs="+")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dbg = debugger()
    hung = failed = False
    for seed in [s.strip() for s in a.seeds.split(",") if s.strip()]:
        what, secs = run_seed(a.program, seed, a.mean_us, a.timeout, out, dbg)
        where = f" (where it waits: {out}/seed-{seed}.hang.txt)" if what == "HUNG" else ""
        print(f"seed {seed}: {what} after {secs:.1f} s{where}", flush=True)
        hung |= what == "HUNG"
        failed |= what.startswith("failed")
    return 1 if hung else 2 if failed else 0


def self_test():
    """A program that ends, one that fails and one that hangs, with `echo` as the debugger."""
    with tempfile.TemporaryDirectory() as d:
        os.environ["CHAOS_DEBUGGER"] = "echo"
        py = sys.executable
        ends = [py, "-c", "import os; print(os.environ['CUPREEMPT_CHAOS'])"]
        assert main(["--seeds", "3", "--mean-us", "5", "--out", d, "--", *ends]) == 0
        assert (Path(d) / "seed-3.log").read_text().strip() == "3,5"
        assert main(["--seeds", "4", "--out", d, "--", py, "-c", "raise SystemExit(3)"]) == 2
        hangs = [py, "-c", "import time; time.sleep(60)"]
        t = time.monotonic()
        assert main(["--seeds", "5,6", "--timeout", "0.5", "--out", d, "--", *hangs]) == 1
        assert time.monotonic() - t < 20, "a hung run was not killed at its limit"
        report = (Path(d) / "seed-5.hang.txt").read_text()
        assert "threads (/proc):" in report and "python" in report, report
        assert "-p" in report and "info cuda kernels" in report, report
        assert not (Path(d) / "seed-3.hang.txt").exists()
    print("chaos_hang.py self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        sys.exit(main(sys.argv[1:]))
