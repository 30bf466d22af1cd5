//! Compiler-launcher mode, ccache-style: `cupreempt nvcc ARGS...` or `cupreempt /path/to/nvcc
//! ARGS...` (what `CMAKE_CUDA_COMPILER_LAUNCHER=cupreempt` runs). Each CUDA source of the command
//! is transformed, with the project headers it includes, into a private folder next to the
//! output, and compiled from there; every other argument goes to nvcc as it is. Link steps get
//! the runtime library. Depfiles name the original files. A kernel that cannot be transformed
//! is compiled as written, with a warning (an error with `CUPREEMPT_STRICT=1`).
//!
//! The private copy keeps every `#include` meaning what it meant: each project header that the
//! source reaches (every resolved header outside the toolkit and the system folders) is copied
//! too, transformed where it defines or launches kernels, and each include line in a copy that
//! names a project header names its copy by absolute path. So a template kernel in a header,
//! launched from several sources, is transformed in each translation unit, and its launches
//! are rewritten (`Options::known_kernels`).

use super::render::render;
use cupreempt::diagnostics::Level;
use cupreempt::program;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Whether `first` (the first argument) names a compiler rather than a cupreempt command.
pub fn is_compiler(first: &std::ffi::OsStr) -> bool {
    let path = Path::new(first);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let stem = name.strip_suffix(".exe").unwrap_or(&name);
    stem == "nvcc" || (first.to_string_lossy().contains('/') && is_executable(path))
}

/// Where cupreempt runs under the name `nvcc` (a link or copy named so, as ccache is used: a
/// build whose compiler variable must be one word, a Makefile that passes `CC=$(CC)` unquoted
/// to another make), the nvcc it stands in front of: the first `nvcc` on PATH that is not
/// this program. `None` under any other name; an error where there is no other nvcc.
pub fn masquerade(argv0: &std::ffi::OsStr) -> Option<anyhow::Result<PathBuf>> {
    let name = Path::new(argv0).file_name()?.to_string_lossy().to_string();
    if name.strip_suffix(".exe").unwrap_or(&name) != "nvcc" {
        return None;
    }
    let me = std::env::current_exe().and_then(|p| p.canonicalize()).ok();
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(&name))
            .filter(|p| is_executable(p))
            .find(|p| p.canonicalize().ok() != me)
    });
    Some(found.ok_or_else(|| {
        anyhow::anyhow!("run as {name}, but no other {name} is on PATH to compile with")
    }))
}

/// A file that may be run (a source named by mistake, `cupreempt ./k.cu`, is not a compiler).
fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// Options whose value is the next argument (when not attached): the value is no source.
const TAKES_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-L",
    "-l",
    "-D",
    "-U",
    "-x",
    "-MF",
    "-MT",
    "-MQ",
    "-include",
    "-isystem",
    "-Xcompiler",
    "-Xlinker",
    "-Xptxas",
    "-Xnvlink",
    "-Xarchive",
    "-Xfatbin",
    "-arch",
    "-code",
    "-gencode",
    "-ccbin",
    "-std",
    "-rdc",
    "-maxrregcount",
    "-odir",
    "-t",
    "-default-stream",
    "-Werror",
    "-Xcudafe",
    "-split-compile",
    "--split-compile",
    "-diag-error",
    "-diag-warn",
    "-diag-suppress",
    "-ftz",
    "-prec-div",
    "-prec-sqrt",
    "-fmad",
    "-idirafter",
    "-iquote",
    "-cudart",
    "-cudadevrt",
    "-time",
    "-keep-dir",
    "-ext-lambda-capture-by-value",
    "--output-file",
    "--include-path",
    "--library-path",
    "--library",
    "--define-macro",
    "--undefine-macro",
    "--x",
    "--dependency-output",
    "--dependency-target-name",
    "--pre-include",
    "--system-include",
    "--compiler-options",
    "--linker-options",
    "--ptxas-options",
    "--nvlink-options",
    "--archive-options",
    "--gpu-architecture",
    "--gpu-code",
    "--generate-code",
    "--compiler-bindir",
    "--std",
    "--relocatable-device-code",
    "--maxrregcount",
    "--output-directory",
    "--threads",
    "--default-stream",
    "--cudart",
    "--cudadevrt",
    "--keep-dir",
    "--options-file",
    "-optf",
    "--run-args",
    "-run-args",
];

/// Whether nvcc reads `flag`'s value from the next argument.
pub(super) fn takes_value(flag: &str) -> bool {
    TAKES_VALUE.contains(&flag)
}

/// Modes in which nvcc compiles nothing or only preprocesses: passed through untouched.
const PASS_THROUGH: &[&str] = &[
    "-E",
    "-M",
    "-MM",
    "--preprocess",
    "--generate-dependencies",
    "--generate-nonsystem-dependencies",
    "--version",
    "-V",
    "--help",
    "-h",
    "-dryrun",
    "--dryrun",
    "--list-gpu-code",
    "--list-gpu-arch",
    "-cuda",
    "--cuda",
];

/// Modes that stop before the host link: no runtime library to add.
const NO_LINK: &[&str] = &[
    "-c",
    "--compile",
    "-dc",
    "--device-c",
    "-dw",
    "--device-w",
    "-ptx",
    "--ptx",
    "-cubin",
    "--cubin",
    "-fatbin",
    "--fatbin",
    "-optix-ir",
    "--optix-ir",
    "-lib",
    "--lib",
    "-dlink",
    "--device-link",
    "-E",
    "--preprocess",
    "-M",
    "-MM",
    "-cuda",
    "--cuda",
];

/// Modes that make no machine code of the sources (PTX alone, device-code objects, a device
/// link): no ptxas report of the kernels' registers to choose capped wrappers by.
const NO_MACHINE_CODE: &[&str] = &[
    "-dc",
    "--device-c",
    "-dw",
    "--device-w",
    "-ptx",
    "--ptx",
    "-optix-ir",
    "--optix-ir",
    "-dlink",
    "--device-link",
];

/// The command line, split into what the launcher needs to know.
struct NvccCommand {
    args: Vec<OsString>,
    /// Indexes (in `args`) of the CUDA sources.
    sources: Vec<usize>,
    output: Option<PathBuf>,
    depfile: Option<PathBuf>,
    /// The -I folders, in order.
    search: Vec<PathBuf>,
    /// -isystem folders: their headers are not the project's.
    system: Vec<PathBuf>,
    /// Macros the command line defines (-D), less those it undefines after (-U): the analysis
    /// judges a conditional that tests one of them as the compiler will
    /// (`Options::defined_macros`).
    defines: Vec<String>,
    /// The values the command line gives them (`-DNAME=VALUE`; `Options::defined_values`).
    define_values: Vec<(String, String)>,
    pass_through: bool,
    links: bool,
    /// -MD/-MMD: nvcc writes a depfile, named by -MF or after the output.
    depends: bool,
    /// ptxas makes machine code of the sources without relocatable device code (no
    /// `NO_MACHINE_CODE` mode, no `-rdc=true`): its report can choose the capped wrappers.
    machine_code: bool,
    /// The user asked for ptxas's report (`-Xptxas -v`, `--resource-usage`): theirs to see.
    ptxas_report: bool,
}

