//! Wrappers in a module of their own (docs/build.md, "Wrappers in a module of their own").
//!
//! A program's first use of any kernel of a translation unit loads the unit's whole module,
//! and each kernel in it costs that load about 15 µs whatever its code; a transformed unit has
//! up to three kernels for each of the original's (docs/runtime.md, "Module loading"). So the
//! compiler launcher compiles a transformed unit twice: device-only and whole, into a fatbin
//! (the wrapper module), and then the object the program links, with the wrappers only
//! declared (`vocab::SPLIT_UNIT`) and the fatbin and a name table embedded (`header`). The
//! runtime loads the wrapper module when a launch would be preemptible and finds each wrapper
//! by its original's mangled name (runtime/src/rt/wrapper_modules.rs).
//!
//! A unit stays whole where a second module would change what the program computes or where
//! the table cannot be made: a module-scope `__device__`, `__constant__` or `__managed__`
//! variable (the wrapper module would have its own copy, which the program's
//! `cudaMemcpyToSymbol` and its original kernels never see), no machine code to read names
//! from (PTX only), or no tool to read them (`cuobjdump`). Immutable tables are the exception:
//! a variable declared `const` (at its top level) or `constexpr` with an initializer holds
//! the same values in both modules for the program's whole run, so a copy changes nothing
//! (ggml's quantization tables, in a header every one of its files includes).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `cuobjdump --dump-elf-symbols` says of a fatbin's machine code.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Symbols {
    /// Kernel entry points, each once.
    pub entries: Vec<String>,
    /// Variables the module defines (not the string literals of `printf`, `$str...`, nor the
    /// toolchain's own `.nv...`).
    pub variables: Vec<String>,
    /// The fatbin holds machine code (an ELF section) at all.
    pub machine_code: bool,
}

/// Reads `cuobjdump --dump-elf-symbols` output: lines `TYPE BINDING VISIBILITY SECTION [U] NAME`.
pub fn read_symbols(dump: &str) -> Symbols {
    let mut s = Symbols::default();
    for line in dump.lines() {
        if line.trim_start().starts_with("Fatbin elf code") {
            s.machine_code = true;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(&kind), Some(&name)) = (words.first(), words.last()) else {
            continue;
        };
        // Two layouts: `FUNC GLOBAL DEFAULT ENTRY name` (cuobjdump 13.5) and `STT_FUNC
        // STB_GLOBAL STO_ENTRY name` (13.0); an undefined symbol has a `U` before its name.
        let kind = kind.trim_start_matches("STT_");
        let undefined = words[..words.len() - 1].contains(&"U");
        let entry = words.iter().any(|w| *w == "ENTRY" || *w == "STO_ENTRY");
        let list = match kind {
            "FUNC" if entry && !undefined => &mut s.entries,
            "OBJECT" if !undefined && !name.starts_with('$') && !name.starts_with('.') => {
                &mut s.variables
            }
            _ => continue,
        };
        if !list.iter().any(|e| e == name) {
            list.push(name.to_string());
        }
    }
    s
}

/// The wrapper kinds, by the suffix of their names (src/vocab.rs): the plain wrapper and the
/// one held to 32 registers.
const CAPPED_SUFFIX: &str = "__cupreempt_r32";
const PLAIN_SUFFIX: &str = "__cupreempt";
const LAUNCH_FIRST: &str = "(cupreempt_launch";

/// A name as the table compares it: demangled with its parameters (`void ns::k<float>(float*,
/// int)`), or itself where it is not mangled (`extern "C"`).
fn readable(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return Some(name.to_string());
    }
    cpp_demangle::Symbol::new(name.as_bytes())
        .ok()?
        .demangle(&cpp_demangle::DemangleOptions::new())
        .ok()
}

/// A wrapper's readable name turned into its original's, and whether it is the capped one:
/// the suffix off the function's name and the launch parameter off the parameter list. `None`
/// for a name that is no wrapper's.
fn original_of_wrapper(readable: &str) -> Option<(String, bool)> {
    // extern "C": `k__cupreempt`, no parameter list.
    if !readable.contains('(') {
        for (suffix, capped) in [(CAPPED_SUFFIX, true), (PLAIN_SUFFIX, false)] {
            if let Some(o) = readable.strip_suffix(suffix) {
                return Some((o.to_string(), capped));
            }
        }
        return None;
    }
    let open = readable.find(LAUNCH_FIRST)?;
    let after = &readable[open + LAUNCH_FIRST.len()..];
    let params = if let Some(rest) = after.strip_prefix(", ") {
        format!("({rest}")
    } else if after.starts_with(')') {
        format!("({after}")
    } else {
        return None;
    };
    let head = &readable[..open];
    // The function's name ends where its template arguments (if any) begin.
    let name_end = super::capped::template_args_start(head)?;
    let name = &head[..name_end];
    for (suffix, capped) in [(CAPPED_SUFFIX, true), (PLAIN_SUFFIX, false)] {
        if let Some(o) = name.strip_suffix(suffix) {
            return Some((format!("{o}{}{params}", &head[name_end..]), capped));
        }
    }
    None
}

/// One row of the table: an original kernel's mangled name, its wrapper's and its capped
/// wrapper's (empty where there is none).
pub type Row = [String; 3];

