//! The command line on hand-made bad input: every case ends with a diagnostic and a documented
//! exit code, never with a crash, and nothing the user had is lost.

mod support;

use support::{cupreempt, stderr, stdout};

use std::path::Path;
use std::process::Output;

/// An exit code (not a signal: a stack overflow aborts), with stderr for the message.
fn exit_code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {}", stderr(o)))
}

const KERNEL: &str = "__global__ void k(float* a) { a[blockIdx.x] = 1.0f; }\n";

#[test]
fn deep_nesting_is_handled_or_refused_never_a_crash() {
    let dir = support::tempdir("bad-deep");
    let n = 10_000;
    let braces = format!("void host() {}{}\n{KERNEL}", "{ ;".repeat(n), "}".repeat(n));
    std::fs::write(dir.join("braces.cu"), braces).unwrap();
    let n = 3_000;
    let namespaces: String = (0..n).map(|i| format!("namespace n{i} {{ ")).collect();
    std::fs::write(
        dir.join("namespaces.cu"),
        format!("{namespaces}{KERNEL}{}\n", "}".repeat(n)),
    )
    .unwrap();
    // Nested template argument lists (found by the fuzzer: the scan's walk once recursed).
    let n = 3_000;
    std::fs::write(
        dir.join("templates.cu"),
        format!(
            "using T = {}int{};\n{KERNEL}",
            "A<".repeat(n),
            ">".repeat(n)
        ),
    )
    .unwrap();
    let n = 7_000;
    std::fs::write(
        dir.join("blocks.cu"),
        format!(
            "__global__ void k(float* a) {{ if (threadIdx.x > 5) return; {}__syncthreads(); a[blockIdx.x] = 1.0f;{} }}\n",
            "{".repeat(n),
            "}".repeat(n)
        ),
    )
    .unwrap();
    for (file, outcome) in [
        ("templates.cu", "transformable (plain)"),
        ("braces.cu", "transformable (plain)"),
        ("namespaces.cu", "transformable (plain)"),
        ("blocks.cu", "transformable (predicated)"),
    ] {
        let o = cupreempt(&["check", file], &dir);
        assert_eq!(exit_code(&o), 0, "{file}: {}", stderr(&o));
        assert!(stdout(&o).contains(outcome), "{file}: {}", stdout(&o));
        let o = cupreempt(&["transform", file, "-o", &format!("out-{file}")], &dir);
        assert_eq!(exit_code(&o), 0, "{file}: {}", stderr(&o));
    }

    // Deeper than the analysis takes on: the file is refused with CP011 and left as it is.
    let n = 60_000;
    std::fs::write(
        dir.join("deeper.cu"),
        format!(
            "__global__ void k(float* a) {{ if (threadIdx.x > 5) return; {}__syncthreads();{} }}\n",
            "{".repeat(n),
            "}".repeat(n)
        ),
    )
    .unwrap();
    let o = cupreempt(&["check", "deeper.cu"], &dir);
    assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("CP011"), "{}", stderr(&o));
    let o = cupreempt(&["transform", "deeper.cu", "-o", "out-deeper.cu"], &dir);
    assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("CP011"), "{}", stderr(&o));
}

