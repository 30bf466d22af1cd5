//! `cupreempt-build`: preemptible CUDA kernels from a cargo build script.
//!
//! In build.rs:
//!
//! ```no_run
//! cupreempt_build::Build::new()
//!     .file("kernels/saxpy.cu")
//!     .arch("sm_80")
//!     .compile("kernels")
//!     .unwrap_or_else(|e| panic!("{e}"));
//! ```
//!
//! and in the crate: `include!(concat!(env!("OUT_DIR"), "/kernels.rs"));` (the package also
//! depends on `cupreempt-runtime`).
//!
//! Each file is transformed (`cupreempt::transform`), compiled with nvcc to a fatbin (machine
//! code for each architecture, and PTX for newer GPUs), and embedded;
//! `OUT_DIR/NAME.rs` defines `Kernels`, whose `load(&Runtime)` loads the modules and which has
//! one method per transformed kernel: the kernel's parameters as Rust values (pointers as
//! `u64` device addresses, e.g. a cudarc `CUdeviceptr`), returning the runtime's
//! `Kernel` handle (preempt, resume, progress, wait). A template kernel gets one method per
//! instance asked for with `Build::instantiate("scale<float, 3>")`, named after it
//! (`scale_float_3`). Kernels that the transformation refuses, templates with no instance
//! asked for, overloads, and kernels with parameters of types other than scalars and pointers
//! get no method; a `cargo:warning` says why.
//!
//! nvcc: `Build::nvcc`, else `CUPREEMPT_NVCC`, else `CUDA_HOME`/`CUDA_PATH` `bin/nvcc`, else
//! PATH; none: an error that says so. The architectures: `Build::arch`, else `CUDA_ARCH` (one or
//! several, e.g. `80,90`), else sm_75, 80, 86, 89, 90, 100 and 120. Each gets machine code; the
//! oldest one's PTX goes along for GPUs newer than all of them. Machine code matters: a driver
//! older than the nvcc that made the PTX cannot compile it (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`),
//! but it runs machine code from any nvcc of its major version. `cargo:rerun-if-changed` for
//! every file and every header it includes outside the system's and the toolkit's folders.

use cupreempt::program;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cupreempt-build: {}", self.0)
    }
}

impl std::error::Error for Error {}

fn err(msg: impl Into<String>) -> Error {
    Error(msg.into())
}

#[derive(Default, Debug, Clone)]
pub struct Build {
    files: Vec<PathBuf>,
    include: Vec<PathBuf>,
    arch: Option<String>,
    instances: Vec<String>,
    nvcc: Option<PathBuf>,
    flags: Vec<String>,
    out_dir: Option<PathBuf>,
    /// (C++ type, Rust type) of struct parameters (`Build::param_type`).
    param_types: Vec<(String, String)>,
}

/// A kernel that got a launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    pub kernel: String,
    /// The wrapper's entry in the PTX.
    pub entry: String,
    /// (name, Rust type) of each parameter.
    pub params: Vec<(String, String)>,
    /// (Rust type, size, alignment) of each struct parameter, as nvcc laid the C++ type out
    /// (the PTX's parameter list): the generated code checks the Rust type against them.
    pub layouts: Vec<(String, u64, u64)>,
    /// Index of the module (file) it is in.
    pub module: usize,
}

impl Build {
    pub fn new() -> Build {
        Build::default()
    }
    /// A `.cu` file whose kernels get launchers.
    pub fn file(&mut self, p: impl AsRef<Path>) -> &mut Build {
        self.files.push(p.as_ref().to_path_buf());
        self
    }
    /// An include folder (`-I`).
    pub fn include(&mut self, p: impl AsRef<Path>) -> &mut Build {
        self.include.push(p.as_ref().to_path_buf());
        self
    }
    /// The GPU architectures to compile for: `sm_80`, `compute_90`, `90`, or several of
    /// these separated by commas or spaces.
    pub fn arch(&mut self, a: &str) -> &mut Build {
        self.arch = Some(a.to_string());
        self
    }
    /// An instance of a template kernel to launch: `scale<float, 3>`, `ns::fill<double>`. Its
    /// method is named after it (`scale_float_3`, `fill_double`).
    pub fn instantiate(&mut self, instance: &str) -> &mut Build {
        self.instances.push(instance.to_string());
        self
    }
    pub fn nvcc(&mut self, p: impl AsRef<Path>) -> &mut Build {
        self.nvcc = Some(p.as_ref().to_path_buf());
        self
    }
    /// A struct parameter's type: kernels whose parameters are of the C++ type `cpp` (as
    /// written there: `Params`, `ns::Params`; `const` and `struct` aside) get methods that take
    /// the Rust type `rust` (a path, e.g. `crate::Params`), which must have the same layout
    /// (`#[repr(C)]`, the same fields in the same order). The generated code checks its size and
    /// alignment against the ones nvcc gave the C++ type, at compile time.
    pub fn param_type(&mut self, cpp: &str, rust: &str) -> &mut Build {
        self.param_types
            .push((cpp.trim().to_string(), rust.trim().to_string()));
        self
    }
    /// Another nvcc flag.
    pub fn flag(&mut self, f: &str) -> &mut Build {
        self.flags.push(f.to_string());
        self
    }
    /// Where to write (default `OUT_DIR`).
    pub fn out_dir(&mut self, p: impl AsRef<Path>) -> &mut Build {
        self.out_dir = Some(p.as_ref().to_path_buf());
        self
    }