/// `args` with nvcc's own `NVCC_PREPEND_FLAGS` before them and `NVCC_APPEND_FLAGS` after them
/// (split at blanks, as nvcc splits them), which are then taken out of the environment: the
/// launcher decides by every flag nvcc will see (the include folders it searches for project
/// headers, `-rdc`, the architectures), and passes them on itself, once, to every nvcc it runs.
fn with_environment_flags(args: Vec<OsString>) -> Vec<OsString> {
    let words = |name: &str| -> Vec<OsString> {
        std::env::var_os(name)
            .map(|v| {
                v.to_string_lossy()
                    .split_whitespace()
                    .map(OsString::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (prepend, append) = (words("NVCC_PREPEND_FLAGS"), words("NVCC_APPEND_FLAGS"));
    if prepend.is_empty() && append.is_empty() {
        return args;
    }
    // The launcher is one process per compile and has started no thread yet.
    std::env::remove_var("NVCC_PREPEND_FLAGS");
    std::env::remove_var("NVCC_APPEND_FLAGS");
    prepend.into_iter().chain(args).chain(append).collect()
}

fn parse(args: Vec<OsString>) -> NvccCommand {
    let mut c = NvccCommand {
        args,
        sources: Vec::new(),
        output: None,
        depfile: None,
        search: Vec::new(),
        system: Vec::new(),
        defines: Vec::new(),
        define_values: Vec::new(),
        pass_through: false,
        links: true,
        depends: false,
        machine_code: true,
        ptxas_report: false,
    };
    let mut language_cu = false;
    let mut i = 0;
    while i < c.args.len() {
        let a = c.args[i].to_string_lossy().to_string();
        let (flag, attached) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let next = || c.args.get(i + 1).map(|v| v.to_string_lossy().to_string());
        if PASS_THROUGH.contains(&flag.as_str()) {
            c.pass_through = true;
        }
        if NO_LINK.contains(&flag.as_str()) {
            c.links = false;
        }
        if NO_MACHINE_CODE.contains(&flag.as_str()) {
            c.machine_code = false;
        }
        // `-rdc true`, `-rdc=true`, `--relocatable-device-code=true`.
        let rdc = match flag.as_str() {
            "-rdc" | "--relocatable-device-code" => attached.clone().or_else(next),
            _ => a.strip_prefix("-rdc=").map(str::to_string),
        };
        if rdc.is_some_and(|v| v == "true" || v == "1") {
            c.machine_code = false;
        }
        let ptxas = match flag.as_str() {
            "-Xptxas" | "--ptxas-options" => attached.clone().or_else(next),
            _ => a.strip_prefix("-Xptxas=").map(str::to_string),
        };
        let verbose = |v: String| v.split(',').any(|o| o == "-v" || o == "--verbose");
        if matches!(flag.as_str(), "--resource-usage" | "-res-usage") || ptxas.is_some_and(verbose)
        {
            c.ptxas_report = true;
        }
        let value = |short: &[&str], long: &[&str]| -> Option<String> {
            if let Some(v) = &attached {
                return long.contains(&flag.as_str()).then(|| v.clone());
            }
            if short.contains(&flag.as_str()) || long.contains(&flag.as_str()) {
                return next();
            }
            // Attached short values: -Idir, -DNAME, -UNAME (nvcc takes no -ofile: -odir is
            // another option).
            short
                .iter()
                .find(|s| ["-I", "-D", "-U"].contains(s) && a.starts_with(**s) && a.len() > 2)
                .map(|s| a[s.len()..].to_string())
        };
        if let Some(v) = value(&["-o"], &["--output-file"]) {
            c.output = Some(PathBuf::from(v));
        } else if let Some(v) = value(&["-MF"], &["--dependency-output"]) {
            c.depfile = Some(PathBuf::from(v));
        } else if let Some(v) = value(&["-I"], &["--include-path"]) {
            c.search.push(PathBuf::from(v));
        } else if let Some(v) = value(&["-D"], &["--define-macro"]) {
            // `-DA=1,B`: nvcc takes a comma-separated list.
            for d in v.split(',') {
                let name = d.split('=').next().unwrap_or(d).trim();
                if !name.is_empty() && !c.defines.iter().any(|n| n == name) {
                    c.defines.push(name.to_string());
                }
                c.define_values.retain(|(n, _)| n != name);
                if let Some((_, value)) = d.split_once('=') {
                    c.define_values.push((name.to_string(), value.to_string()));
                }
            }
        } else if let Some(v) = value(&["-U"], &["--undefine-macro"]) {
            for name in v.split(',') {
                c.defines.retain(|n| n != name.trim());
                c.define_values.retain(|(n, _)| n != name.trim());
            }
        } else if let Some(v) = value(&["-isystem"], &["--system-include"]) {
            c.system.push(PathBuf::from(v));
        } else if let Some(v) = value(&["-x"], &["--x"]) {
            language_cu = v == "cu";
        } else if let Some((files, _)) = options_files_named(&a, next().as_deref()) {
            // Include folders may come in options files (CMake writes them for long lines).
            for f in files {
                options_file(&f, &mut c);
            }
        }
        if matches!(
            flag.as_str(),
            "-MD"
                | "-MMD"
                | "--generate-dependencies-with-compile"
                | "--generate-nonsystem-dependencies-with-compile"
        ) {
            c.depends = true;
        }
        let separate = attached.is_none() && TAKES_VALUE.contains(&flag.as_str());
        if !a.starts_with('-') {
            let p = Path::new(&a);
            let cuda = p.extension().is_some_and(|e| e == "cu")
                || (language_cu && !p.extension().is_some_and(|e| e == "o" || e == "a"));
            if cuda && p.is_file() {
                c.sources.push(i);
            }
        }
        i += if separate { 2 } else { 1 };
    }
    c
}

/// The include folders of an options file (`--options-file F`, `@F`): its words, split as a
/// shell would split them, parsed like a command line. A file that names no CUDA source stays
/// as it is, and nvcc reads the rest of it; one that does was put in its words' place before
/// (`expand_source_options_files`).
fn options_file(path: &Path, c: &mut NvccCommand) {
    thread_local! {
        // Options files that name each other: nvcc would not finish either; stop reading.
        static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    if DEPTH.get() >= MAX_OPTIONS_DEPTH {
        return;
    }
    DEPTH.set(DEPTH.get() + 1);
    let inner = parse(options_file_words(path));
    DEPTH.set(DEPTH.get() - 1);
    c.search.extend(inner.search);
    c.system.extend(inner.system);
}

/// How deep options files naming options files are followed.
const MAX_OPTIONS_DEPTH: usize = 8;

fn options_file_words(path: &Path) -> Vec<OsString> {
    std::fs::read_to_string(path)
        .map(|text| split_words(&text).into_iter().map(OsString::from).collect())
        .unwrap_or_default()
}

/// The options files that argument `a` names (`-optf F` and `--options-file F` with the next
/// argument `next`, `--options-file=F,G`, `@F`), and how many arguments that takes up.
fn options_files_named(a: &str, next: Option<&str>) -> Option<(Vec<PathBuf>, usize)> {
    let list = |v: &str| v.split(',').map(PathBuf::from).collect::<Vec<_>>();
    if a == "-optf" || a == "--options-file" {
        return Some((next.map(list).unwrap_or_default(), 2));
    }
    if let Some(v) = a.strip_prefix("--options-file=") {
        return Some((list(v), 1));
    }
    a.strip_prefix('@').map(|f| (vec![PathBuf::from(f)], 1))
}

/// Puts the words of each options file that names a CUDA source (or another such file) in its
/// place on the command line, so that those sources are transformed like sources named there;
/// the meaning is the same, as nvcc reads an options file's words where the file is named.
/// Files that name none stay (CMake writes include folders to them for long lines).
fn expand_source_options_files(args: Vec<OsString>, depth: usize) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        let next = args.get(i + 1).map(|v| v.to_string_lossy());
        let Some((files, used)) = options_files_named(&a, next.as_deref()) else {
            out.push(args[i].clone());
            i += 1;
            continue;
        };
        let used = used.min(args.len() - i);
        let expanded: Vec<OsString> = if depth < MAX_OPTIONS_DEPTH {
            files
                .iter()
                .flat_map(|f| expand_source_options_files(options_file_words(f), depth + 1))
                .collect()
        } else {
            Vec::new()
        };
        if !expanded.is_empty() && !parse(expanded.clone()).sources.is_empty() {
            out.extend(expanded);
        } else {
            out.extend(args[i..i + used].iter().cloned());
        }
        i += used;
    }
    out
}

/// Words of an options file: whitespace separates them, quotes group, a backslash escapes.
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        match (quote, ch) {
            (Some(q), ch) if ch == q => quote = None,
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    word.get_or_insert_with(String::new).push(n);
                }
            }
            (None, '"' | '\'') => {
                quote = Some(ch);
                word.get_or_insert_with(String::new);
            }
            (None, ch) if ch.is_whitespace() => words.extend(word.take()),
            (_, ch) => word.get_or_insert_with(String::new).push(ch),
        }
    }
    words.extend(word);
    words
}

