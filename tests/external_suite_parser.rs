//! Self-tests of the Python helpers of the probes. The external suite's timing parser
//! (`scripts/external_suite.py --self-test`): which printed
//! lines count as measurements decides the published geomean, so it is checked in CI.
use std::process::Command;

#[test]
fn the_external_suite_counts_measurements_and_nothing_else() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/external_suite.py"))
        .arg("--self-test")
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed for this test: {e}"));
    assert!(
        out.status.success(),
        "self-test failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fairness experiment's arithmetic (`scripts/probes/fairness_report.py --self-test`):
/// NTT, ANTT, STP, DNTT and the preemption cost read from a daemon log, on made-up numbers.
#[test]
fn the_fairness_report_computes_the_metrics_as_the_simulator_does() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/probes/fairness_report.py"))
        .arg("--self-test")
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed for this test: {e}"));
    assert!(
        out.status.success(),
        "self-test failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