/// Pairs each original kernel among `entries` with its wrappers by their demangled names.
/// Originals without a wrapper (kernels the transformer left as written) are left out.
pub fn table(entries: &[String]) -> Vec<Row> {
    let named: Vec<(&String, String)> = entries
        .iter()
        .filter_map(|e| Some((e, readable(e)?)))
        .collect();
    // Each wrapper by (its original's readable name, capped), and the set of wrapper symbols:
    // one pass, so that a module of thousands of kernels pairs them in linear time.
    let mut wrappers: HashMap<(String, bool), &String> = HashMap::new();
    let mut is_wrapper: HashSet<&String> = HashSet::new();
    for (e, r) in &named {
        if let Some((original, capped)) = original_of_wrapper(r) {
            wrappers.entry((original, capped)).or_insert(e);
            is_wrapper.insert(e);
        }
    }
    let mut rows = Vec::new();
    for (e, r) in &named {
        if is_wrapper.contains(e) {
            continue;
        }
        let find = |capped: bool| wrappers.get(&(r.clone(), capped)).map(|w| w.to_string());
        if let Some(plain) = find(false) {
            rows.push([(*e).clone(), plain, find(true).unwrap_or_default()]);
        }
    }
    rows
}

/// Whether a module variable is a constant of the CUDA toolkit: the compiler's unnamed ones,
/// the math library's tables, or an object of its C++ libraries (libcu++, Thrust, CUB: `cuda::`, `thrust::`,
/// `cub::`, behind the `_INTERNAL_...` namespace that internal
/// linkage adds): those declare their namespace-scope device objects constant
/// (`_CCCL_GLOBAL_CONSTANT`: customization-point objects, placeholders, execution policies,
/// `ignore`), so a second copy cannot differ from the first. Every unit that includes
/// `<cuda/std/...>` or Thrust has some.
fn toolkit_constant(name: &str) -> bool {
    // The math library's tables (`__cudart_i2opi_f` for sinf's argument reduction, in
    // nvcc 13.0's headers): `static const`, names the CUDA headers reserve. And the
    // compiler's own unnamed constants (`__unnamed_1`: the function name an `assert` prints,
    // HeCBench's kiss), which no program can name.
    if name.starts_with("__cudart_") || name.starts_with("__unnamed_") {
        return true;
    }
    let Some(readable) = readable(name) else {
        return false;
    };
    let unqualified = match readable.split_once("::") {
        Some((first, rest)) if first.starts_with("_INTERNAL_") => rest,
        _ => &readable,
    };
    ["cuda::", "thrust::", "cub::"]
        .iter()
        .any(|ns| unqualified.starts_with(ns))
}

/// A variable's name without its scopes (`ns::table` → `table`), as the pre-scan reads it.
fn unqualified(symbol: &str) -> String {
    let readable = readable(symbol).unwrap_or_else(|| symbol.to_string());
    readable
        .rsplit("::")
        .next()
        .unwrap_or(&readable)
        .to_string()
}

/// Why a unit stays whole, from what its wrapper module holds; `None` where it can be split.
/// `immutable`: the names the unit's own files declare only as immutable tables
/// (`DeviceVariables::immutable`), whose copies in the wrapper module change nothing.
pub fn stays_whole(s: &Symbols, rows: &[Row], immutable: &[String]) -> Option<String> {
    if !s.machine_code {
        return Some("no machine code in the wrapper module to read kernel names from".into());
    }
    let own: Vec<&str> = s
        .variables
        .iter()
        .map(String::as_str)
        .filter(|v| !toolkit_constant(v) && !immutable.contains(&unqualified(v)))
        .collect();
    if !own.is_empty() {
        return Some(format!(
            "module-scope device variables ({}): a second module would hold copies of them",
            own.join(", ")
        ));
    }
    if rows.is_empty() {
        return Some("no original kernel paired with its wrapper".into());
    }
    None
}

/// The header the linked object is compiled with (host code only): the wrapper module's bytes
/// and its table, registered with the runtime before `main`.
pub fn header_text(image: &[u8], rows: &[Row]) -> String {
    // `cupreempt_wrapper_unit` is declared in both compilation passes: launch.cuh's host
    // templates name it, and the device pass parses them too.
    let mut out = String::from(
        "// Generated by cupreempt's compiler launcher: this unit's wrappers, compiled into a module\n\
         // of their own, and their names (docs/build.md, \"Wrappers in a module of their own\").\n\
         #include \"cupreempt/runtime_library.h\"\n\
         extern \"C\" int cupreempt_rt_register_wrapper_module(const void*, const char* const*, unsigned);\n\
         namespace {\n\
         #if !defined(__CUDA_ARCH__)\n",
    );
    out.push_str(&image_arrays(image, rows));
    out.push_str(&format!(
        "__attribute__((unused)) const int cupreempt_wrapper_unit =\n    \
         {};\n\
         #else\n__attribute__((unused)) const int cupreempt_wrapper_unit = 0;\n#endif\n}}  // namespace\n",
        registration_call(rows.len())
    ));
    out
}

