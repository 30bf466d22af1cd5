#!/usr/bin/env python3
"""CMake suite: one public CUDA project that builds all its programs from one top-level
CMakeLists.txt (e.g. utcs-scea/altis; never copied into this repository), built twice out of
its tree: as written, and with every CUDA compile through the compiler launcher
(CMAKE_CUDA_COMPILER_LAUNCHER=cupreempt, the runtime linked), as a CMake user puts cupreempt in
front of nvcc (docs/build.md). Then each command of a run list written here
(scripts/suites/NAME.txt: the project's programs and their arguments) runs with both builds, one
at a time, and outputs and the programs' own printed timings are compared by
external_suite.py's rules. Writes OUT/external.md and OUT/external-results.json.

Usage: cmake_suite.py CHECKOUT CUPREEMPT_BINARY RUNTIME_LIB_DIR RUN_LIST
  (scripts/cmake-suite.sh builds cupreempt when no binary is given)
Env: EXT_RUNS=3, EXT_ARCH=90, EXT_TIMEOUT=120, EXT_DIFF_RERUNS=6, EXT_ONLY=REGEX (command
     names), EXT_BUILD (default target/cmake-suite), EXT_SKIP_BUILD=1, EXT_RERUN=1,
     EXT_BUDGET_S, EXT_LONG_S=60, EXT_CMAKE_ARGS (more -D settings for both builds), OUT.
  --self-test: the run list's parser and the run lists here (no GPU, no nvcc)."""
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import external_suite as ext  # noqa: E402


def main():
    started = time.time()
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    s = ext.settings("cmake_suite.py", "CHECKOUT", "target/cmake-suite")
    checkout, cli, lib, build_dir, out = s.root, s.cli, s.lib, s.build, s.out
    run_list = Path(sys.argv[4]).resolve()
    commands = ext.parse_run_list(run_list.read_text())
    if s.only:
        commands = [c for c in commands if re.search(s.only, c[0])]
    long_s = float(os.environ.get("EXT_LONG_S", "60"))
    orig, tr = build_dir / "orig", build_dir / "transformed"
    common = ["-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CUDA_ARCHITECTURES={s.arch}",
              *shlex.split(os.environ.get("EXT_CMAKE_ARGS", ""))]
    # The programs' CMake targets, named as their executables (add_executable(NAME ...)).
    targets = sorted({Path(rel).name for _, rel, _ in commands})
    if not os.environ.get("EXT_SKIP_BUILD"):
        ext.cmake_build(checkout, orig, common, s.jobs, build_dir / "orig.log", "orig", targets)
        link = f"-L{lib} -Wl,-rpath,{lib} -lcupreempt_runtime"
        env = {**os.environ, "CUPREEMPT_RUNTIME_DIR": str(lib)}
        ext.cmake_build(checkout, tr, [*common, f"-DCMAKE_CUDA_COMPILER_LAUNCHER={cli}",
                                       f"-DCMAKE_CUDA_STANDARD_LIBRARIES={link}",
                                       f"-DCMAKE_CXX_STANDARD_LIBRARIES={link}"],
                        s.jobs, build_dir / "transformed.log", "transformed", targets, env)
    tr_log = (build_dir / "transformed.log").read_text(errors="replace")
    as_written = ext.units_compiled_as_written(tr_log, checkout)
    files = sorted(str(p) for pat in ext.SOURCE_PATTERNS for p in checkout.rglob(pat)
                   if p.is_file())
    kernels = ext.count_kernels(cli, files) if files else (0, 0)
    ext.log(f"kernels transformable/refused (`cupreempt check`): {kernels}; "
            f"units compiled as written: {len(as_written)}")

    results = build_dir / "results"
    results.mkdir(exist_ok=True)
    budget = float(os.environ.get("EXT_BUDGET_S", "inf"))
    rows = []
    for name, rel, args in commands:
        cached = results / f"{name}.json"
        if cached.exists() and not os.environ.get("EXT_RERUN"):
            rows.append(json.loads(cached.read_text()))
            continue
        if time.time() - started > budget:
            ext.log(f"{name}: not run (time budget)")
            continue
        exe_o, exe_t = orig / rel, tr / rel
        row = {"name": name, "kernels": ("", "")}  # the project's, not a program's: below
        if not exe_o.is_file():
            row["status"] = "original does not build"
        elif not exe_t.is_file():
            row["status"] = "TRANSFORMED DOES NOT BUILD"
        else:
            ext.compare_program(row, name, exe_o, exe_t, args, s, (orig, tr), results, long_s)
        rows.append(row)
        cached.write_text(json.dumps(row))
        ext.save_results(out, rows, [], s.runs)
        ext.save_logs(out, results)
    ext.save_results(out, rows, [], s.runs)
    ext.report(rows, [], out, s.runs)
    print(f"Kernels of the project, transformable/refused (`cupreempt check`): "
          f"{kernels[0]}/{kernels[1]}")
    print(f"Units the launcher compiled as written: {', '.join(as_written) or 'none'}")
    return ext.exit_status(rows)


def self_test():
    cmds = ext.parse_run_list("# a comment\n\nbfs bin/level1/bfs -s 1  # size one\n"
                          "sort_uvm bin/level1/sort -s 1 --uvm\nq 'bin/a b' \"x y\"\n")
    assert cmds == [("bfs", "bin/level1/bfs", ["-s", "1"]),
                    ("sort_uvm", "bin/level1/sort", ["-s", "1", "--uvm"]),
                    ("q", "bin/a b", ["x y"])], cmds
    for bad in ("lonely\n", "a x\na y\n"):
        try:
            ext.parse_run_list(bad)
        except SystemExit:
            continue
        raise AssertionError(f"accepted {bad!r}")
    suites = Path(__file__).resolve().parent / "suites"
    for f in sorted(suites.glob("*.txt")):
        assert ext.parse_run_list(f.read_text()), f"{f.name}: no commands"
    print("cmake_suite self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    sys.exit(main())