/// Folders whose headers are not the project's: the toolkit's, the system's, -isystem ones.
fn system_dirs(nvcc: &Path, cmd: &NvccCommand) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["/usr/include", "/usr/local/include", "/usr/lib", "/opt"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let real = which(nvcc).and_then(|p| p.canonicalize().ok());
    if let Some(top) = real
        .as_deref()
        .and_then(Path::parent)
        .and_then(Path::parent)
    {
        dirs.push(top.to_path_buf());
    }
    dirs.extend(cmd.system.iter().filter_map(|d| d.canonicalize().ok()));
    dirs
}

pub(super) fn which(prog: &Path) -> Option<PathBuf> {
    if prog.components().count() > 1 {
        return Some(prog.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Where the runtime library is: CUPREEMPT_RUNTIME_DIR, next to this binary (a cargo build),
/// or ../lib from it (an install).
fn runtime_dir() -> Option<PathBuf> {
    let has = |d: &Path| {
        ["libcupreempt_runtime.so", "libcupreempt_runtime.a"]
            .iter()
            .any(|f| d.join(f).is_file())
    };
    if let Some(d) = std::env::var_os("CUPREEMPT_RUNTIME_DIR") {
        return Some(PathBuf::from(d));
    }
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let bin = exe.parent()?;
    [bin.to_path_buf(), bin.join("../lib")]
        .into_iter()
        .find(|d| has(d))
        .and_then(|d| d.canonicalize().ok())
}

fn strict() -> bool {
    std::env::var("CUPREEMPT_STRICT").is_ok_and(|v| !v.is_empty() && v != "0")
}

pub fn run(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let nvcc = PathBuf::from(&args[0]);
    let args = with_environment_flags(args[1..].to_vec());
    let mut cmd = parse(expand_source_options_files(args, 0));
    if !cmd.pass_through && !cmd.sources.is_empty() {
        let as_written = cmd.args.clone();
        let system = system_dirs(&nvcc, &cmd);
        let base = private_base(&cmd)?;
        let support = base.join("include");
        write_support(&support)?;
        let mut mapped = Vec::new();
        let mut copies = Vec::new();
        let mut source_dirs: Vec<OsString> = Vec::new();
        let mut failed = false;
        let mut capped = false;
        let mut wraps = false;
        for &i in &cmd.sources.clone() {
            let source = PathBuf::from(&cmd.args[i]);
            match prepare(
                &source,
                &base,
                &cmd.search,
                &system,
                &cmd.defines,
                &cmd.define_values,
            ) {
                Ok(Prepared::Copy(c)) => {
                    cmd.args[i] = c.copy.clone().into_os_string();
                    copies.push((c.copy, source.clone()));
                    mapped.push(c.root);
                    capped |= c.capped;
                    wraps |= c.wraps;
                    // An include the copies could not redirect (a computed one) searched the
                    // source's own folder first, as written: it does so for quoted includes
                    // (not for `<...>`, which never searched it). Only then: the option makes
                    // every file's quoted includes search that folder, system headers' too,
                    // which as written never did (a partial `boost/` next to the source would
                    // stand in for parts of the system's).
                    if c.unredirected {
                        if let Some(dir) = std::path::absolute(&source)
                            .ok()
                            .and_then(|p| p.parent().map(Path::to_path_buf))
                        {
                            source_dirs.extend(quoted_search(&dir));
                        }
                    }
                }
                Ok(Prepared::AsWritten) => {}
                Err(e) if strict() => {
                    eprintln!("cupreempt: error: {}: {e:#}", source.display());
                    failed = true;
                }
                Err(e) => eprintln!(
                    "cupreempt: warning: {}: {e:#}; compiled as written",
                    source.display()
                ),
            }
        }
        if failed {
            return Ok(ExitCode::from(1));
        }
        // The headers that the transformed files include come last.
        let mut args = source_dirs;
        args.append(&mut cmd.args);
        args.push(format!("-I{}", support.display()).into());
        cmd.args = args;
        let split = match (&copies[..], &mapped[..]) {
            ([(copy, source)], [root]) if wraps && splits(&cmd) => {
                let choose_capped = capped && chooses_capped(&cmd);
                Some(compile_split(
                    &nvcc,
                    &cmd,
                    copy,
                    source,
                    root,
                    &support,
                    choose_capped,
                )?)
            }
            _ => None,
        };
        // nvcc's messages about the transformed copies, held back until it is known whether
        // they are the build's (a split compile shows its own on success).
        let (status, messages) = if let Some(Some(status)) = split {
            (status, String::new())
        } else if capped && chooses_capped(&cmd) {
            let memory = mapped.first().map(|root| root.join("capped-wrappers"));
            compile_choosing_capped(&nvcc, &cmd, memory.as_deref())?
        } else {
            nvcc_captured(&nvcc, &cmd.args, cmd.links)?
        };
        if !status.success() && !copies.is_empty() && !strict() {
            return compile_as_written(&nvcc, &as_written, cmd.links, &copies, &messages);
        }
        eprint!("{messages}");
        if status.success() {
            // -MD without -MF: nvcc names the depfile after the output.
            let named = cmd.output.iter().flat_map(|o| {
                let mut appended = o.clone().into_os_string();
                appended.push(".d");
                [o.with_extension("d"), PathBuf::from(appended)]
            });
            let depfiles: Vec<PathBuf> = match &cmd.depfile {
                Some(d) => vec![d.clone()],
                None if cmd.depends => named.collect(),
                None => Vec::new(),
            };
            for dep in depfiles {
                originals_in_depfile(&dep, &mapped)?;
            }
        }
        return Ok(exit_code(status));
    }
    let status = nvcc_status(&nvcc, &cmd.args, cmd.links && !cmd.pass_through)?;
    Ok(exit_code(status))
}

/// Outputs that are no object or program with host code to register a wrapper module.
const NO_HOST_OBJECT: &[&str] = &[
    "-ptx",
    "--ptx",
    "-optix-ir",
    "--optix-ir",
    "-cubin",
    "--cubin",
    "-fatbin",
    "--fatbin",
    "-dlink",
    "--device-link",
    "-dw",
    "--device-w",
];

/// Whether a unit may have its wrappers compiled into a module of their own (`split.rs`): one
/// source compiled into an object or a program (relocatable device code included: the wrapper
/// module is compiled without it, and a unit that needs other units' device code stays whole
/// when that compile fails), unless `CUPREEMPT_SPLIT=0`.
fn splits(cmd: &NvccCommand) -> bool {
    let no_object = cmd
        .args
        .iter()
        .any(|a| a.to_str().is_some_and(|a| NO_HOST_OBJECT.contains(&a)));
    cmd.sources.len() == 1
        && !no_object
        && std::env::var_os("CUPREEMPT_SPLIT").is_none_or(|v| v != "0")
}

/// Compiles a unit split (`split.rs`): its wrapper module and the object without the
/// wrappers, side by side where `side_by_side::joiner` allows (the module's bytes joined into
/// the object afterwards), else the object after the module, with the module embedded
/// (`copy`: the transformed copy of `source`, as the command names it in messages; `choose_capped`: the module keeps only the capped wrappers
/// that a launch could choose, read from ptxas's report). `None` where the unit stays whole (the reason under
/// `CUPREEMPT_VERBOSE`), or where the object without wrappers does not compile (then the
/// caller compiles the unit whole, which shows nvcc's own messages, and this says so).
fn compile_split(
    nvcc: &Path,
    cmd: &NvccCommand,
    copy: &Path,
    source: &Path,
    root: &Path,
    support: &Path,
    choose_capped: bool,
) -> anyhow::Result<Option<std::process::ExitStatus>> {
    let verbose = std::env::var_os("CUPREEMPT_VERBOSE").is_some_and(|v| v != "0");
    // The toolkit's and the system's headers, and cupreempt's own, declare no variable of the
    // program's.
    let mut excluded = system_dirs(nvcc, cmd);
    excluded.push(support.to_path_buf());
    let split_failed = |why: String| {
        if verbose {
            eprintln!(
                "cupreempt: {}: wrappers kept in the unit: {why}",
                source.display()
            );
        }
        Ok(None)
    };
    let plan = match super::split::plan_module(nvcc, &cmd.args, copy, root, &excluded) {
        Ok(p) => p,
        Err(why) => return split_failed(why),
    };
    let object_args = |header: &Path| {
        let mut args = cmd.args.clone();
        args.push(format!("-D{}", cupreempt::vocab::SPLIT_UNIT).into());
        args.push("--pre-include".into());
        args.push(header.as_os_str().to_os_string());
        args
    };
    let object_compile = |header: &Path| -> anyhow::Result<Command> {
        let mut c = launcher_command(nvcc, &object_args(header), cmd.links)?;
        c.stdout(std::process::Stdio::inherit())
            .stderr(std::process::Stdio::piped());
        Ok(c)
    };
    let joiner = super::side_by_side::joiner(&cmd.args, cmd.output.as_deref(), cmd.machine_code);
    let mut side_by_side = None;
    let (module, compiled) = if let (Some(host), Some(object)) = (joiner, &cmd.output) {
        // The object's compile runs while this thread compiles the module.
        let function = super::side_by_side::registration_function(&plan);
        let declared = plan.dir.join("wrappers-declared.h");
        write_if_changed(
            &declared,
            super::split::declaration_header(&function).as_bytes(),
        )?;
        let mut child = object_compile(&declared)?
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nvcc.display()))?;
        let mut pipe = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(p) = pipe.as_mut() {
                let _ = std::io::Read::read_to_end(p, &mut text);
            }
            text
        });
        let module = plan.compile(nvcc, choose_capped);
        let status = child
            .wait()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nvcc.display()))?;
        let stderr = reader.join().unwrap_or_default();
        let module = match module {
            Ok(m) => m,
            Err(why) => return split_failed(why),
        };
        let joined = status.success()
            && match super::side_by_side::join(
                nvcc, &cmd.args, support, &plan, &module, &function, object, &host,
            ) {
                Ok(()) => true,
                Err(why) => {
                    eprintln!(
                        "cupreempt: warning: {}: {why}; compiling the object again with the module embedded",
                        source.display()
                    );
                    false
                }
            };
        side_by_side = Some(joined);
        if joined || !status.success() {
            (module, Some((status, stderr)))
        } else {
            (module, None)
        }
    } else {
        match plan.compile(nvcc, choose_capped) {
            Ok(m) => (m, None),
            Err(why) => return split_failed(why),
        }
    };
    let (status, stderr) = match compiled {
        Some(done) => done,
        None => {
            let header =
                super::split::embedding_header(&plan, &module).map_err(|e| anyhow::anyhow!(e))?;
            let out = object_compile(&header)?
                .output()
                .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nvcc.display()))?;
            (out.status, out.stderr)
        }
    };
    if !status.success() {
        eprintln!(
            "cupreempt: warning: {}: the unit without its wrappers did not compile; compiling it whole",
            source.display()
        );
        return Ok(None);
    }
    eprint!("{}", String::from_utf8_lossy(&stderr));
    if verbose {
        let n = module.rows.len();
        let (held, compiles) = &module.capped;
        let held = match held {
            None => "every kernel".to_string(),
            Some(k) if k.is_empty() => "none".to_string(),
            Some(k) => k.join(", "),
        };
        let order = match side_by_side {
            Some(true) => "the object compiled side by side",
            Some(false) => "the object compiled again after it",
            None => "the object compiled after it",
        };
        eprintln!(
            "cupreempt: {}: wrappers of {n} kernel{} in a module of their own; wrappers held to 32 registers there: {held} ({compiles} module compile{}; {order})",
            source.display(),
            if n == 1 { "" } else { "s" },
            if *compiles == 1 { "" } else { "s" }
        );
    }
    Ok(Some(status))
}

