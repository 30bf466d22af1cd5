#!/usr/bin/env python3
"""Probe: what the wrappers' code in a translation unit costs a program that times its first
launch. With lazy module loading the first use of a kernel loads its unit's whole module,
wrappers included (runtime.md, "Module loading"). This builds one program in forms that differ
only in that unit's module, and runs them alternately, one process at a time:

  original   the source as written, no runtime;
  full       transformed (cupreempt transform), linked with the runtime;
  no_r32     the same without the wrappers held to 32 registers (`CUPREEMPT_R32_CHOSEN`);
  empty      both wrappers kept as kernels, their bodies empty (the kernels' count, not code);
  empty_no_r32  one empty wrapper per kernel;
  runtime    the source as written, linked with the runtime and with one transformed unit of
             its own (a kernel that is never launched, so its module is never loaded): what
             the runtime's presence costs (its threads, early loading's polling);
  launcher   built through the compiler launcher (`cupreempt nvcc`), which compiles the
             wrappers into a module of their own (docs/build.md);
  launcher_whole  the same with CUPREEMPT_SPLIT=0 (the wrappers in the unit's module, capped
             ones only where ptxas says a launch would choose them);

and prints the median of the first number on the program's first output line matching PATTERN
(default: a line with `time`). Unscheduled, every launch runs the original kernel, so the
transformed forms compute the same; the empty wrappers are never launched.

Usage: scripts/probes/wrapper_load.py CUPREEMPT RUNTIME_LIB_DIR SOURCE.cu [OTHER_SOURCES...]
         [-- NVCC_FLAGS...]
  Env: PROBE_RUNS=9, PROBE_PATTERN=regex, PROBE_ARGS (program arguments), NVCC (default nvcc),
       PROBE_FORMS (space-separated forms to build; default all; the original always).
  Needs a GPU and nvcc; never changes the sources (works in a temporary folder).
"""
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BODY = re.compile(r"using CupreemptCtx = cupreempt::TaskCtx;\n\s*cupreempt::run_tasks<.*?\n  \}\);",
                  re.S)


def variant(text: str, form: str) -> str:
    """The transformed unit's text in the given form."""
    if form == "no_r32":
        # As the compiler launcher leaves them out (CUPREEMPT_R32_CHOSEN); older builds' guard.
        return "#define CUPREEMPT_R32_CHOSEN 1\n" + text.replace(
            "#ifndef __CUDACC_RDC__", "#if 0").replace("#ifdef __CUDACC_RDC__", "#if 1")
    if form == "empty":
        return BODY.sub("(void)__cp_launch;", text)
    if form == "empty_no_r32":
        return variant(variant(text, "empty"), "no_r32")
    return text


# The runtime form's second unit: one kernel, transformed, never launched.
IDLE_UNIT = """__global__ void cupreempt_probe_idle(float* p) { p[blockIdx.x] = 0.0f; }
void cupreempt_probe_idle_launch(float* p) { cupreempt_probe_idle<<<1, 1>>>(p); }
"""


def first_number(out: str, pattern: str):
    for line in out.splitlines():
        if re.search(pattern, line, re.I):
            m = re.search(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line.split(":", 1)[-1])
            if m:
                return float(m.group(0))
    return None


def self_test():
    text = ("__global__ void k__cupreempt(cupreempt_launch __cp_launch, int n) {\n"
            "  using CupreemptCtx = cupreempt::TaskCtx;\n"
            "  cupreempt::run_tasks<CupreemptCtx, false>(__cp_launch, 0, 0, [&](CupreemptCtx& __cp) {\n"
            "    k__cupreempt_body<CupreemptCtx>(__cp, n);\n"
            "  });\n}\n#ifndef __CUDACC_RDC__\nr32\n#endif\n")
    empty = variant(text, "empty")
    assert "run_tasks" not in empty and "(void)__cp_launch;\n}" in empty, empty
    assert "#if 0\nr32" in variant(text, "no_r32")
    assert variant(text, "no_r32").startswith("#define CUPREEMPT_R32_CHOSEN 1\n")
    both = variant(text, "empty_no_r32")
    assert "run_tasks" not in both and "#if 0" in both, both
    assert first_number("Processing time: 0.25 (ms)", "time") == 0.25
    assert first_number("x\nElapsed time = 3e-2 s", "time") == 0.03
    print("wrapper_load self-test: ok")


