#!/usr/bin/env python3
"""Makefile suite: public CUDA programs that nobody here wrote, one folder each with a Makefile
(HeCBench's `src/NAME-cuda` folders: `$(CC)`, `-arch=$(ARCH)`, a `run` target; PolyBench-ACC's:
nvcc called by name, no run target). Each program is built twice on copies, as it is
(`make CC=nvcc`) and through the compiler launcher (`make CC=DIR/nvcc` with DIR first on PATH,
DIR/nvcc a link to cupreempt, which then launches the nvcc on PATH: one word, as Makefiles that
pass `CC=$(CC)` unquoted to another make need; it transforms every CUDA source and links the
runtime), run one at a time with the arguments of its `run` target (or the one program its build
made), outputs compared and the programs' own printed timings set side by side (the rules of
external_suite.py). See scripts/makefile-suite.sh for usage.

The checkout is never modified: both builds work on copies under the build folder, with the
folders beside or above a program that it names (`../other/file`, `../../utilities`) copied
with it.
"""
import collections
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import external_suite as ext  # noqa: E402

# A program whose Makefile needs more than the CUDA toolkit: MPI.
EXCLUDED_MAKEFILE = re.compile(r"\bmpi(?:cc|cxx|c\+\+|run)\b|-lmpi\b")
# `CC = g++`, `CC := gcc`: the Makefile's CC is a host compiler (Rodinia's, which reach nvcc as
# `$(NVCC)` or `$(CUDA_DIR)/bin/nvcc`), so the suite leaves CC as it is. A Makefile whose CC is
# another compiler and that never names nvcc compiles its CUDA code with something else.
OTHER_CC = re.compile(r"^CC\s*:?=\s*(?!\S*nvcc\b)(\S+)", re.M)
# Variables that Makefiles use for the toolkit's folder (`$(CUDA_DIR)/bin/nvcc`,
# `-I$(CUDA_DIR)/include`): set to the toolkit for the build as written, and to a copy of it
# whose bin/nvcc is the launcher for the other (toolkit_front).
TOOLKIT_VARIABLES = ("CUDA_DIR", "CUDA_PATH", "CUDA_HOME", "CUDA_INSTALL_PATH", "CUDA_ROOT")
# A run line's redirection of its output to a file (`> result.txt`, `1>>log`): dropped, so that
# the output is compared (`2>&1` and the like stay).
OUTPUT_REDIRECT = re.compile(r"\s*(?<![\d&>])(?:1)?>>?\s*(?!&)[^\s;&|]+")
# `../NAME`, `../../NAME/...` in a Makefile or a source: a folder beside the program's or above
# it that the program reads (data, shared code, PolyBench's `../../utilities`).
RELATIVE = re.compile(r"((?:\.\./)+)([A-Za-z0-9_+-][A-Za-z0-9_.+-]*)")
# A word of a run line that names a file (a path or a name with an extension), not a number.
FILE_ARG = re.compile(r"(?:/|\.[A-Za-z][A-Za-z0-9]*$)")
SOURCES = ("*.cu", "*.cuh", "*.h", "*.hpp", "*.cpp", "*.c", "*.cc", "Makefile*")


def select_programs(root: Path, pattern, only):
    """The program folders: those with a Makefile under any of the blank-separated globs of
    `pattern` (`cuda/* cuda/srad/*`), less those that need what the suite cannot give."""
    chosen, skipped = [], []
    # make reads `makefile` as well as `Makefile` (Rodinia's srad_v1).
    folders = sorted({mk.parent for p in pattern.split() for name in ("Makefile", "makefile")
                      for mk in root.glob(f"{p}/{name}")})
    for d in folders:
        # The one make reads first.
        mk = next(d / n for n in ("makefile", "Makefile") if (d / n).is_file())
        name = d.name
        if only and not re.search(only, name):
            continue
        text = mk.read_text(errors="replace")
        why = None
        if m := EXCLUDED_MAKEFILE.search(text):
            why = f"needs {m.group(0).strip()}"
        elif (m := OTHER_CC.search(text)) and not re.search(r"\bnvcc\b", text):
            why = f"needs CC = {m.group(1)}"
        elif dvc := sorted(d.glob("*.dvc")):
            why = f"needs data not in the checkout ({dvc[0].name})"
        (skipped if why else chosen).append((d.relative_to(root), why))
    # A folder whose Makefile builds programs that are selected themselves (Rodinia's srad, the
    # parent of srad_v1 and srad_v2): they would be built twice at once in the same copies.
    parents = []
    for rel, _ in chosen:
        inner = [c.name for c, _ in chosen if c != rel and c.is_relative_to(rel)]
        if inner:
            parents.append(rel)
            skipped.append((rel, f"builds the programs of its folders ({', '.join(inner)})"))
    return [(rel, why) for rel, why in chosen if rel not in parents], skipped