/// Whether the compile reads ptxas's report to choose capped wrappers: where ptxas makes
/// machine code (`NvccCommand::machine_code`), unless `CUPREEMPT_R32_ALL=1` keeps every capped
/// wrapper in one compile.
fn chooses_capped(cmd: &NvccCommand) -> bool {
    cmd.machine_code && std::env::var_os("CUPREEMPT_R32_ALL").is_none_or(|v| v == "0")
}

/// Compiles with the capped wrappers that the last compile of these sources needed (`memory`,
/// a file of kernel names; none at first) and with ptxas's report (`capped`), then again only
/// if the report names a kernel that needs one and did not get it (or says too little to
/// tell), and remembers what it needed: a clean build compiles a unit with such kernels twice,
/// a rebuild once. The report is not shown unless the user asked for it.
fn compile_choosing_capped(
    nvcc: &Path,
    cmd: &NvccCommand,
    memory: Option<&Path>,
) -> anyhow::Result<(std::process::ExitStatus, String)> {
    use super::capped::{choose, is_report_line, Choice};
    let remembered: std::collections::BTreeSet<String> = memory
        .and_then(|m| std::fs::read_to_string(m).ok())
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let remember = |needed: Option<&std::collections::BTreeSet<String>>| {
        if let Some(m) = memory {
            let _ = match needed {
                Some(k) if *k != remembered => {
                    std::fs::write(m, k.iter().map(|n| format!("{n}\n")).collect::<String>())
                }
                Some(_) => Ok(()),
                None => std::fs::remove_file(m),
            };
        }
    };
    let shown = cmd.ptxas_report;
    let mut first = cmd.args.clone();
    first.extend(
        Choice::Kernels(remembered.clone())
            .defines()
            .into_iter()
            .map(OsString::from),
    );
    if !shown {
        first.extend(["-Xptxas".into(), "-v".into()]);
    }
    let mut c = launcher_command(nvcc, &first, cmd.links)?;
    let out = c
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nvcc.display()))?;
    let report = String::from_utf8_lossy(&out.stderr);
    let kept_messages = || -> String {
        report
            .lines()
            .filter(|l| shown || !is_report_line(l))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    if !out.status.success() {
        return Ok((out.status, kept_messages()));
    }
    let verbose = std::env::var_os("CUPREEMPT_VERBOSE").is_some_and(|v| v != "0");
    let names =
        |k: &std::collections::BTreeSet<String>| k.iter().cloned().collect::<Vec<_>>().join(", ");
    let choice = choose(&report);
    match &choice {
        Choice::Kernels(k) if k.is_subset(&remembered) => {
            remember(Some(k));
            let mut messages = kept_messages();
            if verbose {
                let k = if k.is_empty() {
                    "none needed".to_string()
                } else {
                    names(k)
                };
                messages.push_str(&format!("cupreempt: wrappers held to 32 registers: {k}\n"));
            }
            return Ok((out.status, messages));
        }
        Choice::Kernels(k) => {
            remember(Some(k));
            if verbose {
                eprintln!(
                    "cupreempt: wrappers held to 32 registers for {} (ptxas: original at most 32 registers, wrapper more); compiling again with them",
                    names(k)
                );
            }
        }
        Choice::Unknown => {
            remember(None);
            if verbose {
                eprintln!(
                    "cupreempt: ptxas's report does not tell which kernels need their wrapper held to 32 registers; compiling again with all of them"
                );
            }
        }
    }
    let mut second = cmd.args.clone();
    second.extend(choice.defines().into_iter().map(OsString::from));
    nvcc_captured(nvcc, &second, cmd.links)
}

