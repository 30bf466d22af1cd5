//! Self-tests of the Python helpers of the probes, run in CI: the external suite's timing
//! parser (which printed lines count as measurements decides the published geomean), the
//! fairness experiment's arithmetic, the compile check's unit finder and the side-by-side
//! table of two external passes, the Makefile suite's selection, the CMake suite's run lists, the benchmark logs' parser, the task loop's timing cuts and the chaos hang catcher;
//! and pyflakes over every script (a name left undefined fails only when its line runs, on a GPU).
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cmd` and fails with its output, saying `what` failed, where it does not succeed;
/// `missing` says what to do where the program cannot be started.
fn succeeds(cmd: &mut Command, what: &str, missing: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{:?}: {e}: {missing}", cmd.get_program()));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `python3 SCRIPT --self-test` from the repository and fails with its output.
fn self_test(script: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    succeeds(
        Command::new("python3")
            .arg(format!("{root}/{script}"))
            .arg("--self-test"),
        &format!("{script} self-test"),
        "python3 is needed for this test",
    );
}

#[test]
fn the_external_suite_counts_measurements_and_nothing_else() {
    self_test("scripts/external_suite.py");
}

/// NTT, ANTT, STP, DNTT and the preemption cost read from a daemon log, on made-up numbers.
#[test]
fn the_fairness_report_computes_the_metrics_as_the_simulator_does() {
    self_test("scripts/probes/fairness_report.py");
}

/// The chaos hang catcher (scripts/chaos_hang.py) tells a run that ends, one that fails and one
/// that hangs apart, kills the hung one at its limit and says where its threads wait.
#[test]
fn the_chaos_hang_catcher_reports_where_a_hung_run_waits() {
    self_test("scripts/chaos_hang.py");
}

/// The CMake suite's run lists (scripts/suites/*.txt) parse, and its parser rejects bad lines.
#[test]
fn the_cmake_suite_reads_its_run_lists() {
    self_test("scripts/cmake_suite.py");
}

/// The compile check's translation units: .cu files no other .cu file of their folder includes.
#[test]
fn the_compile_check_finds_translation_units() {
    self_test("scripts/compile_check.py");
}

/// Two external passes side by side: ratios per program, geomeans over the programs in both.
#[test]
fn two_external_passes_compare_program_by_program() {
    self_test("scripts/probes/external_libs_report.py");
}

/// The benchmark logs' parser shared by bench_report.py and compare_builds.sh: the median and
/// the launches planned preemptible of all.
#[test]
fn the_benchmark_logs_give_their_median_and_plans() {
    self_test("scripts/bench_log.py");
}

/// The preemption latency's split from the yield log (scripts/probes/yield_split.py): its
/// parse of bench.cuh's `yield_log` lines and its percentiles.
#[test]
fn the_latency_split_reads_the_yield_log() {
    self_test("scripts/probes/yield_split.py");
}

/// The task loop's timing cuts (scripts/probes/task_loop_cuts.py) still apply to the tree's
/// task_loop.cuh: each finds its text and changes it.
#[test]
fn every_task_loop_cut_still_applies() {
    self_test("scripts/probes/task_loop_cuts.py");
}

/// The several-GPU experiment's report (scripts/probes/gpus_report.py): its rounds, SLA count
/// and the GPU time a kill-and-restart revocation would discard.
#[test]
fn gpus_report_parses_its_console_and_the_daemons_log() {
    self_test("scripts/probes/gpus_report.py");
}

/// The several-GPU experiment's workload for the simulator (scripts/probes/gpus_sim.py): its
/// chains and arrivals, and the summary per policy.
#[test]
fn gpus_sim_builds_the_experiments_workload() {
    self_test("scripts/probes/gpus_sim.py");
}

/// The Makefile suite's choice of programs, the sibling folders it copies and the run-line
/// words it takes for input files.
#[test]
fn the_makefile_suite_selects_programs_and_their_inputs() {
    self_test("scripts/makefile_suite.py");
}

/// Every Python script under scripts/, read by pyflakes (installed by scripts/test.sh next to
/// nvcc): an undefined name in a line that runs only on a GPU machine (a suite's progress
/// line) would otherwise be found there, after the builds.
#[test]
fn every_script_passes_pyflakes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/nvcc-venv/bin/python");
    let mut scripts: Vec<PathBuf> = Vec::new();
    for dir in ["scripts", "scripts/probes"] {
        for e in std::fs::read_dir(root.join(dir))
            .expect("scripts/ is in the repository")
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "py") {
                scripts.push(e.path());
            }
        }
    }
    assert!(scripts.len() > 10, "found only {} scripts", scripts.len());
    succeeds(
        Command::new(&python)
            .args(["-m", "pyflakes"])
            .args(&scripts),
        "pyflakes (run the tests through scripts/test.sh if it is missing)",
        "run the tests through scripts/test.sh (it installs pyflakes)",
    );
}

/// The module-load probe's forms of a transformed unit (scripts/probes/wrapper_load.py): the
/// wrappers' bodies emptied, the 32-register wrappers left out, and its timing reader.
#[test]
fn wrapper_load_makes_its_forms() {
    self_test("scripts/probes/wrapper_load.py");
}

/// The chaos probe over a suite's builds (scripts/probes/chaos_suite.py): its verdicts and the
/// runtime's count of preemptible launches.
#[test]
fn chaos_suite_compares_and_counts_preemptible_launches() {
    self_test("scripts/probes/chaos_suite.py");
}