def relatives(root: Path, d: Path):
    """The folders outside the program's own that its Makefile and sources name (`../NAME`,
    `../../NAME/...`), as paths under the checkout; none above it."""
    found = set()
    top = root.resolve()
    # The program's subfolders too (Rodinia's srad builds srad_v1/, whose makefile includes
    # ../../../common/make.config), each path read from the folder of the file naming it.
    for pat in SOURCES + ("makefile*",):
        for f in d.rglob(pat):
            if not f.is_file():
                continue
            for ups, name in RELATIVE.findall(f.read_text(errors="replace")):
                target = (f.parent / ups / name).resolve()
                if target.is_dir() and target.is_relative_to(top) and target != d.resolve() \
                        and not d.resolve().is_relative_to(target):
                    found.add(target.relative_to(top))
    return sorted(found)


# A GPU architecture that CUDA 13 no longer compiles for (`-arch sm_20`,
# `--gpu-code=compute_20`, Rodinia's; `-arch=sm_61`, Chai's): below sm_75.
OLD_ARCH = re.compile(r"\b(sm|compute)_([1-6][0-9]|7[0-4])\b")


def copy_program(root: Path, rel: Path, tree: Path, arch="90"):
    """Copies the program's folder and the folders it names into `tree`. The copies' Makefiles
    name `arch` where they name an architecture older than sm_75, in both builds alike (the
    one change to what the program's authors wrote, as the CMake suite changes their list of
    architectures)."""
    dst = tree / rel
    for d in [rel, *relatives(root, root / rel)]:
        if not (tree / d).exists():
            shutil.copytree(root / d, tree / d, symlinks=True,
                            ignore=shutil.ignore_patterns(".git"))
            for mk in (tree / d).rglob("*"):
                if mk.name.lower().startswith(("makefile", "gnumakefile")) and mk.is_file() \
                        and not mk.is_symlink():
                    text = mk.read_text(errors="replace")
                    if OLD_ARCH.search(text):
                        mk.write_text(OLD_ARCH.sub(lambda m: f"{m.group(1)}_{arch}", text))
    return dst


def make(d: Path, cc, arch, env, target=None, dry=False, timeout=600, toolkit=None):
    """make in folder d with CC (unless the Makefile's CC is a host compiler: OTHER_CC), ARCH
    and, where given, the toolkit's folder in every TOOLKIT_VARIABLES; `target`: one target or
    a list of them."""
    mk = next((d / n for n in ("GNUmakefile", "makefile", "Makefile") if (d / n).is_file()), None)
    text = mk.read_text(errors="replace") if mk else ""
    cmd = ["make", "-C", str(d), f"ARCH=sm_{arch}"]
    if not OTHER_CC.search(text):
        cmd.append(f"CC={cc}")
    if toolkit:
        cmd += [f"{v}={toolkit}" for v in TOOLKIT_VARIABLES]
    if dry:
        cmd.append("-n")
    if isinstance(target, list):
        cmd += ["-k", *target]  # one target that fails to build stops no other
    elif target:
        cmd.append(target)
    return ext.sh(cmd, env=env, timeout=timeout)


def split_words(line):
    """A shell line's words; a line shlex cannot read (a continuation's backslash at its end,
    an open quote) by blanks."""
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


def missing_inputs(d: Path, words, made):
    """The run line's file arguments that are not in the program's folder, less those its
    `clean` target removes (`made`): a file the program writes (`./main output.txt`)."""
    return [w for w in words if FILE_ARG.search(w) and not w.startswith("-")
            and w not in made and not (d / w).exists()]


def built_executables(d: Path, since: float):
    """The programs a build made in folder d: ELF executables written since `since`."""
    found = []
    for f in sorted(d.iterdir()):
        try:
            if not f.is_file() or f.stat().st_mtime < since or not os.access(f, os.X_OK) \
                    or f.suffix == ".so":
                continue
            with open(f, "rb") as h:
                head = h.read(18)
        except OSError:
            continue
        # ELF, of type executable (2) or position-independent executable (3); not objects.
        if head[:4] == b"\x7fELF" and head[16] in (2, 3):
            found.append(f)
    return found