/// The call that registers the module with the runtime, found by name (`runtime_library.h`:
/// the link step may not name the runtime); 0 where there is none, and the unit's launches run
/// their originals.
/// Named directly where runtime_path.h names no library (the launcher found no shared runtime:
/// the link step's static one is then the program's).
fn registration_call(rows: usize) -> String {
    format!(
        "\n#ifdef CUPREEMPT_RUNTIME_LIBRARY\n    \
         [] {{\n      typedef int (*Register)(const void*, const char* const*, unsigned);\n      \
         void* found = cupreempt_runtime_symbol(\"cupreempt_rt_register_wrapper_module\");\n      \
         Register f;\n      __builtin_memcpy(&f, &found, sizeof f);\n      \
         return f ? f(cupreempt_wrapper_image, cupreempt_wrapper_names, {rows}u) : 0;\n    }}()\n\
         #else\n    \
         cupreempt_rt_register_wrapper_module(cupreempt_wrapper_image, cupreempt_wrapper_names, {rows}u)\n\
         #endif\n    "
    )
}

/// The module's bytes as 64-bit words (the host pass parses them quickly) and its table of
/// names: `cupreempt_wrapper_image` and `cupreempt_wrapper_names`.
fn image_arrays(image: &[u8], rows: &[Row]) -> String {
    let mut out =
        String::from("alignas(64) const unsigned long long cupreempt_wrapper_image[] = {\n");
    for (i, chunk) in image.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        out.push_str(&format!("0x{:x},", u64::from_le_bytes(word)));
        out.push(if i % 8 == 7 { '\n' } else { ' ' });
    }
    out.push_str("};\nconst char* const cupreempt_wrapper_names[] = {\n");
    for row in rows {
        for name in row {
            out.push_str(&format!("  \"{name}\",\n"));
        }
    }
    out.push_str("};\n");
    out
}

/// Where the object and the module are compiled side by side (`side_by_side.rs`), the header
/// the object is compiled with: it names the unit's registration function, which a host
/// object of its own defines (`image_source`), so that the object's compile need not wait
/// for the module's bytes.
pub fn declaration_header(function: &str) -> String {
    format!(
        "// Generated by cupreempt's compiler launcher: this unit's wrapper module is registered by\n\
         // {function}, linked into the object with the module's bytes (docs/build.md).\n\
         extern \"C\" int {function}();\n\
         namespace {{\n\
         #if !defined(__CUDA_ARCH__)\n\
         __attribute__((unused)) const int cupreempt_wrapper_unit = {function}();\n\
         #else\n__attribute__((unused)) const int cupreempt_wrapper_unit = 0;\n#endif\n}}  // namespace\n"
    )
}

/// The host source that `declaration_header`'s function comes from: the module's bytes and
/// table, registered once (the first call, from the object's static initializer, before
/// `main`). Hidden: each shared library keeps its own.
pub fn image_source(image: &[u8], rows: &[Row], function: &str) -> String {
    format!(
        "// Generated by cupreempt's compiler launcher (docs/build.md).\n\
         #include \"cupreempt/runtime_library.h\"\n\
         extern \"C\" int cupreempt_rt_register_wrapper_module(const void*, const char* const*, unsigned);\n\
         namespace {{\n{}}}  // namespace\n\
         extern \"C\" __attribute__((visibility(\"hidden\"))) int {function}() {{\n  \
         static const int unit =\n      \
         {};\n  \
         return unit;\n}}\n",
        image_arrays(image, rows),
        registration_call(rows.len())
    )
}

/// Whether a path can be passed to nvcc as an option's value (nvcc splits values at commas).
pub fn passable(path: &Path) -> bool {
    !path.to_string_lossy().contains(',')
}

/// Options the wrapper module's compile leaves out: outputs, depfiles, linking, compile-only,
/// relocatable device code (the wrapper module is loaded alone, never device-linked).
const DROPPED: &[&str] = &[
    "-c",
    "--compile",
    "-dc",
    "--device-c",
    "-MD",
    "-MMD",
    "--generate-dependencies-with-compile",
    "--generate-nonsystem-dependencies-with-compile",
    "-shared",
    "--shared",
    "-lib",
    "--lib",
    "-link",
    "--link",
];
/// The same, with a value.
const DROPPED_WITH_VALUE: &[&str] = &[
    "-o",
    "--output-file",
    "-MF",
    "--dependency-output",
    "-MT",
    "--dependency-target-name",
    "-MQ",
    "-l",
    "--library",
    "-L",
    "--library-path",
    "-Xlinker",
    "--linker-options",
    "-Xnvlink",
    "--nvlink-options",
    "-Xarchive",
    "--archive-options",
    "-odir",
    "--output-directory",
    "-run-args",
    "--run-args",
    "-rdc",
    "--relocatable-device-code",
];