    /// Transforms, compiles and writes `OUT_DIR/NAME.rs`; returns the launchers made.
    pub fn compile(&self, name: &str) -> Result<Vec<Launcher>, Error> {
        let out =
            match &self.out_dir {
                Some(d) => d.clone(),
                None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| {
                    err("OUT_DIR is not set: run from build.rs or call out_dir()")
                })?),
            };
        let work = out.join(format!("{name}.cupreempt"));
        let support = work.join("include");
        for (rel, content) in cupreempt::SUPPORT_FILES {
            let p = support.join(rel);
            std::fs::create_dir_all(p.parent().unwrap_or(&support))
                .map_err(|e| err(e.to_string()))?;
            std::fs::write(&p, content).map_err(|e| err(format!("{}: {e}", p.display())))?;
        }
        let nvcc = self.find_nvcc()?;
        let archs = self.archs()?;
        let oldest = archs.iter().min().copied().unwrap_or(DEFAULT_ARCHS[0]);
        for v in ["CUPREEMPT_NVCC", "CUDA_HOME", "CUDA_PATH", "CUDA_ARCH"] {
            println!("cargo:rerun-if-env-changed={v}");
        }
        let mut launchers = Vec::new();
        let mut modules = Vec::new();
        for (index, file) in self.files.iter().enumerate() {
            let src = std::fs::read_to_string(file)
                .map_err(|e| err(format!("{}: {e}", file.display())))?;
            println!("cargo:rerun-if-changed={}", file.display());
            let system = |p: &Path| {
                !(p.starts_with("/usr")
                    || p.starts_with("/opt")
                    || nvcc_top(&nvcc).is_some_and(|t| p.starts_with(t)))
            };
            for h in program::include_closure(file, &src, &self.include, &system) {
                println!("cargo:rerun-if-changed={}", h.display());
            }
            let shown = file.display().to_string();
            let opts = cupreempt::Options {
                line_directives: true,
                ..cupreempt::Options::default()
            };
            let t = cupreempt::transform(&src, &shown, &opts);
            for d in t
                .diagnostics
                .iter()
                .filter(|d| d.severity != cupreempt::diagnostics::Level::Note)
            {
                println!("cargo:warning={shown}: {} [{}]", d.message, d.code.id());
            }
            let stem = file
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            let cu = work.join(format!("{index}-{stem}.cu"));
            let ptx = work.join(format!("{index}-{stem}.ptx"));
            let fatbin = work.join(format!("{index}-{stem}.fatbin"));
            let instances = instances_of(&src, &self.instances);
            let mut output = t.output.clone();
            if !instances.is_empty() {
                // Taking their wrappers' addresses makes nvcc compile these instances.
                let _ = write!(
                    output,
                    "\n// cupreempt-build: the instances asked for (Build::instantiate).\nvoid* __cupreempt_build_instances_{index}[] = {{{}}};\n",
                    instances
                        .iter()
                        .map(|i| format!("(void*)&{}{}__cupreempt<{}>", i.qualifier, i.kernel, i.args))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            std::fs::write(&cu, &output).map_err(|e| err(e.to_string()))?;
            let dir = std::path::absolute(file)
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or_default();
            let mut c = Command::new(&nvcc);
            c.arg("-ptx")
                .arg(format!("-arch=compute_{oldest}"))
                .arg("-std=c++17")
                .arg(format!("-I{}", dir.display()));
            for i in &self.include {
                c.arg(format!("-I{}", i.display()));
            }
            // The toolkit's own headers: a standard toolkit finds them anyway, an nvcc
            // installed from PyPI needs to be told.
            if let Some(inc) = nvcc_top(&nvcc)
                .map(|t| t.join("include"))
                .filter(|d| d.is_dir())
            {
                c.arg(format!("-I{}", inc.display()));
            }
            c.arg(format!("-I{}", support.display()))
                .args(&self.flags)
                .arg(&cu)
                .arg("-o")
                .arg(&ptx);
            let o = c
                .output()
                .map_err(|e| err(format!("cannot run {}: {e}", nvcc.display())))?;
            if !o.status.success() {
                return Err(err(format!(
                    "nvcc failed on {shown}:\n{}",
                    String::from_utf8_lossy(&o.stderr)
                )));
            }
            // The PTX to machine code for every architecture (ptxas only: the front end ran once).
            let codes: Vec<String> = archs
                .iter()
                .map(|a| format!("sm_{a}"))
                .chain([format!("compute_{oldest}")])
                .collect();
            let o = Command::new(&nvcc)
                .arg("-fatbin")
                .arg(format!(
                    "-gencode=arch=compute_{oldest},code=[{}]",
                    codes.join(",")
                ))
                .arg(&ptx)
                .arg("-o")
                .arg(&fatbin)
                .output()
                .map_err(|e| err(format!("cannot run {}: {e}", nvcc.display())))?;
            if !o.status.success() {
                return Err(err(format!(
                    "nvcc failed on {shown} (machine code for {}):\n{}",
                    codes.join(", "),
                    String::from_utf8_lossy(&o.stderr)
                )));
            }
            let ptx_text = std::fs::read_to_string(&ptx).map_err(|e| err(e.to_string()))?;
            for (kernel, why) in kernels_of(
                &src,
                &ptx_text,
                index,
                &instances,
                &self.param_types,
                &mut launchers,
            ) {
                println!("cargo:warning={shown}: kernel `{kernel}` gets no launcher: {why}");
            }
            modules.push(fatbin);
        }
        let rs = generate(&self.files, &modules, &launchers);
        std::fs::write(out.join(format!("{name}.rs")), rs).map_err(|e| err(e.to_string()))?;
        Ok(launchers)
    }

    /// The architectures' numbers (`sm_80` -> 80), sorted, without repeats.
    fn archs(&self) -> Result<Vec<u32>, Error> {
        let given = self
            .arch
            .clone()
            .or_else(|| std::env::var("CUDA_ARCH").ok());
        let Some(given) = given.filter(|g| !g.trim().is_empty()) else {
            return Ok(DEFAULT_ARCHS.to_vec());
        };
        let mut archs = Vec::new();
        for a in given.split([',', ' ']).filter(|a| !a.is_empty()) {
            let digits = a.trim_start_matches("sm_").trim_start_matches("compute_");
            let n = digits.parse::<u32>().map_err(|_| {
                err(format!(
                    "architecture `{a}` is not one of sm_NN, compute_NN or NN (from {})",
                    if self.arch.is_some() {
                        "Build::arch"
                    } else {
                        "CUDA_ARCH"
                    }
                ))
            })?;
            archs.push(n);
        }
        archs.sort_unstable();
        archs.dedup();
        Ok(archs)
    }

    fn find_nvcc(&self) -> Result<PathBuf, Error> {
        if let Some(p) = &self.nvcc {
            return Ok(p.clone());
        }
        if let Some(p) = std::env::var_os("CUPREEMPT_NVCC") {
            return Ok(PathBuf::from(p));
        }
        for v in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(home) = std::env::var_os(v) {
                let p = PathBuf::from(home).join("bin/nvcc");
                if p.is_file() {
                    return Ok(p);
                }
            }
        }
        std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("nvcc")).find(|p| p.is_file()))
            .ok_or_else(|| err("nvcc not found: set CUPREEMPT_NVCC to it, or CUDA_HOME to the toolkit, or put nvcc on PATH"))
    }
}