def run_file_lines(d: Path):
    """The commands of a `run` script beside the Makefile (Rodinia's): its lines whose first word
    is a program in the folder (`./needle 2048 10`, `cuda/lud_cuda -s 256`); prose and usage
    lines are not."""
    f = d / "run"
    if not f.is_file():
        return []
    lines = []
    for ln in f.read_text(errors="replace").splitlines():
        words = split_words(ln)
        if words and (d / words[0]).is_file() and os.access(d / words[0], os.X_OK):
            lines.append(ln.strip())
    return lines


def run_script(d: Path, cc, arch, env, since: float, toolkit=None):
    """The commands of the program's `run` target, as a script in its folder (what `make run`
    would run, without make's own output), else of a `run` script beside the Makefile, else the
    one program its build made with no arguments (PolyBench's). A line that names an input file
    that is not there is left out (Rodinia's `run` tries its data set and a generated input);
    with none left, the program is listed with the first missing file. Output redirected to a
    file is not (OUTPUT_REDIRECT): the output is what the suite compares."""
    r = make(d, cc, arch, env, target="run", dry=True, toolkit=toolkit)
    lines = [ln.strip() for ln in r.stdout.splitlines()
             if ln.strip() and not ln.startswith(("make", "make:")) and "nvcc" not in ln]
    no_rule = r.returncode != 0 and re.search(r"No rule to make target .run.", r.stderr)
    if r.returncode != 0 and not no_rule:
        return None, []
    if no_rule or not lines:
        # `make -n run` with no rule and a file named `run` says there is nothing to do.
        lines = run_file_lines(d)
    if not lines and (no_rule or r.returncode == 0):
        made = built_executables(d, since)
        lines = [f"./{shlex.quote(made[0].name)}"] if len(made) == 1 else []
    if not lines:
        return None, []
    cleaned = make(d, cc, arch, env, target="clean", dry=True, toolkit=toolkit)
    made = {w for ln in cleaned.stdout.splitlines() for w in split_words(ln)} \
        if cleaned.returncode == 0 else set()
    lines = [OUTPUT_REDIRECT.sub("", ln).rstrip() for ln in lines]
    runnable, missing = [], []
    for ln in lines:
        absent = missing_inputs(d, split_words(ln)[1:], made)
        missing += absent
        if not absent:
            runnable.append(ln)
    if not runnable:
        return None, missing
    script = d / "cupreempt-run.sh"
    script.write_text("#!/bin/sh\nset -e\n" + "\n".join(runnable) + "\n")
    script.chmod(0o755)
    return script, []


def program_sources(d: Path):
    """The files of a program's folder and its subfolders that may hold kernels (Rodinia's lud
    keeps its kernels in `cuda/`, Chai's programs their partitioner in `support/`), for the
    count of kernels: the checkout's, which no build has touched."""
    return sorted({p for pat in ext.SOURCE_PATTERNS for p in d.rglob(pat) if p.is_file()})


def launcher(tree: Path, cli) -> str:
    """The launcher as one word: a link named nvcc to cupreempt, beside the build tree."""
    front = tree.parent / "launcher-front"
    front.mkdir(parents=True, exist_ok=True)
    cli = Path(cli).resolve()
    link = front / "nvcc"
    # Parallel builds (EXT_JOBS) all ask: a link made meanwhile by another is as good.
    if not link.is_symlink() or os.readlink(link) != str(cli):
        link.unlink(missing_ok=True)
        try:
            link.symlink_to(cli)
        except FileExistsError:
            if os.readlink(link) != str(cli):
                raise
    return str(link)


def toolkit_root():
    """The folder of the toolkit whose nvcc is first on PATH (`/usr/local/cuda`), or None."""
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def toolkit_front(tree: Path, cli, toolkit: Path) -> str:
    """A copy of the toolkit's folder made of links, whose bin/nvcc is the launcher: for
    Makefiles that call `$(CUDA_DIR)/bin/nvcc` (TOOLKIT_VARIABLES). Everything else, headers,
    libraries and the other tools, is the toolkit's own."""
    front = tree.parent / "launcher-toolkit"
    (front / "bin").mkdir(parents=True, exist_ok=True)
    entries = [(front / e.name, e) for e in toolkit.iterdir() if e.name != "bin"]
    entries += [(front / "bin" / e.name, e) for e in (toolkit / "bin").iterdir()
                if e.name != "nvcc"]
    entries.append((front / "bin" / "nvcc", Path(launcher(tree, cli))))
    for link, target in entries:
        # Parallel builds (EXT_JOBS) all ask: a link made meanwhile by another is as good.
        if not link.is_symlink():
            try:
                link.symlink_to(target)
            except FileExistsError:
                pass
    return str(front)


