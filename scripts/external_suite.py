#!/usr/bin/env python3
"""External suite: public CUDA programs that nobody here wrote, built as they are and after
`cupreempt transform --keep-going`, run one at a time, outputs compared and the programs' own
printed timings set side by side. See scripts/external-suite.sh for usage.

The samples checkout is never modified: both builds work on copies under the build folder.
The only change made to the copies is the list of GPU architectures (one instead of nine, so
that the build fits in minutes); it is the same for both builds.
"""
import json
import math
import os
import re
import shutil
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

# A sample is self-contained when its build needs nothing beyond the CUDA toolkit's own
# libraries: no graphics, MPI, OpenMP, run-time compilation, driver API or extra packages.
EXCLUDED_BUILD = re.compile(
    r"find_package\((OpenGL|GLUT|EGL|X11|NVSCI|FreeImage|Vulkan|OpenMP|MPI|LLVM|CUDA)\b"
    r"|CUDA::(cuda_driver|nvrtc|nvjpeg|nvJitLink|nvvm)\b"
)
# Several GPUs, several processes, or system-wide memory: not one program on one GPU.
EXCLUDED_SOURCE = re.compile(
    r"cudaDeviceEnablePeerAccess|cudaMemcpyPeer|cudaIpcGetMemHandle|cudaIpcOpenMemHandle"
    r"|\bfork\s*\(|cudaDevAttrPageableMemoryAccess"
)
EXCLUDED_DIRS = ("7_libNVVM", "8_Platform_Specific")

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
TIME_UNIT = r"(?:ms|msec|msecs|milliseconds?|s|sec|secs|seconds?|us|usec|usecs|microseconds?|ns)"
RATE_UNIT = r"(?:[KMGT]B/s|[KMGT]iB/s|[KMGTP]?[Ff]lop/s|[KMGTP]?FLOP/?s|[GM]?[Ff]lops|GFLOPS|[KMGT]?[Oo]ps/s|M?Options/sec|M?[Pp]ixels?/s(?:ec)?|MOPS|[A-Za-z]+/s(?:ec)?)"
TIMED = re.compile(
    rf"({NUMBER})\s*\(?\s*({TIME_UNIT}|{RATE_UNIT})\)?(?![A-Za-z/])"
)
# A line that may hold a measurement: a timing word, or a time unit standing on its own (after a
# digit or a space, not ending a word such as "processors" nor a plural "(s)").
TIMING_LINE = re.compile(
    rf"(?i)\btimes?\b|elapsed|throughput|bandwidth|performance|(?<![A-Za-z(]){TIME_UNIT}\b"
    rf"|/s\b|flop|\bsec\b|speed"
)
NUMBERS = re.compile(NUMBER)


def log(*a):
    print(*a, flush=True)


def sh(cmd, cwd=None, env=None, timeout=None):
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True,
                          errors="replace")


def select_samples(root: Path, only):
    chosen, skipped = [], []
    for cm in sorted(root.glob("Samples/*/*/CMakeLists.txt")):
        d = cm.parent
        name = d.name
        if only and not re.search(only, name):
            continue
        why = None
        if d.parent.name in EXCLUDED_DIRS:
            why = f"in {d.parent.name}"
        elif "add_executable" not in cm.read_text(errors="replace"):
            why = "no executable"
        elif m := EXCLUDED_BUILD.search(cm.read_text(errors="replace")):
            why = f"needs {m.group(0).replace('find_package(', '')}"
        else:
            for src in list(d.glob("*.cu")) + list(d.glob("*.cpp")) + list(d.glob("*.cuh")):
                if m := EXCLUDED_SOURCE.search(src.read_text(errors="replace")):
                    why = f"uses {m.group(0)}"
                    break
        (skipped if why else chosen).append((d.relative_to(root), why))
    return chosen, skipped


def prepare_tree(src: Path, dst: Path, samples, arch):
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".git", "build"))
    for cm in dst.glob("Samples/*/*/CMakeLists.txt"):
        text = cm.read_text(errors="replace")
        new = re.sub(r"set\(CMAKE_CUDA_ARCHITECTURES[^)]*\)",
                     f"set(CMAKE_CUDA_ARCHITECTURES {arch})", text)
        if new != text:
            cm.write_text(new)
    top = ["cmake_minimum_required(VERSION 3.20)",
           "project(cupreempt_external_suite LANGUAGES C CXX CUDA)"]
    top += [f"add_subdirectory({d.as_posix()})" for d, _ in samples]
    (dst / "CMakeLists.txt").write_text("\n".join(top) + "\n")


def count_kernels(cli, files, include_dirs=()):
    """(transformed, refused) kernels of `files`, as `cupreempt check` reports them."""
    extra = [a for d in include_dirs for a in ("-I", str(d))]
    check = sh([cli, "check", "--format", "json", *extra, *files])
    transformed = refused = 0
    try:
        for f in json.loads(check.stdout or "[]"):
            for k in f.get("kernels", []):
                if k.get("transformed"):
                    transformed += 1
                else:
                    refused += 1
    except (json.JSONDecodeError, AttributeError, TypeError):
        pass
    return transformed, refused


# Where a program's kernels may be: the .cu and .cuh files, and headers (the CUDA samples'
# interval defines its kernel in cuda_interval.h; HeCBench's adv in adv.h, maxFlops in kernels.h).
# Files without kernels are left as they are by `transform`.
SOURCE_PATTERNS = ("*.cu", "*.cuh", "*.h", "*.hpp", "*.hh", "*.inl")


def cuda_sources(d: Path):
    """The folder's files that may hold kernels, sorted."""
    return sorted({p for pat in SOURCE_PATTERNS for p in d.glob(pat) if p.is_file()})