/// Machine code for these when no architecture is given: from the oldest that CUDA 13 compiles
/// for to the newest of each family.
const DEFAULT_ARCHS: [u32; 7] = [75, 80, 86, 89, 90, 100, 120];

/// The toolkit folder above nvcc's `bin`.
fn nvcc_top(nvcc: &Path) -> Option<PathBuf> {
    nvcc.canonicalize()
        .ok()?
        .parent()?
        .parent()
        .map(Path::to_path_buf)
}

/// Adds a launcher for each transformed, non-template kernel of `src` whose parameters all have
/// Rust types; returns (kernel, why) for the others.
fn kernels_of(
    src: &str,
    ptx: &str,
    module: usize,
    instances: &[Instance],
    types: &[(String, String)],
    out: &mut Vec<Launcher>,
) -> Vec<(String, String)> {
    let parsed = cupreempt::parse::parse(src);
    let a = cupreempt::analysis::analyze(&parsed, src, &cupreempt::Options::default());
    let entries: Vec<&str> = regex::Regex::new(r"\.entry\s+([A-Za-z0-9_$]+)\s*\(")
        .expect("valid regex")
        .captures_iter(ptx)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect();
    let mut skipped = Vec::new();
    for k in &a.kernels {
        let name = k.site.name.clone();
        if !k.transformed() {
            skipped.push((
                name,
                "it is not transformed (see the warnings above)".into(),
            ));
            continue;
        }
        if k.overloaded {
            skipped.push((
                name,
                "overloads are not supported (one launch type per overload)".into(),
            ));
            continue;
        }
        if k.site.is_template() {
            let mine: Vec<&Instance> = instances.iter().filter(|i| i.kernel == name).collect();
            if mine.is_empty() {
                skipped.push((
                    name,
                    "a template: ask for instances with Build::instantiate(\"name<args>\")".into(),
                ));
            }
            for i in mine {
                match template_launcher(k, i, &entries, types, module) {
                    Ok(mut l) => match struct_layouts(&l.params, types, ptx, &l.entry) {
                        Ok(layouts) => {
                            l.layouts = layouts;
                            out.push(l)
                        }
                        Err(why) => skipped.push((i.spec.clone(), why)),
                    },
                    Err(why) => skipped.push((i.spec.clone(), why)),
                }
            }
            continue;
        }
        let mut params = Vec::new();
        let mut bad = None;
        for p in &k.site.param_list {
            match param_rust_type(&p.text, &p.name, types) {
                Some(t) => params.push((p.name.clone(), t)),
                None => bad = Some(p.text.clone()),
            }
        }
        if let Some(t) = bad {
            skipped.push((name, no_rust_type(&t)));
            continue;
        }
        let wrapper = format!("{name}__cupreempt");
        let mangled = {
            let mut m = String::from("_Z");
            if k.site.scope.is_empty() {
                let _ = write!(m, "{}{wrapper}", wrapper.len());
            } else {
                m.push('N');
                for s in &k.site.scope {
                    let _ = write!(m, "{}{s}", s.len());
                }
                let _ = write!(m, "{}{wrapper}E", wrapper.len());
            }
            m
        };
        match entries
            .iter()
            .find(|e| **e == wrapper || e.starts_with(&mangled))
        {
            Some(e) => match struct_layouts(&params, types, ptx, e) {
                Ok(layouts) => out.push(Launcher {
                    kernel: name,
                    entry: e.to_string(),
                    params,
                    layouts,
                    module,
                }),
                Err(why) => skipped.push((name, why)),
            },
            None => skipped.push((name, format!("no entry {wrapper} in the PTX"))),
        }
    }
    skipped
}