/// Where the transformed copies do not compile, the command as written (`args`, before any
/// copy replaced a source), so that the build never fails where the original builds: the
/// unit's kernels then run as written, not preemptible, and a warning gives the first of nvcc's
/// messages about the copies (`messages`) to report. Where the command fails as written too,
/// its own messages are the build's (the program's error, not the transformation's).
fn compile_as_written(
    nvcc: &Path,
    args: &[OsString],
    links: bool,
    copies: &[(PathBuf, PathBuf)],
    messages: &str,
) -> anyhow::Result<ExitCode> {
    let (status, own) = nvcc_captured(nvcc, args, links)?;
    eprint!("{own}");
    if status.success() {
        const SHOWN: usize = 20;
        let lines: Vec<&str> = messages.lines().collect();
        let more = lines.len().saturating_sub(SHOWN);
        let sources: Vec<String> = copies
            .iter()
            .map(|(_, source)| source.display().to_string())
            .collect();
        eprintln!(
            "cupreempt: warning: {}: the transformed source did not compile; compiled as written, so its kernels are not preemptible (CUPREEMPT_STRICT=1 makes this an error). nvcc said about the transformed source:",
            sources.join(", ")
        );
        for l in &lines[..lines.len().min(SHOWN)] {
            eprintln!("  {l}");
        }
        if more > 0 {
            eprintln!("  ... ({more} more lines)");
        }
    }
    Ok(exit_code(status))
}

/// Options that put `dir` on the search path of quoted includes only (`-iquote`, which nvcc
/// passes to the host compiler's preprocessor, the one both compilation passes use). A folder
/// whose name has a comma cannot go through `-Xcompiler` (it splits at commas): `-I` then.
fn quoted_search(dir: &Path) -> Vec<OsString> {
    let d = dir.as_os_str();
    if d.to_string_lossy().contains(',') {
        let mut i = OsString::from("-I");
        i.push(d);
        return vec![i];
    }
    vec![
        "-Xcompiler".into(),
        "-iquote".into(),
        "-Xcompiler".into(),
        d.to_os_string(),
    ]
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8)
}

fn nvcc_status(
    nvcc: &Path,
    args: &[OsString],
    links: bool,
) -> anyhow::Result<std::process::ExitStatus> {
    launcher_command(nvcc, args, links)?
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nvcc.display()))
}