def transform_tree(cli, tree: Path, samples, in_place=True):
    """Transforms every CUDA file of the chosen samples in place (unless `in_place` is false:
    the compiler launcher transforms them in the build); returns per-sample counts."""
    counts = {}
    for d, _ in samples:
        files = [str(p) for p in cuda_sources(tree / d)]
        if not files:
            counts[d.name] = (0, 0)
            continue
        transformed, refused = count_kernels(cli, files)
        counts[d.name] = (transformed, refused)
        if not in_place:
            continue
        r = sh([cli, "transform", "--keep-going", "--in-place", *files])
        if r.returncode != 0:
            log(f"transform {d.name}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        counts[d.name] = (transformed, refused)
    return counts


def configure_and_build(tree: Path, extra, jobs):
    """Configures and builds the tree in `tree/build` (output in `tree/build.log`)."""
    cmake_build(tree, tree / "build", extra, jobs, tree / "build.log", tree.name)
    return tree / "build"


def cmake_build(source: Path, folder: Path, extra, jobs, log_path: Path, label, targets=(),
                env=None):
    """Configures `source` in `folder` and builds `targets` (every target where none are
    named), going on past failed ones: a target that fails both ways is the project's, and the
    rest still runs. The configure's and the build's output go to `log_path`, and are
    returned."""
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    r = sh(["cmake", "-S", str(source), "-B", str(folder), *gen, *extra], env=env)
    text = r.stdout + r.stderr
    if r.returncode != 0:
        log_path.write_text(text)
        log(r.stdout[-2000:], r.stderr[-2000:])
        raise SystemExit(f"cmake configure failed in {folder}")
    keep = ["--", "-k", "0"] if gen else ["--", "-k"]
    chosen = ["--target", *targets] if targets else []
    t = time.time()
    r = sh(["cmake", "--build", str(folder), "-j", str(jobs), *chosen, *keep], env=env)
    text += r.stdout + r.stderr
    log_path.write_text(text)
    log(f"built {label} in {time.time() - t:.0f} s (exit {r.returncode})")
    return text


# The compiler launcher's warning for a unit whose transformed copy nvcc rejected and that it
# compiled as written instead (docs/build.md): such a unit's kernels are not transformed.
AS_WRITTEN = re.compile(r"cupreempt: warning: (.+?): the transformed source did not compile; "
                        r"compiled as written")


def units_compiled_as_written(build_log: str, folder: Path):
    """The sources under `folder` that a build log says were compiled as written."""
    found = {u.strip() for m in AS_WRITTEN.finditer(build_log) for u in m.group(1).split(", ")}
    return sorted(u for u in found if Path(u).is_relative_to(folder)
                  or Path(u).resolve().is_relative_to(folder.resolve()))


def find_exe(build: Path, rel: Path):
    d = build / rel
    name = rel.name
    for cand in [d / name, *d.glob("*")]:
        if cand.is_file() and os.access(cand, os.X_OK) and cand.suffix not in (".so", ".a"):
            if cand.name == name:
                return cand
    return None


def sample_args(args_cfg, name):
    c = args_cfg.get(name, {})
    if c.get("skip"):
        return None
    if "runs" in c and c["runs"]:
        return c["runs"][0].get("args", [])
    return c.get("args", [])


def run_once(exe: Path, args, timeout, tree: Path, env=None, runtime_lines=False):
    """One run: (exit status or "timeout", output, seconds). The program runs in a session of
    its own, and at the timeout the whole session is killed: a run line is often a shell whose
    child is the program, and a child left running would share the GPU with the next ones.
    `env`: variables set for this run on top of the environment. `runtime_lines`: keep the
    runtime's own lines (chaos_suite.py counts the launches they report)."""
    t = time.perf_counter()
    p = subprocess.Popen([str(exe), *args], cwd=exe.parent, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **env} if env else None)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        return "timeout", "", time.perf_counter() - t
    # The runtime's own lines (CUPREEMPT_VERBOSE, chaos mode's counts: `cupreempt: ...` on
    # standard error) are no output of the program's.
    err = "".join(ln for ln in stderr.decode(errors="replace").splitlines(keepends=True)
                  if runtime_lines or not ln.startswith(RUNTIME_LINE))
    # The two builds live in two trees: paths the program prints name its own.
    out = (stdout.decode(errors="replace") + err).replace(str(tree), "<tree>")
    return p.returncode, out, time.perf_counter() - t


RUNTIME_LINE = "cupreempt: "


def unstable_lines(o_runs):
    """Line numbers where the original's runs do not all print the same."""
    o_lines = [r[1].splitlines() for r in o_runs]
    return {i for i in range(max(map(len, o_lines)))
            if len({(ls[i] if i < len(ls) else None) for ls in o_lines}) > 1}


def first_differing(ref_run, t_runs, unstable):
    """The first transformed run whose exit status or masked output differs from ref_run's."""
    ref = (ref_run[0], mask(ref_run[1], unstable))
    return next((r for r in t_runs if (r[0], mask(r[1], unstable)) != ref), None)