/// The Rust type of a kernel parameter (`text` its declaration, `name` its name): pointers are
/// device addresses (`u64`).
/// A template kernel's instance asked for (`Build::instantiate`).
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    /// As written: `ns::scale<float, 3>`.
    spec: String,
    /// `ns::` (the wrapper is named from the file's top level), `scale`, `float, 3`.
    qualifier: String,
    kernel: String,
    args: String,
}

/// The instances asked for whose kernel `src` defines (by name).
fn instances_of(src: &str, specs: &[String]) -> Vec<Instance> {
    specs
        .iter()
        .filter_map(|spec| {
            let open = spec.find('<')?;
            let close = spec.rfind('>').filter(|&c| c > open)?;
            let path = spec[..open].trim();
            let (qualifier, kernel) = match path.rfind("::") {
                Some(i) => (&path[..i + 2], &path[i + 2..]),
                None => ("", path),
            };
            let defines = regex::Regex::new(&format!(r"\b{}\s*\(", regex::escape(kernel)))
                .is_ok_and(|r| r.is_match(src));
            defines.then(|| Instance {
                spec: spec.clone(),
                qualifier: qualifier.to_string(),
                kernel: kernel.to_string(),
                args: spec[open + 1..close].trim().to_string(),
            })
        })
        .collect()
}

/// `ns::scale<float, 3>` -> `scale_float_3`: a Rust method name.
fn instance_method(i: &Instance) -> String {
    let mut m = String::new();
    for c in format!("{}_{}", i.kernel, i.args).chars() {
        if c.is_ascii_alphanumeric() {
            m.push(c);
        } else if !m.ends_with('_') {
            m.push('_');
        }
    }
    m.trim_end_matches('_').to_string()
}

/// Spaces, integer suffixes (`3u`) and the demangler's casts of literals (`(unsigned int)3`)
/// do not make two template argument lists differ.
fn normalized(s: &str) -> String {
    // Made once: this runs for every PTX entry of every instance asked for.
    static CAST: OnceLock<regex::Regex> = OnceLock::new();
    static SUFFIX: OnceLock<regex::Regex> = OnceLock::new();
    let cast = CAST.get_or_init(|| {
        regex::Regex::new(
            r"\((?:unsigned |signed )?(?:long long|long|int|short|char)(?: int)?\)(-?\d)",
        )
        .expect("valid regex")
    });
    let suffix = SUFFIX
        .get_or_init(|| regex::Regex::new(r"\b(\d+)(?:ull|ul|ll|u|l)\b").expect("valid regex"));
    let no_space: String = cast
        .replace_all(s, "$1")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    suffix.replace_all(&no_space, "$1").into_owned()
}