def program_name(rel: Path, programs) -> str:
    """A program's name in the report and its results file: its folder's name, or its path
    with `-` for `/` where another selected folder has the same name (accel-sim's tensor-core
    microbenchmarks: `ClockProfiling/FP16_MODE` and `SassProfiling/FP16_MODE`, whose results
    were one file)."""
    if sum(1 for other, _ in programs if other.name == rel.name) > 1:
        return str(rel).replace("/", "-")
    return rel.name


def build_both(root, rel, trees, cli, lib, arch, targets=None):
    """Builds one program as written and through the launcher; returns (row fields, scripts).
    `targets`: the make targets of a run list's programs in this folder (EXT_RUN_LIST), built
    instead of the Makefile's first; the run list then says what runs, not a run script."""
    orig_tree, tr_tree = trees
    env = {**os.environ, "CUPREEMPT_RUNTIME_DIR": str(lib)}
    front = launcher(tr_tree, cli)
    # A Makefile that calls nvcc by name rather than through $(CC) (PolyBench's) finds the
    # launcher first on PATH, as a user's would; the launcher skips itself to find nvcc.
    tr_env = {**env, "PATH": f"{Path(front).parent}{os.pathsep}{env.get('PATH', '')}"}
    toolkit = toolkit_root()
    tr_toolkit = toolkit_front(tr_tree, cli, toolkit) if toolkit else None
    out = {}
    for label, tree, cc, env, kit in (("orig", orig_tree, "nvcc", env, toolkit),
                                      ("transformed", tr_tree, front, tr_env, tr_toolkit)):
        d = copy_program(root, rel, tree, arch)
        t = time.time()
        try:
            r = make(d, cc, arch, env, target=targets, toolkit=kit)
            ok, text = r.returncode == 0, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            ok, text = False, "build timed out"
        (d / "cupreempt-build.log").write_text(text)
        script, missing = run_script(d, cc, arch, env, t, kit) if ok and not targets \
            else (None, [])
        out[label] = {"ok": ok, "script": str(script) if script else None, "missing": missing,
                      "seconds": round(time.time() - t, 1)}
    files = [str(p) for p in program_sources(root / rel)]
    out["kernels"] = ext.count_kernels(cli, files, [root / rel]) if files else (0, 0)
    return out


