//! The support headers stay cheap to include.
//!
//! Every transformed unit includes `cupreempt.cuh`, so whatever standard header it pulls in is
//! parsed by nvcc's front end, its device compiler and the host compiler of every such unit.
//! `<mutex>` and `<unordered_map>` alone cost a unit about 0.9 s of nvcc's time (docs/build.md,
//! "Compile time"). This test fails when a support header includes a system header outside the
//! list below; widening the list is a decision to measure first
//! (`scripts/probes/compile_phases.sh`).

use std::path::Path;

mod support;

/// System headers the support headers may include: each measured at a few milliseconds of a
/// unit's compile, or included by nvcc anyway.
const CHEAP: &[&str] = &[
    "cuda_runtime.h",
    "cstdio",
    "cstdlib",
    "cstring",
    "stddef.h",
    "dlfcn.h",
    "tuple",
    "type_traits",
    "utility",
];

fn headers(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            headers(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "h" || x == "cuh" || x == "hpp")
        {
            out.push(p);
        }
    }
}

/// The `<...>` names of a header's `#include` lines.
fn system_includes(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix('#')?.trim_start().strip_prefix("include")?;
            let rest = rest.trim_start().strip_prefix('<')?;
            Some(rest.split('>').next()?.to_string())
        })
        .collect()
}

#[test]
fn support_headers_include_only_cheap_system_headers() {
    let mut files = Vec::new();
    headers(&support::root().join("cuda_support"), &mut files);
    assert!(files.len() >= 5, "support headers not found: {files:?}");
    let mut costly = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for name in system_includes(&text) {
            if !CHEAP.contains(&name.as_str()) {
                costly.push(format!("{}: <{name}>", f.display()));
            }
        }
    }
    assert!(
        costly.is_empty(),
        "support headers include system headers outside the measured list:\n{}",
        costly.join("\n")
    );
}

#[test]
fn include_lines_are_read_with_spaces_and_quotes_apart() {
    let text = "#include <a>\n  #  include   <b/c.h>\n#include \"d.h\"\n// #include <e>\n";
    assert_eq!(system_includes(text), ["a", "b/c.h"]);
}