/// The compile command of the wrapper module: the command's own options (architectures,
/// defines, include folders, optimization), its one source, and no output, depfile or link
/// options of its own; `-DCUPREEMPT_WRAPPER_MODULE --fatbin -o FATBIN` is added.
pub fn module_args(args: &[OsString], source: &Path, fatbin: &Path) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        let flag = match a.split_once('=') {
            Some((f, _)) if f.starts_with("--") => f,
            _ => &a,
        };
        let attached = flag.len() < a.len();
        let takes_value = !attached && super::launcher::takes_value(flag);
        let step = if takes_value { 2 } else { 1 };
        // `-lm`, `-L/lib` (attached values); `-lib` and `-link` are in DROPPED anyway.
        let short_link =
            (a.starts_with("-l") || a.starts_with("-L")) && a.len() > 2 && a != "-lineinfo";
        let positional = !a.starts_with('-') && Path::new(a.as_ref()) != source;
        let dropped = DROPPED.contains(&flag)
            || DROPPED_WITH_VALUE.contains(&flag)
            || a.starts_with("-rdc=")
            || short_link
            || positional;
        if !dropped {
            out.extend(args[i..(i + step).min(args.len())].iter().cloned());
        }
        i += step;
    }
    // The original kernels' symbols without their bodies (`vocab::WRAPPER_MODULE`): the
    // object compiles them, and nothing launches them from this module.
    out.push(format!("-D{}", cupreempt::vocab::WRAPPER_MODULE).into());
    out.extend([
        "--fatbin".into(),
        "-o".into(),
        fatbin.as_os_str().to_os_string(),
    ]);
    out
}

/// The module-scope variables of a unit's own files, by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeviceVariables {
    /// Any declaration of the name is not an immutable table: it keeps the unit whole.
    pub mutable: Vec<String>,
    /// Every declaration of the name is `const` at its top level (or `constexpr`) with an
    /// initializer, and not `__managed__`: a copy in the wrapper module changes nothing.
    pub immutable: Vec<String>,
}

/// Whether a variable declaration's head (up to its initializer, attributes removed) declares
/// an object that cannot change: `constexpr`, or `const` after the last `*` (`const float t[4]`,
/// `const int* const p`; not `const int* p`, a pointer that can be changed). Conservative: a
/// `*` inside template arguments counts as a pointer too.
fn immutable_head(head: &str) -> bool {
    cupreempt::lang::has_word(head, "constexpr")
        || cupreempt::lang::has_word(head.rsplit('*').next().unwrap_or(head), "const")
}

/// The name a declaration's head (attributes removed, up to its initializer or `;`) declares,
/// where it declares a variable: a parameter list makes it a function, and so does `operator`
/// (its head may stop at the `=` of `operator+=` before the parameters: radixsort's `uint4`
/// operators, HeCBench).
fn variable_name(decl: &str) -> Option<&str> {
    if decl.contains('(') || cupreempt::lang::has_word(decl, "operator") {
        return None;
    }
    cupreempt::lang::identifiers(decl.split('[').next().unwrap_or(decl)).last()
}

/// The module-scope variables (`__device__`, `__constant__`, `__managed__`) that the files of a
/// preprocessed unit (`nvcc -E`, where those read `__attribute__((device))` and so on) declare
/// outside `excluded` folders (the toolkit's, the system's, cupreempt's own headers): a cheap
/// look, before the wrapper module's compile, at what would keep the unit whole anyway.
/// Conservative both ways: a declaration it misreads as a function (a function-pointer
/// variable) leaves the decision to the compiled module's symbols; one it takes for a variable
/// only keeps the unit whole, unless it reads as an immutable table.
pub fn own_device_variables(preprocessed: &str, excluded: &[PathBuf]) -> DeviceVariables {
    const SPACES: [&str; 3] = [
        "__attribute__((device))",
        "__attribute__((constant))",
        "__attribute__((managed))",
    ];
    let mut names = Vec::new();
    let mut tables = Vec::new();
    let mut own = true;
    let mut pending = String::new();
    // Folders and files compared as the file system resolves them: nvcc names its headers
    // through the path it was run by (`bin/../include`), which may be a link.
    let excluded: Vec<PathBuf> = excluded
        .iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()))
        .collect();
    let mut files: std::collections::HashMap<String, bool> = Default::default();
    for line in preprocessed.lines() {
        // `# 12 "path" flags`: the lines after it come from that file.
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some(path) = rest.split('"').nth(1) {
                own = *files.entry(path.to_string()).or_insert_with(|| {
                    let p = Path::new(path);
                    let resolved = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
                    !path.starts_with('<')
                        && !excluded
                            .iter()
                            .any(|d| resolved.starts_with(d) || p.starts_with(d))
                });
                pending.clear();
                continue;
            }
        }
        if !own {
            continue;
        }
        if pending.is_empty() && !SPACES.iter().any(|s| line.contains(s)) {
            continue;
        }
        pending.push_str(line);
        pending.push(' ');
        // The declaration's head: up to the first `;`, `{` or `=` after the attribute.
        let Some(at) = SPACES.iter().filter_map(|s| pending.find(s)).min() else {
            pending.clear();
            continue;
        };
        let head = &pending[at..];
        let Some(end) = head.find([';', '{', '=']) else {
            if pending.len() > 4096 {
                pending.clear();
            }
            continue;
        };
        let initialized = head[end..].starts_with(['=', '{']);
        let managed = head[..end].contains(SPACES[2]);
        let mut decl = head[..end].to_string();
        for s in SPACES {
            decl = decl.replace(s, " ");
        }
        // The math library's tables and the compiler's constants are no reason either.
        if let Some(name) = variable_name(&decl).filter(|n| !toolkit_constant(n)) {
            // What comes before the attribute counts too (`static const __device__ T t[] = ...`).
            let before = pending[..at].rsplit([';', '}']).next().unwrap_or("");
            let table = initialized && !managed && immutable_head(&format!("{before} {decl}"));
            if table { &mut tables } else { &mut names }.push(name.to_string());
        }
        pending.clear();
    }
    names.sort();
    names.dedup();
    tables.sort();
    tables.dedup();
    // A name declared both ways (two namespaces, or a declaration and a definition) is mutable.
    tables.retain(|t| names.binary_search(t).is_err());
    DeviceVariables {
        mutable: names,
        immutable: tables,
    }
}