def main():
    started = time.time()
    s = ext.settings("makefile_suite.py", "CHECKOUT", "target/makefile-suite")
    root, cli, lib, build, out = s.root, s.cli, s.lib, s.build, s.out
    runs, arch, jobs = s.runs, s.arch, s.jobs
    pattern = os.environ.get("EXT_PROGRAMS", "src/*-cuda")
    # Programs whose first run takes longer are listed, not measured: with five runs each, a
    # few such programs would use a time-limited machine's whole call.
    long_s = float(os.environ.get("EXT_LONG_S", "20"))

    # A run list (`NAME FOLDER/EXECUTABLE ARGS...`, scripts/suites/*.txt) names the programs
    # of one Makefile that builds many (llm.c's dev/cuda) and the arguments each runs with;
    # each folder it names is built once per build, making only the executables it names.
    commands, targets = None, {}
    if run_list := os.environ.get("EXT_RUN_LIST"):
        commands = [c for c in ext.parse_run_list(Path(run_list).read_text())
                    if not s.only or re.search(s.only, c[0])]
        for _, exe, _ in commands:
            targets.setdefault(Path(exe).parent, set()).add(Path(exe).name)
        programs, skipped = [(d, None) for d in sorted(targets)], []
    else:
        programs, skipped = select_programs(root, pattern, s.only)
        programs = ext.shard(programs)
    ext.log(f"{len(programs)} programs, {len(skipped)} skipped")
    trees = (build / "orig", build / "transformed")
    builds_file = build / "builds.json"
    builds = json.loads(builds_file.read_text()) if builds_file.exists() else {}
    # A folder built before for a run list's other commands lacks the executables of these.
    todo = [rel for rel, _ in programs if str(rel) not in builds
            or not targets.get(rel, set()) <= set(builds[str(rel)].get("targets", []))]
    if todo and not os.environ.get("EXT_SKIP_BUILD"):
        t = time.time()
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = {pool.submit(build_both, root, rel, trees, cli, lib, arch,
                                   sorted(targets.get(rel, ())) or None): rel
                       for rel in todo}
            for f in concurrent.futures.as_completed(futures):
                try:
                    rel = futures[f]
                    before = builds.get(str(rel), {}).get("targets", [])
                    builds[str(rel)] = f.result()
                    if rel in targets:
                        builds[str(rel)]["targets"] = sorted(targets[rel] | set(before))
                except (OSError, shutil.Error, subprocess.SubprocessError) as e:
                    # One program's folder that cannot be copied or built stops no other.
                    ext.log(f"{futures[f]}: not built: {e}")
                    failed = {"ok": False, "script": None, "missing": [], "seconds": 0}
                    builds[str(futures[f])] = {"orig": failed, "transformed": failed,
                                               "kernels": (0, 0)}
                builds_file.write_text(json.dumps(builds))  # a run cut short keeps its builds
        ext.log(f"built {len(todo)} programs twice in {time.time() - t:.0f} s")

    if os.environ.get("EXT_BUILD_ONLY"):
        return build_report(builds, programs, skipped, out, trees[1])
    results = build / "results"
    results.mkdir(exist_ok=True)
    budget = float(os.environ.get("EXT_BUDGET_S", "inf"))
    rows = []
    # (name, folder, original, transformed, arguments): a run list's commands, or each
    # folder's run script.
    jobs = [(name, Path(exe).parent, trees[0] / exe, trees[1] / exe, args)
            for name, exe, args in commands] if commands is not None else \
        [(program_name(rel, programs), rel, None, None, []) for rel, _ in programs]
    for name, rel, exe_o, exe_t, args in jobs:
        cached = results / f"{name}.json"
        if cached.exists() and not os.environ.get("EXT_RERUN"):
            rows.append(json.loads(cached.read_text()))
            continue
        b = builds.get(str(rel))
        if b is None:
            continue
        row = {"name": name, "kernels": b["kernels"]}
        tr_log = trees[1] / rel / "cupreempt-build.log"
        if tr_log.exists():
            as_written = [m.group(1) for m in
                          ext.AS_WRITTEN.finditer(tr_log.read_text(errors="replace"))]
            if as_written:
                row["as_written"] = as_written
        for label, tree in zip(("orig", "transformed"), trees):
            # A failed build's log comes back with the report: why is not always the same on
            # the machine that runs the suite as where it was tried.
            log_file = tree / rel / "cupreempt-build.log"
            if not b[label]["ok"] and log_file.exists():
                (out / "build-logs").mkdir(exist_ok=True)
                shutil.copy(log_file, out / "build-logs" / f"{name}.{label}.log")
        if exe_o is not None:
            # make -k: one executable that does not build stops no other.
            if not exe_o.is_file():
                row["status"] = "original does not build"
            elif not exe_t.is_file():
                row["status"] = "TRANSFORMED DOES NOT BUILD"
            elif time.time() - started > budget:
                ext.log(f"{name}: not run (time budget)")
                continue
            else:
                ext.compare_program(row, name, exe_o, exe_t, args, s, trees, results, long_s)
        elif not b["orig"]["ok"]:
            row["status"] = "original does not build"
        elif not b["transformed"]["ok"]:
            row["status"] = "TRANSFORMED DOES NOT BUILD"
        elif b["orig"]["missing"]:
            row["status"] = f"needs {b['orig']['missing'][0]}"
        elif not b["orig"]["script"]:
            row["status"] = "no run command"
        elif time.time() - started > budget:
            ext.log(f"{name}: not run (time budget)")
            continue
        else:
            ext.compare_program(row, name, Path(b["orig"]["script"]),
                                Path(b["transformed"]["script"]), [], s, trees, results, long_s)
        rows.append(row)
        if "wall" in row or row["status"].isupper() or row["status"].startswith("runs longer"):
            cached.write_text(json.dumps(row))
        ext.save_results(out, rows, skipped, runs)
    ext.save_results(out, rows, skipped, runs)
    ext.report(rows, [(d.name, why) for d, why in skipped], out, runs)
    ext.save_logs(out, results)
    return ext.exit_status(rows)


