//! A split unit's object and wrapper module compiled side by side (docs/build.md, "Side by
//! side").
//!
//! A split unit (`split.rs`) takes two compiles: its wrapper module and the object the program
//! links. One after the other, the object waits for the module, whose bytes its pre-included
//! header embeds, and a heavy unit costs both compiles' time. Here the object's compile starts
//! at once, with a header that only calls the unit's registration function
//! (`split::declaration_header`), while the launcher compiles the module; then a small host
//! object holds the module's bytes and that function (`split::image_source`), and the host
//! compiler joins the two into the object the command names (a relocatable link, `-r`).
//!
//! Only where a joined object is what the command would have made: a compile to one named
//! object (`-c -o`), machine code and no relocatable device code (nvlink reads the objects of
//! `-rdc` builds), and no link-time optimization (host or device: a relocatable link of
//! compiler IR is the toolchains' weak spot). Where a step of the join fails, the launcher
//! compiles the object again with the module embedded, as one after the other.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::split::{CompiledModule, ModulePlan};

/// The host compiler that joins the two objects, where `args` (a compile's, `compile_only`
/// and `machine_code` as the launcher read them) may be compiled side by side; `None` means
/// one after the other. `CUPREEMPT_SIDE_BY_SIDE=0` turns it off.
pub fn joiner(args: &[OsString], output: Option<&Path>, machine_code: bool) -> Option<PathBuf> {
    if std::env::var_os("CUPREEMPT_SIDE_BY_SIDE").is_some_and(|v| v == "0") {
        return None;
    }
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let compiles = words.iter().any(|w| w == "-c" || w == "--compile");
    let lto = words.iter().any(|w| w.to_ascii_lowercase().contains("lto"));
    // Intermediate files kept in one folder under the source's name, or a timing file: the
    // two compiles would write the same files at once.
    let keeps = words.iter().any(|w| {
        let flag = w.split_once('=').map_or(w.as_str(), |(f, _)| f);
        KEEPS_FILES.contains(&flag)
    });
    if !compiles || !machine_code || output.is_none() || lto || keeps {
        return None;
    }
    host_compiler(&words)
}

/// Options under which both compiles write the same files.
const KEEPS_FILES: &[&str] = &[
    "-keep",
    "--keep",
    "-save-temps",
    "--save-temps",
    "-keep-dir",
    "--keep-dir",
    "-time",
    "--time",
];

/// The host compiler nvcc uses: `-ccbin`/`--compiler-bindir` (a program, or a folder with
/// one), else `NVCC_CCBIN`, else `g++` on PATH.
fn host_compiler(words: &[String]) -> Option<PathBuf> {
    let mut named = std::env::var_os("NVCC_CCBIN").map(PathBuf::from);
    for (i, w) in words.iter().enumerate() {
        let value = match w.split_once('=') {
            Some(("-ccbin" | "--compiler-bindir", v)) => Some(v.to_string()),
            _ if w == "-ccbin" || w == "--compiler-bindir" => words.get(i + 1).cloned(),
            _ => None,
        };
        if let Some(v) = value {
            named = Some(PathBuf::from(v));
        }
    }
    let named = named.unwrap_or_else(|| PathBuf::from("g++"));
    if named.is_dir() {
        return ["g++", "c++", "clang++"]
            .iter()
            .map(|c| named.join(c))
            .find(|p| p.is_file());
    }
    super::launcher::which(&named).filter(|p| p.is_file())
}

/// The options of a compile that the host object's compile keeps: the host compiler and its
/// options (`-fPIC` for a shared library, say), the machine's word size.
fn host_options(args: &[OsString]) -> Vec<OsString> {
    const WITH_VALUE: &[&str] = &[
        "-ccbin",
        "--compiler-bindir",
        "-Xcompiler",
        "--compiler-options",
        "--machine",
        "-m",
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        let flag = a.split_once('=').map_or(a.as_ref(), |(f, _)| f);
        if WITH_VALUE.contains(&flag) {
            let step = if flag.len() < a.len() { 1 } else { 2 };
            out.extend(args[i..(i + step).min(args.len())].iter().cloned());
            i += step;
            continue;
        }
        if a == "-m64" || a == "-m32" {
            out.push(args[i].clone());
        }
        i += 1;
    }
    out
}