/// nvcc with its standard error held back and returned (its standard output passes through).
fn nvcc_captured(
    nvcc: &Path,
    args: &[OsString],
    links: bool,
) -> anyhow::Result<(std::process::ExitStatus, String)> {
    let out = launcher_command(nvcc, args, links)?
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nvcc.display()))?;
    Ok((
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// nvcc with `args`, and the runtime library where the command links.
fn launcher_command(nvcc: &Path, args: &[OsString], links: bool) -> anyhow::Result<Command> {
    let mut c = Command::new(nvcc);
    c.args(args);
    if links {
        let Some(dir) = runtime_dir() else {
            anyhow::bail!(
                "cannot find libcupreempt_runtime (next to {} or in ../lib from it): set CUPREEMPT_RUNTIME_DIR to its folder",
                std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
            );
        };
        c.arg(format!("-L{}", dir.display()))
            .arg("-lcupreempt_runtime")
            .args(["-Xlinker", "-rpath", "-Xlinker"])
            .arg(&dir);
    }
    Ok(c)
}

/// The private folder: next to the output (`OUT.cupreempt/`), or in the working folder.
fn private_base(cmd: &NvccCommand) -> anyhow::Result<PathBuf> {
    let base = match &cmd.output {
        Some(o) => {
            let mut name = o.file_name().unwrap_or_default().to_os_string();
            name.push(".cupreempt");
            o.with_file_name(name)
        }
        None => PathBuf::from(".cupreempt"),
    };
    std::fs::create_dir_all(&base)?;
    Ok(std::path::absolute(&base)?)
}

fn write_support(dir: &Path) -> anyhow::Result<()> {
    for (rel, content) in cupreempt::SUPPORT_FILES {
        let content = if *rel == "cupreempt/runtime_path.h" {
            runtime_path_header(content)
        } else {
            content.to_string()
        };
        write_if_changed(&dir.join(rel), content.as_bytes())?;
    }
    Ok(())
}

/// `runtime_path.h` naming the shared runtime library that link steps get (`runtime_dir`), so
/// that a program whose link step does not name it (the host compiler's) loads it
/// (`runtime_library.h`).
fn runtime_path_header(default: &str) -> String {
    let Some(lib) = runtime_dir()
        .map(|d| d.join("libcupreempt_runtime.so"))
        .filter(|l| l.is_file())
    else {
        return default.to_string();
    };
    let escaped: String = lib
        .to_string_lossy()
        .chars()
        .flat_map(|c| match c {
            '\\' | '"' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    format!("{default}#define CUPREEMPT_RUNTIME_LIBRARY \"{escaped}\"\n")
}

/// Writes only when the content differs, so that an unchanged copy keeps its time stamp.
pub(super) fn write_if_changed(path: &Path, content: &[u8]) -> anyhow::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, content)?;
    Ok(())
}

/// A source's transformed copy and what its compile needs to know.
struct Copied {
    /// The folder that mirrors the file system, with the copies under it.
    root: PathBuf,
    /// The source's copy, to compile.
    copy: PathBuf,
    /// The copies hold a capped wrapper (`capped`).
    capped: bool,
    /// The copies define wrappers (a kernel was transformed): the unit may be split.
    wraps: bool,
    /// A copy has an include line the copying could not redirect: a computed
    /// `#include MACRO` or a quoted `__has_include`.
    unredirected: bool,
}

enum Prepared {
    Copy(Copied),
    /// Nothing to transform in it or its headers.
    AsWritten,
}

/// Copies `source` and the project headers it reaches under a root of its own in `base`
/// (transformed where they hold kernels or launches), and returns the source's copy.
fn prepare(
    source: &Path,
    base: &Path,
    search: &[PathBuf],
    system: &[PathBuf],
    defines: &[String],
    define_values: &[(String, String)],
) -> anyhow::Result<Prepared> {
    let spelled_source = source;
    let source = source.canonicalize()?;
    // Files that are not UTF-8: their odd bytes, put back into their copies.
    let mut foreign: std::collections::HashMap<PathBuf, super::files::Foreign> =
        std::collections::HashMap::new();
    let text = read_text(&source, &mut foreign)?;
    let project = |p: &Path| !system.iter().any(|d| p.starts_with(d));
    let resolver = program::IncludeResolver::new(search);
    let headers = resolver.closure(&source, &text, &project);
    let mut files = vec![(source.clone(), text)];
    for h in &headers {
        let t = read_text(h, &mut foreign)?;
        files.push((h.clone(), t));
    }
    // Kernels spelled with a macro (`GLOBAL static void k(...)`) count too.
    let (global_macros, _) = program::space_macro_names(files.iter().map(|(_, t)| t.as_str()));
    // Each file's text read once for it (a pass over the text without its comments).
    let with_kernels: Vec<bool> = files
        .iter()
        .map(|(_, t)| program::mentions_kernels_with(t, &global_macros))
        .collect();
    if !with_kernels.contains(&true) {
        return Ok(Prepared::AsWritten);
    }
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut h);
        h.finish()
    };
    let stem = source.file_stem().unwrap_or_default().to_string_lossy();
    let root = base.join(format!("{stem}-{key:016x}"));
    let copy_of = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    // The translation unit is one program: a header's helper that reads blockIdx/gridDim gets
    // its task-context form for the kernels of the files that include it.
    let opts = cupreempt::Options {
        line_directives: true,
        helpers_for_other_files: true,
        defined_macros: defines.to_vec(),
        defined_values: define_values.to_vec(),
        ..cupreempt::Options::default()
    };
    // What each file defines, for the launches and kernels of the files that include it.
    // The source's closure is `headers`; each header's, from it.
    let graph: program::IncludeGraph = files
        .iter()
        .enumerate()
        .map(|(i, (p, t))| {
            let c = if i == 0 {
                headers.clone()
            } else {
                resolver.closure(p, t, &project)
            };
            (p.clone(), c)
        })
        .collect();
    // Every file of the unit's closure within the project is in `files`.
    let memo = program::MacroMemo::default();
    let defines = program::defines_of(&files, &Default::default(), &graph, &opts, &memo);
    let index = program::KnownIndex::new(&defines, &graph);
    let spelled = spelled_names(spelled_source, &files, search);
    let color = super::stderr_color();
    let mut refused = false;
    let mut capped = false;
    let mut wraps = false;
    // The name the preprocessor gives each original (its `__FILE__`, its messages), not the
    // copy's path nor the canonical one: a program that prints `__FILE__` prints the same
    // either way.
    let names: Vec<String> = files
        .iter()
        .map(|(p, _)| {
            spelled
                .get(p)
                .cloned()
                .unwrap_or_else(|| p.display().to_string())
        })
        .collect();
    // Each file's text as its copy holds it. The headers first: where one of theirs includes
    // cupreempt's header, the source does too (`Options::include_support`).
    let mut outputs = vec![String::new(); files.len()];
    let mut support = false;
    for i in (1..files.len()).chain([0]) {
        let (p, text) = &files[i];
        let name = &names[i];
        let gives_ctx = defines.get(p).is_some_and(|(_, h)| {
            h.iter()
                .any(|h| h.with_ctx || matches!(h.live_copy, Some(Ok(_))))
        });
        let include_support = i == 0 && support;
        outputs[i] = if with_kernels[i] || gives_ctx || include_support {
            let (k, h) = index.known_from(p);
            let mut o = opts.clone();
            o.known_kernels.extend(k);
            o.known_helpers.extend(h);
            o.namesakes = program::namesake_ordinals(&defines, p);
            let included = memo.macros_in_context(&graph, p, &|q| {
                files.iter().find(|(f, _)| f == q).map(|(_, t)| t.clone())
            });
            o.known_macros = included;
            o.include_support = include_support;
            let t = cupreempt::transform(text, name, &o);
            let shown: Vec<_> = t
                .diagnostics
                .iter()
                .filter(|d| d.severity != Level::Note)
                .cloned()
                .collect();
            eprint!("{}", render(&shown, name, text, color));
            refused |= t.diagnostics.iter().any(|d| d.is_refusal());
            capped |= t.output.contains(cupreempt::vocab::CAPPED_CHOSEN);
            wraps |= t.output.contains(cupreempt::vocab::SPLIT_UNIT);
            support |= t.includes_support();
            t.output
        } else {
            text.clone()
        };
    }
    for (((p, _), name), out) in files.iter().zip(&names).zip(outputs) {
        let dir = p.parent().unwrap_or(Path::new("/"));
        // Messages about lines before the first edit name the original too.
        let out = line_one(name, &out);
        let out = redirect_includes(&out, dir, search, &project, &copy_of);
        let bytes = match foreign.get(p) {
            None => out.into_bytes(),
            Some(f) => f.restore(&out).ok_or_else(|| {
                anyhow::anyhow!("{name} is not UTF-8 text, and its bytes could not be kept")
            })?,
        };
        write_if_changed(&copy_of(p), &bytes)?;
    }
    if refused && strict() {
        anyhow::bail!("kernels refused (CUPREEMPT_STRICT=1)");
    }
    let copy = copy_of(&source);
    let unredirected = files
        .iter()
        .any(|(_, t)| program::has_unredirected_include(t));
    Ok(Prepared::Copy(Copied {
        root,
        copy,
        capped,
        wraps,
        unredirected,
    }))
}