def build_report(builds, programs, skipped, out: Path, tr_tree: Path):
    """EXT_BUILD_ONLY=1 (no GPU needed): per program, whether each build compiles, and what the
    launcher said in the transformed build (refusals by code, files left whole: CP013)."""
    lines = ["| program | kernels transformed/refused | original | transformed | launcher codes |",
             "| --- | --- | --- | --- | --- |"]
    bad = both = 0
    for rel, _ in programs:
        b = builds.get(str(rel))
        if b is None:
            continue
        log_file = tr_tree / rel / "cupreempt-build.log"
        text = log_file.read_text(errors="replace") if log_file.exists() else ""
        codes = collections.Counter(re.findall(r"\bCP(\d{3})\b", text))
        o, t = b["orig"]["ok"], b["transformed"]["ok"]
        # Units the launcher compiled as written after nvcc rejected their transformed copy.
        fell_back = len(ext.AS_WRITTEN.findall(text))
        bad += o and (not t or fell_back > 0)
        both += o and t and not fell_back
        built = f"AS WRITTEN ({fell_back} units)" if fell_back else "builds"
        cells = ["builds" if o else "fails", built if t else ("FAILS" if o else "fails"),
                 ", ".join(f"CP{c} ×{n}" for c, n in sorted(codes.items())) or "—"]
        lines.append(f"| {rel.name} | {b['kernels'][0]}/{b['kernels'][1]} | " + " | ".join(cells)
                     + " |")
    text = "\n".join([f"Builds: {both} both ways, {bad} only as written (or with units the "
                      "launcher compiled as written).", ""] + lines +
                      ["", "Skipped:", ""] + [f"- {d.name}: {why}" for d, why in skipped]) + "\n"
    (out / "builds.md").write_text(text)
    print(text)
    return 1 if bad else 0