/// A file that is not UTF-8 (a Latin-1 character in a comment, as in real programs) is
/// transformed with its own bytes kept; one that cannot be read so (it holds the stand-in byte
/// 0x1A itself) is skipped with CP012 at the first odd byte, and the others go on.
#[test]
fn a_file_that_is_not_utf8_keeps_its_bytes_or_is_skipped_with_its_position() {
    let dir = support::tempdir("bad-utf8");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    let mut latin1 = b"// ok\n// caf".to_vec();
    latin1.push(0xE9); // 'é' in Latin-1
    latin1.extend_from_slice(b"\n");
    latin1.extend_from_slice(KERNEL.as_bytes());
    std::fs::write(dir.join("in/a_latin1.cu"), &latin1).unwrap();
    std::fs::write(dir.join("in/b_good.cu"), KERNEL).unwrap();

    let o = cupreempt(&["transform", "in", "--out-dir", "out"], &dir);
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    let out = std::fs::read(dir.join("out/a_latin1.cu")).unwrap();
    assert!(
        out.starts_with(b"// ok\n// caf\xE9\n"),
        "the byte is kept where it was"
    );
    assert_eq!(out.iter().filter(|&&b| b == 0xE9).count(), 1);
    assert!(!out.contains(&0x1A), "no stand-in is left");
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("__cupreempt"),
        "the kernel is transformed: {text}"
    );
    assert!(dir.join("out/b_good.cu").exists());
    assert_eq!(
        std::fs::read(dir.join("in/a_latin1.cu")).unwrap(),
        latin1,
        "the input is untouched"
    );

    // The stand-in byte in the file itself: skipped, with the odd byte's position.
    let mut odd = latin1.clone();
    odd.extend_from_slice(b"// \x1A\n");
    std::fs::write(dir.join("in/a_latin1.cu"), &odd).unwrap();
    for extra in [&[][..], &["--keep-going"][..]] {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let mut args = vec!["transform", "in", "--out-dir", "out"];
        args.extend_from_slice(extra);
        let o = cupreempt(&args, &dir);
        assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
        assert!(stderr(&o).contains("CP012"), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("a_latin1.cu:2:7"),
            "line:column of the byte: {}",
            stderr(&o)
        );
        assert!(dir.join("out/b_good.cu").exists(), "{}", stderr(&o));
        assert!(!dir.join("out/a_latin1.cu").exists());
    }

    let o = cupreempt(&["check", "--format", "json", "in"], &dir);
    assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    let files = v.as_array().expect("one entry per file");
    assert_eq!(files.len(), 2, "{v}");
    let d = &files[0]["diagnostics"][0];
    assert_eq!(d["code"], "CP012", "{v}");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(2), Some(7))
    );
    assert_eq!(files[1]["kernels"][0]["transformed"], true, "{v}");
}

/// The original line that output line `index` (0-based) stands for, following `#line`.
fn original_line(out: &str, index: usize) -> usize {
    let mut line = 1;
    for l in out.split('\n').take(index) {
        line = match l.trim_end().strip_prefix("#line ") {
            Some(rest) => rest.split(' ').next().unwrap().parse().unwrap(),
            None => line + 1,
        };
    }
    line
}

#[test]
fn line_directives_on_crlf_files_keep_crlf_and_count_lines_right() {
    let dir = support::tempdir("bad-crlf");
    let src = "// a\r\n#include <cstdio>\r\n__global__ void k(float* a) {\r\n  a[blockIdx.x] = 1.0f;\r\n}\r\nint main() {\r\n  float* a = 0;\r\n  k<<<1, 1>>>(a);\r\n  marker();\r\n}\r\n";
    std::fs::write(dir.join("crlf.cu"), src).unwrap();
    let o = cupreempt(
        &["transform", "--line-directives", "crlf.cu", "-o", "out.cu"],
        &dir,
    );
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("out.cu")).unwrap();
    assert!(out.contains("#line "), "{out}");
    assert_eq!(
        out.matches('\n').count(),
        out.matches("\r\n").count(),
        "no mixed line ends: {out:?}"
    );
    let at = out
        .split('\n')
        .position(|l| l.contains("marker()"))
        .unwrap();
    assert_eq!(original_line(&out, at), 9, "{out}");
}