/// Each file's name as the preprocessor spells it when it compiles the original (`__FILE__`):
/// the source as the command line names it, and a header as the folder it was found in is
/// spelled (the including file's own folder, as that file is named, for a quoted include found
/// there; an `-I` folder as given) joined with the name its include line gives. `files` are
/// canonical paths with their texts, the source first; a header reached twice keeps the name of
/// its first include in the preprocessor's order.
fn spelled_names(
    source: &Path,
    files: &[(PathBuf, String)],
    search: &[PathBuf],
) -> std::collections::HashMap<PathBuf, String> {
    let mut names = std::collections::HashMap::new();
    let Some((canonical, _)) = files.first() else {
        return names;
    };
    names.insert(canonical.clone(), source.display().to_string());
    // Depth first, in include order, as the preprocessor reads them. Each file's include
    // lines are read once (a file is popped once per include line).
    let mut includes: Vec<Option<Vec<_>>> = vec![None; files.len()];
    let mut stack = vec![(0usize, source.to_path_buf(), 0usize)];
    while let Some((file, spelled, next)) = stack.pop() {
        let incs = includes[file].get_or_insert_with(|| program::includes(&files[file].1));
        let Some(inc) = incs.get(next).cloned() else {
            continue;
        };
        stack.push((file, spelled.clone(), next + 1));
        let dir = spelled.parent().unwrap_or(Path::new(""));
        let Some(found) = program::resolve(&inc, dir, search) else {
            continue;
        };
        let Ok(canon) = found.canonicalize() else {
            continue;
        };
        let Some(i) = files.iter().position(|(p, _)| *p == canon) else {
            continue;
        };
        if names.contains_key(&canon) {
            continue;
        }
        names.insert(canon, found.display().to_string());
        stack.push((i, found, 0));
    }
    names
}

/// A file's text; one that is not UTF-8 is read with stand-ins, kept in `foreign`.
fn read_text(
    p: &Path,
    foreign: &mut std::collections::HashMap<PathBuf, super::files::Foreign>,
) -> anyhow::Result<String> {
    match super::files::decode(std::fs::read(p)?) {
        super::files::Source::Text(s) => Ok(s),
        super::files::Source::Foreign(f) => {
            let text = f.text.clone();
            foreign.insert(p.to_path_buf(), f);
            Ok(text)
        }
        super::files::Source::Skipped(d, _) => anyhow::bail!("{}: {}", p.display(), d.message),
    }
}

/// `text` with a `#line 1 "name"` directive first, after its byte order mark if it has one
/// (the compiler skips a mark only at the very start of a file; anywhere else it is a stray
/// character, and a header that begins with one would not compile).
fn line_one(name: &str, text: &str) -> String {
    let (bom, rest) = match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    };
    format!("{bom}#line 1 \"{}\"\n{rest}", escape(name))
}