/// The name of a unit's registration function: one per object (its private folder's path),
/// since a program may link two objects compiled from one source.
pub fn registration_function(plan: &ModulePlan) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    plan.dir.hash(&mut h);
    format!("cupreempt_wrapper_unit_{:016x}", h.finish())
}

/// Joins the compiled `object` (compiled with `split::declaration_header` naming `function`)
/// and the module's host object into `object`, with `host` (`joiner`). The host object's source
/// includes cupreempt's `runtime_library.h` from `support`. A step that fails says why, and
/// `object` is then as the object's compile left it.
#[allow(clippy::too_many_arguments)]
pub fn join(
    nvcc: &Path,
    args: &[OsString],
    support: &Path,
    plan: &ModulePlan,
    module: &CompiledModule,
    function: &str,
    object: &Path,
    host: &Path,
) -> Result<(), String> {
    let source = plan.dir.join("wrappers-image.cpp");
    let image_object = plan.dir.join("wrappers-image.o");
    let text = super::split::image_source(&module.image, &module.rows, function);
    super::launcher::write_if_changed(&source, text.as_bytes()).map_err(|e| format!("{e:#}"))?;
    let out = Command::new(nvcc)
        .args(host_options(args))
        .arg(format!("-I{}", support.display()))
        .args(["-x", "c++", "-c"])
        .arg(&source)
        .arg("-o")
        .arg(&image_object)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nvcc.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the module's host object did not compile: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut joined = object.as_os_str().to_os_string();
    joined.push(".cupreempt-joined");
    let joined = PathBuf::from(joined);
    let out = Command::new(host)
        .args(["-r", "-nostdlib", "-o"])
        .arg(&joined)
        .arg(object)
        .arg(&image_object)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", host.display()))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&joined);
        return Err(format!(
            "{} -r could not join the object and the module's: {}",
            host.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::rename(&joined, object).map_err(|e| format!("{}: {e}", object.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn only_compiles_to_one_object_without_rdc_or_lto_go_side_by_side() {
        let out = Path::new("k.o");
        // A host compiler that exists wherever the test runs: the test's own program stands in.
        let exe = std::env::current_exe().unwrap();
        let ccbin = format!("-ccbin={}", exe.display());
        let side = |a: &str, machine_code: bool, o: Option<&Path>| {
            joiner(&args(&format!("{ccbin} {a}")), o, machine_code).is_some()
        };
        assert!(side("-c k.cu -o k.o", true, Some(out)));
        assert!(!side("k.cu -o k", true, Some(out)), "compile and link");
        assert!(!side("-c k.cu", true, None), "no output named");
        assert!(!side("-c -rdc=true k.cu -o k.o", false, Some(out)));
        assert!(!side("-c -Xcompiler -flto k.cu -o k.o", true, Some(out)));
        assert!(
            !side("-c -keep k.cu -o k.o", true, Some(out)),
            "intermediate files"
        );
        assert!(!side("-c --time=t.csv k.cu -o k.o", true, Some(out)));
        assert!(!side(
            "-c -gencode arch=compute_90,code=lto_90 k.cu -o k.o",
            true,
            Some(out)
        ));
        assert!(
            joiner(
                &args("-c -ccbin /no/such/compiler k.cu -o k.o"),
                Some(out),
                true
            )
            .is_none(),
            "no host compiler to join with"
        );
    }

    #[test]
    fn the_host_objects_compile_keeps_the_host_compiler_and_its_options() {
        let kept = host_options(&args(
            "-arch=sm_90 -ccbin /opt/gcc/bin/g++ -Xcompiler -fPIC --compiler-options=-O2 -m64 -DX=1 -I inc -include k.h -c k.cu -o k.o",
        ));
        assert_eq!(
            kept,
            args("-ccbin /opt/gcc/bin/g++ -Xcompiler -fPIC --compiler-options=-O2 -m64")
        );
    }
}