#[test]
fn outputs_never_overwrite_inputs_or_each_other() {
    let dir = support::tempdir("bad-outputs");
    std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
    let o = cupreempt(&["transform", "k.cu", "-o", "./k.cu"], &dir);
    assert_eq!(exit_code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("names the input itself"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(dir.join("k.cu")).unwrap(), KERNEL);

    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::write(dir.join(sub).join("same.cu"), KERNEL).unwrap();
    }
    let o = cupreempt(
        &["transform", "a/same.cu", "b/same.cu", "--out-dir", "out"],
        &dir,
    );
    assert_eq!(exit_code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("would both be written"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("out").exists(), "nothing written");
}

#[test]
fn an_out_dir_inside_the_inputs_is_not_taken_as_input_on_a_second_run() {
    let dir = support::tempdir("bad-outdir-inside");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/k.cu"), KERNEL).unwrap();
    for run in 0..2 {
        let o = cupreempt(&["transform", "in", "--out-dir", "in/out"], &dir);
        assert_eq!(exit_code(&o), 0, "run {run}: {}", stderr(&o));
        assert!(!stderr(&o).contains("CP009"), "run {run}: {}", stderr(&o));
    }
    assert!(dir.join("in/out/k.cu").exists());
    assert!(!dir.join("in/out/out").exists());
}

#[test]
fn a_selection_that_names_no_kernel_is_a_warning() {
    let dir = support::tempdir("bad-select");
    std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--select", "nosuch"],
            "--select `nosuch` matches no kernel",
        ),
        (&["--exclude", "^kk$"], "--exclude `^kk$` matches no kernel"),
        (&["--chunk", "nosuch=4"], "--chunk nosuch=N names no kernel"),
    ];
    for (opts, warning) in cases {
        for cmd in [
            &["transform", "k.cu"][..],
            &["check", "k.cu"],
            &["diff", "k.cu"],
        ] {
            let args = [cmd, opts].concat();
            let o = cupreempt(&args, &dir);
            assert!(exit_code(&o) <= 1, "{args:?}: {}", stderr(&o));
            let err = stderr(&o);
            assert!(err.contains("warning[CP202]"), "{args:?}: {err}");
            assert!(err.contains(warning), "{args:?}: {err}");
            assert!(err.contains("(kernels: k)"), "{args:?}: {err}");
        }
    }
    let o = cupreempt(&["transform", "k.cu", "--select", "nosuch"], &dir);
    assert!(
        stderr(&o).contains("0 kernels transformed, 0 refused; 1 warnings"),
        "{}",
        stderr(&o)
    );
    // A selection that names a kernel says nothing.
    let o = cupreempt(
        &["transform", "k.cu", "--select", "^k$", "--chunk", "k=4"],
        &dir,
    );
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("CP202"), "{}", stderr(&o));
}

