//! The benchmark programs in fixtures/bench/: every kernel is transformed (nothing refused),
//! and the original and the transformed program both compile with nvcc (-arch=sm_90; the
//! transformed one against the runtime's C ABI header, as scripts/bench-gpu.sh builds it).
//! Running them needs a GPU: scripts/bench-gpu.sh. Needs nvcc: scripts/test.sh provides it.

mod support;

use std::path::PathBuf;

#[test]
fn benchmark_programs_transform_fully_and_compile() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("bench-programs");
    let bench = support::root().join("fixtures/bench");
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&bench)
        .expect("fixtures/bench")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    programs.sort();
    assert!(
        programs.len() >= 12,
        "expected the 12 benchmark programs, found {}",
        programs.len()
    );
    let failures = support::parallel(&programs, 2, |path| {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let src = std::fs::read_to_string(path).unwrap();
        let t = cupreempt::transform(&src, &name, &cupreempt::Options::default());
        if t.has_errors() || t.kernels.iter().any(|k| !k.transformed) {
            return Err(format!(
                "{name}: not every kernel is transformed: {:?}",
                t.diagnostics
            ));
        }
        let out = dir.join(format!("{name}.transformed.cu"));
        std::fs::write(&out, &t.output).unwrap();
        for (what, file, defines) in [
            ("original", path.clone(), vec![]),
            ("transformed", out, vec!["-DCUPREEMPT_TRANSFORMED"]),
        ] {
            support::compiles(
                support::nvcc_compile(&nvcc, &dir.join(format!("{name}.{what}.o")))
                    .arg("-O1")
                    .arg(format!("-I{}", bench.display()))
                    .args(&defines)
                    .arg(&file),
                &format!("{name} ({what})"),
            )?;
        }
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