/// The launcher of one instance: its parameters with the template's parameters replaced by
/// the instance's arguments, and its entry found by demangling the PTX's entries.
fn template_launcher(
    k: &cupreempt::analysis::KernelPlan,
    i: &Instance,
    entries: &[&str],
    types: &[(String, String)],
    module: usize,
) -> Result<Launcher, String> {
    let args = cupreempt::lang::split_top_level(&i.args);
    let names: Vec<&str> = k
        .site
        .template_params
        .iter()
        .map(|p| p.arg.trim_end_matches("..."))
        .collect();
    if k.site.template_params.iter().any(|p| p.pack) || args.len() != names.len() {
        return Err(format!(
            "`{}` gives {} template arguments where `{}` takes {} (packs and defaults are not supported)",
            i.spec,
            args.len(),
            i.kernel,
            names.len()
        ));
    }
    let mut params = Vec::new();
    for p in &k.site.param_list {
        let mut text = p.text.clone();
        for (n, a) in names.iter().zip(&args) {
            let word = regex::Regex::new(&format!(r"\b{}\b", regex::escape(n)))
                .map_err(|e| e.to_string())?;
            text = word.replace_all(&text, a.as_str()).into_owned();
        }
        match param_rust_type(&text, &p.name, types) {
            Some(t) => params.push((p.name.clone(), t)),
            None => return Err(no_rust_type(&text)),
        }
    }
    let want = normalized(&format!(
        "{}{}__cupreempt<{}>(",
        i.qualifier, i.kernel, i.args
    ));
    let entry = entries.iter().find(|e| {
        cpp_demangle::Symbol::new(e.as_bytes())
            .ok()
            .map(|s| s.to_string())
            .is_some_and(|d| normalized(d.trim_start_matches("void ")).starts_with(&want))
    });
    match entry {
        Some(e) => Ok(Launcher {
            kernel: instance_method(i),
            entry: e.to_string(),
            params,
            layouts: Vec::new(),
            module,
        }),
        None => Err(format!("no entry for `{}` in the PTX", i.spec)),
    }
}

fn no_rust_type(param: &str) -> String {
    format!(
        "parameter `{param}` has no Rust type here (scalars, pointers, and structs named with \
         Build::param_type)"
    )
}

/// The Rust type of a parameter: a scalar's or pointer's (`rust_type`), else the one given for
/// its C++ type with `Build::param_type` (passed by value; references are no kernel
/// parameters a launch can fill).
fn param_rust_type(text: &str, name: &str, types: &[(String, String)]) -> Option<String> {
    if let Some(t) = rust_type(text, name) {
        return Some(t.to_string());
    }
    if text.contains(['&', '*', '[']) {
        return None;
    }
    let ty = text.trim().strip_suffix(name).unwrap_or(text);
    let ty: Vec<&str> = ty
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const" | "volatile" | "struct" | "class" | "__restrict__"
            )
        })
        .collect();
    let ty = ty.join(" ").replace(" ::", "::").replace(":: ", "::");
    types
        .iter()
        .find(|(cpp, _)| *cpp == ty || cpp.strip_prefix("::") == Some(ty.as_str()))
        .map(|(_, rust)| rust.clone())
}

/// (Rust type, size, alignment) of each parameter whose type came from `Build::param_type`,
/// with the size and alignment of the entry's parameter in the PTX (the wrapper's first
/// parameter is the launch's own, then the kernel's).
fn struct_layouts(
    params: &[(String, String)],
    types: &[(String, String)],
    ptx: &str,
    entry: &str,
) -> Result<Vec<(String, u64, u64)>, String> {
    let mut out = Vec::new();
    let mut ptx_params = None;
    for (i, (name, t)) in params.iter().enumerate() {
        if !types.iter().any(|(_, rust)| rust == t) {
            continue;
        }
        let list = ptx_params.get_or_insert_with(|| entry_params(ptx, entry));
        match list.get(i + 1) {
            Some(&(size, align)) => out.push((t.clone(), size, align)),
            None => return Err(format!("no layout for parameter `{name}` in the PTX")),
        }
    }
    Ok(out)
}