def main():
    argv = sys.argv[1:]
    if argv == ["--self-test"]:
        return self_test()
    flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1:]
    if len(argv) < 3:
        raise SystemExit(__doc__)
    cli, lib = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    source, others = Path(argv[2]).resolve(), [Path(a).resolve() for a in argv[3:]]
    nvcc = os.environ.get("NVCC", "nvcc")
    runs = int(os.environ.get("PROBE_RUNS", "9"))
    pattern = os.environ.get("PROBE_PATTERN", "time")
    args = shlex.split(os.environ.get("PROBE_ARGS", ""))
    work = Path(tempfile.mkdtemp(prefix="wrapper_load-"))
    transformed = work / ("t-" + source.name)
    subprocess.run([str(cli), "transform", str(source), "-o", str(transformed)], check=True)
    text = transformed.read_text()
    (work / "idle.cu").write_text(IDLE_UNIT)
    subprocess.run([str(cli), "transform", str(work / "idle.cu"), "-o",
                    str(work / "idle.t.cu")], check=True)
    rt_flags = [f"-I{ROOT / 'cuda_support'}", f"-L{lib}", "-lcupreempt_runtime",
                "-Xlinker", "-rpath", "-Xlinker", str(lib)]
    exes = {}
    forms = ("original", "full", "no_r32", "empty", "empty_no_r32", "runtime", "launcher",
             "launcher_whole")
    chosen = os.environ.get("PROBE_FORMS", "").split() or forms
    for form in (f for f in forms if f == "original" or f in chosen):
        src = work / form / source.name
        src.parent.mkdir()
        if form.startswith("launcher"):
            shutil.copy(source, src)
            exe = work / form / "prog"
            env = dict(os.environ, CUPREEMPT_RUNTIME_DIR=str(lib), CUPREEMPT_VERBOSE="1",
                       CUPREEMPT_SPLIT="0" if form == "launcher_whole" else "1")
            r = subprocess.run([str(cli), nvcc, *flags, f"-I{source.parent}", str(src),
                                *map(str, others), "-o", str(exe)], env=env, check=True,
                               capture_output=True, text=True)
            said = [l for l in r.stderr.splitlines() if "module of their own" in l
                    or "kept in the unit" in l]
            print(f"{form}: built; {' '.join(said) or 'not split'}")
            exes[form] = exe
            continue
        if form == "original":
            shutil.copy(source, src)
            extra = []
        elif form == "runtime":
            shutil.copy(source, src)
            extra = [str(work / "idle.t.cu"), *rt_flags]
        else:
            src.write_text(variant(text, form))
            extra = rt_flags
        exe = work / form / "prog"
        cmd = [nvcc, *flags, f"-I{source.parent}", str(src), *map(str, others), *extra,
               "-o", str(exe)]
        subprocess.run(cmd, check=True)
        exes[form] = exe
        size = subprocess.run(["size", str(exe)], capture_output=True, text=True).stdout
        print(f"{form}: built ({size.splitlines()[-1].split()[3] if size else '?'} bytes)")
    values = {form: [] for form in exes}
    for _ in range(runs):
        for form, exe in exes.items():  # alternately, one process at a time
            r = subprocess.run([str(exe), *args], cwd=source.parent, capture_output=True,
                               text=True, timeout=120)
            v = first_number(r.stdout + r.stderr, pattern)
            if v is not None:
                values[form].append(v)
    base = statistics.median(values["original"]) if values["original"] else None
    for form, v in values.items():
        if not v:
            print(f"{form:9s} no value matching {pattern!r}")
            continue
        m = statistics.median(v)
        ratio = f" ({m / base:.3f}x the original)" if base else ""
        print(f"{form:9s} median {m:.4g} (min {min(v):.4g}, max {max(v):.4g}, {len(v)} runs){ratio}")


if __name__ == "__main__":
    main()