/// A unit's wrapper module before its compile: its private folder, its compile's options and
/// the unit's immutable tables (`own_device_variables`).
pub struct ModulePlan {
    pub dir: PathBuf,
    fatbin: PathBuf,
    base: Vec<OsString>,
    immutable: Vec<String>,
}

/// A compiled wrapper module: its bytes, its table, and its capped wrappers (the kernels whose
/// capped wrapper it holds, `None`: every one; and how many compiles that took).
pub struct CompiledModule {
    pub image: Vec<u8>,
    pub rows: Vec<Row>,
    pub capped: (Option<Vec<String>>, usize),
}

/// Plans the wrapper module of `source` (a transformed copy, the command's one source) next to
/// the copies' `root`, or says why the unit stays whole: the unit is only preprocessed (a
/// fraction of a second), and declarations of module-scope variables in files outside
/// `excluded` (`own_device_variables`) keep it whole without the module's compile (a full
/// device compile).
pub fn plan_module(
    nvcc: &Path,
    args: &[OsString],
    source: &Path,
    root: &Path,
    excluded: &[PathBuf],
) -> Result<ModulePlan, String> {
    // Beside the copies' root, and not named with it as a prefix: the launcher maps every path
    // that starts with the root to the original's (depfiles).
    let mut name = std::ffi::OsString::from("wrappers-");
    name.push(root.file_name().unwrap_or_default());
    let dir = root.with_file_name(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !passable(&dir.join("wrappers.h")) {
        return Err("its private folder's path has a comma, which nvcc options cannot pass".into());
    }
    let fatbin = dir.join("wrappers.fatbin");
    let preprocessed = dir.join("unit.i");
    let mut pre_args = module_args(args, source, &fatbin);
    pre_args.truncate(pre_args.len().saturating_sub(3)); // `--fatbin -o FATBIN`
    pre_args.extend(["-E".into(), "-o".into(), preprocessed.clone().into()]);
    let read = Command::new(nvcc)
        .args(&pre_args)
        .output()
        .is_ok_and(|o| o.status.success());
    let mut immutable = Vec::new();
    if let Some(text) = read
        .then(|| std::fs::read_to_string(&preprocessed).ok())
        .flatten()
    {
        let _ = std::fs::remove_file(&preprocessed);
        let vars = own_device_variables(&text, excluded);
        if !vars.mutable.is_empty() {
            return Err(format!(
                "module-scope device variables ({}): a second module would hold copies of them",
                vars.mutable.join(", ")
            ));
        }
        immutable = vars.immutable;
    }
    let base = module_args(args, source, &fatbin);
    Ok(ModulePlan {
        dir,
        fatbin,
        base,
        immutable,
    })
}

impl ModulePlan {
    /// Compiles the module (`choose_capped`: only the capped wrappers a launch could choose,
    /// from ptxas's report), reads its kernels and variables, or says why the unit stays whole.
    pub fn compile(&self, nvcc: &Path, choose_capped: bool) -> Result<CompiledModule, String> {
        let capped = if choose_capped {
            compile_choosing_capped(nvcc, &self.base, &self.dir.join("capped-wrappers"))?
        } else {
            compile_module(nvcc, &self.base).map(|_| (None, 1))?
        };
        let tool =
            cuobjdump(nvcc).ok_or("no cuobjdump next to nvcc or on PATH to read kernel names")?;
        let dump = Command::new(&tool)
            .arg("--dump-elf-symbols")
            .arg(&self.fatbin)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
        if !dump.status.success() {
            return Err(format!(
                "{} could not read the wrapper module",
                tool.display()
            ));
        }
        let symbols = read_symbols(&String::from_utf8_lossy(&dump.stdout));
        let rows = table(&symbols.entries);
        if let Some(why) = stays_whole(&symbols, &rows, &self.immutable) {
            return Err(why);
        }
        let image =
            std::fs::read(&self.fatbin).map_err(|e| format!("{}: {e}", self.fatbin.display()))?;
        Ok(CompiledModule {
            image,
            rows,
            capped,
        })
    }
}

/// Writes the header that embeds a compiled module (`header_text`) into its plan's folder; its
/// path.
pub fn embedding_header(plan: &ModulePlan, module: &CompiledModule) -> Result<PathBuf, String> {
    let header = plan.dir.join("wrappers.h");
    super::launcher::write_if_changed(&header, header_text(&module.image, &module.rows).as_bytes())
        .map_err(|e| format!("{e:#}"))?;
    Ok(header)
}

/// Runs the module's compile (`args`, from `module_args`); its report (nvcc's messages).
fn compile_module(nvcc: &Path, args: &[OsString]) -> Result<String, String> {
    let out = Command::new(nvcc)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nvcc.display()))?;
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!(
            "its wrapper module did not compile: {}",
            report.trim()
        ));
    }
    Ok(report)
}