/// (size, alignment) of each parameter of the PTX entry `entry`, in order.
fn entry_params(ptx: &str, entry: &str) -> Vec<(u64, u64)> {
    let Some(start) = ptx.find(&format!(".entry {entry}(")) else {
        return Vec::new();
    };
    let body = &ptx[start..];
    let body = &body[..body.find(')').unwrap_or(body.len())];
    let param = regex::Regex::new(
        r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([busf])(\d+)(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?\s+\S+?(?:\[(\d+)\])?\s*[,\n]",
    )
    .expect("valid regex");
    param
        .captures_iter(&format!("{body}\n"))
        .map(|c| {
            let bits: u64 = c[3].parse().unwrap_or(8);
            let element = (bits / 8).max(1);
            let count: u64 = c.get(4).and_then(|m| m.as_str().parse().ok()).unwrap_or(1);
            let align = c
                .get(1)
                .and_then(|m| m.as_str().parse().ok())
                .unwrap_or(element);
            (element * count, align)
        })
        .collect()
}

pub fn rust_type(text: &str, name: &str) -> Option<&'static str> {
    if text.contains('*') {
        return Some("u64");
    }
    if text.contains('&') || text.contains('[') {
        return None;
    }
    let ty = text.trim().strip_suffix(name).unwrap_or(text);
    let words: Vec<&str> = ty
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "volatile" | "__restrict__"))
        .collect();
    Some(match words.join(" ").as_str() {
        "float" => "f32",
        "double" => "f64",
        "int" | "signed" | "signed int" | "int32_t" => "i32",
        "unsigned" | "unsigned int" | "uint32_t" => "u32",
        "long long" | "long long int" | "int64_t" | "long" => "i64",
        "unsigned long long" | "unsigned long" | "uint64_t" | "size_t" => "u64",
        "short" | "int16_t" => "i16",
        "unsigned short" | "uint16_t" => "u16",
        "char" | "signed char" | "int8_t" => "i8",
        "unsigned char" | "uint8_t" => "u8",
        "bool" => "bool",
        _ => return None,
    })
}

