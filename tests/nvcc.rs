//! Every fixture, original and transformed, compiles with nvcc (-arch=sm_90). Needs nvcc:
//! scripts/test.sh provides it; without it this test fails and says so.

mod support;

#[test]
fn every_transformed_fixture_compiles_with_nvcc() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc");
    let fixtures = support::fixtures();
    let failures = support::parallel(&fixtures, 2, |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if !support::directives(&src, "NVCC").is_empty() {
            return Ok(()); // e.g. the syntax-error fixture, which is not meant to compile
        }
        let t = cupreempt::transform(
            &src,
            &name,
            &cupreempt::Options {
                verify: true,
                ..cupreempt::Options::default()
            },
        )
        .map_err(|e| e.to_string())?;
        let out = dir.join(format!("{name}.transformed.cu"));
        std::fs::write(&out, &t.output).unwrap();
        let extra: Vec<String> = support::directives(&src, "NVCC-FLAGS")
            .iter()
            .flat_map(|f| f.split_whitespace().map(String::from))
            .collect();
        for (what, file) in [("original", path.clone()), ("transformed", out)] {
            let o = support::compiles(
                support::nvcc_compile(&nvcc, &dir.join(format!("{name}.{what}.o")))
                    .args(&extra)
                    .arg(&file),
                &format!("{name} ({what})"),
            )?;
            let warnings = String::from_utf8_lossy(&o.stderr);
            if what == "transformed"
                && warnings.contains("cupreempt")
                && warnings.contains("warning")
            {
                return Err(format!(
                    "{name}: nvcc warns about generated code:\n{warnings}"
                ));
            }
        }
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