def self_test():
    """--self-test: selection and run-line rules on a made-up checkout (no GPU, no nvcc)."""
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        root = Path(t)
        mk = "CC        = nvcc\nARCH      = sm_60\nprogram = main\n"
        progs = {
            "a-cuda": mk + "run: $(program)\n\t./$(program) 100 ../b-cuda/in.bin\n",
            "b-cuda": mk + "run: $(program)\n\t./$(program)\n",
            "c-cuda": "CC = mpicxx\nrun: main\n\t./main\n",
            "d-cuda": mk + "all: main\n",
            "e-cuda": mk + "run: $(program)\n\t./$(program) data\n",
        }
        for name, text in progs.items():
            (root / "src" / name).mkdir(parents=True)
            (root / "src" / name / "Makefile").write_text(text)
        (root / "src" / "e-cuda" / "data.tar.gz.dvc").write_text("outs:\n")
        chosen, skipped = select_programs(root, "src/*-cuda", None)
        assert [str(p) for p, _ in chosen] == ["src/a-cuda", "src/b-cuda", "src/d-cuda"], chosen
        assert dict((str(p), w) for p, w in skipped) == {
            "src/c-cuda": "needs mpicxx",
            "src/e-cuda": "needs data not in the checkout (data.tar.gz.dvc)"}, skipped
        assert relatives(root, root / "src/a-cuda") == [Path("src/b-cuda")]
        tree = root / "copy"
        copy_program(root, Path("src/a-cuda"), tree)
        assert (tree / "src/b-cuda/Makefile").exists(), "the sibling is copied"
        # PolyBench's shape: shared code two folders up, named without a slash after it; the
        # folders above the program and the checkout's outside are not copied.
        (root / "CUDA/utilities").mkdir(parents=True)
        (root / "CUDA/utilities/common.mk").write_text("all:\n\tnvcc x.cu\n")
        (root / "CUDA/stencils/fdtd").mkdir(parents=True)
        (root / "CUDA/stencils/fdtd/Makefile").write_text(
            "PATH_TO_UTILS := ../../utilities\ninclude ${PATH_TO_UTILS}/common.mk\n"
            "# ../../../outside ../.. ../fdtd\n")
        assert relatives(root, root / "CUDA/stencils/fdtd") == [Path("CUDA/utilities")]
        (root / "CUDA/stencils/both/v1").mkdir(parents=True)
        (root / "CUDA/stencils/both/Makefile").write_text("all:\n\tcd v1; make\n")
        (root / "CUDA/stencils/both/v1/makefile").write_text(
            "include ../../../utilities/common.mk\n")
        assert relatives(root, root / "CUDA/stencils/both") == [Path("CUDA/utilities")]
        copy_program(root, Path("CUDA/stencils/fdtd"), tree)
        assert (tree / "CUDA/utilities/common.mk").exists()
        # With no run target, the one executable the build made runs.
        since = time.time() - 1
        prog = root / "CUDA/stencils/fdtd"
        (prog / "fdtd.exe").write_bytes(b"\x7fELF" + bytes(12) + b"\x02\x00")
        (prog / "fdtd.o").write_bytes(b"\x7fELF" + bytes(12) + b"\x01\x00")
        (prog / "run.sh").write_text("#!/bin/sh\n")
        for f in ("fdtd.exe", "fdtd.o", "run.sh"):
            (prog / f).chmod(0o755)
        assert built_executables(prog, since) == [prog / "fdtd.exe"]
        assert built_executables(prog, time.time() + 5) == []
        assert FILE_ARG.search("../b-cuda/in.bin") and FILE_ARG.search("graph.txt")
        assert not any(FILE_ARG.search(w) for w in ("100", "1e-3", "0.5", "-n"))
        # A file the clean target removes is an output, not a missing input.
        assert missing_inputs(root / "src/a-cuda", ["output.txt", "in.bin", "10"],
                              {"rm", "-rf", "main", "output.txt"}) == ["in.bin"]
        # A first run longer than long_s, or past the timeout, is not run again.
        slow = root / "slow.sh"
        slow.write_text("#!/bin/sh\nsleep 0.3\necho done\n")
        slow.chmod(0o755)
        row = {}
        t = time.perf_counter()
        ext.compare_builds(row, slow, slow, [], 3, 10, 0, root, root, long_s=0.1)
        assert row["status"] == "runs longer than 0.1 s", row
        # Stopped at long_s, the shell's child too (whose open output would hold the run).
        assert time.perf_counter() - t < 0.25, time.perf_counter() - t
        assert row["wall"][0] <= 0.1, row
        row = {}
        ext.compare_builds(row, slow, slow, [], 3, 0.1, 0, root, root)
        assert row["status"] == "original times out", row
        row = {}
        ext.compare_builds(row, slow, slow, [], 1, 10, 0, root, root, long_s=5)
        assert row["status"] == "identical", row
        assert split_words("./main 10 \\") == ["./main", "10", "\\"]
        # Rodinia's shape: nvcc through `$(CUDA_DIR)/bin/nvcc`, CC a host compiler (left as it
        # is, not excluded), a `run` script beside the Makefile whose first line needs a data
        # set that is not there and whose second generates its input; output redirected to a
        # file; folders one level deeper named by a second glob.
        rod = root / "rod"
        (rod / "common").mkdir(parents=True)
        (rod / "common/make.config").write_text("CUDA_DIR = /nonexistent/cuda\n")
        prog = rod / "cuda/needle"
        prog.mkdir(parents=True)
        (prog / "Makefile").write_text(
            "include ../../common/make.config\nCC = gcc\nNVCC = $(CUDA_DIR)/bin/nvcc\n"
            "all:\n\t@echo $(CC) $(NVCC) > built.txt\n\tcp /bin/true needle\n"
            "clean:\n\trm -f needle result.txt\n")
        (prog / "run").write_text("# two inputs\nThere are two data sets:\n"
                                  "./needle -f ../../data/needle/in.txt\n"
                                  "./needle 2048 10 > result.txt\n")
        (rod / "cuda/srad/srad_v2").mkdir(parents=True)
        (rod / "cuda/srad/srad_v2/Makefile").write_text("CC := $(CUDA_DIR)/bin/nvcc\nall:\n")
        (rod / "cuda/srad/srad_v1").mkdir(parents=True)
        (rod / "cuda/srad/srad_v1/makefile").write_text("CC := $(CUDA_DIR)/bin/nvcc\nall:\n")
        (rod / "cuda/other").mkdir(parents=True)
        (rod / "cuda/other/Makefile").write_text("CC = clang++\nall:\n\t$(CC) x.cu\n")
        (rod / "cuda/srad/srad_v2/makefile").write_text("NVCC_FLAGS = -arch sm_35\n")
        (rod / "cuda/srad/srad_v2/Makefile.old").write_text(
            "NVCC_FLAGS = -arch sm_20 --gpu-code=compute_13,sm_90 -arch=sm_100 -arch=sm_61 "
            "-arch=sm_75\n")
        copy_program(rod, Path("cuda/srad/srad_v2"), root / "rodcopy", "90")
        assert (root / "rodcopy/cuda/srad/srad_v2/Makefile.old").read_text() == \
            "NVCC_FLAGS = -arch sm_90 --gpu-code=compute_90,sm_90 -arch=sm_100 -arch=sm_90 " \
            "-arch=sm_75\n"
        assert (root / "rodcopy/cuda/srad/srad_v2/makefile").read_text() == \
            "NVCC_FLAGS = -arch sm_90\n"
        (rod / "cuda/srad/Makefile").write_text("all:\n\tcd srad_v1; make\n")
        chosen, skipped = select_programs(rod, "cuda/* cuda/srad/*", None)
        assert [str(p) for p, _ in chosen] == ["cuda/needle", "cuda/srad/srad_v1",
                                               "cuda/srad/srad_v2"], chosen
        assert [(str(p), w) for p, w in skipped] == [
            ("cuda/other", "needs CC = clang++"),
            ("cuda/srad", "builds the programs of its folders (srad_v1, srad_v2)")], skipped
        kit = root / "kit"
        (kit / "bin").mkdir(parents=True)
        (kit / "include").mkdir()
        for tool in ("nvcc", "cuobjdump"):
            (kit / "bin" / tool).write_text("")
        front = Path(toolkit_front(root / "tr" / "tree", root / "cupreempt", kit))
        assert os.readlink(front / "bin/nvcc") == launcher(root / "tr" / "tree",
                                                           root / "cupreempt")
        assert os.readlink(front / "bin/cuobjdump") == str(kit / "bin/cuobjdump")
        assert os.readlink(front / "include") == str(kit / "include")
        since = time.time() - 1
        env = dict(os.environ)
        r = make(prog, "nvcc", "90", env, toolkit=str(front))
        assert r.returncode == 0, r.stderr
        # CC stays the Makefile's; the toolkit's folder is the one given.
        assert (prog / "built.txt").read_text().split() == ["gcc", f"{front}/bin/nvcc"]
        # A run list's targets: one that fails to build stops no other (llm.c's dev/cuda).
        many = root / "many"
        many.mkdir()
        (many / "Makefile").write_text("all: a b\na:\n\tfalse\nb:\n\ttouch b\n")
        r = make(many, "nvcc", "90", env, target=["a", "b"])
        assert r.returncode != 0 and (many / "b").exists(), r.stderr
        script, missing = run_script(prog, "nvcc", "90", env, since, str(front))
        assert missing == [] and script is not None, (script, missing)
        assert script.read_text().splitlines()[2:] == ["./needle 2048 10"], script.read_text()
        (prog / "run").write_text("./needle -f ../../data/needle/in.txt\n")
        assert run_script(prog, "nvcc", "90", env, since, str(front)) == (
            None, ["../../data/needle/in.txt"])
        for line, kept in (("./a > out.txt", "./a"), ("./a 1>>log 2>&1", "./a 2>&1"),
                           ("./a >&2", "./a >&2"), ("./a 2> err", "./a 2> err")):
            assert OUTPUT_REDIRECT.sub("", line).rstrip() == kept, (line, kept)
        (root / "cupreempt").write_text("")
        cc = launcher(root / "tr" / "tree", root / "cupreempt")
        assert cc.endswith("/launcher-front/nvcc"), cc
        assert Path(os.readlink(cc)) == (root / "cupreempt").resolve(), os.readlink(cc)
        # Kernels in a header are counted with the .cu files.
        prog = root / "src/h-cuda"
        prog.mkdir(parents=True)
        for name in ("main.cu", "kernels.h", "util.hpp", "notes.txt", "Makefile"):
            (prog / name).write_text("")
        assert [p.name for p in ext.cuda_sources(prog)] == ["kernels.h", "main.cu", "util.hpp"]
        (prog / "cuda").mkdir()
        (prog / "cuda/lud_kernel.cu").write_text("")
        assert [p.name for p in program_sources(prog)] == [
            "lud_kernel.cu", "kernels.h", "main.cu", "util.hpp"]
        # Folders of one name in two places get their paths as names.
        chosen = [(Path("Clock/FP16"), None), (Path("Sass/FP16"), None), (Path("mem_bw"), None)]
        assert [program_name(r, chosen) for r, _ in chosen] == [
            "Clock-FP16", "Sass-FP16", "mem_bw"]
    print("makefile_suite self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    sys.exit(main())
