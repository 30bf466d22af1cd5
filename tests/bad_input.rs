//! The command line on hand-made bad input: every case ends with a diagnostic and a documented
//! exit code, never with a crash, and nothing the user had is lost.

mod support;

use std::path::Path;
use std::process::{Command, Output};

fn cupreempt(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cupreempt"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .output()
        .expect("run cupreempt")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

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
