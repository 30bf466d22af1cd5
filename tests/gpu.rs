//! On a machine with an NVIDIA GPU: every fixture with a GPU-TEST line is transformed, built
//! with a generated harness (tests/gpu/harness.cuh) and run: output bit-identical to the
//! original kernel's, every task run exactly once, temporal and spatial preemption mid-run
//! followed by resumption. Without a GPU driver the test says so and does nothing.
//!
//! CUPREEMPT_SANITIZE=1 also runs the hazard fixtures under compute-sanitizer (memcheck,
//! racecheck, synccheck). CUPREEMPT_GPU_OUT=DIR keeps the logs there.
//! CUPREEMPT_GPU_GENERATE=1 only writes the transformed fixtures and harness sources (to
//! CUPREEMPT_GPU_OUT), for scripts/gpu-check.sh or a GPU machine without Rust.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn gpu_present() -> bool {
    Path::new("/dev/nvidiactl").exists()
        || Command::new("nvidia-smi")
            .arg("-L")
            .output()
            .is_ok_and(|o| o.status.success())
}

const SANITIZED: &[&str] = &[
    "return_in_barrier_loop",
    "reduction_loop_after_return",
    "thread_return_before_barrier",
    "syncthreads_count",
    "cg_block_sync",
    "uniform_return_before_barrier",
    "early_return_no_barrier",
    "shared_static",
];

/// The harness's spatial scenario yields the even SMs of a grid of one block per SM (132 on an
/// H100) and its mid-run scenarios preempt at a fraction of the tasks: a fixture with too few
/// tasks finishes before a yield lands and fails on the GPU with correct output. With adaptive
/// chunks the first rounds of claims take 1, 2, 4 tasks per block: a fixture of 300 tasks had
/// them all taken before the adaptive scenario's yield at half landed (H100). Checked here,
/// without a GPU, so such a fixture never reaches the GPU machine.
#[test]
fn gpu_test_grids_have_tasks_for_every_scenario() {
    const MIN_TASKS: u64 = 1000;
    let mut small = Vec::new();
    for path in support::fixtures() {
        let src = std::fs::read_to_string(&path).unwrap();
        for spec in support::gpu_specs(&src) {
            let tasks = spec.grid_tasks().unwrap_or_else(|| {
                panic!(
                    "{}: GPU-TEST grid `{}` is not dim3(numbers)",
                    path.display(),
                    spec.grid
                )
            });
            if tasks < MIN_TASKS {
                small.push(format!("{} ({} tasks)", path.display(), tasks));
            }
            // Its arguments read as the harness reads them (`in:`/`out:` arrays of a known
            // element type, scalars): a line it cannot read panics here, not on the GPU machine.
            let _ = spec.harness("check", "check.transformed.cu", "", false, 1);
        }
    }
    assert!(
        small.is_empty(),
        "GPU-TEST grids under {MIN_TASKS} blocks: {small:?}"
    );
}