fn escape(path: &str) -> String {
    path.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Each include line of `text` (a file of folder `dir`) that names a project header names its
/// copy instead, by absolute path; the line count stays the same.
fn redirect_includes(
    text: &str,
    dir: &Path,
    search: &[PathBuf],
    project: &dyn Fn(&Path) -> bool,
    copy_of: &dyn Fn(&Path) -> PathBuf,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for inc in program::includes(text) {
        let Some(found) = program::resolve(&inc, dir, search) else {
            continue;
        };
        let found = found.canonicalize().unwrap_or(found);
        if !project(&found) {
            continue;
        }
        // `<name>` becomes `"path"`: the delimiters are one byte each either side.
        out.push_str(&text[at..inc.name_range.start - 1]);
        out.push('"');
        out.push_str(&escape(&copy_of(&found).display().to_string()));
        out.push('"');
        at = inc.name_range.end + 1;
    }
    out.push_str(&text[at..]);
    out
}

/// Rewrites a depfile that nvcc wrote for the private copies so that it names the originals:
/// the copies mirror the originals' absolute paths under each root.
fn originals_in_depfile(dep: &Path, roots: &[PathBuf]) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(dep) else {
        return Ok(());
    };
    let mut out = text.clone();
    for r in roots {
        let plain = r.display().to_string();
        out = out.replace(&plain, "");
        out = out.replace(&plain.replace(' ', "\\ "), "");
    }
    if out != text {
        std::fs::write(dep, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn compilers_are_told_from_commands() {
        assert!(is_compiler("nvcc".as_ref()));
        assert!(is_compiler("nvcc.exe".as_ref()));
        assert!(!is_compiler("transform".as_ref()));
        assert!(!is_compiler("./no/such/nvcc-wrapper".as_ref()));
        // A path to a file that cannot be run is a source given by mistake, not a compiler.
        let src = std::env::temp_dir().join(format!("cupreempt-notexe-{}.cu", std::process::id()));
        std::fs::write(&src, "").unwrap();
        assert!(!is_compiler(src.as_os_str()));
        std::fs::remove_file(&src).unwrap();
        assert!(is_compiler("/bin/sh".as_ref()));
    }

    #[test]
    fn modes_without_machine_code_and_asks_for_ptxas_report_are_read() {
        let c = |line: &str| {
            let p = parse(args(line));
            (p.machine_code, p.ptxas_report)
        };
        assert_eq!(c("-c a.cu -o a.o"), (true, false));
        for line in [
            "-dc a.cu",
            "-ptx a.cu",
            "-rdc true -c a.cu",
            "-rdc=true -c a.cu",
            "--relocatable-device-code=true -c a.cu",
            "--device-link a.o",
        ] {
            assert_eq!(c(line), (false, false), "{line}");
        }
        assert_eq!(c("-rdc=false -c a.cu"), (true, false));
        for line in [
            "-Xptxas -v -c a.cu",
            "-Xptxas=-O3,-v -c a.cu",
            "--ptxas-options=-v -c a.cu",
            "--resource-usage -c a.cu",
            "-Xptxas --verbose -c a.cu",
        ] {
            assert_eq!(c(line), (true, true), "{line}");
        }
        assert_eq!(c("-Xptxas -O3 -c a.cu"), (true, false));
    }

    #[test]
    fn defines_and_undefines_are_read_in_order() {
        let c = parse(args(
            "-DNDEBUG -D TRACE=1 --define-macro=A,B=2 -x cu -c a.cu -UA --undefine-macro TRACE -DC",
        ));
        assert_eq!(c.defines, ["NDEBUG", "B", "C"]);
        // The values of those still defined (`-D TRACE=1` is undefined after).
        assert_eq!(c.define_values, [("B".to_string(), "2".to_string())]);
    }

    #[test]
    fn cmake_compile_lines_are_understood() {
        let dir = std::env::temp_dir().join(format!("cupreempt-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("a.cu");
        std::fs::write(&src, "").unwrap();
        let line = format!(
            "-I/inc -isystem /sys -x cu -c {} -o obj/a.cu.o -MD -MT obj/a.cu.o -MF obj/a.cu.o.d --generate-code=arch=compute_90,code=sm_90",
            src.display()
        );
        let c = parse(args(&line));
        assert_eq!(c.sources.len(), 1);
        assert_eq!(c.args[c.sources[0]], src.as_os_str());
        assert_eq!(c.output.as_deref(), Some(Path::new("obj/a.cu.o")));
        assert_eq!(c.depfile.as_deref(), Some(Path::new("obj/a.cu.o.d")));
        assert_eq!(c.search, [PathBuf::from("/inc")]);
        assert_eq!(c.system, [PathBuf::from("/sys")]);
        assert!(!c.links && !c.pass_through);
        // A value that looks like a source is no source; linking and preprocessing are seen.
        let c = parse(args(&format!("-o {} main.o", src.display())));
        assert!(c.sources.is_empty() && c.links);
        let c = parse(args(&format!("-E {}", src.display())));
        assert!(c.pass_through && !c.links);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn options_files_give_include_folders() {
        assert_eq!(
            split_words("-I/a \"-I/b c\" '-isystem' /s\\ t\n"),
            ["-I/a", "-I/b c", "-isystem", "/s t"]
        );
        let dir = std::env::temp_dir().join(format!("cupreempt-optf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("includes.rsp");
        std::fs::write(&f, "-I/inc/one \"-I/inc two\" -isystem /sys\n").unwrap();
        let c = parse(args(&format!("--options-file {} -I/last", f.display())));
        assert_eq!(
            c.search,
            [
                PathBuf::from("/inc/one"),
                PathBuf::from("/inc two"),
                PathBuf::from("/last")
            ]
        );
        assert_eq!(c.system, [PathBuf::from("/sys")]);
        let c = parse(args(&format!("@{} -MD -c x.cu -o x.o", f.display())));
        assert_eq!(c.search.len(), 2);
        assert!(c.depends && c.depfile.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn options_files_that_name_sources_are_expanded() {
        let dir = std::env::temp_dir().join(format!("cupreempt-optf-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("k.cu");
        std::fs::write(&src, "").unwrap();
        let includes = dir.join("includes.rsp");
        std::fs::write(&includes, "-I/inc\n").unwrap();
        let sources = dir.join("sources.rsp");
        std::fs::write(&sources, format!("-c \"{}\" -o k.o\n", src.display())).unwrap();
        let nested = dir.join("nested.rsp");
        std::fs::write(&nested, format!("@{}\n", sources.display())).unwrap();
        for line in [
            format!(
                "--options-file {} @{}",
                includes.display(),
                sources.display()
            ),
            format!(
                "-optf {} --options-file={}",
                includes.display(),
                sources.display()
            ),
            format!("@{} @{}", includes.display(), nested.display()),
        ] {
            let args = expand_source_options_files(args(&line), 0);
            // The includes' file stays; the sources' file is replaced by its words.
            assert!(args
                .iter()
                .any(|a| a.to_string_lossy().contains("includes.rsp")));
            assert!(!args
                .iter()
                .any(|a| a.to_string_lossy().contains("sources.rsp")));
            let c = parse(args);
            assert_eq!(c.sources.len(), 1, "{line}");
            assert_eq!(c.args[c.sources[0]], src.as_os_str());
            assert_eq!(c.output.as_deref(), Some(Path::new("k.o")));
            assert_eq!(c.search, [PathBuf::from("/inc")]);
        }
        // Files that name each other end; nothing is lost.
        let a = dir.join("a.rsp");
        let b = dir.join("b.rsp");
        std::fs::write(&a, format!("@{} -c {}", b.display(), src.display())).unwrap();
        std::fs::write(&b, format!("@{}", a.display())).unwrap();
        let c = parse(expand_source_options_files(
            args(&format!("@{}", a.display())),
            0,
        ));
        assert!(!c.sources.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn depfiles_name_the_originals_also_behind_escaped_spaces() {
        let dir = std::env::temp_dir().join(format!("cupreempt-dep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dep = dir.join("a.o.d");
        let root = PathBuf::from("/b d/a.o.cupreempt/a-00ff");
        std::fs::write(
            &dep,
            "a.o: /b\\ d/a.o.cupreempt/a-00ff/src/my\\ dir/a.cu \\\n /b\\ d/a.o.cupreempt/a-00ff/src/k.cuh /usr/include/stdio.h\n",
        )
        .unwrap();
        originals_in_depfile(&dep, &[root]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&dep).unwrap(),
            "a.o: /src/my\\ dir/a.cu \\\n /src/k.cuh /usr/include/stdio.h\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn includes_of_project_headers_name_their_copies() {
        let dir = std::env::temp_dir().join(format!("cupreempt-redirect-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("inc")).unwrap();
        std::fs::write(dir.join("k.cuh"), "").unwrap();
        std::fs::write(dir.join("inc/s.h"), "").unwrap();
        let dir = dir.canonicalize().unwrap();
        let text = "#include \"k.cuh\"\n#include <s.h>\n#include <vector>\nint x;\n";
        let out = redirect_includes(text, &dir, &[dir.join("inc")], &|_| true, &|p| {
            Path::new("/copy").join(p.strip_prefix("/").unwrap())
        });
        let want = format!(
            "#include \"/copy{0}/k.cuh\"\n#include \"/copy{0}/inc/s.h\"\n#include <vector>\nint x;\n",
            dir.display()
        );
        assert_eq!(out, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