/// Compiles the module with the capped wrappers that a launch could choose, from ptxas's
/// report: first with those the last compile of this unit needed (`memory`, a file of kernel
/// names; none at first), then again only where the report names a kernel that needs one and
/// did not get it. The module's originals have no body (`module_args`), so their counts say
/// nothing of the object's: every kernel whose plain wrapper needs more than 32 registers
/// keeps its capped one (`capped::choose` reads a bodyless original as at most 32), and the
/// runtime, which knows the original's count, chooses between them. A wrapper within 32
/// registers never needs one, which is most kernels' case: a module without their capped
/// copies costs ptxas much less (utcs-scea/altis's `MaxFlops.cu`, 48 kernels, none above 32:
/// 15 s against 24 s with every capped wrapper; docs/build.md).
/// Returns the kernels whose capped wrapper the module holds (`None`: every one) and the number
/// of compiles.
fn compile_choosing_capped(
    nvcc: &Path,
    base: &[OsString],
    memory: &Path,
) -> Result<(Option<Vec<String>>, usize), String> {
    use super::capped::{choose, Choice};
    use std::collections::BTreeSet;
    let remembered: BTreeSet<String> = std::fs::read_to_string(memory)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let with = |choice: &Choice, report: bool| {
        let mut a = base.to_vec();
        a.extend(choice.defines().into_iter().map(OsString::from));
        if report {
            a.extend(["-Xptxas".into(), "-v".into()]);
        }
        a
    };
    let report = compile_module(nvcc, &with(&Choice::Kernels(remembered.clone()), true))?;
    let choice = choose(&report);
    let _ = match &choice {
        Choice::Kernels(k) if *k == remembered => Ok(()),
        Choice::Kernels(k) => std::fs::write(
            memory,
            k.iter().map(|n| format!("{n}\n")).collect::<String>(),
        ),
        Choice::Unknown => std::fs::remove_file(memory),
    };
    let held = |c: &Choice| match c {
        Choice::Kernels(k) => Some(k.iter().cloned().collect()),
        Choice::Unknown => None,
    };
    match choice {
        Choice::Kernels(k) if k.is_subset(&remembered) => {
            Ok((Some(remembered.into_iter().collect()), 1))
        }
        other => compile_module(nvcc, &with(&other, false)).map(|_| (held(&other), 2)),
    }
}