#[test]
fn transformed_fixtures_match_the_original_on_the_gpu() {
    let generate_only = std::env::var_os("CUPREEMPT_GPU_GENERATE").is_some();
    if !gpu_present() && !generate_only {
        // Written straight to stderr: the test harness does not capture it, so it is visible.
        let _ = writeln!(std::io::stderr(), "gpu: SKIPPED, no NVIDIA GPU driver on this machine (tests/gpu.rs runs on a GPU machine)");
        return;
    }
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = match std::env::var_os("CUPREEMPT_GPU_OUT") {
        Some(d) => {
            std::fs::create_dir_all(&d).unwrap();
            PathBuf::from(d)
        }
        None => support::tempdir("gpu"),
    };
    let mut jobs = Vec::new();
    for path in support::fixtures() {
        let src = std::fs::read_to_string(&path).unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        for (i, spec) in support::gpu_specs(&src).into_iter().enumerate() {
            let t = cupreempt::transform(
                &src,
                &stem,
                &cupreempt::Options {
                    verify: true,
                    ..cupreempt::Options::default()
                },
            );
            let transformed = dir.join(format!("{stem}.transformed.cu"));
            std::fs::write(&transformed, &t.output).unwrap();
            let has_main = src.contains("int main(");
            // Included by its name: the folder can move to a GPU machine without Rust.
            let included = format!("{stem}.transformed.cu");
            // The fixture's `-D` flags as `#define`s: the harness builds on the GPU machine
            // with the same flags for every fixture.
            let defines: String = support::nvcc_flags(&src)
                .iter()
                .filter_map(|w| w.strip_prefix("-D"))
                .map(|d| match d.split_once('=') {
                    Some((name, value)) => format!("#define {name} {value}\n"),
                    None => format!("#define {d}\n"),
                })
                .collect();
            let harness = format!(
                "{defines}{}",
                spec.harness(&stem, &included, &t.output, has_main, 1234 + i as u32)
            );
            let file = dir.join(format!("{stem}.harness{i}.cu"));
            std::fs::write(&file, harness).unwrap();
            jobs.push((stem.clone(), file, dir.join(format!("{stem}.harness{i}"))));
        }
    }
    assert!(
        jobs.len() >= 15,
        "expected GPU-TEST lines in most fixtures, found {}",
        jobs.len()
    );
    if generate_only {
        let _ = writeln!(
            std::io::stderr(),
            "gpu: generated {} harnesses in {}",
            jobs.len(),
            dir.display()
        );
        return;
    }
    // As scripts/gpu-check.sh: each harness with looks inside chunks (a look cuts a chunk and
    // its rest goes back) and as the default build (a chunk claimed beside the command that
    // sends its block away goes back).
    let builds: Vec<(String, PathBuf, PathBuf, &str)> = jobs
        .iter()
        .flat_map(|(stem, file, exe)| {
            ["looks", "plain"].map(|build| {
                (
                    stem.clone(),
                    file.clone(),
                    PathBuf::from(format!("{}.{build}.exe", exe.display())),
                    build,
                )
            })
        })
        .collect();
    let build_failures = support::parallel(&builds, 8, |(stem, file, exe, build)| {
        let o = Command::new(&nvcc)
            // Harnesses call the kernels directly; launch sites in the fixtures need no runtime.
            .args([
                "-arch=sm_90",
                "-std=c++17",
                "-O2",
                "-lineinfo",
                "-DCUPREEMPT_STANDALONE",
            ])
            .args((*build == "looks").then_some("-DCUPREEMPT_LOOKS"))
            .arg("-o")
            .arg(exe)
            .arg(format!(
                "-I{}",
                support::root().join("cuda_support").display()
            ))
            .arg(format!("-I{}", support::root().join("tests/gpu").display()))
            .args(support::toolkit_flags(&nvcc))
            .arg(file)
            .output()
            .map_err(|e| e.to_string())?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{stem}: build failed\n{}",
                String::from_utf8_lossy(&o.stderr)
            ))
        }
    });
    assert!(build_failures.is_empty(), "{}", build_failures.join("\n"));

    let mut report = String::new();
    let mut failed = Vec::new();
    // Each result is printed as it comes (not captured), so a hang shows where it happened.
    let log = |text: &str, report: &mut String| {
        report.push_str(text);
        let _ = std::io::stderr().write_all(text.as_bytes());
    };
    for (stem, _, exe, build) in &builds {
        let (ok, text) = run_with_timeout(Command::new(exe), 120);
        log(&text, &mut report);
        if !ok {
            failed.push(format!("{stem} ({build})"));
        }
    }
    if std::env::var_os("CUPREEMPT_SANITIZE").is_some() {
        for (stem, _, exe, _) in builds
            .iter()
            .filter(|(s, _, _, build)| *build == "looks" && SANITIZED.contains(&s.as_str()))
        {
            for tool in ["memcheck", "racecheck", "synccheck"] {
                let mut cmd = Command::new("compute-sanitizer");
                cmd.args(["--tool", tool, "--error-exitcode", "9"])
                    .arg(exe)
                    .env("CUPREEMPT_HARNESS_QUICK", "1");
                let (ok, out) = run_with_timeout(cmd, 240);
                let summary = out
                    .lines()
                    .filter(|l| l.contains("ERROR SUMMARY") || l.contains("RACECHECK SUMMARY"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let verdict = if ok { "ok" } else { "FAILED" };
                log(
                    &format!("sanitizer {tool} {stem}: {verdict} {summary}\n"),
                    &mut report,
                );
                if !ok {
                    report.push_str(&out);
                    failed.push(format!("{stem} ({tool})"));
                }
            }
        }
    }
    std::fs::write(dir.join("gpu-report.txt"), &report).unwrap();
    assert!(failed.is_empty(), "failed on the GPU: {failed:?}\n{report}");
}

/// Runs `cmd`, killing it after `seconds` (a deadlocked kernel must not hang the suite).
fn run_with_timeout(mut cmd: Command, seconds: u64) -> (bool, String) {
    use std::process::Stdio;
    let out = support::tempdir(&format!("run-{}", rand_tag()));
    let (so, se) = (out.join("stdout"), out.join("stderr"));
    cmd.stdout(Stdio::from(std::fs::File::create(&so).unwrap()));
    cmd.stderr(Stdio::from(std::fs::File::create(&se).unwrap()));
    let mut child = cmd.spawn().expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut text = std::fs::read_to_string(&so).unwrap_or_default()
        + &std::fs::read_to_string(&se).unwrap_or_default();
    if status.is_none() {
        text.push_str(&format!("TIMEOUT after {seconds} s (deadlock?)\n"));
    }
    (status.is_some_and(|s| s.success()), text)
}

fn rand_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}
