//! The external suite's timing parser (`scripts/external_suite.py --self-test`): which printed
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