/// `cuobjdump` of nvcc's toolkit (its `bin` folder), else the first on PATH.
fn cuobjdump(nvcc: &Path) -> Option<PathBuf> {
    let real = super::launcher::which(nvcc).and_then(|p| p.canonicalize().ok());
    real.and_then(|p| p.parent().map(|d| d.join("cuobjdump")))
        .filter(|p| p.is_file())
        .or_else(|| super::launcher::which(Path::new("cuobjdump")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_s_own_device_variables_are_read_from_its_preprocessed_text() {
        let text = "# 1 \"/cuda/include/cuda_runtime.h\" 1\n\
                    static __attribute__((device)) const int __cudart_table[2] = {1, 2};\n\
                    # 2 \"/proj/common.h\" 1\n\
                    static const __attribute__((device)) unsigned long long grid[2] = {1, 2};\n\
                    __attribute__((device)) int f(int x) { return x; }\n\
                    __attribute__((constant))\n float table[4]\n = {1,2,3,4};\n\
                    namespace a { __attribute__((managed)) int m; }\n\
                    __attribute__((global)) void k(int* p) { p[0] = f(1); }\n\
                    template <class T> __attribute__((device)) T twice(T v) { return v + v; }\n\
                    # 3 \"/proj/support/cupreempt/task_loop.cuh\" 1\n\
                    __attribute__((device)) int internal;\n";
        let excluded = [PathBuf::from("/cuda"), PathBuf::from("/proj/support")];
        let vars = own_device_variables(text, &excluded);
        assert_eq!(
            vars.mutable,
            ["m", "table"],
            "functions, kernels and excluded folders' variables are not counted"
        );
        assert_eq!(
            vars.immutable,
            ["grid"],
            "a static const table with its values"
        );
        assert_eq!(
            own_device_variables(
                "# 1 \"/proj/a.cu\"\n__attribute__((device)) int f();\n",
                &[]
            ),
            DeviceVariables::default()
        );
    }

    /// Only what cannot change, and has its values where it is declared, may be copied.
    #[test]
    fn immutable_tables_are_told_from_variables() {
        let vars = own_device_variables(
            "# 1 \"/proj/a.cu\"\n\
             static const __attribute__((device)) float kq[4] = {1, 2, 3, 4};\n\
             __attribute__((constant)) const int kc[2] = {1, 2};\n\
             __attribute__((device)) constexpr int kx = 3;\n\
             __attribute__((device)) const int* const kp = nullptr;\n\
             __attribute__((device)) const int* movable = nullptr;\n\
             __attribute__((constant)) float filled_by_host[16];\n\
             extern __attribute__((device)) const int declared_only;\n\
             __attribute__((managed)) const int managed_one = 1;\n\
             namespace a { __attribute__((device)) const int twice = 1; }\n\
             namespace b { __attribute__((device)) int twice; }\n\
             inline __attribute__((device)) void operator+=(uint4 &a, uint4 b) { a.x += b.x; }\n\
             __attribute__((device)) bool operator==(uint4 a, uint4 b);\n",
            &[],
        );
        assert_eq!(vars.immutable, ["kc", "kp", "kq", "kx"]);
        assert_eq!(
            vars.mutable,
            [
                "declared_only",
                "filled_by_host",
                "managed_one",
                "movable",
                "twice"
            ]
        );
    }

    /// The module's symbols of the immutable tables keep no unit whole; any other does.
    #[test]
    fn a_unit_with_only_immutable_tables_is_split() {
        let mut s = read_symbols(DUMP);
        let rows = table(&s.entries);
        s.variables = vec!["_ZL2kq".into(), "_ZN2ns2kcE".into()];
        let tables = ["kc".to_string(), "kq".to_string()];
        assert!(stays_whole(&s, &rows, &tables).is_none());
        assert!(stays_whole(&s, &rows, &tables[..1])
            .unwrap()
            .contains("_ZL2kq"));
        s.variables.push("counter".into());
        assert!(stays_whole(&s, &rows, &tables).unwrap().contains("counter"));
    }

    /// Shaped as `cuobjdump --dump-elf-symbols` prints a transformed unit (nvcc 13, sm_90).
    const DUMP: &str = "
Fatbin elf code:
================
arch = sm_90
symbols:
OBJECT        LOCAL   DEFAULT    -                                    $str
FUNC          GLOBAL  DEFAULT    ENTRY                                _ZN2ns20scale__cupreempt_r32IdEEv16cupreempt_launchPT_i
OBJECT        WEAK    DEFAULT    -                                 U  .nv.reservedSmem.offset0
FUNC          GLOBAL  DEFAULT    ENTRY                                _ZN2ns16scale__cupreemptIdEEv16cupreempt_launchPT_i
FUNC          GLOBAL  DEFAULT    ENTRY                                _ZN2ns5scaleIdEEvPT_i
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z16byval__cupreempt16cupreempt_launch1PPS0_PKS0_
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z5byval1PPS_PKS_
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z21noargs__cupreempt_r3216cupreempt_launch
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z17noargs__cupreempt16cupreempt_launch
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z6noargsv
FUNC          GLOBAL  DEFAULT    ENTRY                                vadd__cupreempt
FUNC          GLOBAL  DEFAULT    ENTRY                                vadd
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z9untouchedPf
FUNC          GLOBAL  DEFAULT    -                                 U  vprintf

Fatbin ptx code:
================
arch = sm_90
";

    /// cuobjdump 13.0's layout of the same (the H200 machine's toolkit).
    const DUMP_13_0: &str = "
Fatbin elf code:
================
symbols:
STT_OBJECT       STB_WEAK   STV_DEFAULT  U .nv.reservedSmem.offset0
STT_?            STB_WEAK   STO_RESERVED_SHARED   __nv_reservedSMEM_offset_0_alias
STT_?            STB_LOCAL  STV_DEFAULT  U 
STT_FUNC         STB_LOCAL  STV_DEFAULT    $_Z6k__cupreempt16cupreempt_launchPf$_ZN9cupreempt7TaskCtx5splitEyjj
STT_OBJECT       STB_LOCAL  STV_DEFAULT    coef
STT_OBJECT       STB_LOCAL  STV_DEFAULT    $str
STT_FUNC         STB_GLOBAL STO_ENTRY      _Z16k__cupreempt16cupreempt_launchPf
STT_FUNC         STB_GLOBAL STO_ENTRY      _Z1kPf
STT_FUNC         STB_GLOBAL STV_DEFAULT  U vprintf
";

    #[test]
    fn the_older_layout_is_read_too() {
        let s = read_symbols(DUMP_13_0);
        assert!(s.machine_code);
        assert_eq!(
            s.entries,
            ["_Z16k__cupreempt16cupreempt_launchPf", "_Z1kPf"]
        );
        assert_eq!(s.variables, ["coef"]);
    }

    #[test]
    fn entries_and_variables_are_read() {
        let s = read_symbols(DUMP);
        assert!(s.machine_code);
        assert_eq!(s.entries.len(), 11);
        assert!(
            s.variables.is_empty(),
            "string literals and .nv symbols are no variables"
        );
        let v = read_symbols(
            "Fatbin elf code:\nOBJECT        LOCAL   DEFAULT    -                                    counter\n",
        );
        assert_eq!(v.variables, ["counter"]);
        assert!(!read_symbols("Fatbin ptx code:\n").machine_code);
    }

    /// Substitutions renumber when the launch parameter comes first (`S_` → `S0_`): pairing by
    /// demangled names is what finds byval's wrapper.
    #[test]
    fn originals_pair_with_their_wrappers() {
        let rows = table(&read_symbols(DUMP).entries);
        let row = |o: &str| rows.iter().find(|r| r[0] == o).cloned();
        assert_eq!(
            row("_ZN2ns5scaleIdEEvPT_i").unwrap(),
            [
                "_ZN2ns5scaleIdEEvPT_i",
                "_ZN2ns16scale__cupreemptIdEEv16cupreempt_launchPT_i",
                "_ZN2ns20scale__cupreempt_r32IdEEv16cupreempt_launchPT_i"
            ]
        );
        assert_eq!(
            row("_Z5byval1PPS_PKS_").unwrap()[1],
            "_Z16byval__cupreempt16cupreempt_launch1PPS0_PKS0_"
        );
        assert_eq!(
            row("_Z5byval1PPS_PKS_").unwrap()[2],
            "",
            "no capped wrapper"
        );
        assert_eq!(
            row("_Z6noargsv").unwrap()[2],
            "_Z21noargs__cupreempt_r3216cupreempt_launch"
        );
        assert_eq!(row("vadd").unwrap()[1], "vadd__cupreempt");
        assert!(row("_Z9untouchedPf").is_none(), "a kernel left as written");
        assert_eq!(rows.len(), 4);
    }

    #[test]
    fn a_unit_with_device_variables_stays_whole() {
        let mut s = read_symbols(DUMP);
        let rows = table(&s.entries);
        assert!(stays_whole(&s, &rows, &[]).is_none());
        s.variables.push("coef".into());
        assert!(stays_whole(&s, &rows, &[]).unwrap().contains("coef"));
        assert!(stays_whole(&read_symbols("Fatbin ptx code:\n"), &rows, &[]).is_some());
        assert!(stays_whole(&read_symbols(DUMP), &[], &[]).is_some());
    }

    /// libcu++'s and Thrust's constant tag objects (HeCBench's softmax and remap have dozens)
    /// keep no unit whole; a variable of the program's own, in any namespace, does.
    #[test]
    fn the_toolkits_constant_objects_are_no_reason_to_stay_whole() {
        let mut s = read_symbols(DUMP);
        let rows = table(&s.entries);
        s.variables = vec![
            "_ZN37_INTERNAL_24c889cb_7_main_cu_b13f3c704cuda3std3__45__cpo9iter_swapE".into(),
            "_ZN37_INTERNAL_dfec71a7_7_main_cu_9f2940ef6thrust16_V_300500_SM_9008cuda_cub3parE"
                .into(),
        ];
        assert!(toolkit_constant(&s.variables[0]));
        assert!(toolkit_constant(&s.variables[1]));
        assert!(
            stays_whole(&s, &rows, &[]).is_none(),
            "{:?}",
            stays_whole(&s, &rows, &[])
        );
        assert!(
            toolkit_constant("__cudart_i2opi_f"),
            "sinf's table (nvcc 13.0)"
        );
        for own in ["_Z4maskIfE", "_ZN2ns7counterE", "lut", "cudart_table"] {
            assert!(!toolkit_constant(own), "{own}");
        }
        s.variables.push("_ZN2ns7counterE".into());
        assert!(stays_whole(&s, &rows, &[])
            .unwrap()
            .contains("_ZN2ns7counterE"));
    }

    /// The wrapper module's compile keeps the command's own options and its source, and none of
    /// its outputs, depfiles, link inputs or relocatable-device-code options.
    #[test]
    fn the_module_compile_keeps_the_options_and_drops_outputs() {
        let words = "-O3 -rdc=true -dc -x cu src.cu -o x.o -MD -MF x.d -MT x.o -Ifoo other.o -lm \
                     -L/lib -lineinfo --relocatable-device-code=true -rdc true -Xlinker -z \
                     --output-file=y.o -gencode arch=compute_90,code=sm_90 -Xcudafe quiet";
        let args: Vec<OsString> = words.split_whitespace().map(OsString::from).collect();
        let got = module_args(&args, Path::new("src.cu"), Path::new("w.fatbin"));
        let got: Vec<String> = got
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            [
                "-O3",
                "-x",
                "cu",
                "src.cu",
                "-Ifoo",
                "-lineinfo",
                "-gencode",
                "arch=compute_90,code=sm_90",
                "-Xcudafe",
                "quiet",
                "-DCUPREEMPT_WRAPPER_MODULE",
                "--fatbin",
                "-o",
                "w.fatbin"
            ]
        );
    }

    #[test]
    fn the_header_holds_the_image_and_the_table() {
        let h = header_text(
            &[1, 0, 0, 0, 0, 0, 0, 0, 2],
            &table(&read_symbols(DUMP).entries),
        );
        assert!(
            h.contains("0x1, 0x2,"),
            "little-endian words, the last padded"
        );
        assert!(h.contains("\"_Z6noargsv\",\n  \"_Z17noargs__cupreempt16cupreempt_launch\","));
        assert!(h.contains("cupreempt_wrapper_names, 4u)"));
        assert!(h.starts_with("//") && h.contains("#if !defined(__CUDA_ARCH__)"));
        assert!(
            h.contains("const int cupreempt_wrapper_unit = 0;"),
            "declared in the device pass"
        );
    }
}