#[test]
fn a_refusal_caused_by_a_helper_names_the_helper_and_what_is_refused() {
    let dir = support::tempdir("bad-helper-reason");
    std::fs::write(
        dir.join("h.cu"),
        r#"#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ void gsync() { cg::this_grid().sync(); }
__device__ void outer(float* a) { a[0] = 0; gsync(); }
__device__ void launcher() { cudaDeviceSynchronize(); }
__device__ void stage(float* a) { a[threadIdx.x] = 0; if (threadIdx.x < 3) __syncthreads(); }
__global__ void k1(float* a) { outer(a); a[blockIdx.x] = 1; }
__global__ void k2(float* a) { launcher(); a[blockIdx.x] = 1; }
__global__ void k3(float* a) { if (threadIdx.x > 5) return; stage(a); a[blockIdx.x] = 1; }
"#,
    )
    .unwrap();
    let o = cupreempt(&["check", "h.cu"], &dir);
    assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
    let out = stdout(&o);
    for want in [
        "k1: left as it is: CP002 kernel `k1` calls helper `gsync` (through `outer`), which is refused: grid-wide synchronization",
        "k2: left as it is: CP003 kernel `k2` calls helper `launcher`, which is refused: dynamic parallelism",
        "k3: left as it is: CP004 a thread-dependent return reaches `stage`, which synchronizes the block, and in its live copy this condition may differ between threads",
    ] {
        assert!(out.contains(want), "missing `{want}` in:\n{out}");
    }
    // The kernels are counted as refused, by code, in transform's summary.
    let o = cupreempt(&["transform", "h.cu", "--out-dir", "out"], &dir);
    assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 kernels transformed, 3 refused (CP002 ×1, CP003 ×1, CP004 ×1)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn grid_sync_is_reported_once_at_the_sync_call() {
    let dir = support::tempdir("bad-grid-sync");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/grid_sync.cu");
    std::fs::copy(fixture, dir.join("grid_sync.cu")).unwrap();
    std::fs::write(
        dir.join("inline.cu"),
        "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n__global__ void k(float* a) {\n  a[blockIdx.x] = 1;\n  cg::this_grid().sync();\n}\n",
    )
    .unwrap();
    // (file, line and column of the sync call)
    for (file, line, column) in [("grid_sync.cu", 12, 3), ("inline.cu", 5, 3)] {
        let o = cupreempt(&["check", "--format", "json", file], &dir);
        assert_eq!(exit_code(&o), 1, "{}", stderr(&o));
        let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let cp002: Vec<&serde_json::Value> = json[0]["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["code"] == "CP002")
            .collect();
        assert_eq!(cp002.len(), 1, "{file}: {cp002:#?}");
        assert_eq!(
            (cp002[0]["line"].as_u64(), cp002[0]["column"].as_u64()),
            (Some(line), Some(column)),
            "{file}: {cp002:#?}"
        );
        assert_eq!(
            cp002[0]["labels"][0]["message"], "grid-wide barrier here",
            "{file}"
        );
    }
}

/// A syntax error outside every kernel (a grammar gap such as a statement macro whose
/// definition the file does not show, `UNROLL_HINT` before a loop) is a warning: `transform`
/// writes the file, as `check` says it will, with the kernel transformed and the unreadable
/// region as it was.
#[test]
fn a_syntax_error_outside_kernels_is_a_warning_and_the_file_is_written() {
    let dir = support::tempdir("bad-cp100");
    std::fs::write(
        dir.join("a.cu"),
        "int step(int x) {\n  UNROLL_HINT\n  for (int i = 0; i < 4; ++i) x += i;\n  return x;\n}\n\
         __global__ void k(float* a) { a[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f; }\n\
         void host(float* a) { k<<<4, 32>>>(a); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "a.cu"], &dir);
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("k: transformable"), "{}", stdout(&o));
    assert!(stderr(&o).contains("CP100"), "{}", stderr(&o));
    let o = cupreempt(&["transform", "a.cu", "-o", "b.cu"], &dir);
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    let out = std::fs::read_to_string(dir.join("b.cu")).expect("written");
    assert!(out.contains("k__cupreempt"), "{out}");
    assert!(
        out.contains("  UNROLL_HINT\n  for (int i = 0; i < 4; ++i) x += i;\n"),
        "{out}"
    );
}

/// A syntax error that begins before a kernel and takes it in (conditional initializers whose
/// branches each open the brace that closes after `#endif`, as a public hashing miner writes
/// its constant tables) is reported (CP100): the launch it holds gets CP101 "inside a syntax
/// error", which must point at a reported error. An error that begins inside a kernel stays
/// that kernel's refusal (CP001) alone.
#[test]
fn a_syntax_error_around_a_kernel_is_reported() {
    let dir = support::tempdir("bad-cp100-around");
    std::fs::write(
        dir.join("a.cu"),
        "#ifdef DIRECT\n__constant__ int a[2] = {\n#else\n__constant__ int a[2];\nconst int h_a[2] = {\n#endif\n  1, 2\n};\n\
         #ifdef DIRECT\n__constant__ int b[2] = {\n#else\n__constant__ int b[2];\nconst int h_b[2] = {\n#endif\n  3, 4\n};\n\
         __global__ void k(int* out) { out[threadIdx.x] = a[0] + b[1]; }\n\
         void host(int* out) { k<<<1, 32>>>(out); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "--format", "json", "a.cu"], &dir);
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let codes: Vec<&str> = json[0]["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect();
    assert!(
        codes.contains(&"CP101") && codes.contains(&"CP100"),
        "{codes:?}"
    );
    std::fs::write(
        dir.join("b.cu"),
        "__global__ void k(int* out) { out[threadIdx.x] = ) 1; }\nvoid host(int* out) { k<<<1, 32>>>(out); }\n",
    )
    .unwrap();
    let o = cupreempt(&["check", "b.cu"], &dir);
    assert!(
        stdout(&o).contains("k: left as it is: CP001"),
        "{}",
        stdout(&o)
    );
    assert!(!stderr(&o).contains("CP100"), "{}", stderr(&o));
}
