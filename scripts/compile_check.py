#!/usr/bin/env python3
"""Compile check on code nobody here wrote (no GPU needed): for every folder of a checkout that
holds .cu files, transform its .cu files and headers (.cuh, .h, .hpp: kernels are often
defined in headers) together (`cupreempt transform --keep-going`,
on a copy), then compile each translation unit (a .cu file no other .cu file of the folder
includes) with `nvcc -c`, as written and transformed. A unit that compiles as written and not
transformed is a fault of cupreempt; one that fails both ways is the checkout's (old CUDA APIs,
missing dependencies) and is only counted.

Folders are transformed one at a time, in path order (`cupreempt transform` of each); a unit
transformed before a folder of headers it includes (in a later run) knows that folder's kernels
as untransformed, as a user's folder-at-a-time runs would.

Usage: compile_check.py CHECKOUT CUPREEMPT [NVCC]
  Env: CC_JOBS=2 (compiles at once), CC_STD=c++17 (the dialect: c++11 as projects built with
       CMAKE_CXX_STANDARD 11 compile), CC_FLAGS (more nvcc flags, e.g. -D...), CC_INCLUDE
       (colon-separated include folders, absolute, or relative to the checkout: the
       transformed copy's for its build; given to `cupreempt transform` as `-I` too).
Prints one line per unit and a summary; exits 1 when a unit fails only transformed.
  --self-test: the unit finder on made-up folders."""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from external_suite import cuda_sources  # noqa: E402

INCLUDE_CU = re.compile(r'^\s*#\s*include\s*"([^"]+\.cu)"', re.M)


def units(folder_files):
    """The .cu files that no other .cu file of the folder includes (by file name)."""
    included = set()
    for _, text in folder_files:
        included.update(os.path.basename(m) for m in INCLUDE_CU.findall(text))
    return [p for p, _ in folder_files if p.name not in included]


def folders(root: Path):
    """Folders of `root` with .cu files: {folder: [(path, text)]}."""
    out = {}
    for p in sorted(root.rglob("*.cu")):
        text = p.read_text(errors="replace")
        out.setdefault(p.parent, []).append((p, text))
    return out


def compile_unit(nvcc, unit: Path, includes, extra):
    std = os.environ.get("CC_STD", "c++17")
    cmd = [nvcc, "-arch=sm_90", "-O2", f"-std={std}", "-w", "-c", str(unit), "-o", os.devnull,
           "-I", str(unit.parent), *sum((["-I", i] for i in includes), []), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    first = next((l for l in r.stderr.splitlines() if "error" in l), r.stderr.strip()[:200])
    return r.returncode == 0, first


def self_test():
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "a").mkdir()
        (d / "a" / "main.cu").write_text('#include "kernel.cu"\nint main() {}\n')
        (d / "a" / "kernel.cu").write_text("__global__ void k() {}\n")
        (d / "a" / "other.cu").write_text("__global__ void o() {}\n")
        found = folders(d)
        assert list(found) == [d / "a"], found
        assert sorted(p.name for p in units(found[d / "a"])) == ["main.cu", "other.cu"]
    print("compile_check self-test: ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    checkout, cli = Path(argv[1]).resolve(), argv[2]
    nvcc = argv[3] if len(argv) > 3 else "nvcc"
    repo = Path(__file__).resolve().parent.parent
    extra = os.environ.get("CC_FLAGS", "").split()
    # A relative include folder is the checkout's for the build as written and the copy's for
    # the transformed one: a header reached through it (`#include "lib/common.cuh"`) must be
    # the copy's too, or the unit includes both and defines their functions twice.
    def includes(root):
        return [str(i if Path(i).is_absolute() else root / i)
                for i in os.environ.get("CC_INCLUDE", "").split(":") if i]
    work = Path(tempfile.mkdtemp())
    copy = work / "transformed"
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    jobs = []
    for folder, files in folders(checkout).items():
        rel = folder.relative_to(checkout)
        inputs = [str(copy / rel / p.name) for p, _ in files]
        inputs += [str(p) for p in cuda_sources(copy / rel) if p.suffix != ".cu"]
        # The include folders nvcc gets, for the transform too: a unit's launches and includes
        # are read through them, as a user passes `-I` to both.
        dirs = sum((["-I", i] for i in includes(copy)), [])
        subprocess.run([cli, "transform", "--keep-going", "--in-place", *dirs, *inputs],
                       capture_output=True, text=True)
        for u in units(files):
            jobs.append(u.relative_to(checkout))
    results = {}
    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("CC_JOBS", "2"))) as pool:
        def both(u):
            o = compile_unit(nvcc, checkout / u, includes(checkout), extra)
            t = compile_unit(nvcc, copy / u, includes(copy),
                             extra + ["-I", str(repo / "cuda_support")])
            return u, o, t
        for u, o, t in pool.map(both, jobs):
            results[u] = (o, t)
            state = {(True, True): "ok", (False, False): "fails as written",
                     (True, False): "FAILS ONLY TRANSFORMED", (False, True): "fails only as written"}
            line = f"{u}: {state[(o[0], t[0])]}"
            if o[0] and not t[0]:
                line += f"\n    {t[1]}"
            print(line, flush=True)
    faults = [u for u, (o, t) in results.items() if o[0] and not t[0]]
    both_ok = sum(1 for o, t in results.values() if o[0] and t[0])
    print(f"\n{len(results)} units: {both_ok} compile both ways, {len(faults)} only as written, "
          f"{sum(1 for o, t in results.values() if not o[0])} fail as written")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
