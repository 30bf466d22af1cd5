//! The command line, end to end: outputs, exit codes, what is (not) written.

mod support;

use support::{cupreempt, stderr, stdout};

fn fixture(name: &str) -> String {
    support::root()
        .join("fixtures")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn transform_prints_to_stdout_and_writes_with_o() {
    let dir = support::tempdir("cli-o");
    let o = cupreempt(&["transform", &fixture("grid_1d.cu")], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("#include \"cupreempt.cuh\"")
            && stdout(&o).contains("saxpy__cupreempt(")
    );
    let out = dir.join("out.cu");
    let o = cupreempt(
        &[
            "transform",
            &fixture("grid_1d.cu"),
            "-o",
            out.to_str().unwrap(),
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("cupreempt::launch<saxpy__cupreempt_kernels>"));
}

#[test]
fn transform_reads_standard_input() {
    let dir = support::tempdir("cli-stdin");
    let src = std::fs::read(fixture("grid_1d.cu")).unwrap();
    let from_file = cupreempt(&["transform", &fixture("grid_1d.cu")], &dir);
    let o = support::cupreempt_with_stdin(&["transform", "-"], &dir, &src);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        stdout(&from_file),
        "same output as from the file"
    );
    // Diagnostics name standard input.
    let bad = b"__global__ void k(int* p) { if (threadIdx.x > 3) return; __syncthreads(); p[0] = 1; }\nvoid f(int* p) { k<<<4096, 128>>>(p); }\n";
    let o = support::cupreempt_with_stdin(&["check", "-"], &dir, bad);
    assert!(
        stderr(&o).contains("<stdin>") || stdout(&o).contains("<stdin>"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    // -o writes a file; --in-place and --out-dir have no file to work on.
    let out = dir.join("from_stdin.cu");
    let o =
        support::cupreempt_with_stdin(&["transform", "-", "-o", out.to_str().unwrap()], &dir, &src);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), stdout(&from_file));
    for extra in [&["--in-place"][..], &["--out-dir", "outs"][..]] {
        let mut args = vec!["transform", "-"];
        args.extend_from_slice(extra);
        let o = support::cupreempt_with_stdin(&args, &dir, &src);
        assert!(!o.status.success(), "{extra:?} accepted");
        assert!(stderr(&o).contains("standard input"), "{}", stderr(&o));
    }
    assert!(!dir.join("outs").exists(), "nothing written for --out-dir");
}

#[test]
fn a_file_with_errors_is_skipped_the_others_are_written() {
    let dir = support::tempdir("cli-keep");
    let inputs = dir.join("in/sub");
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::copy(fixture("grid_sync.cu"), inputs.join("grid_sync.cu")).unwrap();
    std::fs::copy(fixture("grid_1d.cu"), dir.join("in/grid_1d.cu")).unwrap();
    let out = dir.join("out");
    let o = cupreempt(&["transform", "in", "--out-dir", "out"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("CP002") && stderr(&o).contains("grid_sync.cu not written"),
        "{}",
        stderr(&o)
    );
    assert!(
        !out.join("sub/grid_sync.cu").exists(),
        "a file with errors is not written"
    );
    assert!(
        out.join("grid_1d.cu").exists(),
        "the other files are written on their own"
    );
    assert!(
        stderr(&o).contains(
            "1 files written, 0 unchanged, 1 skipped; 2 kernels transformed, 1 refused (CP002 ×1); 0 warnings"
        ),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&out).unwrap();

    let o = cupreempt(
        &["transform", "in", "--out-dir", "out", "--keep-going"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let refused = std::fs::read_to_string(out.join("sub/grid_sync.cu")).unwrap();
    // The refused kernel is untouched, the other kernel of the file is transformed.
    assert!(refused.contains("__global__ void two_phase(float* data"));
    assert!(refused.contains("simple_copy__cupreempt("));
    assert!(out.join("grid_1d.cu").exists());
}

#[test]
fn in_place_keeps_a_backup_and_a_second_run_changes_nothing() {
    let dir = support::tempdir("cli-inplace");
    let file = dir.join("k.cu");
    let original = std::fs::read_to_string(fixture("grid_1d.cu")).unwrap();
    std::fs::write(&file, &original).unwrap();
    let o = cupreempt(&["transform", "--in-place", "k.cu"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(dir.join("k.cu.orig")).unwrap(),
        original
    );
    let transformed = std::fs::read_to_string(&file).unwrap();
    assert!(transformed.contains("saxpy__cupreempt_body"));

    // Re-running is idempotent: the file is recognised, left as it is with a note, counted as
    // unchanged, and the run succeeds; the backup of the original is never overwritten.
    let o = cupreempt(&["transform", "--in-place", "k.cu"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("CP009"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 files written, 1 unchanged, 0 skipped"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), transformed);
    assert_eq!(
        std::fs::read_to_string(dir.join("k.cu.orig")).unwrap(),
        original
    );
    assert!(!dir.join("k.cu.orig.1").exists());

    // A file that lost its include line but holds generated wrappers is recognised too.
    let stripped = transformed.replace("#include \"cupreempt.cuh\"", "");
    std::fs::write(&file, &stripped).unwrap();
    let o = cupreempt(&["transform", "--in-place", "k.cu"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("CP009"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), stripped);
    assert_eq!(
        std::fs::read_to_string(dir.join("k.cu.orig")).unwrap(),
        original
    );

    // check agrees: nothing to refuse.
    let o = cupreempt(&["check", "k.cu"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// A file written in place is compiled as the original was: `#line N` directives without a
/// file name give its lines the original's numbers and leave `__FILE__` to the build;
/// `--no-line-directives` leaves them out.
#[test]
fn in_place_keeps_the_original_line_numbers() {
    let dir = support::tempdir("cli-inplace-lines");
    let original = std::fs::read_to_string(fixture("kernel_names_itself.cu")).unwrap();
    std::fs::write(dir.join("k.cu"), &original).unwrap();
    let o = cupreempt(&["transform", "--in-place", "k.cu"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("k.cu")).unwrap();
    let directives: Vec<&str> = out.lines().filter(|l| l.starts_with("#line ")).collect();
    assert!(!directives.is_empty(), "{out}");
    assert!(
        directives.iter().all(|d| !d.contains('"')),
        "{directives:?}"
    );
    // The body's statements keep their original numbers (counting from each directive).
    let number = |text: &str, lines: &mut dyn Iterator<Item = &str>| {
        let mut n = 0;
        for l in lines {
            n = match l.strip_prefix("#line ") {
                Some(d) => d.parse::<usize>().unwrap() - 1,
                None => n + 1,
            };
            if l.contains(text) {
                return n;
            }
        }
        panic!("no line holds {text}");
    };
    for text in ["assert(n > 0);", "out[i] = name[i % len]"] {
        assert_eq!(
            number(text, &mut out.lines()),
            number(text, &mut original.lines()),
            "{text}: {out}"
        );
    }

    std::fs::write(dir.join("k.cu"), &original).unwrap();
    std::fs::remove_file(dir.join("k.cu.orig")).unwrap();
    let o = cupreempt(
        &["transform", "--in-place", "--no-line-directives", "k.cu"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("k.cu")).unwrap();
    assert!(!out.contains("#line"), "{out}");
    let o = cupreempt(
        &[
            "transform",
            "--line-directives",
            "--no-line-directives",
            "k.cu",
        ],
        &dir,
    );
    assert!(!o.status.success());
}

#[test]
fn check_reports_per_kernel_with_exit_code_and_json() {
    let dir = support::tempdir("cli-check");
    let o = cupreempt(&["check", &fixture("grid_1d.cu")], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("saxpy: transformable (plain)"));

    let o = cupreempt(&["check", &fixture("grid_sync.cu")], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("two_phase: left as it is: CP002"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("simple_copy: transformable (plain)"));
    // The run ends with what it found, as `transform` does.
    let kernels = stdout(&o).lines().count();
    let refused = stdout(&o).matches(": left as it is: ").count();
    assert!(refused >= 1 && kernels > refused, "{}", stdout(&o));
    assert_eq!(
        stderr(&o).lines().last(),
        Some(
            format!(
                "cupreempt: 1 files checked; {kernels} kernels: {} transformable (0 predicated), {refused} refused (CP002 ×{refused}); 0 warnings",
                kernels - refused
            )
            .as_str()
        ),
        "{}",
        stderr(&o)
    );
    let o = cupreempt(
        &[
            "check",
            &fixture("thread_return_before_barrier.cu"),
            &fixture("grid_1d.cu"),
        ],
        &dir,
    );
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("cupreempt: 2 files checked; ") && !last.contains("(0 predicated)"),
        "{last}"
    );

    let o = cupreempt(
        &[
            "check",
            "--format",
            "json",
            &fixture("thread_return_before_barrier.cu"),
            &fixture("grid_sync.cu"),
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let files = v.as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["kernels"][0]["mode"], "predicated");
    let d = &files[1]["diagnostics"][0];
    assert_eq!(d["code"], "CP002");
    assert_eq!(d["severity"], "error");
    assert!(d["line"].as_u64().unwrap() > 1);
    assert!(files[0]["kernels"][0].get("loop_state_dynamic").is_none());

    // A kernel whose static shared memory fills the 48 KB: its loop keeps its state in dynamic
    // shared memory, and both outputs say so (only for such kernels in JSON).
    let limit = fixture("shared_memory_at_the_limit.cu");
    let o = cupreempt(&["check", &limit], &dir);
    let out = stdout(&o);
    assert!(
        out.contains("full: transformable (plain; the loop's state in dynamic shared memory)")
            && out.contains("edge: transformable (plain)\n"),
        "{out}"
    );
    let o = cupreempt(&["check", "--format", "json", &limit], &dir);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let kernels = v[0]["kernels"].as_array().unwrap();
    let dynamic: Vec<&str> = kernels
        .iter()
        .filter(|k| k["loop_state_dynamic"] == true)
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        dynamic,
        [
            "full",
            "with_helper",
            "with_file_array",
            "mixed",
            "scalar_limit",
            "quad_limit"
        ]
    );
}

#[test]
fn diff_variants() {
    let dir = support::tempdir("cli-diff");
    let o = cupreempt(&["diff", &fixture("helper_blockidx.cu")], &dir);
    assert!(o.status.success());
    let d = stdout(&o);
    assert!(
        d.contains("+#include \"cupreempt.cuh\"") && d.contains("@@"),
        "{d}"
    );
    assert!(!d.contains('\x1b'), "no colour when not a terminal");

    let o = cupreempt(&["diff", "--color", "always", &fixture("grid_1d.cu")], &dir);
    assert!(stdout(&o).contains("\x1b[32m+"));

    let o = cupreempt(
        &[
            "diff",
            "--kernel",
            "accumulate",
            &fixture("multiple_kernels.cu"),
        ],
        &dir,
    );
    let d = stdout(&o);
    assert!(
        d.contains("accumulate__cupreempt(") && !d.contains("init__cupreempt("),
        "{d}"
    );

    let o = cupreempt(
        &[
            "diff",
            "--side-by-side",
            "--width",
            "120",
            &fixture("grid_1d.cu"),
        ],
        &dir,
    );
    assert!(
        stdout(&o).lines().any(|l| l.contains(" | ")),
        "{}",
        stdout(&o)
    );

    let o = cupreempt(&["diff", "--stat", &fixture("grid_sync.cu")], &dir);
    let d = stdout(&o);
    assert!(
        d.contains("lines added")
            && d.contains("two_phase  left as it is (CP002)")
            && d.contains("simple_copy  transformed (plain)"),
        "{d}"
    );

    let o = cupreempt(&["diff", "--kernel", "nope", &fixture("grid_1d.cu")], &dir);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn selection_chunks_and_bad_arguments() {
    let dir = support::tempdir("cli-select");
    let o = cupreempt(
        &[
            "transform",
            "--select",
            "^accum",
            &fixture("multiple_kernels.cu"),
        ],
        &dir,
    );
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("accumulate__cupreempt(") && !out.contains("init__cupreempt("));
    assert!(
        out.contains("init<<<64, 256>>>"),
        "launches of unselected kernels stay"
    );

    let o = cupreempt(
        &[
            "transform",
            "--chunk",
            "accumulate=16",
            "--budget-us",
            "50",
            &fixture("multiple_kernels.cu"),
        ],
        &dir,
    );
    assert!(stdout(&o).contains("/*chunk=*/16, /*budget_ns=*/50000"));

    let o = cupreempt(
        &["transform", "--chunk", "zero=0", &fixture("grid_1d.cu")],
        &dir,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--chunk"));

    let o = cupreempt(&["transform", "missing.cu"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.cu"));
}

#[test]
fn headers_are_installed() {
    let dir = support::tempdir("cli-headers");
    let o = cupreempt(&["headers", "--out", "inc"], &dir);
    assert!(o.status.success());
    // Every file of cuda_support/, so that a new header cannot be left out (a header missing
    // from the installed set, such as runtime.h that launch.cuh includes, breaks compilation).
    let support_dir = support::root().join("cuda_support");
    let mut shipped_files = Vec::new();
    for entry in walk(&support_dir) {
        let rel = entry.strip_prefix(&support_dir).unwrap().to_path_buf();
        shipped_files.push(rel);
    }
    assert!(shipped_files.len() >= 5, "{shipped_files:?}");
    for f in shipped_files {
        let installed = std::fs::read_to_string(dir.join("inc").join(&f))
            .unwrap_or_else(|e| panic!("{} not installed: {e}", f.display()));
        let shipped = std::fs::read_to_string(support_dir.join(&f)).unwrap();
        assert_eq!(installed, shipped, "{}", f.display());
    }
}

/// Files under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn sim_compares_policies_on_one_workload() {
    let dir = support::tempdir("cli-sim");
    let o = cupreempt(
        &[
            "sim",
            "--generate",
            "300",
            "--seed",
            "5",
            "--compare",
            "fifo,srt",
            "--save-workload",
            "w.json",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.lines().next().unwrap().contains("ANTT") && t.contains("\nfifo ") && t.contains("\nsrt "),
        "{t}"
    );

    let o = cupreempt(
        &[
            "sim",
            "--workload",
            "w.json",
            "--policy",
            "srt",
            "--format",
            "json",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &v[0]["metrics"];
    assert_eq!(v[0]["policy"], "srt");
    assert_eq!(m["kernels"], 300);
    assert!(m["antt"].as_f64().unwrap() >= 1.0 && m["stp"].as_f64().unwrap() <= 300.0);
    // The saved workload replays the same run.
    assert!(
        t.contains(&format!("{:.3}", m["antt"].as_f64().unwrap())),
        "{t}"
    );

    // Spatial sharing: narrow kernels side by side on a GPU's SMs beat running them one by one.
    let o = cupreempt(
        &[
            "sim",
            "--generate",
            "200",
            "--seed",
            "3",
            "--load",
            "1.5",
            "--sms",
            "132",
            "--sm-widths",
            "16,33,66",
            "--compare",
            "fifo,spatial",
            "--format",
            "json",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[1]["policy"], "spatial");
    let stp = |i: usize| v[i]["metrics"]["stp"].as_f64().unwrap();
    assert!(stp(1) > stp(0), "spatial STP {} vs FIFO {}", stp(1), stp(0));
    assert!(v[1]["metrics"]["shrinks"].as_u64().is_some());

    // Policies on predicted durations: the error of what they were told is reported.
    let o = cupreempt(
        &[
            "sim",
            "--generate",
            "200",
            "--programs",
            "3",
            "--policy",
            "srt",
            "--predict",
            "--format",
            "json",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v[0]["metrics"]["estimate_error"].as_f64().unwrap() > 0.0);

    let o = cupreempt(&["sim", "--generate", "10", "--policy", "nope"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown policy"));

    // Every kernel of a run, on request: its NTTs average to the run's ANTT.
    let o = cupreempt(
        &[
            "sim",
            "--generate",
            "40",
            "--compare",
            "hpf,rr",
            "--format",
            "json",
            "--per-kernel",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for run in v.as_array().unwrap() {
        let kernels = run["kernels"].as_array().unwrap();
        assert_eq!(kernels.len(), 40);
        let mean = kernels
            .iter()
            .map(|k| k["ntt"].as_f64().unwrap())
            .sum::<f64>()
            / 40.0;
        let antt = run["metrics"]["antt"].as_f64().unwrap();
        assert!((mean - antt).abs() < 1e-9 * antt, "{mean} vs {antt}");
        assert!(kernels
            .iter()
            .all(|k| k["finish"].as_f64().unwrap() >= k["arrival"].as_f64().unwrap()));
    }
    assert!(v[1]["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["preemptions"].as_u64().unwrap() > 0));
    let o = cupreempt(&["sim", "--generate", "5", "--per-kernel"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--per-kernel needs --format json"));

    // Jobs of tasks from a table: every generated kernel is one of its rows.
    std::fs::write(
        dir.join("tasks.csv"),
        "name,work_us,max_sms\n# kinds of task\nsmall,100\nwide,5000,33\n",
    )
    .unwrap();
    let o = cupreempt(
        &[
            "sim",
            "--generate",
            "60",
            "--tasks-per-job",
            "4",
            "--job-window",
            "2",
            "--task-table",
            "tasks.csv",
            "--save-workload",
            "tasks.json",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tasks.json")).unwrap()).unwrap();
    let kernels = w["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 60);
    for k in kernels {
        match (k["name"].as_str().unwrap(), k["work"].as_f64().unwrap()) {
            ("small", work) => assert_eq!(work, 100.0),
            ("wide", work) => assert_eq!((work, k["max_sms"].as_u64()), (5000.0, Some(33))),
            other => panic!("not a row of the table: {other:?}"),
        }
    }
    std::fs::write(dir.join("bad.csv"), "small,100\nbad,-5\n").unwrap();
    let o = cupreempt(&["sim", "--generate", "5", "--task-table", "bad.csv"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.csv: line 2"), "{}", stderr(&o));
    let o = cupreempt(
        &[
            "sim",
            "--generate",
            "5",
            "--task-table",
            "tasks.csv",
            "--programs",
            "3",
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("leave out --programs"),
        "{}",
        stderr(&o)
    );

    // Plots on request: one GPU-share picture per policy and the response-time curves.
    let o = cupreempt(
        &[
            "sim",
            "--workload",
            "w.json",
            "--compare",
            "fifo,srt",
            "--plot",
            "plots",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "gpu-share-fifo.svg",
        "gpu-share-srt.svg",
        "response-times.svg",
    ] {
        let svg = std::fs::read_to_string(dir.join("plots").join(f)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{f}"
        );
    }
    let curves = std::fs::read_to_string(dir.join("plots/response-times.svg")).unwrap();
    assert_eq!(
        curves.matches("<polyline").count(),
        2,
        "one curve per policy"
    );
}

/// Several inputs are one program: a source's launches of a kernel defined in a header it
/// includes (another input) are rewritten, and the outputs compile together; a launch of a
/// kernel the source only declares goes through weak declarations of its wrappers.
#[test]
fn transform_rewrites_launches_of_kernels_in_included_inputs() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-program");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let project = support::root().join("examples/cmake-project/src");
    for f in ["scale.cuh", "scale_float.cu", "scale_double.cu"] {
        std::fs::copy(project.join(f), src.join(f)).unwrap();
    }
    std::fs::write(
        src.join("declared.cu"),
        "extern __global__ void elsewhere(float*);\nvoid go(float* p) { elsewhere<<<1, 32>>>(p); }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let float = std::fs::read_to_string(dir.join("out/scale_float.cu")).unwrap();
    let double = std::fs::read_to_string(dir.join("out/scale_double.cu")).unwrap();
    assert!(
        float.contains("cupreempt::launch<decltype(scale_add__cupreempt_select("),
        "{float}"
    );
    assert!(
        double.contains("cupreempt::launch<scale_add__cupreempt_kernels<double>>"),
        "{double}"
    );
    let declared = std::fs::read_to_string(dir.join("out/declared.cu")).unwrap();
    assert!(
        declared.contains("cupreempt::launch<elsewhere__cupreempt_kernels>(1, 32, 0, 0)(p)")
            && declared.contains("CUPREEMPT_WEAK elsewhere__cupreempt("),
        "{declared}"
    );
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    for f in ["scale_float", "scale_double", "declared"] {
        let obj = dir.join(format!("{f}.o"));
        support::compiles(
            support::nvcc_compile(&nvcc, &obj).arg(dir.join(format!("out/{f}.cu"))),
            f,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let bytes = std::fs::read(&obj).unwrap();
        // declared.o names the wrapper of `elsewhere` (a weak reference to another object).
        let wrapper = match f {
            "scale_float" => "scale_add__cupreemptIfE",
            "scale_double" => "scale_add__cupreemptIdE",
            _ => "elsewhere__cupreempt",
        };
        assert!(
            bytes
                .windows(wrapper.len())
                .any(|w| w == wrapper.as_bytes()),
            "{f}.o names no preemptible wrapper"
        );
    }
}

/// A unit that includes, inside a namespace, a header a run of its own transforms (a folder
/// at a time, as a miner's per-coin units include their shared kernels' headers), the
/// header's run first (`header_first`) or the unit's: the unit includes cupreempt's header
/// first, at file scope, so that the header's own include of it (and the standard headers it
/// brings) does nothing inside the namespace. Before the header's run the unit's run knows
/// its kernel as left untouched, and the header will include it all the same once
/// transformed.
fn unit_with_a_header_included_in_a_namespace(name: &str, header_first: bool) {
    let dir = support::tempdir(name);
    let common = dir.join("common");
    let coin = dir.join("coin");
    std::fs::create_dir_all(&common).unwrap();
    std::fs::create_dir_all(&coin).unwrap();
    std::fs::write(
        common.join("kernels.cuh"),
        "#pragma once\n__global__ void fill(int* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = i;\n}\n",
    )
    .unwrap();
    let unit = "#include <cstdint>\nnamespace coin_a {\n#include \"../common/kernels.cuh\"\n}\nint main() { return 0; }\n";
    std::fs::write(coin.join("unit.cu"), unit).unwrap();
    let runs = if header_first {
        ["common", "coin"]
    } else {
        ["coin", "common"]
    };
    for folder in runs {
        let o = cupreempt(&["transform", folder, "--in-place"], &dir);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let header = std::fs::read_to_string(common.join("kernels.cuh")).unwrap();
    assert!(header.contains("#include \"cupreempt.cuh\""), "{header}");
    let out = std::fs::read_to_string(coin.join("unit.cu")).unwrap();
    let include = out.find("#include \"cupreempt.cuh\"");
    let namespace = out.find("namespace coin_a");
    assert!(
        include.is_some_and(|i| namespace.is_some_and(|n| i < n)),
        "{out}"
    );
}

#[test]
fn a_unit_that_includes_a_transformed_header_in_a_namespace_includes_the_support_first() {
    unit_with_a_header_included_in_a_namespace("cli-namespace-include", true);
}

#[test]
fn a_unit_transformed_before_the_header_it_includes_in_a_namespace_includes_the_support_first() {
    unit_with_a_header_included_in_a_namespace("cli-namespace-include-before", false);
}

/// A header that launches kernels only its includer brings in before it (a miner's
/// `common.hpp` includes the kernels' headers, then `hash.hpp`, which launches them): the
/// header's launches are rewritten (they were CP101), and the unit compiles transformed.
#[test]
fn a_headers_launches_of_kernels_its_includer_brings_in_are_rewritten() {
    let dir = support::tempdir("cli-includer-kernels");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("kernels.cuh"),
        "#pragma once\n__global__ void fill(int* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = i;\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("run.hpp"),
        "#pragma once\ninline void go(int* p, int n) { fill<<<(n + 255) / 256, 256>>>(p, n); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.cu"),
        "#include \"kernels.cuh\"\n#include \"run.hpp\"\nint main() { go(nullptr, 0); return 0; }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    let run = std::fs::read_to_string(dir.join("out/run.hpp")).unwrap();
    assert!(
        run.contains(
            "cupreempt::launch<fill__cupreempt_kernels>((n + 255) / 256, 256, 0, 0)(p, n)"
        ),
        "{run}"
    );
}

/// A folder walk takes headers of other extensions (`.h`, `.hxx`, `.inl`...) where their code
/// defines or launches a kernel, so that their kernels are reported and transformed with the
/// files that launch them; a header whose `__global__` is in a comment or a prototype, or that
/// has none, is not taken (nothing in it could change, and host-only sources may include it).
#[test]
fn a_folder_walk_takes_headers_that_define_kernels() {
    let dir = support::tempdir("cli-headers");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let kernel = "__global__ void fill(int* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = i;\n}\n";
    std::fs::write(src.join("fill.hxx"), format!("#pragma once\n{kernel}")).unwrap();
    std::fs::write(
        src.join("launch.inl"),
        "#include \"fill.hxx\"\ninline void go(int* p, int n) { fill<<<(n + 255) / 256, 256>>>(p, n); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("notes.h"),
        "// a __global__ kernel would go here\ninline int twice(int x) { return 2 * x; }\n",
    )
    .unwrap();
    std::fs::write(src.join("plain.hpp"), "struct S { int a; };\n").unwrap();
    std::fs::write(
        src.join("proto.h"),
        "#pragma once\n__global__ void fill(int* p, int n);\nstruct T { int b; };\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.cu"),
        "#include \"launch.inl\"\n#include \"notes.h\"\nvoid run(int* p) { go(p, 1000); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("fill.hxx:2: fill: transformable (plain)"),
        "{}",
        stdout(&o)
    );
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    let launch = std::fs::read_to_string(dir.join("out/launch.inl")).unwrap();
    assert!(
        launch.contains(
            "cupreempt::launch<fill__cupreempt_kernels>((n + 255) / 256, 256, 0, 0)(p, n)"
        ),
        "{launch}"
    );
    assert!(std::fs::read_to_string(dir.join("out/fill.hxx"))
        .unwrap()
        .contains("fill__cupreempt("));
    for header in ["notes.h", "plain.hpp", "proto.h"] {
        assert!(
            !dir.join("out").join(header).exists(),
            "{header} was written"
        );
    }
}

/// A folder walk takes a header whose code reads the block index, whatever its extension (a
/// rasterizer keeps the `__device__` bodies of its kernels in `.inl` files) and however it
/// reads it (through cooperative groups' `group_index()` in a `.h`): its kernel's caller is
/// transformable, where before the helper was of a file not transformed with it
/// (CP008). The transformed header stays fit for a host-only source that includes it, its
/// CUDA part under `#ifdef __CUDACC__`: cupreempt's header is empty for a host compiler.
#[test]
fn a_folder_walk_takes_headers_whose_code_reads_the_block_index() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-block-index-header");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("tile.inl"),
        "#pragma once\n#ifdef __CUDACC__\n\
         __device__ int tile_base() { return (int)(blockIdx.x * 4u); }\n#endif\n\
         inline int host_side(int x) { return x + 1; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("paint.cu"),
        "#include \"tile.inl\"\n\
         __global__ void paint(int* out) { out[tile_base() + (int)threadIdx.x] = 1; }\n\
         void run(int* out) { paint<<<64, 4>>>(out); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("host.cc"),
        "#include \"tile.inl\"\nint f() { return host_side(1); }\n",
    )
    .unwrap();
    // A `.h` whose helper reads the block index through cooperative groups only.
    std::fs::write(
        src.join("groups.h"),
        "#pragma once
#include <cooperative_groups.h>
         __device__ int group_base() { return (int)cooperative_groups::this_thread_block().group_index().x * 4; }
",
    )
    .unwrap();
    std::fs::write(
        src.join("shade.cu"),
        "#include \"groups.h\"
         __global__ void shade(int* out) { out[group_base() + (int)threadIdx.x] = 2; }
",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("paint.cu:2: paint: transformable"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("shade.cu:2: shade: transformable"),
        "{}",
        stdout(&o)
    );
    // A host header whose parameter is named like a query (not called) is not taken.
    std::fs::write(
        src.join("host_only.h"),
        "#pragma once\ninline int pick(int block_index) { return block_index + 1; }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "--format", "json", "src"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("groups.h"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("host_only.h"), "{}", stdout(&o));
    std::fs::remove_file(src.join("host_only.h")).unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let tile = std::fs::read_to_string(dir.join("out/tile.inl")).unwrap();
    assert!(tile.contains("CupreemptCtx"), "{tile}");
    // The host-only source, next to the transformed header, compiled by the host compiler.
    std::fs::copy(dir.join("host.cc"), dir.join("out/host.cc")).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let host = std::process::Command::new(&cxx)
        .args(["-std=c++17", "-c", "-o"])
        .arg(dir.join("host.o"))
        .arg(format!(
            "-I{}",
            support::root().join("cuda_support").display()
        ))
        .arg(dir.join("out/host.cc"))
        .output()
        .unwrap_or_else(|e| panic!("this test needs a C++ compiler ({cxx}): {e}"));
    assert!(
        host.status.success(),
        "{}",
        String::from_utf8_lossy(&host.stderr)
    );
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("paint.o"))
            .arg(format!("-I{}", dir.join("out").display()))
            .arg(dir.join("out/paint.cu")),
        "paint",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A kernel header whose heads use a macro defined in a header outside the inputs (found
/// through `-I`, as a parallel-primitives library's radix sort takes `LAUNCH_BOUNDS` from its
/// utility header): the header's kernels are read with that macro when the files including it
/// are transformed too, so their launches are rewritten (they got CP101, "names no kernel").
#[test]
fn launches_of_a_header_kernel_whose_head_macro_comes_from_outside_the_inputs_are_rewritten() {
    let dir = support::tempdir("cli-outside-macro");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("inc")).unwrap();
    std::fs::write(
        dir.join("inc/util.h"),
        "#define LB(x) __launch_bounds__(x)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/k.cuh"),
        "#include \"util.h\"\ntemplate <int N> __global__ void LB(128) t(int* p) { p[threadIdx.x] = N; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/a.cu"),
        "#include \"k.cuh\"\nvoid run(int* p) { t<3><<<1, 128>>>(p); }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "-I", "inc", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    let a = std::fs::read_to_string(dir.join("out/a.cu")).unwrap();
    assert!(
        a.contains("cupreempt::launch<t__cupreempt_kernels<3>>(1, 128, 0, 0)(p)"),
        "{a}"
    );
}

/// A kernel file included inside another file's `extern "C" {` block (a public benchmark suite
/// does so): transformed together, the includer compiles, its launch is rewritten, and the
/// kernel and the helper keep C linkage.
#[test]
fn a_kernel_file_included_in_an_extern_c_block_compiles_transformed() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-extern-c-include");
    std::fs::write(
        dir.join("kernel.cu"),
        "__device__ int gid() { return blockIdx.x * blockDim.x + threadIdx.x; }\n\
         __global__ void findK(float* p, int n) { int i = gid(); if (i < n) p[i] += 1.0f; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("wrapper.cu"),
        "extern \"C\" {\n#include \"kernel.cu\"\n\
         void go(float* p, int n) { findK<<<(n + 255) / 256, 256>>>(p, n); }\n}\n",
    )
    .unwrap();
    let o = cupreempt(
        &["transform", "kernel.cu", "wrapper.cu", "--out-dir", "out"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let wrapper = std::fs::read_to_string(dir.join("out/wrapper.cu")).unwrap();
    assert!(
        wrapper.contains("cupreempt::launch<findK__cupreempt_kernels>"),
        "{wrapper}"
    );
    let obj = dir.join("wrapper.o");
    support::compiles(
        support::nvcc_compile(&nvcc, &obj).arg(dir.join("out/wrapper.cu")),
        "wrapper.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let has = |name: &str| support::file_contains(&obj, name);
    assert!(has("findK__cupreempt"), "the wrapper is in the object");
    // C linkage: the kernel's name as written, not mangled.
    assert!(has("\0findK\0"), "findK keeps C linkage");
}

/// A source with no kernel or launch of its own that defines library words as macros (`base`,
/// as HeCBench's sw4ck does), then includes a file of kernels: transformed together, that
/// file's output includes cupreempt's header (and with it `<string>`) after the macros unless
/// the source includes it first, as its output now does.
#[test]
fn a_source_defining_library_words_before_a_transformed_include_compiles() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-macros-before-include");
    std::fs::write(
        dir.join("kernels.cuh"),
        "__global__ void shift(float* a, int first, int last) {\n  a[blockIdx.x * blockDim.x + threadIdx.x + base + ni] += 1.0f;\n}\n\
         void run(float* a, int first, int last) { shift<<<64, 128>>>(a, first, last); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.cu"),
        "#define ni (last - first + 1)\n#define base (-(first + ni))\n#include \"kernels.cuh\"\n",
    )
    .unwrap();
    let o = cupreempt(
        &["transform", "kernels.cuh", "main.cu", "--out-dir", "out"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let main = std::fs::read_to_string(dir.join("out/main.cu")).unwrap();
    let include = main.find("#include \"cupreempt.cuh\"");
    assert!(
        include.is_some_and(|i| i < main.find("#define ni").unwrap()),
        "cupreempt's header is not included before the program's macros:\n{main}"
    );
    let obj = dir.join("main.o");
    support::compiles(
        support::nvcc_compile(&nvcc, &obj).arg(dir.join("out/main.cu")),
        "main.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(support::file_contains(&obj, "shift__cupreempt"));
}

/// With relocatable device code (`-rdc`), functions a kernel calls through the ABI keep their
/// own register counts, and ptxas refuses a wrapper capped at 32 registers that calls one
/// needing more (the CUDA samples' newdelete): the capped wrapper exists only without `-rdc`,
/// and the file compiles both ways.
#[test]
fn the_32_register_wrapper_is_left_out_of_relocatable_device_code() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-rdc-capped");
    std::fs::write(
        dir.join("virt.cu"),
        "struct Shape { __device__ virtual ~Shape() {} __device__ virtual float area() const { return 0.0f; } };\n\
         struct Square : Shape { float s; __device__ Square(float v) : s(v) {}\n\
           __device__ float area() const override { return s * s; } };\n\
         __global__ void areas(float* out, int n) {\n\
           int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
           if (i < n) { Shape* p = new Square(i); out[i] = p->area(); delete p; }\n}\n\
         void go(float* out, int n) { areas<<<(n + 127) / 128, 128>>>(out, n); }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "virt.cu", "-o", "out.cu"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("out.cu")).unwrap();
    assert!(
        out.contains("#if !defined(__CUDACC_RDC__) && (!defined(CUPREEMPT_R32_CHOSEN) || defined(CUPREEMPT_R32_areas))\n// cupreempt: the same, held to 32 registers"),
        "{out}"
    );
    for rdc in [false, true] {
        let obj = dir.join(format!("virt-{rdc}.o"));
        let mut c = support::nvcc_compile(&nvcc, &obj);
        if rdc {
            c.arg("-rdc=true");
        }
        support::compiles(c.arg(dir.join("out.cu")), "out.cu").unwrap_or_else(|e| panic!("{e}"));
        let capped = support::file_contains(&obj, "areas__cupreempt_r32");
        assert_eq!(capped, !rdc, "the capped wrapper only without -rdc");
    }
}

/// A source transformed without the header that defines its kernels: the launches stay as
/// written, and the warning names the header to transform with it (no wrappers exist for them).
#[test]
fn launches_of_kernels_in_an_untransformed_header_name_it() {
    let dir = support::tempdir("cli-untransformed-header");
    std::fs::write(
        dir.join("k.cuh"),
        "__global__ void fill(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("m.cu"),
        "#include \"k.cuh\"\nvoid go(float* p, int n) { fill<<<n / 256, 256>>>(p, n); }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "m.cu", "-o", "alone.cu"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    // The report wraps its lines: compare words.
    let err = stderr(&o).replace('│', " ");
    let words = err.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("CP101"), "{err}");
    assert!(
        words.contains("k.cuh, which is not transformed with this file"),
        "{err}"
    );
    let alone = std::fs::read_to_string(dir.join("alone.cu")).unwrap();
    assert!(alone.contains("fill<<<n / 256, 256>>>(p, n)"), "{alone}");
    // Given together, the launch is rewritten and nothing is said.
    let o = cupreempt(&["transform", "k.cuh", "m.cu", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    let together = std::fs::read_to_string(dir.join("out/m.cu")).unwrap();
    assert!(
        together.contains("cupreempt::launch<fill__cupreempt_kernels>"),
        "{together}"
    );
}

/// A kernel that calls a device function of an included input which reads blockIdx is refused
/// with CP008 naming it: transformed, it would read the persistent block's values. A function
/// there that synchronizes is a barrier, as one of the kernel's own file would be: fine in the
/// plain form, and CP004 naming it when a thread-dependent return reaches it. A kernel that
/// calls the same header's harmless helper is transformed.
/// A kernel that calls a helper of an included header that reads blockIdx/gridDim: transformed
/// together with the header (a folder), the header's helper gets its task-context form and the
/// kernel passes its context, also through a helper of a second header that calls the first;
/// the outputs compile. Alone, without the header, the kernel is refused (CP008). Helpers that
/// synchronize are barriers.
#[test]
fn kernels_calling_block_id_helpers_of_included_inputs() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-included-helper");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("helpers.cuh"),
        "#pragma once\n\
         __device__ int tile_row() { return blockIdx.y * blockDim.y + threadIdx.y; }\n\
         __device__ void sync_all() { __syncthreads(); }\n\
         __device__ float twice(float v) { return 2.0f * v; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("mix.cuh"),
        "#pragma once\n#include \"helpers.cuh\"\n\
         __device__ int shifted_row(int by) { return tile_row() + by; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("k.cu"),
        "#include \"mix.cuh\"\n\
         __global__ void rows(int* out) { out[tile_row()] = 1; }\n\
         __global__ void shifted(int* out) { out[shifted_row(3)] = 2; }\n\
         __global__ void synced(float* p) { p[threadIdx.x] = 1.0f; sync_all(); p[blockIdx.x] += 1.0f; }\n\
         __global__ void early(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; p[i] = 1.0f; sync_all(); p[i] += 1.0f; }\n\
         __global__ void doubled(float* p) { int i = blockIdx.x * blockDim.x + threadIdx.x; p[i] = twice(p[i]); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    let err = stderr(&o);
    assert!(o.status.success(), "every kernel transforms:\n{out}{err}");
    let line = |out: &str, k: &str| {
        out.lines()
            .find(|l| l.contains(&format!(": {k}:")))
            .unwrap_or_else(|| panic!("no line for {k}:\n{out}"))
            .to_string()
    };
    assert!(line(&out, "rows").contains("transformable"), "{out}");
    assert!(line(&out, "shifted").contains("transformable"), "{out}");
    assert!(
        line(&out, "synced").contains("transformable (plain)"),
        "{out}"
    );
    // The header's synchronizing helper gets its live copy there, which `early` calls.
    assert!(
        line(&out, "early").contains("transformable (predicated)"),
        "{out}"
    );
    assert!(line(&out, "doubled").contains("transformable"), "{out}");

    // Transformed together: the headers' helpers take the context, the kernels pass theirs.
    let o = cupreempt(
        &["transform", "--keep-going", "--out-dir", "out", "src"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |f: &str| std::fs::read_to_string(dir.join("out").join(f)).unwrap();
    let (helpers, mix, k) = (read("helpers.cuh"), read("mix.cuh"), read("k.cu"));
    assert!(
        helpers.contains("int tile_row(CupreemptCtx& __cp)"),
        "{helpers}"
    );
    assert!(
        helpers.contains("__device__ int tile_row() {"),
        "the native form stays:\n{helpers}"
    );
    assert!(mix.contains("return tile_row(__cp) + by;"), "{mix}");
    assert!(
        helpers.contains("__device__ void sync_all__cp_live(bool __cp_live) { __syncthreads(); }")
            && k.contains("sync_all__cp_live(__cp_live);"),
        "{helpers}\n{k}"
    );
    assert!(
        k.contains("out[tile_row(__cp)] = 1;") && k.contains("out[shifted_row(__cp, 3)] = 2;"),
        "{k}"
    );
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.o")).arg(dir.join("out/k.cu")),
        "k.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // The kernel file alone: the header is not transformed, so its helper cannot take the
    // context.
    let o = cupreempt(&["check", "src/k.cu"], &dir);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(line(&out, "rows").contains("CP008"), "{out}");
    assert!(
        line(&out, "early").contains(
            "`sync_all`, which synchronizes the block, gets no live copy: it is defined in another file that is not transformed in the same run"
        ),
        "{out}"
    );
    assert!(
        err.contains("`tile_row`, a device function of an included file, reads blockIdx/gridDim"),
        "{err}"
    );
}

/// A header's helpers that synchronize the block, called by another file's kernels after a
/// thread-dependent return: the header's transform makes their live copies (the one that reads
/// blockIdx from its task-context form), and the kernels call them, passing the arguments that
/// the copies' barrier conditions read only where they are the same in every thread.
#[test]
fn a_headers_synchronizing_helpers_get_live_copies_for_other_files_kernels() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-header-live-copies");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("stages.cuh"),
        "#pragma once\n\
         __device__ void stage_rows(float* s, const float* v, int i, int rows) {\n\
           for (int r = 0; r < rows; ++r) {\n\
             s[threadIdx.x] = v[i] + r + blockIdx.x;\n\
             __syncthreads();\n\
           }\n\
         }\n",
    )
    .unwrap();
    // A `.hpp` of a helper that only synchronizes: the folder walk takes it for its copy.
    std::fs::write(
        src.join("pairs.hpp"),
        "#pragma once\n\
         __device__ float pair_sum(float* s, float v) {\n\
           s[threadIdx.x] = v;\n\
           __syncthreads();\n\
           return s[threadIdx.x ^ 1] + v;\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("k.cu"),
        "#include \"stages.cuh\"\n#include \"pairs.hpp\"\n\
         __global__ void rows_ok(float* o, const float* v, int n, int rows) { __shared__ float s[128]; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; stage_rows(s, v, i, rows); o[i] = s[threadIdx.x]; }\n\
         __global__ void rows_varying(float* o, const float* v, int n) { __shared__ float s[128]; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; stage_rows(s, v, i, i % 3); o[i] = s[threadIdx.x]; }\n\
         __global__ void pairs(float* o, const float* v, int n) { __shared__ float s[128]; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; float t = pair_sum(s, v[i]); o[i] = t; }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    let line = |k: &str| {
        out.lines()
            .find(|l| l.contains(&format!(": {k}:")))
            .unwrap_or_else(|| panic!("no line for {k}:\n{out}"))
            .to_string()
    };
    assert!(
        line("rows_ok").contains("transformable (predicated)"),
        "{out}"
    );
    assert!(
        line("pairs").contains("transformable (predicated)"),
        "{out}"
    );
    assert!(
        line("rows_varying").contains("this argument may differ between threads, where a barrier's condition in `stage_rows` reads the parameter"),
        "{out}"
    );

    let o = cupreempt(
        &["transform", "--keep-going", "--out-dir", "out", "src"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |f: &str| std::fs::read_to_string(dir.join("out").join(f)).unwrap();
    let (stages, pairs, k) = (read("stages.cuh"), read("pairs.hpp"), read("k.cu"));
    assert!(
        stages.contains("stage_rows__cp_live(CupreemptCtx& __cp, bool __cp_live, float* s, const float* v, int i, int rows)")
            && stages.contains("if (__cp_live) { s[threadIdx.x] = v[i] + r + blockIdx.x; }"),
        "{stages}"
    );
    assert!(
        pairs.contains(
            "return cupreempt::live_value(__cp_live, [&] { return s[threadIdx.x ^ 1] + v; });"
        ),
        "{pairs}"
    );
    assert!(
        k.contains("stage_rows__cp_live(__cp, __cp_live, s, v, i, rows);")
            && k.contains(
                "pair_sum__cp_live(__cp_live, s, cupreempt::live_value(__cp_live, [&] { return v[i]; }))"
            ),
        "{k}"
    );
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.o"))
            .arg(format!("-I{}", dir.join("out").display()))
            .arg(dir.join("out/k.cu")),
        "k.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A header of synchronizing helpers that includes nothing, compiled in units that include
/// first what it calls (MAGMA's `gemm_template_device.cuh` and `gemm_template_device_defs.cuh`),
/// through a header of kernels: its copies are planned with the functions of those units.
#[test]
fn a_helper_headers_copies_know_the_functions_of_the_units_it_is_compiled_in() {
    let dir = support::tempdir("cli-helper-header-units");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Reads its reference parameter only (and is no uniform helper: it reads threadIdx).
    std::fs::write(
        src.join("defs.cuh"),
        "#pragma once\n__device__ void rows_of(int& r, float* o) { o[threadIdx.x] = (float)r; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("stages.cuh"),
        "#pragma once\n\
         __device__ void staged_rows(float* s, int rows) {\n\
           int r = rows;\n\
           rows_of(r, s);\n\
           for (int k = 0; k < r; ++k) { s[threadIdx.x] += k; __syncthreads(); }\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("kernels.cuh"),
        "#pragma once\n#include \"stages.cuh\"\n\
         __global__ void rows_after_return(float* o, int n, int rows) { __shared__ float s[128]; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; staged_rows(s, rows); o[i] = s[threadIdx.x]; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("unit.cu"),
        "#include \"defs.cuh\"\n#include \"kernels.cuh\"\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.contains(": rows_after_return: transformable (predicated)")),
        "{out}{}",
        stderr(&o)
    );
    // Without the unit, `rows_of` is unknown: it may write `r`, and the copy is refused.
    std::fs::remove_file(src.join("unit.cu")).unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.contains(": rows_after_return: left as it is: CP004")
                && l.contains("`staged_rows`")),
        "{out}"
    );
}

/// Compiles `out/main.cu` and `out/kernels.cu` under `dir`, links them, and checks that the
/// program defines `ops::fill`'s wrapper (the launch in main went through it).
fn links_with_the_fill_wrapper_defined(nvcc: &std::path::Path, dir: &std::path::Path) {
    for f in ["main", "kernels"] {
        support::compiles(
            support::nvcc_compile(nvcc, &dir.join(format!("{f}.o")))
                .arg("-DCUPREEMPT_STANDALONE")
                .arg(format!("-I{}", dir.join("out").display()))
                .arg(dir.join(format!("out/{f}.cu"))),
            f,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    support::compiles(
        support::nvcc_build(nvcc, &dir.join("prog"))
            .arg(dir.join("main.o"))
            .arg(dir.join("kernels.o")),
        "link",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let nm = std::process::Command::new("nm")
        .arg(dir.join("prog"))
        .output()
        .unwrap_or_else(|e| panic!("nm is needed for this test: {e}"));
    assert!(
        String::from_utf8_lossy(&nm.stdout)
            .lines()
            .any(|l| l.ends_with(" T _ZN3ops15fill__cupreemptE16cupreempt_launchPfi")),
        "the wrapper is not defined in the program"
    );
}

/// The usual separate compilation: a header declares a kernel, one source defines it, another
/// includes the header and launches it. Transformed together, the launch goes through the
/// wrappers of the defining source (declared weak next to the launch), and the objects link
/// with those wrappers defined.
#[test]
fn a_kernel_declared_in_a_header_and_defined_elsewhere_is_launched_preemptibly() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-declared-header");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("kernels.cuh"),
        "#pragma once\nnamespace ops {\n__global__ void fill(float* p, int n);\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("kernels.cu"),
        "#include \"kernels.cuh\"\nnamespace ops {\n__global__ void fill(float* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = 1.0f;\n}\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.cu"),
        "#include \"kernels.cuh\"\nnamespace app {\nvoid run(float* p, int n) { ops::fill<<<(n + 255) / 256, 256>>>(p, n); }\n}\nint main() { app::run(nullptr, 0); return 0; }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    let main = std::fs::read_to_string(dir.join("out/main.cu")).unwrap();
    assert!(
        main.contains("cupreempt::launch<ops::fill__cupreempt_kernels>")
            && main.contains(
                "namespace ops {\n#ifndef CUPREEMPT_WRAPPERS_ops_fill__cupreempt_kernels\n"
            )
            && main.contains("// cupreempt: `fill` is declared in an included file"),
        "{main}"
    );
    links_with_the_fill_wrapper_defined(&nvcc, &dir);
}

/// `-I DIR` as nvcc takes it: a kernel file included with angle brackets (`#include <k.cu>`,
/// as programs built with `-I.` write it) is found there, so its launch is rewritten when the
/// two are transformed together; without the folder the launch is left as written (CP101).
#[test]
fn an_include_folder_finds_a_kernel_file_included_with_angle_brackets() {
    let dir = support::tempdir("cli-include-dir");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("kk.cu"),
        "__global__ void kk(int* o) { o[blockIdx.x] = 1; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.cu"),
        "#include <kk.cu>\nvoid host(int* o) { kk<<<4, 32>>>(o); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    assert!(stderr(&o).contains("CP101"), "{}", stderr(&o));
    for args in [
        &["-I", "src"][..],
        &["-Isrc"][..],
        &["--include-dir", "src"][..],
    ] {
        let o = cupreempt(&[&["check"][..], args, &["src"][..]].concat(), &dir);
        assert!(!stderr(&o).contains("CP101"), "{args:?}: {}", stderr(&o));
    }
    let o = cupreempt(&["transform", "-I", "src", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let main = std::fs::read_to_string(dir.join("out/main.cu")).unwrap();
    assert!(
        main.contains("cupreempt::launch<kk__cupreempt_kernels>"),
        "{main}"
    );
}

/// The same with the declaration in a `.h` header, which a folder's transform reads but does
/// not take as an input (a header of prototypes may be included by host-only sources too): the
/// launches still go through the wrappers, declared weak in the launching files, and the
/// header is not written. A `.cuh` that launches the kernel and the `.cu` that includes it and
/// launches it too hold those declarations twice in one translation unit, which compiles (they
/// are guarded).
#[test]
fn a_kernel_declared_in_a_plain_header_is_launched_preemptibly_and_the_header_left_alone() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-declared-plain-header");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("kernels.h"),
        "#pragma once\nnamespace ops {\n__global__ void fill(float* p, int n);\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("kernels.cu"),
        "#include \"kernels.h\"\nnamespace ops {\n__global__ void fill(float* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = 1.0f;\n}\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("steps.cuh"),
        "#pragma once\n#include \"kernels.h\"\ninline void first(float* p, int n) { ops::fill<<<(n + 255) / 256, 256>>>(p, n); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.cu"),
        "#include \"steps.cuh\"\n#include \"kernels.h\"\nvoid run(float* p, int n) { first(p, n); ops::fill<<<(n + 255) / 256, 256>>>(p, n); }\nint main() { run(nullptr, 0); return 0; }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP101"), "{}", stderr(&o));
    assert!(
        !dir.join("out/kernels.h").exists(),
        "the header was written"
    );
    for f in ["main.cu", "steps.cuh"] {
        let text = std::fs::read_to_string(dir.join("out").join(f)).unwrap();
        assert!(
            text.contains("cupreempt::launch<ops::fill__cupreempt_kernels>"),
            "{f}: {text}"
        );
    }
    std::fs::copy(src.join("kernels.h"), dir.join("out/kernels.h")).unwrap();
    links_with_the_fill_wrapper_defined(&nvcc, &dir);
}

/// A helper of a header that reads the block index only through a member function defined
/// outside its class (`Tile::origin()`, which cannot be given the task context) cannot be
/// handed the context for a kernel of another file: its context form would call the member,
/// which reads the hardware's index. The kernel is refused (CP008) rather than transformed
/// into one that computes other elements. Defined in its class, the member takes the context,
/// the helper passes it, and the kernel of the other file is transformed and compiles.
#[test]
fn a_header_helper_that_reads_the_block_index_through_a_member_is_not_given_the_context() {
    let dir = support::tempdir("cli-helper-through-member");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let kernel = "#include \"tile.cuh\"\n__global__ void kern(unsigned* out) { out[gidx()] = 1; }\nvoid host(unsigned* o) { kern<<<8, 64>>>(o); }\n";
    std::fs::write(
        src.join("tile.cuh"),
        "#pragma once\nstruct Tile {\n  __device__ static unsigned origin() { return blockIdx.x * 64u; }\n};\n__device__ unsigned gidx() { return Tile::origin() + threadIdx.x; }\n",
    )
    .unwrap();
    std::fs::write(src.join("k.cu"), kernel).unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.contains(": kern:") && l.contains("transformable")),
        "{out}"
    );
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let header = std::fs::read_to_string(dir.join("out/tile.cuh")).unwrap();
    assert!(
        header.contains("return Tile::origin(__cp) + threadIdx.x;"),
        "{header}"
    );
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.o"))
            .arg("-I")
            .arg(dir.join("out"))
            .arg(dir.join("out/k.cu")),
        "out/k.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(dir.join("out")).unwrap();

    std::fs::write(
        src.join("tile.cuh"),
        "#pragma once\nstruct Tile {\n  __device__ static unsigned origin();\n};\n__device__ unsigned Tile::origin() { return blockIdx.x * 64u; }\n__device__ unsigned gidx() { return Tile::origin() + threadIdx.x; }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let (out, err) = (stdout(&o), stderr(&o));
    let kern = out
        .lines()
        .find(|l| l.contains(": kern:"))
        .unwrap_or_else(|| panic!("no line for kern:\n{out}"));
    assert!(kern.contains("CP008"), "{out}");
    assert!(
        err.contains("`gidx`, a device function of an included file, reads blockIdx/gridDim"),
        "{err}"
    );

    // A default argument on the helper's path: `through` takes the context, and its call
    // `at()` passes the default itself, from the context (`at(__cp, __cp.blockIdx.x)`), so the
    // kernel of the other file is transformed; `through`'s own file is transformed with it.
    std::fs::write(
        src.join("tile.cuh"),
        "#pragma once\n__device__ unsigned at(unsigned b = blockIdx.x) { return b * 64u; }\n__device__ unsigned through() { return at() + blockIdx.y + threadIdx.x; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("k.cu"),
        "#include \"tile.cuh\"\n__global__ void kern(unsigned* out) { out[through()] = 1; }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    let kern = out
        .lines()
        .find(|l| l.contains(": kern:"))
        .unwrap_or_else(|| panic!("no line for kern:\n{out}"));
    assert!(kern.contains("transformable"), "{out}");
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let header = std::fs::read_to_string(dir.join("out/tile.cuh")).unwrap();
    assert!(header.contains("at(__cp, __cp.blockIdx.x)"), "{header}");

    // Helpers whose bodies name no block index at all, and still read it: through a type's
    // default member initializer (`Origin o;`), and through their own default argument,
    // which the call in the other file takes. No context can reach either read.
    std::fs::write(
        src.join("tile.cuh"),
        "#pragma once\nstruct Origin { unsigned b = blockIdx.x; };\n__device__ unsigned by_type() { Origin o; return o.b * 64u + threadIdx.x; }\n__device__ unsigned by_default(unsigned b = blockIdx.x) { return b * 64u + threadIdx.x; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("k.cu"),
        "#include \"tile.cuh\"\n__global__ void kern(unsigned* out) { out[by_type()] = 1; }\n__global__ void kern2(unsigned* out) { out[by_default()] = 2; }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let (out, err) = (stdout(&o), stderr(&o));
    for (kernel, helper) in [("kern", "by_type"), ("kern2", "by_default")] {
        let line = out
            .lines()
            .find(|l| l.contains(&format!(": {kernel}:")))
            .unwrap_or_else(|| panic!("no line for {kernel}:\n{out}"));
        assert!(line.contains("CP008"), "{kernel}: {out}");
        assert!(
            err.contains(&format!(
                "`{helper}`, a device function of an included file"
            )),
            "{err}"
        );
    }
}

/// Macros of an included header count as the file's own: a `__device__` helper that reads the
/// block index only through a header's macro gets its task-context form (without the header's
/// macros it read the hardware's index in the persistent form: silently wrong), a barrier
/// inside a header's macro makes a kernel whose thread-dependent return reaches it refused
/// (CP004), and a header's loop-head macro (`KERNEL_LOOP(i, n) { ... }`) is no syntax error,
/// as the same macros in the file would. The transformed file compiles.
#[test]
fn macros_of_included_headers_count() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-header-macros");
    std::fs::write(
        dir.join("idx.h"),
        "#pragma once\n#define GIDX (blockIdx.x * blockDim.x + threadIdx.x)\n#define SYNC() __syncthreads()\n\
         #define KERNEL_LOOP(i, n) \\\n  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "#include \"idx.h\"\n\
         __device__ int my_index() { return GIDX; }\n\
         __global__ void fill(float* y, int n) {\n  int i = my_index();\n  if (i < n) y[i] = 1.0f;\n}\n\
         __global__ void early(float* p, int n) {\n  __shared__ float s[128];\n  if (threadIdx.x >= n) return;\n  s[threadIdx.x] = p[threadIdx.x];\n  SYNC();\n  p[threadIdx.x] = s[127 - threadIdx.x % 128];\n}\n\
         __global__ void relu(float* y, int n) {\n  KERNEL_LOOP(index, n / 2) {\n    y[index] = y[index] > 0.0f ? y[index] : 0.0f;\n  }\n}\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "--keep-going", "k.cu", "-o", "k.t.cu"], &dir);
    assert!(dir.join("k.t.cu").exists(), "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("k.t.cu")).unwrap();
    assert!(
        out.contains("__device__ int my_index(CupreemptCtx& __cp)")
            && out.contains("my_index(__cp)"),
        "the helper takes the task context:\n{out}"
    );
    let err = stderr(&o);
    assert!(
        err.contains("CP004") && err.contains("early"),
        "the header's barrier counts:\n{err}"
    );
    // The header's loop-head macro reads as the file's own would: no syntax error, and the
    // body shadows what the macro reads.
    assert!(!err.contains("CP001"), "{err}");
    assert!(
        out.contains("void relu__cupreempt_body")
            && out.contains("const ::dim3 gridDim = __cp.gridDim;"),
        "{out}"
    );
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.t.o"))
            .arg("-DCUPREEMPT_STANDALONE")
            .arg(dir.join("k.t.cu")),
        "k.t.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Transformed together with a header that holds a kernel, a file's functor that reads
/// `blockIdx` is not given the task context as the file's helpers are for the other files: a
/// member is called through objects, which are not rewritten, and its edited header broke the
/// output (CP013, the file left whole; DeepSpeed's fused optimizers).
#[test]
fn members_are_not_given_the_context_for_other_files() {
    let dir = support::tempdir("cli-member-other-files");
    std::fs::write(
        dir.join("h.cuh"),
        "#pragma once\n__global__ void zero(float* p) { p[threadIdx.x] = 0.0f; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("u.cu"),
        "#include \"h.cuh\"\n\
         struct AddBlock {\n  __device__ void operator()(float* p) const { p[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f; }\n};\n\
         __device__ int block_base() { return blockIdx.x * blockDim.x; }\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "h.cuh", "u.cu", "--out-dir", "out"], &dir);
    let err = stderr(&o);
    assert!(!err.contains("CP013"), "{err}");
    let u = std::fs::read_to_string(dir.join("out/u.cu")).unwrap_or_default();
    assert!(
        u.contains("__device__ void operator()(float* p) const {")
            && u.contains("block_base(CupreemptCtx& __cp)"),
        "the member as written, the free helper with the context:\n{u}\n{err}"
    );
}

/// A kernel template in a header that calls a functor of its template type, and a file that
/// includes the header and passes it a functor whose `operator()` reads `blockIdx` (a fused
/// optimizer's shape): transformed together, the header's kernel passes the functor the task's
/// context (`a_functor_of_a_template_parameter_takes_the_context_across_files`); where the
/// functor is virtual, so that it cannot take the context, the kernel is refused (CP008)
/// instead of giving it the persistent block's index; with a functor that reads no block
/// index, it is transformed.
#[test]
fn functors_of_the_files_that_include_a_header_count_for_its_kernels() {
    let reads = "p[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f;";
    for (tag, head, body, refused) in [
        ("reads", "", reads, false),
        ("virtual", "virtual ", reads, true),
        ("plain", "", "p[threadIdx.x] += 1.0f;", false),
    ] {
        let dir = support::tempdir(&format!("cli-functor-includer-{tag}"));
        std::fs::write(
            dir.join("apply.cuh"),
            "#pragma once\ntemplate <typename F>\n__global__ void apply_kernel(float* p, F f) { f(p); }\n\
             template <typename F>\nvoid apply(float* p, int blocks, F f) { apply_kernel<<<blocks, 256>>>(p, f); }\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("user.cu"),
            format!(
                "#include \"apply.cuh\"\nstruct Op {{\n  {head}__device__ void operator()(float* p) const {{ {body} }}\n}};\n\
                 void run(float* p, int blocks) {{ apply(p, blocks, Op()); }}\n"
            ),
        )
        .unwrap();
        let o = cupreempt(&["check", "apply.cuh", "user.cu"], &dir);
        let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        assert_eq!(
            out.contains("apply_kernel: left as it is: CP008"),
            refused,
            "{tag}:\n{out}"
        );
    }
}

/// Overloads of one kernel name spread over two headers (a template with two parameters in
/// one, with one in the other; two plain kernels of different parameter types) that one file
/// includes together: each header's launch types are numbered after the other's, so the
/// translation unit compiles with every launch preemptible (the shape of HeCBench's segsort; one
/// `gen_copy__cupreempt_kernels` per header would be defined twice).
#[test]
fn overloads_spread_over_headers_get_launch_types_of_their_own() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-namesakes");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("a.cuh"),
        "#pragma once\ntemplate <class K, class T>\n__global__ void cp(K* k, const T* t, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) k[i] = (K)t[i]; }\n\
         __global__ void fill(int* k, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) k[i] = 1; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b.cuh"),
        "#pragma once\ntemplate <class K>\n__global__ void cp(K* k, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) k[i] = 0; }\n\
         __global__ void fill(float* k, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) k[i] = 2.0f; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.cu"),
        "#include \"a.cuh\"\n#include \"b.cuh\"\n\
         void go(int* a, float* b, int n) {\n  cp<<<n / 64, 64>>>(a, b, n);\n  cp<<<n / 64, 64>>>(a, n);\n  fill<<<n / 64, 64>>>(a, n);\n  fill<<<n / 64, 64>>>(b, n);\n}\n",
    )
    .unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |f: &str| std::fs::read_to_string(dir.join("out").join(f)).unwrap();
    let (a, b, main) = (read("a.cuh"), read("b.cuh"), read("main.cu"));
    for (text, n) in [(&a, 0), (&b, 1)] {
        for k in ["cp", "fill"] {
            assert!(
                text.contains(&format!("struct {k}__cupreempt_kernels_{n} ")),
                "{text}"
            );
        }
    }
    assert_eq!(
        main.matches("cupreempt::launch<decltype(").count(),
        4,
        "every launch picks its overload: {main}"
    );
    let obj = dir.join("main.o");
    support::compiles(
        support::nvcc_compile(&nvcc, &obj).arg(dir.join("out/main.cu")),
        "main.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(support::file_contains(&obj, "fill__cupreempt"));
}

/// Two programs of one checkout, each with a kernel of the same name whose parameters and
/// launch arguments a conditional chooses (`#ifndef FIXED_BLOCKWIDTH`, as two CUDA samples
/// have it), transformed in one run: their launch types are numbered across the files, but
/// each file sees one kernel of that name, so its launch names its own launch types and needs
/// no copy of the arguments on its line (the selector's copy held the directive lines, the
/// output did not parse, and both files were left as written, CP013). A real overload in the
/// same file with such arguments leaves that launch as written (CP101), and the file is
/// transformed.
#[test]
fn namesakes_in_two_files_launch_with_conditional_arguments() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-namesakes-conditional-args");
    let kernel = "__global__ void sobel(int* p,\n#ifndef FIXED\n    int n,\n#endif\n    int m) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < m) p[i] = i;\n}\n";
    // And a kernel with a literal default that the launch leaves out, also in both files.
    let launch = "__global__ void fill(int* p, int m, int v = 7) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < m) p[i] = v; }\n\
                  void run(int* p, int n, int m) {\n  sobel<<<m / 64, 64>>>(p,\n#ifndef FIXED\n      n,\n#endif\n      m);\n  fill<<<m / 64, 64>>>(p, m);\n}\n";
    for d in ["a", "b"] {
        std::fs::create_dir_all(dir.join("src").join(d)).unwrap();
        std::fs::write(
            dir.join("src").join(d).join("k.cu"),
            format!("{kernel}{launch}"),
        )
        .unwrap();
    }
    std::fs::create_dir_all(dir.join("src/c")).unwrap();
    std::fs::write(
        dir.join("src/c/k.cu"),
        format!("{kernel}__global__ void sobel(float* p, int m) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < m) p[i] = 1.0f; }}\n{launch}"),
    )
    .unwrap();
    let o = cupreempt(
        &["transform", "--keep-going", "src", "--out-dir", "out"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("CP013"), "{err}");
    assert!(
        err.contains("CP101"),
        "the overloaded launch is left as written: {err}"
    );
    let read = |f: &str| std::fs::read_to_string(dir.join("out").join(f)).unwrap();
    for (f, n) in [("a/k.cu", 0), ("b/k.cu", 1)] {
        let text = read(f);
        assert!(
            text.contains(&format!(
                "cupreempt::launch<sobel__cupreempt_kernels_{n}>(m / 64, 64, 0, 0)(p,"
            )),
            "{f}: {text}"
        );
        assert!(
            text.contains(&format!(
                "cupreempt::launch<fill__cupreempt_kernels_{n}>(m / 64, 64, 0, 0)(p, m, 7);"
            )),
            "{f}: {text}"
        );
    }
    let c = read("c/k.cu");
    assert!(c.contains("sobel<<<m / 64, 64>>>(p,"), "{c}");
    assert!(c.contains("sobel__cupreempt_body"), "{c}");
    for f in ["a/k.cu", "b/k.cu", "c/k.cu"] {
        for config in [None, Some("-DFIXED")] {
            let obj = dir.join("k.o");
            let mut cmd = support::nvcc_compile(&nvcc, &obj);
            cmd.args(config).arg(dir.join("out").join(f));
            support::compiles(&mut cmd, f).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// A helper of an included header that shuffles by a full mask is a warp sync to the kernels
/// of the file that includes it: called under a condition that differs between a warp's lanes
/// (HeCBench's segsort: `exch_intxn` in `bb_exch.cuh`, called under `if (bin_it < bin_size)`,
/// `bin_it = gid >> 1`), or after a return that does, the kernel is refused (CP004; the
/// preemptible program hung), where the same helper called by whole warps is transformed.
#[test]
fn warp_syncs_of_included_helpers_count() {
    let dir = support::tempdir("cli-included-warp-sync");
    std::fs::write(
        dir.join("exch.cuh"),
        "template <class K>\n__device__ inline void exch(K& k, int mask) {\n  K o = __shfl_xor_sync(0xffffffff, k, mask);\n  k = k < o ? o : k;\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "#include \"exch.cuh\"\n\
         __global__ void pairs(int* key, int n) {\n  int gid = threadIdx.x + blockIdx.x * blockDim.x;\n  int it = gid >> 1;\n  if (it < n) {\n    int k = key[gid];\n    exch(k, 1);\n    key[gid] = k;\n  }\n}\n\
         __global__ void pairs_returned(int* key, int n) {\n  int gid = threadIdx.x + blockIdx.x * blockDim.x;\n  if ((gid >> 1) >= n) return;\n  int k = key[gid];\n  exch(k, 1);\n  key[gid] = k;\n}\n\
         __global__ void warps(int* key, int n) {\n  int gid = threadIdx.x + blockIdx.x * blockDim.x;\n  if ((gid >> 5) < n) {\n    int k = key[gid];\n    exch(k, 1);\n    key[gid] = k;\n  }\n}\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "k.cu", "exch.cuh"], &dir);
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    for refused in ["pairs", "pairs_returned"] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!(" {refused}: left as it is: CP004"))),
            "{refused}: {out}"
        );
    }
    assert!(out.contains(" warps: transformable"), "{out}");
}

/// Variant headers, each defining and launching its own `init` and `step`, that one `.cu` file
/// includes under `#if VARIANT == ...` (a graph-analytics suite's BFS variants): a header's
/// launches of a kernel it defines itself launch its own, so the namesakes its includer brings
/// in beside it are no conflict (every such launch was CP101), and the program compiles in
/// every variant.
#[test]
fn variant_headers_launch_their_own_namesakes() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-variant-headers");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for (v, scale) in [("a", 2), ("b", 3)] {
        std::fs::write(
            dir.join("src").join(format!("variant_{v}.h")),
            format!(
                "__global__ void init(int* p, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = {scale}; }}
                 __global__ void step(int* p, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] *= {scale}; }}
                 void run(int* p, int n) {{
  init<<<(n + 63) / 64, 64>>>(p, n);
  step<<<(n + 63) / 64, 64>>>(p, n);
}}
"
            ),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("src/main.cu"),
        "#if VARIANT == 0
#include \"variant_a.h\"
#else
#include \"variant_b.h\"
#endif
         int main() { int* p; cudaMalloc(&p, 256 * sizeof(int)); run(p, 256); return cudaDeviceSynchronize() != cudaSuccess; }
",
    )
    .unwrap();
    let o = cupreempt(
        &["transform", "--keep-going", "src", "--out-dir", "out"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("CP101"), "every launch is rewritten: {err}");
    for v in ["a", "b"] {
        let f = format!("variant_{v}.h");
        let text = std::fs::read_to_string(dir.join("out").join(&f)).unwrap();
        for k in ["init", "step"] {
            assert!(
                text.contains(&format!("cupreempt::launch<{k}__cupreempt_kernels")),
                "{f}: {text}"
            );
        }
    }
    for variant in ["-DVARIANT=0", "-DVARIANT=1"] {
        let obj = dir.join("main.o");
        let mut cmd = support::nvcc_compile(&nvcc, &obj);
        cmd.arg(variant).arg(dir.join("out/main.cu"));
        support::compiles(&mut cmd, variant).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A launch of a template kernel whose arguments span lines (comments among them), written
/// with `#line` directives as the compiler launcher writes every file: the selector's copy of
/// the arguments stays on the launch's line, so no directive lands inside the argument list
/// (the grammar cannot read one there, and the whole file would be left as written, CP013), and
/// the lines after it keep their numbers.
#[test]
fn a_deduced_launch_over_several_lines_keeps_its_lines_under_line_directives() {
    let out = transformed_and_compiled(
        "cli-deduced-launch-lines",
        &["--line-directives"],
        "template <class T>\n__global__ void gen(T* a, const T* b, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) a[i] = b[i];\n}\n\
         void go(int* a, int* b, int n, cudaStream_t s) {\n  if (n > 0)\n  gen<<<n / 64, 64, 0, s>>>(\n      a, b, // the inputs\n      n /* count */);\n  static_assert(__LINE__ == 11, \"lines kept\");\n}\n",
    );
    assert!(
        out.contains(
            "cupreempt::launch<decltype(gen__cupreempt_select(a, b, n))>(n / 64, 64, 0, s)(\n"
        ),
        "{out}"
    );
}

/// Two more shapes under `#line` directives (as the launcher writes every file), each of which
/// must not leave its whole file as written (CP013): a launch whose explicit template
/// arguments span lines (HeCBench's pool), whose head is written on one line followed by as
/// many line breaks as it had, so no directive is needed inside the argument list; and a
/// kernel defined out of its namespace (`__global__ void ns::k(...)`, HeCBench's
/// logic-rewrite), whose reopened namespace's note is a block comment (a line comment would
/// swallow the generated body's head on the same line). Launch bounds on a line of their own
/// between a template's head and `__global__` (ggml's kernels) move to the wrappers, and their
/// line's deletion gets no `#line` directive (its place is between the head and the
/// declaration).
#[test]
fn explicit_template_launches_and_qualified_kernels_keep_their_lines_under_line_directives() {
    let out = transformed_and_compiled(
        "cli-line-directive-shapes",
        &["--line-directives"],
        "namespace ns {\n__global__ void fill(int* p, int n);\n}\n\
         __global__ void ns::fill(int* p,\n    int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = 1;\n}\n\
         template <class T, int A, int B>\n__launch_bounds__(256, 1)\n__global__ void add(T* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] += A * B;\n}\n\
         void go(int* p, int n) {\n  ns::fill<<<n / 64, 64>>>(p, n);\n  add<int, 2,\n      3><<<n / 64,\n      64>>>(\n      p, n);\n  static_assert(__LINE__ == 21, \"lines kept\");\n}\n",
    );
    assert!(
        out.contains("cupreempt::launch<add__cupreempt_kernels<int, 2, 3>>(n / 64, 64, 0, 0)(\n\n\n      p, n);"),
        "{out}"
    );
    assert!(
        out.contains("/* cupreempt: `fill` out of its namespace */"),
        "{out}"
    );
}

/// A file that begins with a byte order mark keeps it first: the include line goes after it
/// (the compiler skips a mark only at the very start of a file, and so does the grammar; an
/// include before it would leave the whole file as written, CP013: HeCBench's stsg).
#[test]
fn a_byte_order_mark_stays_first() {
    let src = "\u{feff}#ifdef __CUDACC__\n#include <cuda.h>\n#endif\n__global__ void k(int* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = 1;\n}\nvoid go(int* p, int n) { k<<<n / 64, 64>>>(p, n); }\n";
    for extra in [&[][..], &["--line-directives"][..]] {
        let out = transformed_and_compiled("cli-bom", extra, src);
        assert!(
            out.starts_with("\u{feff}#include \"cupreempt.cuh\"\n"),
            "{extra:?}: {out}"
        );
    }
}

/// `src` written as `k.cu` in a fresh folder named after `name`, transformed with `extra`
/// arguments into `out.cu` (which must succeed) and compiled with nvcc; the output's text.
fn transformed_and_compiled(name: &str, extra: &[&str], src: &str) -> String {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir(name);
    std::fs::write(dir.join("k.cu"), src).unwrap();
    let o = cupreempt(
        &[&["transform", "k.cu", "-o", "out.cu"][..], extra].concat(),
        &dir,
    );
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.o")).arg(dir.join("out.cu")),
        "out.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::read_to_string(dir.join("out.cu")).unwrap()
}

/// `multi_tensor_apply`'s shape across files: a header's kernel template calls a functor of its
/// template parameter's type (`callable(n, out)`), and the file that includes it defines the
/// functor, whose `operator()` reads blockIdx, and launches the kernel with it. The functor
/// gets its context form in its own file, the header's call passes the context through
/// `cupreempt::call_functor`, and both compile. Where the operator() is defined outside its
/// class (it cannot take the context), the kernel is refused (CP008), as every such call was.
#[test]
fn a_functor_of_a_template_parameter_takes_the_context_across_files() {
    let dir = support::tempdir("cli-functor-across-files");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("apply.cuh"),
        "#pragma once\ntemplate <typename U>\n__global__ void apply_kernel(int n, float* out, U callable) { callable(n, out); }\n",
    )
    .unwrap();
    let functor = "#include \"apply.cuh\"\nstruct Scale {\n  float s;\n  __device__ void operator()(int n, float* out) const {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = s * i;\n  }\n};\nvoid run(int n, float* out) { apply_kernel<<<(n + 255) / 256, 256>>>(n, out, Scale{2.0f}); }\n";
    std::fs::write(src.join("scale.cu"), functor).unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.contains(": apply_kernel:") && l.contains("transformable")),
        "{out}\n{}",
        stderr(&o)
    );
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let header = std::fs::read_to_string(dir.join("out/apply.cuh")).unwrap();
    assert!(
        header.contains("::cupreempt::call_functor(__cp, callable, n, out);"),
        "{header}"
    );
    let scale = std::fs::read_to_string(dir.join("out/scale.cu")).unwrap();
    assert!(
        scale.contains("operator()(CupreemptCtx& __cp, int n, float* out) const"),
        "{scale}"
    );
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("scale.o"))
            .arg("-I")
            .arg(dir.join("out"))
            .arg(dir.join("out/scale.cu")),
        "out/scale.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(dir.join("out")).unwrap();

    std::fs::write(
        src.join("scale.cu"),
        functor.replace(
            "  __device__ void operator()(int n, float* out) const {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = s * i;\n  }\n};\n",
            "  __device__ void operator()(int n, float* out) const;\n};\n__device__ void Scale::operator()(int n, float* out) const {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = s * i;\n}\n",
        ),
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.contains(": apply_kernel:"))
        .unwrap_or_else(|| panic!("no line for apply_kernel:\n{out}"));
    assert!(line.contains("CP008"), "{out}");
}

/// A batched kernel bounds its blocks with a helper of a header it includes
/// (`if (blockIdx.x >= ceil_div(n, 128)) return;` before a barrier): the header's function,
/// arithmetic on its by-value parameters, gives every thread of the block the same value, so
/// the return is block-uniform and the kernel keeps the plain form. A header helper that reads
/// the thread's index, or one the header only declares, is no such helper.
#[test]
fn an_included_files_uniform_helper_keeps_a_return_block_uniform() {
    let dir = support::tempdir("cli-included-uniform-helper");
    let kernel = "#include \"sizes.h\"\n__global__ void tiles(int* sizes, float* out) {\n  __shared__ float s[128];\n  int n = sizes[blockIdx.y];\n  if (blockIdx.x >= ceil_div(n, 128)) return;\n  s[threadIdx.x] = n;\n  __syncthreads();\n  out[blockIdx.y * gridDim.x + blockIdx.x] = s[127 - threadIdx.x];\n}\n";
    std::fs::write(dir.join("tiles.cu"), kernel).unwrap();
    let cases = [
        ("{ return (a + b - 1) / b; }", "plain"),
        ("{ return (a + (int)threadIdx.x) / b; }", "predicated"),
        (";", "predicated"),
    ];
    for (body, form) in cases {
        let header =
            format!("#pragma once\n__host__ __device__ int ceil_div(int a, int b){body}\n");
        std::fs::write(dir.join("sizes.h"), header).unwrap();
        let o = cupreempt(&["check", "tiles.cu"], &dir);
        let out = stdout(&o);
        assert!(
            out.lines()
                .any(|l| l.contains(": tiles:") && l.contains(&format!("transformable ({form})"))),
            "{body}: {out}\n{}",
            stderr(&o)
        );
    }
}

/// A header of kernels is compiled only inside the units that include it, after what they
/// include first: MAGMA's variable-size batched headers call `magma_ceildiv` from a header
/// only their includers include. Read alone, the header's call is unknown (predicated); read
/// with the folder, the helper every including unit declares is known, and uniform only if it
/// is so in every unit.
#[test]
fn a_headers_kernels_know_the_functions_of_the_units_that_include_it() {
    let dir = support::tempdir("cli-header-unit-context");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let kernels = "#pragma once\n__global__ void tiles(int* sizes, float* out) {\n  __shared__ float s[128];\n  int n = sizes[blockIdx.y];\n  if (blockIdx.x >= ceil_div(n, 128)) return;\n  s[threadIdx.x] = n;\n  __syncthreads();\n  out[blockIdx.y * gridDim.x + blockIdx.x] = s[127 - threadIdx.x];\n}\n";
    std::fs::write(src.join("tiles.cuh"), kernels).unwrap();
    std::fs::write(
        src.join("util.h"),
        "#pragma once\n__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }\n",
    )
    .unwrap();
    let unit = |util: &str| {
        format!("#include \"{util}\"\n#include \"tiles.cuh\"\nvoid run(int* s, float* o) {{ tiles<<<dim3(4, 8), 128>>>(s, o); }}\n")
    };
    std::fs::write(src.join("a.cu"), unit("util.h")).unwrap();
    let form = |args: &[&str]| {
        let o = cupreempt(args, &dir);
        let out = stdout(&o);
        let line = out
            .lines()
            .find(|l| l.contains("tiles.cuh") && l.contains(": tiles:"))
            .unwrap_or_else(|| panic!("{out}\n{}", stderr(&o)))
            .to_string();
        line
    };
    assert!(form(&["check", "src"]).contains("transformable (plain)"));
    assert!(form(&["check", "src/tiles.cuh"]).contains("transformable (predicated)"));
    // A second unit whose `ceil_div` reads the thread's index: not uniform in every unit.
    std::fs::write(
        src.join("util2.h"),
        "#pragma once\n__host__ __device__ inline int ceil_div(int a, int b) { return (a + (int)threadIdx.x) / b; }\n",
    )
    .unwrap();
    std::fs::write(src.join("b.cu"), unit("util2.h")).unwrap();
    assert!(form(&["check", "src"]).contains("transformable (predicated)"));
    std::fs::remove_file(src.join("b.cu")).unwrap();
    let o = cupreempt(&["transform", "src", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let header = std::fs::read_to_string(dir.join("out/tiles.cuh")).unwrap();
    assert!(header.contains("tiles__cupreempt"), "{header}");
    assert!(!header.contains("__cp_live"), "plain form: {header}");
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("a.o"))
            .arg("-I")
            .arg(dir.join("out"))
            .arg("-I")
            .arg(&src)
            .arg(dir.join("out/a.cu")),
        "out/a.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Another file's functions carry their class (`KnownHelper::owner`): a qualified call of a
/// class's own `add` that does not synchronize is plain work even where another class's `add`
/// synchronizes the warp, and a call through an object of a written class reaches that class's
/// member only. Without the header, the calls are unseen.
#[test]
fn qualified_and_object_calls_reach_the_named_class_of_another_file() {
    let dir = support::tempdir("cli-owner-across-files");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("ops.cuh"),
        "#pragma once\n\
         template <class T> struct Math { static __device__ T add(T a, T b) { return a + b; } };\n\
         struct Heap {\n\
           float top;\n\
           __device__ void add(float v) { top = __shfl_sync(0xffffffff, v > top ? v : top, 0); }\n\
           __device__ void reduce(float* s) { s[threadIdx.x] = top; __syncthreads(); }\n\
         };\n\
         struct Lane {\n\
           float top;\n\
           __device__ void reduce(float* s) { s[threadIdx.x] = top; }\n\
         };\n",
    )
    .unwrap();
    std::fs::write(
        src.join("k.cu"),
        "#include \"ops.cuh\"\n\
         __global__ void sums(const float* in, float* out, int n) {\n\
           for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = Math<float>::add(in[i], 1.0f);\n\
         }\n\
         __global__ void heaps(const float* in, float* out, int n) {\n\
           Heap heap{0.0f};\n\
           for (int i = threadIdx.x; i < n; i += blockDim.x) heap.add(in[i]);\n\
           out[threadIdx.x] = heap.top;\n\
         }\n\
         __global__ void lanes(const float* in, float* out, int n) {\n\
           __shared__ float s[128];\n\
           int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
           if (i >= n) return;\n\
           Lane lane{in[i]};\n\
           lane.reduce(s);\n\
           out[i] = s[threadIdx.x];\n\
         }\n\
         __global__ void staged(const float* in, float* out, int n) {\n\
           __shared__ float s[128];\n\
           int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
           if (i >= n) return;\n\
           Heap heap{in[i]};\n\
           heap.reduce(s);\n\
           out[i] = s[threadIdx.x ^ 1];\n\
         }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src"], &dir);
    let out = stdout(&o);
    for want in [
        ": sums: transformable (plain)",
        ": heaps: left as it is: CP004",
        ": lanes: transformable (plain)",
        ": staged: left as it is: CP004",
    ] {
        assert!(
            out.lines().any(|l| l.contains(want)),
            "{want}\n{out}{}",
            stderr(&o)
        );
    }
}

/// A kernel calls a member function of a class from a header found through `-I`
/// (`volume.ptr(y)`, PCL's `PtrStep`) in a file whose own functor reads the block index. The
/// call names a member function of the header, not a functor held in a field, so the kernel is
/// transformed; without the `-I` the header is unseen, `ptr` could be such a field, and the
/// kernel stays as written (CP008). PCL's GPU modules: 64 → 121 of 134 kernels transformable
/// with their include folders given.
#[test]
fn member_calls_of_a_headers_class_beside_a_functor_that_reads_the_block_index() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-header-member-beside-functor");
    std::fs::create_dir_all(dir.join("inc/grid")).unwrap();
    std::fs::write(
        dir.join("inc/grid/step.h"),
        "#pragma once\n\
         #if defined(__CUDACC__)\n#define GRID_HOST_DEVICE __host__ __device__ __forceinline__\n\
         #else\n#define GRID_HOST_DEVICE\n#endif\n\
         template <class T> struct PtrStep {\n  T* data;\n  unsigned long step;\n\
         \x20 GRID_HOST_DEVICE T* ptr(int y = 0) { return (T*)((char*)data + y * step); }\n};\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "#include <grid/step.h>\n\
         struct Clear {\n  float* out;\n  __device__ void operator()() const { out[blockIdx.x] = 0.0f; }\n};\n\
         __global__ void fill(PtrStep<float> volume, float v) {\n\
         \x20 float* row = volume.ptr(blockIdx.y);\n  row[blockIdx.x * blockDim.x + threadIdx.x] = v;\n}\n\
         __global__ void clear(const Clear c) { c(); }\n",
    )
    .unwrap();
    let line = |out: &str, k: &str| {
        out.lines()
            .find(|l| l.contains(&format!(": {k}:")))
            .unwrap_or_else(|| panic!("no line for {k}:\n{out}"))
            .to_string()
    };
    let o = cupreempt(&["check", "-I", "inc", "k.cu"], &dir);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        line(&out, "fill").contains("transformable (plain)"),
        "{out}"
    );
    assert!(line(&out, "clear").contains("transformable"), "{out}");
    let o = cupreempt(&["check", "k.cu"], &dir);
    let out = stdout(&o);
    assert!(
        line(&out, "fill").contains("CP008 member function `operator()`"),
        "without the header, `ptr` may be a functor in a field:\n{out}"
    );
    let o = cupreempt(&["transform", "-I", "inc", "k.cu", "-o", "out.cu"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let inc = dir.join("inc");
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.o"))
            .arg("-I")
            .arg(&inc)
            .arg(dir.join("out.cu")),
        "out.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A macro that an included header defines only under a configuration macro (a logging
/// library's `__syncthreads` that records each barrier with its block index, as CUTLASS's
/// synclog does under `CUTLASS_ENABLE_SYNCLOG`): with nothing defining that macro, the kernel is
/// transformed (CP203 says on what assumption) and its wrappers are compiled only where the
/// macro stays undefined; with `-D` it is judged with the definition and refused (CP008). Both
/// outputs compile with and without the macro, and where it is defined the object holds no
/// wrapper: its launches run the kernel as written.
#[test]
fn a_macro_defined_only_under_an_undefined_configuration_macro() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("cli-unconfigured-macro");
    std::fs::write(
        dir.join("trace.h"),
        "#pragma once\n#include <cstdio>\nnamespace trace {\n\
         __device__ inline void barrier(int line) {\n\
           if (threadIdx.x == 0) printf(\"block %u at line %d\\n\", blockIdx.x, line);\n}\n}\n\
         #ifdef TRACE_NAMESPACE\n#define trace TRACE_NAMESPACE\n#endif\n\
         #if defined(TRACE_BARRIERS)\n#undef __syncthreads\n\
         #define __syncthreads() do { \\\n  trace::barrier(__LINE__); \\\n  __syncthreads(); \\\n} while (0)\n\
         #endif\n\
         #ifdef TRACE_HELPER\n#define BLOCK_SYNC() do { trace::barrier(__LINE__); __syncthreads(); } while (0)\n\
         #else\n#define BLOCK_SYNC() __syncthreads()\n#endif\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("reverse.cu"),
        "#include \"trace.h\"\n\
         __global__ void reverse(float* x) {\n  __shared__ float s[256];\n\
           s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];\n  __syncthreads();\n\
           x[blockIdx.x * 256 + threadIdx.x] = s[255 - threadIdx.x];\n}\n\
         __device__ void sync_block() { BLOCK_SYNC(); }\n\
         __global__ void reverse_via_helper(float* x) {\n  __shared__ float s[256];\n\
           s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];\n  sync_block();\n\
           x[blockIdx.x * 256 + threadIdx.x] = s[255 - threadIdx.x];\n}\n\
         void run(float* x, int blocks) {\n  reverse<<<blocks, 256>>>(x);\n\
           reverse_via_helper<<<blocks, 256>>>(x);\n}\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "."], &dir);
    let err = stderr(&o);
    assert!(
        o.status.success()
            && stdout(&o).contains("reverse: transformable")
            && stdout(&o).contains("reverse_via_helper: transformable"),
        "{}{err}",
        stdout(&o)
    );
    // Two configuration macros assumed undefined: the help speaks of either (miette wraps it).
    let help = err.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        err.contains("CP203")
            && help.contains("a build that defines any of them runs these kernels as written")
            && help.contains("(-D TRACE_BARRIERS -D TRACE_HELPER)"),
        "{err}"
    );
    let o = cupreempt(&["check", ".", "-D", "TRACE_BARRIERS=1"], &dir);
    assert!(!o.status.success(), "refused with the definition");
    // The kernel's own use of the macro, and its helper's.
    assert!(
        stdout(&o).contains("reverse: left as it is: CP008")
            && stdout(&o).contains("reverse_via_helper: left as it is: CP008")
            && !stderr(&o).contains("CP203"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    // The helper's macro has a plain definition too (`#else`), which comes last: the other one
    // is in effect under -D TRACE_HELPER, and the kernel that reaches it is refused.
    let o = cupreempt(&["check", ".", "-D", "TRACE_HELPER"], &dir);
    assert!(
        stdout(&o).contains("reverse: transformable")
            && stdout(&o).contains("reverse_via_helper: left as it is: CP008"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    // A kernel that reaches the macro only through a helper: the note points at the macro's
    // use in the helper (line 2), not at the kernel's call of the helper (line 5). Its plain
    // definition names `__syncthreads`, whose logging definition calls the reader too, so both
    // configuration macros are taken as undefined; `trace`, named by that definition and
    // defined only under TRACE_NAMESPACE, calls no reader and is read as written (the guard
    // in the output below ends without it).
    std::fs::write(
        dir.join("via.cu"),
        "#include \"trace.h\"\n__device__ void wait_block() { BLOCK_SYNC(); }\n\
         __global__ void shift(float* x) {\n  x[blockIdx.x] += 1.0f;\n  wait_block();\n}\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "via.cu", "--format", "json"], &dir);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", stdout(&o), stderr(&o));
    });
    let notes: Vec<u64> = report[0]["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["code"] == "CP203")
        .filter_map(|d| d["line"].as_u64())
        .collect();
    assert_eq!(notes, [2], "{}", stdout(&o));
    std::fs::remove_file(dir.join("via.cu")).unwrap();
    let o = cupreempt(&["transform", ".", "--out-dir", "out"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("out/reverse.cu")).unwrap();
    assert!(
        out.contains(
            "#if !defined(CUPREEMPT_SPLIT_UNIT) && !defined(TRACE_BARRIERS) && !defined(TRACE_HELPER)\n"
        ),
        "{out}"
    );
    for (flag, wrappers) in [(None, true), (Some("-DTRACE_BARRIERS"), false)] {
        let obj = dir.join(format!("reverse{}.o", flag.is_some() as u8));
        let mut cmd = support::nvcc_compile(&nvcc, &obj);
        cmd.arg(dir.join("out/reverse.cu"));
        if let Some(f) = flag {
            cmd.arg(f);
        }
        support::compiles(&mut cmd, "reverse.cu").unwrap_or_else(|e| panic!("{e}"));
        // The wrapper's mangled name (the body's is `23reverse__cupreempt_body`).
        assert_eq!(
            support::file_contains(&obj, "18reverse__cupreempt"),
            wrappers,
            "{flag:?}"
        );
    }
}

/// A kernel whose specifier is a macro that only an including file's header defines
/// (cuCollections' `CUCO_KERNEL` in a header that does not include its definition): checked on
/// its own, the grammar cannot read the definition and the kernel is missing from the report.
/// `-D NAME=VALUE` gives the macro its value, as the build's own command line would.
#[test]
fn a_define_with_a_value_is_read_as_the_macros_definition() {
    let dir = support::tempdir("cli-define-value");
    std::fs::write(
        dir.join("kernels.cuh"),
        "#pragma once\n\
         KERNEL_SPEC void fill(int* out, int n) {\n\
           int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
           if (i < n) out[i] = 1;\n\
         }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "kernels.cuh"], &dir);
    assert!(
        !stdout(&o).contains("fill:") && stderr(&o).contains("CP100"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = cupreempt(
        &["check", "kernels.cuh", "-D", "KERNEL_SPEC=__global__"],
        &dir,
    );
    assert!(
        o.status.success()
            && stdout(&o).contains("fill: transformable")
            && !stderr(&o).contains("CP100"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    // A name alone (`-D KERNEL_SPEC`) gives no value to read: as before.
    let o = cupreempt(&["check", "kernels.cuh", "-D", "KERNEL_SPEC"], &dir);
    assert!(!stdout(&o).contains("fill:"), "{}", stdout(&o));
}

/// A refused kernel whose file includes a header that is not found gets a note naming it
/// (CP204), in `check` and `transform`; given the folder with `-I`, the helper is read, the
/// kernel is transformable and no note is left. A file whose kernels all pass gets none.
#[test]
fn a_header_not_found_is_named_where_a_kernel_is_refused() {
    let dir = support::tempdir("cli-include-not-found");
    std::fs::create_dir_all(dir.join("src/common")).unwrap();
    std::fs::write(
        dir.join("src/common/util.h"),
        "#pragma once\ninline __device__ __host__ unsigned div_up(unsigned a, unsigned b) { return (a + b - 1) / b; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/tiles.cu"),
        "#include \"util.h\"\n\
         __global__ void tiles(float* out, unsigned n) {\n\
           const unsigned k_tiles = div_up(n, 256);\n\
           if (blockIdx.x >= k_tiles) return;\n\
           __shared__ float s[256];\n\
           float sum = 0.0f;\n\
           for (unsigned k = 0; k < k_tiles; ++k) {\n\
             s[threadIdx.x] = out[k * 256 + threadIdx.x];\n\
             __syncthreads();\n\
             sum += s[255 - threadIdx.x];\n\
             __syncthreads();\n\
           }\n\
           out[blockIdx.x * 256 + threadIdx.x] = sum;\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/fine.cu"),
        "#include \"absent.h\"\n__global__ void fine(float* out) { out[threadIdx.x] = 1.0f; }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src/tiles.cu", "src/fine.cu"], &dir);
    assert!(
        stdout(&o).contains("tiles: left as it is: CP004")
            && stderr(&o).contains("CP204")
            && stderr(&o).contains("`util.h` not found")
            && !stderr(&o).contains("absent.h"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = cupreempt(&["transform", "src/tiles.cu", "-o", "out.cu"], &dir);
    assert!(stderr(&o).contains("`util.h` not found"), "{}", stderr(&o));
    // A launch left as written (CP101) of a kernel the missing header would define.
    std::fs::write(
        dir.join("src/run.cu"),
        "#include \"kernels.cuh\"\nvoid run(float* p) { scale<<<1, 32>>>(p); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "src/run.cu"], &dir);
    assert!(
        stderr(&o).contains("CP101") && stderr(&o).contains("`kernels.cuh` not found"),
        "{}",
        stderr(&o)
    );
    let o = cupreempt(&["check", "-I", "src/common", "src/tiles.cu"], &dir);
    assert!(
        o.status.success()
            && stdout(&o).contains("tiles: transformable")
            && !stderr(&o).contains("CP204"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

/// A header of kernels whose type and execution-space macros only a header that its includer
/// includes before it defines (`KERNEL_SPEC void fill(...)`, `DEVICE float twice(...)`, as
/// cuCollections' `static_map_kernels.cuh` and pytorch3d's pulsar headers are written): read
/// with the macros of the units that include it, its kernel is found and the unit's launch
/// rewritten. Before, the kernel was not found and the launch was left as written (CP101).
#[test]
fn a_headers_kernels_are_read_with_its_includers_macros() {
    let dir = support::tempdir("cli-includer-macros");
    std::fs::write(
        dir.join("global.h"),
        "#pragma once\n#define KERNEL_SPEC __global__\n#define DEVICE __device__\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("kernels.cuh"),
        "#pragma once\n\
         DEVICE float twice(float v) { return v + v; }\n\
         KERNEL_SPEC void fill(float* out, int n) {\n\
           int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
           if (i < n) out[i] = twice((float)blockIdx.x);\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("unit.cu"),
        "#include \"global.h\"\n#include \"kernels.cuh\"\n\
         void run(float* o, int n) { fill<<<(n + 255) / 256, 256>>>(o, n); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "."], &dir);
    assert!(
        o.status.success()
            && stdout(&o).contains("fill: transformable")
            && !stderr(&o).contains("CP101")
            && !stderr(&o).contains("CP100"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = cupreempt(
        &["transform", "--out-dir", "out", "unit.cu", "kernels.cuh"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let unit = std::fs::read_to_string(dir.join("out/unit.cu")).unwrap();
    assert!(
        unit.contains("cupreempt::launch<fill__cupreempt_kernels>"),
        "{unit}"
    );
}