def differing_lines(orig, transformed, unstable, most=5):
    """(line number, original, transformed) of the first few masked lines that differ."""
    a, b = mask(orig, unstable), mask(transformed, unstable)
    rows = [(i + 1, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) != len(b):
        rows.append((min(len(a), len(b)) + 1, f"{len(a)} lines", f"{len(b)} lines"))
    return rows[:most]


def mask(text, unstable):
    """The lines as compared: numbers masked on timing lines and on lines the original varies,
    and every run of white space as one space (tables pad their columns to the width of the
    numbers in them, masked or not: utcs-scea/altis's result tables)."""
    lines, heading = [], False
    for i, line in enumerate(text.splitlines()):
        timing = bool(TIMING_LINE.search(line))
        if i in unstable or timing or (heading and LONE_NUMBER.fullmatch(line)):
            line = NUMBERS.sub("#", line)
        heading = timing and not NUMBERS.search(line)
        lines.append(" ".join(line.split()))
    return lines


# A line that is one number and nothing else: the value of the timing line before it when that
# line holds no number (PolyBench's "GPU Time in seconds:" and the time on the next line).
LONE_NUMBER = re.compile(rf"\s*({NUMBER})\s*")
HEADING_UNIT = re.compile(rf"(?i)\b({TIME_UNIT})\b")


RATE_WORDS = re.compile(r"(?i)/s\b|/sec|bandwidth|throughput|rate|flops|performance")


def is_constant(values):
    """A value that is the same in every run of both builds (at least three runs: the unmeasured
    one too) is something the program prints, such as an expected time or a device property on
    a line that also names a unit, not a measurement; counted, it pulls the geomean to 1."""
    return len(values) >= 3 and len(set(values)) == 1


# A results table of the kind SHOC's and utcs-scea/altis's ResultDatabase prints: a header
# `test atts units median mean stddev min max ...`, then one row per measurement.
TABLE_HEADER = re.compile(r"^\s*test\s+atts\s+units\s+median\b")
TIME_SCALE = {"s": 1e3, "sec": 1e3, "secs": 1e3, "us": 1e-3, "usec": 1e-3, "usecs": 1e-3,
              "ns": 1e-6}


def to_ms(value, unit):
    u = unit.lower()
    return value * TIME_SCALE.get(u, 1e3 if u.startswith("second") else
                                  1e-3 if u.startswith("micro") else 1.0)


def table_row(line):
    """(key, (value, higher_is_better)) of a results table's row: its median, in ms where the
    unit is a time; None for a row whose unit is neither a time nor a rate (counts, and the
    ratios of two times that such tables also print, unit `N`)."""
    words = line.split()
    if len(words) < 4:
        return None
    name, atts, unit, median = words[0], words[1], words[2], words[3]
    try:
        value = float(median)
    except ValueError:
        return None
    key = f"{name} {NUMBERS.sub('#', atts)} {unit}#median"
    if re.fullmatch(TIME_UNIT, unit):
        return key, (to_ms(value, unit), False)
    if re.fullmatch(RATE_UNIT, unit):
        return key, (value, True)
    return None


# A table whose header names its columns, some with a unit (BabelStream's `Function  MB/s
# Min (sec)  Max  Average`), columns padded with two or more spaces, then one row per
# measurement: a name and one number per column after the first. A column with no unit of
# its own has the unit of the column before it (`Max` and `Average` are seconds too).
COLUMN_UNIT = re.compile(rf"(?i)(?:^|[\s(])({TIME_UNIT}|{RATE_UNIT})\)?$")


def column_header(line):
    """The units of a column table's columns after the first (None where none is known), or
    None if `line` is not such a header."""
    if re.search(r"\d", line):
        return None
    heads = [h for h in re.split(r"\s{2,}", line.strip()) if h]
    if len(heads) < 3:
        return None
    units, unit = [], None
    for h in heads[1:]:
        if m := COLUMN_UNIT.search(h):
            unit = m.group(1)
        units.append(unit)
    return units if any(units) else None


def column_row(line, units):
    """{column index: (value, higher_is_better)} of a column table's row, keyed by its name;
    None if the line is not one (the table has ended)."""
    words = line.split()
    if len(words) < len(units) + 1:
        return None
    cells = words[-len(units):]
    try:
        values = [float(c) for c in cells]
    except ValueError:
        return None
    name = " ".join(words[:-len(units)])
    row = {}
    for j, (value, unit) in enumerate(zip(values, units)):
        if unit is None:
            continue
        rate = bool(re.fullmatch(RATE_UNIT, unit))
        row[f"{name}#col{j}"] = (value if rate else to_ms(value, unit), rate)
    return row


def timings(text):
    """Values on timing lines: {key: (value, higher_is_better)}. A number followed by a unit
    says what it is; on a timing line with no such pair, every number counts, as a rate where
    the line speaks of one (e.g. "Bandwidth (GB/s) for pitch linear: 1.8e+03"). In a results
    table (TABLE_HEADER) each row counts once, with its median; in a column table
    (`column_header`) each cell under a column with a unit."""
    found, seen = {}, {}
    table, heading, columns = False, None, None
    for i, line in enumerate(text.splitlines()):
        if columns is not None:
            row = column_row(line, columns)
            if row is not None:
                found.update(row)
                continue
            columns = None
        if (units := column_header(line)) is not None:
            columns = units
            continue
        if heading is not None and (m := LONE_NUMBER.fullmatch(line)):
            key, unit, rate = heading
            value = float(m.group(1))
            found[key] = (value if rate or unit is None else to_ms(value, unit), rate)
        heading = None
        if TABLE_HEADER.match(line):
            table = True
            continue
        if table:
            if not line.strip():
                table = False
                continue
            row = table_row(line)
            if row is not None:
                key, value = row
                seen[key] = seen.get(key, 0) + 1
                found[key if seen[key] == 1 else f"{key}@{seen[key]}"] = value
            continue
        if not TIMING_LINE.search(line):
            continue
        # Lines that read the same once their numbers are masked (one per size, say) are told
        # apart by their order; white space is not output (tables pad their columns).
        masked = " ".join(NUMBERS.sub("#", line).split())
        seen[masked] = seen.get(masked, 0) + 1
        if seen[masked] > 1:
            masked += f"@{seen[masked]}"
        if not NUMBERS.search(line):
            unit = HEADING_UNIT.search(line)
            heading = (f"{masked}#next", unit and unit.group(1), bool(RATE_WORDS.search(line)))
            continue
        if not TIMED.search(line):
            rate = bool(RATE_WORDS.search(line))
            for j, m in enumerate(NUMBERS.finditer(line)):
                found[f"{masked}#{j}"] = (abs(float(m.group(0))), rate)
            continue
        for j, m in enumerate(TIMED.finditer(line)):
            unit = m.group(2)
            rate = bool(re.fullmatch(RATE_UNIT, unit))
            value = float(m.group(1))
            if not rate:
                value = to_ms(value, unit)
            key = f"{masked}#{j}"
            found[key] = (value, rate)
    return found


def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def settings(script, checkout, default_build):
    """The arguments (CHECKOUT CUPREEMPT_BINARY RUNTIME_LIB_DIR) and the EXT_ settings that the
    suites share, with the build and output folders made."""
    if len(sys.argv) < 4:
        raise SystemExit(f"usage: {script} {checkout} CUPREEMPT_BINARY RUNTIME_LIB_DIR")
    repo = Path(__file__).resolve().parent.parent
    build = Path(os.environ.get("EXT_BUILD", repo / default_build)).resolve()
    s = SimpleNamespace(
        root=Path(sys.argv[1]).resolve(), cli=str(Path(sys.argv[2]).resolve()),
        lib=Path(sys.argv[3]).resolve(), repo=repo, build=build,
        out=Path(os.environ.get("OUT", build / "out")).resolve(),
        runs=int(os.environ.get("EXT_RUNS", "3")),
        timeout=int(os.environ.get("EXT_TIMEOUT", "120")),
        diff_reruns=int(os.environ.get("EXT_DIFF_RERUNS", "6")),
        arch=os.environ.get("EXT_ARCH", "90"),
        jobs=int(os.environ.get("EXT_JOBS", str(os.cpu_count() or 2))),
        only=os.environ.get("EXT_ONLY"),
        confirm_over=float(os.environ.get("EXT_CONFIRM_OVER", "1.05")),
        confirm_runs=int(os.environ.get("EXT_CONFIRM_RUNS", "9")))
    s.out.mkdir(parents=True, exist_ok=True)
    build.mkdir(parents=True, exist_ok=True)
    return s


def shard(items):
    """EXT_SHARD=k/n: every n-th item from the k-th, so that n runs (on n machines or in n calls
    of a time-limited one) cover the suite; --report merges their results."""
    if spec := os.environ.get("EXT_SHARD"):
        k, n = (int(x) for x in spec.split("/"))
        items = [x for i, x in enumerate(items) if i % n == k - 1]
        log(f"shard {k}/{n}: {len(items)}")
    return items


def main():
    started = time.time()  # EXT_BUDGET_S counts the build too: a time-limited machine's clock
    s = settings("external_suite.py", "SAMPLES_DIR", "target/external")
    samples_dir, cli, lib, repo, build, out = s.root, s.cli, s.lib, s.repo, s.build, s.out
    runs, timeout, diff_reruns, arch, jobs, only = (s.runs, s.timeout, s.diff_reruns, s.arch,
                                                    s.jobs, s.only)

    samples, skipped = select_samples(samples_dir, only)
    log(f"{len(samples)} self-contained samples, {len(skipped)} skipped")
    samples = shard(samples)
    orig_tree, tr_tree = build / "orig", build / "transformed"
    if not os.environ.get("EXT_SKIP_BUILD"):
        prepare_tree(samples_dir, orig_tree, samples, arch)
        prepare_tree(samples_dir, tr_tree, samples, arch)
        # EXT_MODE=launcher: built as a CMake user builds with cupreempt_enable, every compile
        # through the compiler launcher (which splits units, docs/build.md); else the sources
        # are transformed in place with `cupreempt transform` and built with nvcc.
        launcher = os.environ.get("EXT_MODE", "transform") == "launcher"
        counts = transform_tree(cli, tr_tree, samples, in_place=not launcher)
        (build / "kernels.json").write_text(json.dumps(counts))
        link = f"-L{lib} -Wl,-rpath,{lib} -lcupreempt_runtime"
        configure_and_build(orig_tree, [], jobs)
        how = ([f"-DCMAKE_CUDA_COMPILER_LAUNCHER={cli}"] if launcher
               else [f"-DCMAKE_CUDA_FLAGS=-I{repo / 'cuda_support'}"])
        configure_and_build(tr_tree, [
            *how,
            f"-DCMAKE_CUDA_STANDARD_LIBRARIES={link}",
            f"-DCMAKE_CXX_STANDARD_LIBRARIES={link}",
        ], jobs)
    counts = json.loads((build / "kernels.json").read_text())
    args_file = samples_dir / "test_args.json"
    args_cfg = json.loads(args_file.read_text()) if args_file.exists() else {}

    # Results are kept per sample, so that a run cut short (a time budget) goes on later
    # with EXT_SKIP_BUILD=1 where it stopped; EXT_RERUN=1 runs everything again.
    results = build / "results"
    results.mkdir(exist_ok=True)
    budget = float(os.environ.get("EXT_BUDGET_S", "inf"))
    confirm_over = float(os.environ.get("EXT_CONFIRM_OVER", "1.05"))
    confirm_runs = int(os.environ.get("EXT_CONFIRM_RUNS", "9"))
    rows, logs = [], {}
    for rel, _ in samples:
        name = rel.name
        cached = results / f"{name}.json"
        if cached.exists() and not os.environ.get("EXT_RERUN"):
            rows.append(json.loads(cached.read_text()))
            continue
        if time.time() - started > budget:
            log(f"{name}: not run (time budget)")
            continue
        exe_o, exe_t = find_exe(orig_tree / "build", rel), find_exe(tr_tree / "build", rel)
        args = sample_args(args_cfg, name)
        row = {"name": name, "kernels": counts.get(name, (0, 0))}
        tr_log = tr_tree / "build.log"
        if tr_log.exists():
            as_written = units_compiled_as_written(tr_log.read_text(errors="replace"),
                                                   tr_tree / rel)
            if as_written:
                row["as_written"] = as_written
        if args is None:
            row["status"] = "skipped (test_args.json)"
            rows.append(row)
            continue
        if not exe_o:
            row["status"] = "original does not build"
            rows.append(row)
            continue
        if not exe_t:
            row["status"] = "TRANSFORMED DOES NOT BUILD"
            rows.append(row)
            continue
        logs[name] = compare_builds(row, exe_o, exe_t, args, runs, timeout, diff_reruns,
                                    orig_tree, tr_tree)
        if needs_confirming(row, runs, confirm_over, confirm_runs) and \
                time.time() - started <= budget:
            log(f"{name}: ratio {row['ratio']:.3f} over {confirm_over}: "
                f"{confirm_runs} runs of each build to confirm it")
            row = {k: v for k, v in row.items() if k in ("name", "kernels", "as_written")}
            logs[name] = compare_builds(row, exe_o, exe_t, args, confirm_runs, timeout,
                                        diff_reruns, orig_tree, tr_tree)
            row["runs"] = confirm_runs
        rows.append(row)
        cached.write_text(json.dumps(row))
        save_results(out, rows, skipped, runs)
        (results / f"{name}.log.json").write_text(json.dumps(logs[name]))
        save_logs(out, results)  # after every program: a run cut short keeps its outputs
        log(f"{name}: {row['status']}, ratio {row['ratio'] and round(row['ratio'], 3)} "
            f"({row.get('values', 0)} values), wall {row['wall'][0]:.2f}/{row['wall'][1]:.2f} s")

    save_results(out, rows, skipped, runs)
    report(rows, [(d.name, why) for d, why in skipped], out, runs)
    save_logs(out, results)
    return exit_status(rows)


def needs_confirming(row, runs, over, confirm_runs):
    """Whether a program's ratio from `runs` runs of each build is over `over` (a slowdown
    to confirm) and more runs (`confirm_runs`) would measure it again: programs that time one
    launch of a few microseconds move by tens of percent between two runs of either build."""
    return (row.get("status") == "identical" and row.get("ratio") is not None
            and row["ratio"] > over and confirm_runs > runs)


def compare_builds(row, exe_o: Path, exe_t: Path, args, runs, timeout, diff_reruns,
                   orig_tree: Path, tr_tree: Path, long_s=math.inf):
    """Runs both builds of one program (one unmeasured original run, then the transformed and
    the original alternately, `runs` each), compares their masked outputs and sets the row's
    status, ratio and timings. An original whose first run takes longer than `long_s` seconds
    is not run again (a time-limited machine measures more programs). Returns the first outputs
    of each build, for the logs."""
    # One unmeasured original run first (caches, files). Lines that differ between the
    # original's runs are the program's own randomness (or timings): masked below.
    # A program that would be left out as long is stopped when it gets there.
    first_limit = min(timeout, long_s)
    o_runs = [run_once(exe_o, args, first_limit, orig_tree)]
    t_runs = []
    rc, out, took = o_runs[0]
    if rc == "timeout" and first_limit == timeout:  # no time spent on runs that cannot be compared
        row["status"] = "original times out"
        row.update(ratio=None, values=0, shown=None, detail=[], wall=(timeout, 0.0))
        return {"orig": "", "transformed": "", "rc": ["timeout", None]}
    if rc == "timeout" or took > long_s:
        row["status"] = f"runs longer than {long_s:g} s"
        row.update(ratio=None, values=0, shown=None, detail=[], wall=(min(took, first_limit), 0.0))
        return {"orig": out, "transformed": "", "rc": [rc, None]}
    for _ in range(runs):
        t_runs.append(run_once(exe_t, args, timeout, tr_tree))
        o_runs.append(run_once(exe_o, args, timeout, orig_tree))
    unstable = unstable_lines(o_runs)
    differing = None  # the first transformed run that differs from the original
    if o_runs[0][0] == 2 and "waiv" in o_runs[0][1].lower():
        row["status"] = "waived by the program"
    elif any(r[0] == "timeout" for r in o_runs):
        row["status"] = "original times out"
    else:
        differing = first_differing(o_runs[0], t_runs, unstable)
        if differing is not None:
            # Some programs print what depends on timing (a memory footprint that depends
            # on when a graph finished): the original may vary there too, only rarely.
            # More runs of the original, unmeasured, to find such lines; a line that the
            # original never varies on still makes the outputs DIFFERENT.
            extra = [run_once(exe_o, args, timeout, orig_tree) for _ in range(diff_reruns)]
            unstable = unstable_lines(o_runs + extra)
            differing = first_differing(o_runs[0], t_runs, unstable)
        row["status"] = "identical" if differing is None else "DIFFERENT"
        row["unstable_lines"] = len(unstable)
        if differing is not None:
            row["differing_lines"] = differing_lines(o_runs[0][1], differing[1], unstable)
    shown_t = differing if differing is not None else (t_runs[0] if t_runs else None)
    log_entry = {"orig": o_runs[0][1], "transformed": shown_t[1] if shown_t else "",
                 "rc": [o_runs[0][0], shown_t[0] if shown_t else None]}
    # The programs' own timings: median per value over the runs, then one ratio per
    # program (geomean over its values), > 1 meaning the transformed build is slower.
    ot = [timings(r[1]) for r in o_runs[1:]]
    tt = [timings(r[1]) for r in t_runs]
    first = timings(o_runs[0][1])
    ratios, shown, detail = [], None, []
    only = os.environ.get("EXT_TIMING_ONLY")  # the values a suite's report counts
    for key in ot[0] if ot else {}:
        if only and not re.search(only, key):
            continue
        ov = [t[key][0] for t in ot if key in t]
        tv = [t[key][0] for t in tt if key in t]
        if len(ov) != len(ot) or len(tv) != len(tt):
            continue
        if is_constant(ov + tv + ([first[key][0]] if key in first else [])):
            continue
        mo, mt = statistics.median(ov), statistics.median(tv)
        rate = ot[0][key][1]
        if mo <= 0 or mt <= 0:
            continue
        ratios.append(mo / mt if rate else mt / mo)
        detail.append((key, mo, mt, rate))
        if shown is None:
            shown = (key.split("#")[0][:48], mo, mt, rate)
    row["ratio"] = geomean(ratios) if ratios else None
    row["values"] = len(ratios)
    row["shown"] = shown
    row["detail"] = detail  # every value: (line, original median, transformed median, rate)
    row["wall"] = (statistics.median(r[2] for r in o_runs[1:]),
                   statistics.median(r[2] for r in t_runs))
    return log_entry


def parse_run_list(text):
    """[(name, executable relative to the build folder (or the checkout), [arguments])]: one command per line,
    `NAME EXECUTABLE ARGS...`, `#` comments and blank lines skipped; names are unique."""
    commands, seen = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        if len(words) < 2:
            raise SystemExit(f"run list line {n}: want NAME EXECUTABLE [ARGS...]: {line!r}")
        if words[0] in seen:
            raise SystemExit(f"run list line {n}: {words[0]} named twice")
        seen.add(words[0])
        commands.append((words[0], words[1], words[2:]))
    return commands


def compare_program(row, name, exe_o: Path, exe_t: Path, args, s, trees, results: Path,
                    long_s=math.inf):
    """compare_builds for one program of a suite with settings `s` (settings()), its first
    outputs kept in `results/NAME.log.json`. A program whose original fails (input files it
    could not find, say) says nothing about the transformed build, whatever the outputs. A
    ratio over `s.confirm_over` is measured again with `s.confirm_runs` runs of each build
    (needs_confirming), and the row keeps the second figure."""
    log_entry = compare_builds(row, exe_o, exe_t, args, s.runs, s.timeout, s.diff_reruns,
                               trees[0], trees[1], long_s)
    confirm_over = getattr(s, "confirm_over", math.inf)
    confirm_runs = getattr(s, "confirm_runs", 0)
    if needs_confirming(row, s.runs, confirm_over, confirm_runs):
        log(f"{name}: ratio {row['ratio']:.3f} over {confirm_over}: "
            f"{confirm_runs} runs of each build to confirm it")
        for key in [k for k in row if k not in ("name", "kernels", "as_written")]:
            del row[key]
        log_entry = compare_builds(row, exe_o, exe_t, args, confirm_runs, s.timeout,
                                   s.diff_reruns, trees[0], trees[1], long_s)
        row["runs"] = confirm_runs
    (results / f"{name}.log.json").write_text(json.dumps(log_entry))
    if log_entry["rc"][0] not in (0, "timeout") and row["status"] == "identical":
        row["status"] = f"original fails (exit {log_entry['rc'][0]})"
    log(f"{name}: {row['status']}, ratio {row['ratio'] and round(row['ratio'], 3)} "
        f"({row['values']} values), wall {row['wall'][0]:.2f}/{row['wall'][1]:.2f} s")


def exit_status(rows):
    """1 where a program's outputs differ or its transformed build failed, else 0."""
    bad = [r for r in rows if r["status"] in ("DIFFERENT", "TRANSFORMED DOES NOT BUILD")]
    return 1 if bad else 0


def report(rows, skipped, out: Path, runs):
    timed = [r for r in rows if r.get("ratio")]
    gm = geomean([r["ratio"] for r in timed])
    worst = max(timed, key=lambda r: r["ratio"]) if timed else None
    ran = [r for r in rows if r["status"] in ("identical", "DIFFERENT")]
    as_written = [r["name"] for r in rows if r.get("as_written")]
    lines = [
        f"Programs run: {len(ran)}; outputs identical: "
        f"{sum(r['status'] == 'identical' for r in ran)}; with printed timings: {len(timed)}.",
        "",
        "Programs with units the launcher compiled as written (their transformed copy did not "
        f"compile): {', '.join(as_written) if as_written else 'none'}.",
        "",
        f"Geomean slowdown: {gm:.2f}x" if timed else "Geomean slowdown: n/a",
        "",
        f"Worst: {worst['name']} {worst['ratio']:.2f}x" if worst else "",
        "",
        "| program | kernels transformed/refused | output | printed timing (first of the values) | original | transformed | ratio (all values) | wall original / transformed (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        k = r["kernels"]
        if r.get("shown"):
            label, mo, mt, rate = r["shown"]
            unit = "(rate)" if rate else "ms"
            cells = [label.replace("|", "/"), f"{mo:.4g} {unit}", f"{mt:.4g} {unit}",
                     f"{r['ratio']:.3f}x ({r['values']})"]
        else:
            cells = ["—", "", "", ""]
        wall = f"{r['wall'][0]:.2f} / {r['wall'][1]:.2f}" if r.get("wall") else ""
        status = r["status"]
        if r.get("as_written"):
            status += f" ({len(r['as_written'])} units as written)"
        lines.append(f"| {r['name']} | {k[0]}/{k[1]} | {status} | " + " | ".join(cells) +
                     f" | {wall} |")
    lines += ["", f"Medians of {runs} runs of each build, run alternately after one unmeasured "
              "run of the original."]
    rerun = {}
    for r in rows:
        if r.get("runs", runs) != runs:
            rerun.setdefault(r["runs"], []).append(r["name"])
    for n, names in sorted(rerun.items()):
        lines[-1] += f" Rerun with {n} runs each: {', '.join(names)}."
    for r in rows:
        if r.get("differing_lines"):
            lines += ["", f"{r['name']}: lines that differ (numbers masked where the original "
                      "varies them on its own):"]
            lines += [f"- line {n}: `{a.strip()}` vs `{b.strip()}`"
                      for n, a, b in r["differing_lines"]]
    lines += ["", "Skipped samples:", ""]
    lines += [f"- {name}: {why}" for name, why in skipped]
    text = "\n".join(lines) + "\n"
    (out / "external.md").write_text(text)
    print(text)


def save_logs(out: Path, results: Path):
    """Each program's first output of each build (external-logs.json), for DIFFERENT rows."""
    with open(out / "external-logs.json", "w") as f:
        json.dump({p.name[:-9]: json.loads(p.read_text())
                   for p in sorted(results.glob("*.log.json"))}, f)


def save_results(out: Path, rows, skipped, runs):
    """Every row so far, after each program: a run cut short keeps what it measured."""
    data = {"rows": rows, "skipped": [(d.name, why) for d, why in skipped], "runs": runs}
    (out / "external-results.json").write_text(json.dumps(data))


def merged_rows(results):
    """Rows of several runs' results in order; a program's row in a later run replaces its
    earlier one (a rerun with more runs of programs whose first figures were noisy). Each row
    keeps its own run count (a row confirmed with more runs says so itself). Returns (rows,
    skipped, runs of the first results)."""
    by_name, skipped, runs = {}, [], None
    for data in results:
        for r in data["rows"]:
            # In the earlier row's place.
            by_name[r["name"]] = {"runs": data["runs"], **r}
        skipped = skipped or data["skipped"]
        runs = data["runs"] if runs is None else runs
    return list(by_name.values()), skipped, runs or 0


def merge_reports(out: Path, files):
    """--report OUT_DIR RESULTS.json...: one table from the results of several runs (shards,
    then reruns: see merged_rows)."""
    rows, skipped, runs = merged_rows(json.loads(Path(f).read_text()) for f in files)
    out.mkdir(parents=True, exist_ok=True)
    report(rows, skipped, out, runs)


def self_test():
    """--self-test: the timing parser on lines of the kind the samples print, and the runtime's
    own lines left out of a run's output."""
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        prog = Path(t) / "prog.sh"
        prog.write_text("#!/bin/sh\necho result 42\necho 'cupreempt: chaos: 9 launches' >&2\n"
                        "echo 'error: cupreempt: kept' >&2\n")
        prog.chmod(0o755)
        rc, out, _ = run_once(prog, [], 10, Path(t))
        assert (rc, out) == (0, "result 42\nerror: cupreempt: kept\n"), (rc, out)
    cases = {
        "Processing time: 0.015000 (ms)": {"Processing time: # (ms)#0": (0.015, False)},
        "Measured time for sample = 0.062s": {"Measured time for sample = #s#0": (62.0, False)},
        "Performance= 8510.00 GFlop/s, Time= 0.015 msec, Size= 2 Ops": {
            "Performance= # GFlop/s, Time= # msec, Size= # Ops#0": (8510.0, True),
            "Performance= # GFlop/s, Time= # msec, Size= # Ops#1": (0.015, False)},
        "Bandwidth (GB/s) for pitch linear: 1.8e+03": {
            "Bandwidth (GB/s) for pitch linear: #e#": None},
        "> Detected Compute SM 9.0 hardware with 132 multi-processors": {},
        "[NVIDIA H100] has 132 MP(s) x 128 (Cores/MP) = 16896 (Cores)": {},
        "FDTD on 376 x 376 x 376 volume with symmetric filter radius 4 for 5 timesteps...": {},
        "Iterations to be timed: 100": {},
        "Number of sims: 100000": {},
        "scan, Throughput = 47.5 MElements/s, Time = 0.00002 s, Size = 1024 Elements\n"
        "scan, Throughput = 6511.3 MElements/s, Time = 0.00004 s, Size = 262144 Elements": {
            "scan, Throughput = # MElements/s, Time = # s, Size = # Elements#0": (47.5, True),
            "scan, Throughput = # MElements/s, Time = # s, Size = # Elements#1": (0.02, False),
            "scan, Throughput = # MElements/s, Time = # s, Size = # Elements@2#0": (6511.3, True),
            "scan, Throughput = # MElements/s, Time = # s, Size = # Elements@2#1": (0.04, False)},
        "Detected 1 CUDA Capable device(s)": {},
        # A heading with no number: its value is a lone number on the next line.
        "GPU Time in seconds:\n0.012500\nCPU Time in seconds:\n1.5\nNon-Matching: 0": {
            "GPU Time in seconds:#next": (12.5, False),
            "CPU Time in seconds:#next": (1500.0, False)},
        "Timing results:\nkernel 3": {},
    }
    for line, want in cases.items():
        got = timings(line)
        if "Bandwidth" in line:
            assert got and all(rate for _, rate in got.values()), (line, got)
            continue
        assert got == want, (line, got, want)
    # A results table: each row's median, times in ms, rates as rates, other units left out.
    table = ("test   atts   units   median   mean   stddev   min   max\n"
             "bfs_kernel_time   1048576V,3145728E   sec   0.0123   0.0125   0.0003   0.0121   0.0131\n"
             "DP-Add1   Size:1048576   GFLOPS   1234.5   1230.1   3.2   1220.0   1240.0\n"
             "bfs_parity   1048576V,3145728E   N   1.5   1.4   0.1   1.2   1.6\n"
             "\nKernel time 2.0 ms\n")
    got = timings(table)
    assert got == {"bfs_kernel_time #V,#E sec#median": (12.3, False),
                   "DP-Add1 Size:# GFLOPS#median": (1234.5, True),
                   "Kernel time # ms#0": (2.0, False)}, got
    assert is_constant([0.33, 0.33, 0.33]) and not is_constant([0.33, 0.34, 0.33])
    assert not is_constant([1.0, 1.0])
    # Output comparison: a line the original varies (here its third) is masked, others not.
    o_runs = [(0, "a\nfootprint 64\nfootprint 128\n", 0.1), (0, "a\nfootprint 64\nfootprint 64\n", 0.1)]
    unstable = unstable_lines(o_runs)
    assert unstable == {2}, unstable
    same = (0, "a\nfootprint 64\nfootprint 192\n", 0.1)
    assert first_differing(o_runs[0], [same], unstable) is None
    other = (0, "a\nfootprint 32\nfootprint 64\n", 0.1)
    assert first_differing(o_runs[0], [same, other], unstable) == other
    assert differing_lines(o_runs[0][1], other[1], unstable) == [(2, "footprint 64", "footprint 32")]
    assert first_differing(o_runs[0], [(1, same[1], 0.1)], unstable) is not None  # exit status
    # A heading's lone number is masked as a timing; a lone number elsewhere is compared.
    assert mask("GPU Time in seconds:\n0.0125\n7\n", set()) == ["GPU Time in seconds:", "#", "7"]
    # Padding is not output: a table's columns move with the widths of its (masked) numbers.
    table = (0, "kernel_time  sec   1.25    2.5\nresult 7\n", 0.1)
    padded = (0, "kernel_time  sec   10.125  2.5\nresult   7\n", 0.1)
    assert first_differing(table, [padded], set()) is None
    assert first_differing(table, [(0, "kernel_time sec 1.25 2.5\nresult 8\n", 0.1)],
                           set()) is not None
    # A column table: a header with units over columns padded apart, a column without a unit
    # takes the one before it; its rows end at a line that is not one.
    columns = timings("Function    MB/s        Min (sec)   Max\nCopy        3820411.110 0.00014"
                      "     0.00021\nDot         3870623.140 0.00014     0.00016\nDone 3 of 4\n")
    assert columns["Copy#col0"] == (3820411.110, True), columns
    assert abs(columns["Copy#col1"][0] - 0.14) < 1e-9 and not columns["Copy#col1"][1]
    assert abs(columns["Dot#col2"][0] - 0.16) < 1e-9 and not columns["Dot#col2"][1]
    assert not any(k.startswith("Done") for k in columns), columns
    assert column_header("Name   Value   Count") is None  # no unit: not a timing table
    assert column_header("Run 2   ms   total") is None  # a number: a line of output
    # The launcher's warning for a unit compiled as written names its sources.
    log_text = ("cupreempt: warning: /t/a/x.cu, /t/a/y.cu: the transformed source did not "
                "compile; compiled as written, so ...\ncupreempt: warning: /t/b/z.cu: the "
                "transformed source did not compile; compiled as written, so ...\n")
    assert units_compiled_as_written(log_text, Path("/t/a")) == ["/t/a/x.cu", "/t/a/y.cu"]
    assert units_compiled_as_written(log_text, Path("/t/c")) == []
    # A slowdown from few runs is measured again with more.
    assert needs_confirming({"status": "identical", "ratio": 1.2}, 2, 1.05, 9)
    assert not needs_confirming({"status": "identical", "ratio": 1.04}, 2, 1.05, 9)
    assert not needs_confirming({"status": "identical", "ratio": 1.2}, 9, 1.05, 9)
    assert not needs_confirming({"status": "DIFFERENT", "ratio": 1.2}, 2, 1.05, 9)
    assert not needs_confirming({"status": "identical", "ratio": None}, 2, 1.05, 9)
    # Merging: shards' rows in order; a rerun's row replaces the program's earlier one.
    shard1 = {"rows": [{"name": "a", "ratio": 1.3}, {"name": "b", "ratio": 1.0}], "skipped": [],
              "runs": 2}
    shard2 = {"rows": [{"name": "c", "ratio": 0.9}], "skipped": [], "runs": 2}
    rerun = {"rows": [{"name": "a", "ratio": 1.02}], "skipped": [], "runs": 9}
    rows, _, runs = merged_rows([shard1, shard2, rerun])
    assert [(r["name"], r["ratio"], r["runs"]) for r in rows] == [
        ("a", 1.02, 9), ("b", 1.0, 2), ("c", 0.9, 2)], rows
    assert runs == 2
    # One program of a suite: its first outputs kept, a failing original said so.
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        root = Path(t)
        prog = root / "p.sh"
        prog.write_text("#!/bin/sh\necho result 7\nexit 3\n")
        prog.chmod(0o755)
        row = {}
        settings_ = SimpleNamespace(runs=1, timeout=10, diff_reruns=0)
        compare_program(row, "p", prog, prog, [], settings_, (root, root), root)
        assert row["status"] == "original fails (exit 3)", row
        assert json.loads((root / "p.log.json").read_text())["rc"] == [3, 3]
        # A slowdown over the threshold is measured again with more runs (the row says so).
        slow = root / "slow.sh"
        slow.write_text("#!/bin/sh\n[ -f \"$0.t\" ] && echo 'Time: 2 ms' || echo 'Time: 1 ms'\n")
        slow.chmod(0o755)
        tr_copy = root / "t" / "slow.sh"
        tr_copy.parent.mkdir()
        shutil.copy(slow, tr_copy)
        (root / "t" / "slow.sh.t").write_text("")
        row = {"name": "slow"}
        settings_ = SimpleNamespace(runs=1, timeout=10, diff_reruns=0, confirm_over=1.05,
                                    confirm_runs=3)
        compare_program(row, "slow", slow, tr_copy, [], settings_, (root, root), root)
        assert row["runs"] == 3 and row["ratio"] == 2.0 and row["name"] == "slow", row
    assert exit_status([row]) == 0
    assert exit_status([row, {"status": "DIFFERENT"}]) == 1
    print("external_suite self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[1] == "--report":
        merge_reports(Path(sys.argv[2]), sys.argv[3:])
        sys.exit(0)
    sys.exit(main())
