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

/// The task loop's long division (more than 2^32 tasks) agrees with `/` and `%`, run on the
/// host (it is `__host__ __device__`; no GPU needed).
#[test]
fn wide_task_numbers_split_like_division() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-divide");
    let src = dir.join("divide.cu");
    std::fs::write(
        &src,
        r#"#include <cstdio>
#include "cupreempt.cuh"
int main() {
  const unsigned long long ns[] = {0, 1, 4294967295ull, 4294967296ull, 9000000000ull,
                                   123456789012345ull, 0xffffffffffffffffull};
  const unsigned ds[] = {1, 3, 7, 1000, 65535, 4294967295u};
  int bad = 0;
  for (auto n : ns)
    for (auto d : ds) {
      unsigned r = 0;
      const unsigned long long q = cupreempt::TaskCtx::divide_wide(n, d, r);
      if (q != n / d || r != n % d) std::printf("%llu / %u: %llu rem %u\n", n, d, q, r), ++bad;
    }
  return bad;
}
"#,
    )
    .unwrap();
    let exe = dir.join("divide");
    support::compiles(support::nvcc_build(&nvcc, &exe).arg(&src), "divide.cu")
        .unwrap_or_else(|e| panic!("{e}"));
    let o = std::process::Command::new(&exe).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}