fn generate(files: &[PathBuf], modules: &[PathBuf], launchers: &[Launcher]) -> String {
    let rt = "::cupreempt_runtime::rt";
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// Generated by cupreempt-build from {}: do not edit.",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(s, "/// The preemptible kernels, loaded into one runtime.");
    let _ = writeln!(s, "#[allow(dead_code)]\npub struct Kernels {{");
    for l in launchers {
        let _ = writeln!(s, "    {}: {rt}::Function,", l.kernel);
    }
    let _ = writeln!(
        s,
        "}}\n\n#[allow(dead_code, clippy::too_many_arguments)]\nimpl Kernels {{"
    );
    let _ = writeln!(
        s,
        "    /// Loads the modules (fatbins embedded at build time)."
    );
    let _ = writeln!(
        s,
        "    pub fn load(rt: &{rt}::Runtime) -> {rt}::Result<Kernels> {{"
    );
    for (i, m) in modules.iter().enumerate() {
        let used = launchers.iter().any(|l| l.module == i);
        let _ = writeln!(
            s,
            "        let {}m{i} = rt.load_module(include_bytes!({:?}))?;",
            if used { "" } else { "_" },
            m.display().to_string()
        );
    }
    let _ = writeln!(s, "        Ok(Kernels {{");
    for l in launchers {
        let _ = writeln!(
            s,
            "            {}: m{}.function({:?})?,",
            l.kernel, l.module, l.entry
        );
    }
    let _ = writeln!(s, "        }})\n    }}");
    for l in launchers {
        let params: Vec<String> = l.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let sep = if params.is_empty() { "" } else { ", " };
        let _ = writeln!(
            s,
            "\n    /// Launches `{}` (preemptible) as `<<<cfg.grid, cfg.block, cfg.shared_mem, stream>>>`.",
            l.kernel
        );
        let _ = writeln!(
            s,
            "    pub fn {}(&self, rt: &{rt}::Runtime, cfg: &{rt}::LaunchConfig, stream: {rt}::StreamRef{sep}{}) -> {rt}::Result<{rt}::Kernel> {{",
            l.kernel,
            params.join(", ")
        );
        for (t, size, align) in &l.layouts {
            let _ = writeln!(
                s,
                "        const _: () = assert!(::core::mem::size_of::<{t}>() == {size} && ::core::mem::align_of::<{t}>() == {align}, \"{t}: its size or alignment differs from the C++ type's in `{}` ({size} bytes, aligned to {align}): Build::param_type needs the same layout (#[repr(C)])\");",
                l.kernel
            );
        }
        let _ = writeln!(s, "        let mut args = {rt}::KernelArgs::new();");
        for (n, _) in &l.params {
            let _ = writeln!(s, "        args.push({n});");
        }
        let _ = writeln!(
            s,
            "        rt.launch(&self.{}, cfg, stream, &args)\n    }}",
            l.kernel
        );
    }
    let _ = writeln!(s, "}}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_nvcc_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("cupreempt-build-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cu = dir.join("k.cu");
        std::fs::write(
            &cu,
            "__global__ void k(float* p) { p[blockIdx.x] = 1.0f; }\n",
        )
        .unwrap();
        let e = Build::new()
            .file(&cu)
            .nvcc("/no/such/nvcc")
            .out_dir(&dir)
            .compile("k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot run /no/such/nvcc"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn architectures_from_the_option_or_the_default() {
        let mut b = Build::new();
        // The option wins over CUDA_ARCH, so the environment cannot change this test.
        assert_eq!(b.arch("sm_90, 80,compute_90").archs().unwrap(), [80, 90]);
        assert_eq!(b.arch("75").archs().unwrap(), [75]);
        let e = b.arch("sm_9x").archs().unwrap_err().to_string();
        assert!(e.contains("`sm_9x`") && e.contains("Build::arch"), "{e}");
        if std::env::var_os("CUDA_ARCH").is_none() {
            assert_eq!(Build::new().archs().unwrap(), DEFAULT_ARCHS);
        }
    }

    /// nvcc (scripts/test.sh sets CUPREEMPT_NVCC; without it, the test says so and fails) and
    /// a fresh folder for the test named `tag`.
    fn nvcc_and_dir(tag: &str) -> (std::ffi::OsString, PathBuf) {
        let Some(nvcc) = std::env::var_os("CUPREEMPT_NVCC") else {
            panic!("CUPREEMPT_NVCC is not set: this test needs nvcc (scripts/test.sh provides it)");
        };
        let dir =
            std::env::temp_dir().join(format!("cupreempt-build-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        (nvcc, dir)
    }

    /// With nvcc: the module embedded holds machine code for each architecture asked for.
    #[test]
    fn the_module_holds_machine_code_for_each_architecture() {
        let (nvcc, dir) = nvcc_and_dir("sass");
        let cu = dir.join("k.cu");
        std::fs::write(
            &cu,
            "__global__ void k(float* p) { p[blockIdx.x] = 1.0f; }\n",
        )
        .unwrap();
        Build::new()
            .file(&cu)
            .nvcc(nvcc)
            .arch("sm_80,sm_90")
            .out_dir(&dir)
            .compile("k")
            .unwrap_or_else(|e| panic!("{e}"));
        let rs = std::fs::read_to_string(dir.join("k.rs")).unwrap();
        assert!(rs.contains("0-k.fatbin"), "{rs}");
        let image = std::fs::read(dir.join("k.cupreempt/0-k.fatbin")).unwrap();
        let elves = image.windows(4).filter(|w| w == b"\x7fELF").count();
        assert_eq!(elves, 2, "one ELF (machine code) per architecture");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// With nvcc: instances of template kernels asked for get methods with the template's
    /// parameters replaced, and their entries are found in the PTX by demangling.
    #[test]
    fn template_instances_get_launchers() {
        let (nvcc, dir) = nvcc_and_dir("tmpl");
        let cu = dir.join("t.cu");
        std::fs::write(
            &cu,
            "template <class T, unsigned N>\n__global__ void scale(const T* x, T* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] * T(N);\n}\n\
             namespace ns {\ntemplate <typename V> __global__ void fill(V* p, V v) { p[blockIdx.x] = v; }\n}\n\
             template <class T> __global__ void unused(T* p) { p[blockIdx.x] = T(); }\n",
        )
        .unwrap();
        let launchers = Build::new()
            .file(&cu)
            .nvcc(nvcc)
            .arch("sm_90")
            .instantiate("scale<float, 3>")
            .instantiate("scale<double,2u>")
            .instantiate("ns::fill<double>")
            .out_dir(&dir)
            .compile("t")
            .unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(&str, Vec<&str>)> = launchers
            .iter()
            .map(|l| {
                (
                    l.kernel.as_str(),
                    l.params.iter().map(|(_, t)| t.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("scale_float_3", vec!["u64", "u64", "i32"]),
                ("scale_double_2u", vec!["u64", "u64", "i32"]),
                ("fill_double", vec!["u64", "f64"]),
            ]
        );
        assert!(
            launchers[0]
                .entry
                .starts_with("_Z16scale__cupreemptIfLj3EE"),
            "{:?}",
            launchers[0]
        );
        assert!(
            launchers[1]
                .entry
                .starts_with("_Z16scale__cupreemptIdLj2EE"),
            "{:?}",
            launchers[1]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn struct_parameters_take_the_rust_type_given_and_the_ptx_layout() {
        let types = vec![
            ("Params".to_string(), "crate::Params".to_string()),
            ("ns::Box".to_string(), "crate::Bx".to_string()),
        ];
        assert_eq!(
            param_rust_type("const Params p", "p", &types).as_deref(),
            Some("crate::Params")
        );
        assert_eq!(
            param_rust_type("struct Params p", "p", &types).as_deref(),
            Some("crate::Params")
        );
        assert_eq!(
            param_rust_type("ns :: Box b", "b", &types).as_deref(),
            Some("crate::Bx")
        );
        assert_eq!(param_rust_type("const Params& p", "p", &types), None);
        assert_eq!(param_rust_type("Other o", "o", &types), None);
        let ptx = ".visible .entry _Z12k__cupreempt16cupreempt_launch6ParamsPf(\n\t.param .align 8 .b8 _Z12k__cupreempt16cupreempt_launch6ParamsPf_param_0[96],\n\t.param .align 4 .b8 _Z12k__cupreempt16cupreempt_launch6ParamsPf_param_1[12],\n\t.param .u64 .ptr .global .align 4 _Z12k__cupreempt16cupreempt_launch6ParamsPf_param_2,\n\t.param .f32 _Z12k__cupreempt16cupreempt_launch6ParamsPf_param_3\n)\n{\n}\n";
        let entry = "_Z12k__cupreempt16cupreempt_launch6ParamsPf";
        assert_eq!(entry_params(ptx, entry), [(96, 8), (12, 4), (8, 8), (4, 4)]);
        let params = vec![
            ("p".to_string(), "crate::Params".to_string()),
            ("out".to_string(), "u64".to_string()),
            ("v".to_string(), "f32".to_string()),
        ];
        let layouts = struct_layouts(&params, &types, ptx, entry).unwrap();
        assert_eq!(layouts, [("crate::Params".to_string(), 12, 4)]);
        let launcher = Launcher {
            kernel: "k".into(),
            entry: entry.into(),
            params,
            layouts,
            module: 0,
        };
        let rs = generate(
            &[PathBuf::from("k.cu")],
            &[PathBuf::from("/o/k.fatbin")],
            &[launcher],
        );
        assert!(rs.contains("p: crate::Params"), "{rs}");
        assert!(
            rs.contains("::core::mem::size_of::<crate::Params>() == 12 && ::core::mem::align_of::<crate::Params>() == 4"),
            "{rs}"
        );
    }

    #[test]
    fn parameter_types() {
        assert_eq!(rust_type("const float* __restrict__ x", "x"), Some("u64"));
        assert_eq!(rust_type("int n", "n"), Some("i32"));
        assert_eq!(rust_type("const unsigned int n", "n"), Some("u32"));
        assert_eq!(rust_type("size_t bytes", "bytes"), Some("u64"));
        assert_eq!(rust_type("float3 v", "v"), None);
        assert_eq!(rust_type("const Params& p", "p"), None);
    }

    #[test]
    fn launchers_for_plain_kernels_and_reasons_for_the_others() {
        let src = "__global__ void saxpy(int n, float a, const float* x, float* y) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n\
                   namespace ns { __global__ void fill(float* y, float v) { y[blockIdx.x] = v; } }\n\
                   template <class T> __global__ void t(T* p) { p[blockIdx.x] = T(); }\n\
                   struct P { int a; };\n__global__ void s(P p, int* o) { o[blockIdx.x] = p.a; }\n";
        let ptx = ".entry _Z16saxpy__cupreempt16cupreempt_launchifPKfPf(\n.entry _ZN2ns15fill__cupreemptE16cupreempt_launchPff(\n";
        let mut out = Vec::new();
        let skipped = kernels_of(src, ptx, 0, &[], &[], &mut out);
        let names: Vec<&str> = out.iter().map(|l| l.kernel.as_str()).collect();
        assert_eq!(names, ["saxpy", "fill"]);
        assert_eq!(out[0].params.len(), 4);
        assert_eq!(out[0].params[1], ("a".to_string(), "f32".to_string()));
        assert_eq!(
            out[1].entry,
            "_ZN2ns15fill__cupreemptE16cupreempt_launchPff"
        );
        let skipped: Vec<&str> = skipped.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(skipped, ["t", "s"]);
        let rs = generate(
            &[PathBuf::from("k.cu")],
            &[PathBuf::from("/o/0-k.fatbin")],
            &out,
        );
        assert!(rs.contains("pub fn saxpy(&self, rt: &::cupreempt_runtime::rt::Runtime, cfg: &::cupreempt_runtime::rt::LaunchConfig, stream: ::cupreempt_runtime::rt::StreamRef, n: i32, a: f32, x: u64, y: u64)"), "{rs}");
    }
}
