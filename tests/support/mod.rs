//! Shared by the integration tests: fixtures, their in-file expectations, nvcc, GPU harnesses.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository: where this test was built, or (for a test binary carried to another
/// machine) $CUPREEMPT_ROOT or the current directory.
pub fn root() -> PathBuf {
    if let Some(r) = std::env::var_os("CUPREEMPT_ROOT") {
        return PathBuf::from(r);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("fixtures").exists() {
        built
    } else {
        std::env::current_dir().expect("current directory")
    }
}

/// Every `fixtures/*.cu` file, sorted.
pub fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures"))
        .expect("fixtures/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu" || x == "cuh"))
        .collect();
    v.sort();
    v
}

/// `// EXPECT: NAME transformed plain|predicated` or `// EXPECT: NAME refused CODE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub kernel: String,
    pub outcome: String,
}

pub fn directives<'a>(src: &'a str, key: &str) -> Vec<&'a str> {
    let tag = format!("// {key}:");
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix(&tag).map(str::trim))
        .collect()
}

/// A fixture's extra nvcc flags (`// NVCC-FLAGS:` lines), one argument per word.
pub fn nvcc_flags(src: &str) -> Vec<String> {
    directives(src, "NVCC-FLAGS")
        .iter()
        .flat_map(|f| f.split_whitespace().map(String::from))
        .collect()
}

pub fn expectations(src: &str) -> Vec<Expect> {
    directives(src, "EXPECT")
        .into_iter()
        .map(|d| {
            let (kernel, outcome) = d
                .split_once(' ')
                .unwrap_or_else(|| panic!("bad EXPECT: {d}"));
            Expect {
                kernel: kernel.to_string(),
                outcome: outcome.trim().to_string(),
            }
        })
        .collect()
}

/// nvcc: $CUPREEMPT_NVCC, else the virtual environment scripts/test.sh makes, else PATH.
pub fn nvcc() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("CUPREEMPT_NVCC") {
        return Ok(PathBuf::from(p));
    }
    let venv = root().join("target/nvcc-venv/lib");
    if let Ok(entries) = std::fs::read_dir(&venv) {
        for e in entries.flatten() {
            let p = e.path().join("site-packages/nvidia/cu13/bin/nvcc");
            if p.exists() {
                return Ok(p);
            }
        }
    }
    if Command::new("nvcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(PathBuf::from("nvcc"));
    }
    Err("nvcc not found: run the tests through scripts/test.sh (it installs nvcc from PyPI into target/nvcc-venv), or set CUPREEMPT_NVCC".into())
}

/// Include flags for the toolkit next to an nvcc from PyPI (harmless elsewhere).
pub fn toolkit_flags(nvcc: &Path) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(bin) = nvcc.parent() {
        let top = bin.parent().unwrap_or(bin);
        if top.join("include").exists() {
            v.push(format!("-I{}", top.join("include").display()));
        }
        if top.join("lib").exists() {
            v.push(format!("-L{}", top.join("lib").display()));
        }
    }
    v
}

/// `nvcc -arch=sm_90 -std=c++17 -o OUT -I cuda_support` plus the toolkit's own flags: builds an
/// executable; callers add flags and the source.
pub fn nvcc_build(nvcc: &Path, out: &Path) -> Command {
    nvcc_build_as(nvcc, out, "c++17")
}

/// [`nvcc_build`] in the C++ dialect `std` (`c++11`, ...).
pub fn nvcc_build_as(nvcc: &Path, out: &Path, std: &str) -> Command {
    let mut c = Command::new(nvcc);
    c.args(["-arch=sm_90", &format!("-std={std}"), "-o"])
        .arg(out)
        .arg(format!("-I{}", root().join("cuda_support").display()))
        .args(toolkit_flags(nvcc));
    c
}

/// [`nvcc_build`] with `-c`: the compile-only command of the nvcc tests.
pub fn nvcc_compile(nvcc: &Path, out: &Path) -> Command {
    nvcc_compile_as(nvcc, out, "c++17")
}

/// [`nvcc_compile`] in the C++ dialect `std`.
pub fn nvcc_compile_as(nvcc: &Path, out: &Path, std: &str) -> Command {
    let mut c = nvcc_build_as(nvcc, out, std);
    c.arg("-c");
    c
}

/// Runs an nvcc command; Err with nvcc's messages when it fails, labelled `label`. Ok holds
/// its output (warnings are on stderr).
pub fn compiles(cmd: &mut Command, label: &str) -> Result<std::process::Output, String> {
    let o = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !o.status.success() {
        return Err(format!(
            "{label} does not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(o)
}

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cupreempt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Runs `f` over `items` on a few threads; returns the failures' messages.
pub fn parallel<T: Sync, F: Fn(&T) -> Result<(), String> + Sync>(
    items: &[T],
    threads: usize,
    f: F,
) -> Vec<String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(item) = items.get(i) else { break };
                if let Err(e) = f(item) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// `// GPU-TEST: kernel<targs><<<dim3(..), dim3(..)[, smem]>>>(args)`.
#[derive(Debug, Clone)]
pub struct GpuSpec {
    pub callee: String,
    pub grid: String,
    pub block: String,
    pub smem: String,
    pub args: Vec<String>,
}

pub fn gpu_specs(src: &str) -> Vec<GpuSpec> {
    directives(src, "GPU-TEST")
        .into_iter()
        .map(parse_spec)
        .collect()
}

fn parse_spec(d: &str) -> GpuSpec {
    let (callee, rest) = d
        .split_once("<<<")
        .unwrap_or_else(|| panic!("bad GPU-TEST: {d}"));
    let (config, args) = rest
        .split_once(">>>")
        .unwrap_or_else(|| panic!("bad GPU-TEST: {d}"));
    let cfg = cupreempt::lang::split_top_level(config);
    let args = args
        .trim()
        .strip_prefix('(')
        .and_then(|a| a.strip_suffix(')'))
        .unwrap_or_else(|| panic!("bad args: {d}"));
    GpuSpec {
        callee: callee.trim().to_string(),
        grid: cfg[0].clone(),
        block: cfg[1].clone(),
        smem: cfg.get(2).cloned().unwrap_or_else(|| "0".into()),
        args: cupreempt::lang::split_top_level(args),
    }
}

fn c_type(t: &str) -> &'static str {
    match t {
        "f32" => "float",
        "f64" => "double",
        "i32" => "int",
        "u32" => "unsigned",
        other => panic!("unknown element type {other}"),
    }
}

impl GpuSpec {
    /// Blocks in the grid (`dim3(a, b, c)` of numbers), the harness's task count.
    pub fn grid_tasks(&self) -> Option<u64> {
        let inner = self.grid.trim().strip_prefix("dim3(")?.strip_suffix(')')?;
        inner
            .split(',')
            .map(|d| d.trim().parse::<u64>().ok())
            .product()
    }

    /// `ns::k<float, 3>` → `ns::k__cupreempt<float, 3>`.
    pub fn wrapper(&self) -> String {
        self.wrapper_of("__cupreempt")
    }

    /// The wrapper with `suffix` after the kernel's name (before its template arguments).
    fn wrapper_of(&self, suffix: &str) -> String {
        match self.callee.find('<') {
            Some(i) => format!("{}{suffix}{}", &self.callee[..i], &self.callee[i..]),
            None => format!("{}{suffix}", self.callee),
        }
    }

    /// The transformation keeps this kernel's loop state in dynamic shared memory
    /// (`vocab::dynamic_wrapper_name`): its wrappers have names of their own, and a launch adds
    /// the state's bytes to the original's and raises the wrapper's limit, as launch.cuh does.
    fn loop_state_dynamic(&self, transformed: &str) -> bool {
        let base = self.callee.split('<').next().unwrap_or(&self.callee);
        let unqualified = base.rsplit("::").next().unwrap_or(base);
        transformed.contains(&format!(" {unqualified}__cupreempt_dyn("))
    }

    /// The persistent wrapper's address for the harness: `&k__cupreempt<T>`, or where that
    /// names an overload set (overloaded kernels, whose launch types are numbered, or a
    /// template launched with its arguments left to deduction) the wrapper of the launch types
    /// the generated selector picks for the launch's arguments, as a rewritten launch does.
    pub fn wrapper_address(&self, transformed: &str, args: &str) -> String {
        let base = self.callee.split('<').next().unwrap_or(&self.callee);
        let overloaded = transformed.contains(&format!("{base}__cupreempt_kernels_0"));
        let deduced = !self.callee.contains('<')
            && transformed.contains(&format!("{base}__cupreempt_select("));
        if overloaded || deduced {
            let targs = &self.callee[base.len()..];
            format!("decltype({base}__cupreempt_select{targs}({args}))::wrapper")
        } else if self.loop_state_dynamic(transformed) {
            format!("&{}", self.wrapper_of("__cupreempt_dyn"))
        } else {
            format!("&{}", self.wrapper())
        }
    }

    /// A main() that checks the transformed kernel against the original (`transformed`: the
    /// transformed file's text, which says how to name the wrapper, `wrapper_address`).
    pub fn harness(
        &self,
        fixture_name: &str,
        transformed_file: &str,
        transformed: &str,
        has_main: bool,
        seed: u32,
    ) -> String {
        let mut decls = String::new();
        let mut names = Vec::new();
        for (i, a) in self.args.iter().enumerate() {
            let name = format!("arg{i}");
            let (kind, val) = a
                .split_once(':')
                .unwrap_or_else(|| panic!("bad argument {a}"));
            match kind {
                "in" | "out" | "inout" => {
                    let (ty, n) = val
                        .strip_suffix(']')
                        .and_then(|v| v.split_once('['))
                        .unwrap_or_else(|| panic!("bad buffer {a}"));
                    let k = match kind {
                        "in" => "In",
                        "out" => "Out",
                        _ => "InOut",
                    };
                    decls.push_str(&format!(
                        "  auto* {name} = h.buffer<{}>({n}, cupreempt_test::{k});\n",
                        c_type(ty)
                    ));
                }
                ty => {
                    let ct = c_type(ty);
                    let v = if val == "rand" {
                        format!("h.random<{ct}>()")
                    } else {
                        val.to_string()
                    };
                    decls.push_str(&format!("  {ct} {name} = {v};\n"));
                }
            }
            names.push(name);
        }
        let args = names.join(", ");
        let sep = if args.is_empty() { "" } else { ", " };
        let (pre, post) = if has_main {
            ("#define main cupreempt_fixture_main\n", "#undef main\n")
        } else {
            ("", "")
        };
        let address = self.wrapper_address(transformed, &args);
        let (wrapper, wsmem) = if self.loop_state_dynamic(transformed) {
            (
                self.wrapper_of("__cupreempt_dyn"),
                format!(
                    "cupreempt::detail::wrapper_smem(smem, CUPREEMPT_LOOP_SHARED_BYTES);\n\
                     \x20 CPT_CHECK(cudaFuncSetAttribute((const void*){address}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wsmem))"
                ),
            )
        } else {
            (self.wrapper(), "smem".to_string())
        };
        format!(
            "// Generated by tests/gpu.rs for fixtures/{fixture_name}\n#define CUPREEMPT_AUDIT\n{pre}#include \"{transformed_file}\"\n{post}#include \"harness.cuh\"\n\n\
             int main() {{\n  cupreempt_test::Harness h(\"{fixture_name}\", {seed}u);\n{decls}\
             \x20 const dim3 grid = {grid}, block = {block};\n  const size_t smem = {smem};\n\
             \x20 const size_t wsmem = {wsmem};\n\
             \x20 auto original = [&](cudaStream_t s) {{ {callee}<<<grid, block, smem, s>>>({args}); }};\n\
             \x20 auto persistent = [&](cupreempt_launch l, dim3 blocks, cudaStream_t s) {{ {wrapper}<<<blocks, block, wsmem, s>>>(l{sep}{args}); }};\n\
             \x20 return h.run(grid, block, wsmem, original, persistent, (const void*){address});\n}}\n",
            grid = self.grid,
            block = self.block,
            smem = self.smem,
            callee = self.callee,
        )
    }
}

/// Runs the `cupreempt` binary in `cwd`, without colours.
pub fn cupreempt(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cupreempt"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .output()
        .expect("run cupreempt")
}

/// Runs the `cupreempt` binary in `cwd` with `input` on its standard input.
#[allow(dead_code)] // not every test file pipes input
pub fn cupreempt_with_stdin(args: &[&str], cwd: &Path, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cupreempt"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run cupreempt");
    // A command that refuses its arguments may exit before it reads its input: the pipe is
    // then closed, which is no error of the test.
    if let Err(e) = child.stdin.take().expect("stdin").write_all(input) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    child.wait_with_output().expect("wait for cupreempt")
}

/// Whether `file` (an object, an executable) holds `needle` anywhere (a symbol's name).
pub fn file_contains(file: &Path, needle: &str) -> bool {
    let bytes = std::fs::read(file).unwrap_or_default();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The cupreempt binary under test and the runtime library next to it (built here: cargo
/// builds a workspace member's shared library only when asked).
pub fn cupreempt_and_runtime() -> (PathBuf, PathBuf) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cupreempt"));
    let dir = bin.parent().expect("target folder").to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["build", "-p", "cupreempt-runtime", "--lib"]);
    if dir.ends_with("release") {
        c.arg("--release");
    }
    let st = c.current_dir(root()).status().expect("cargo build");
    assert!(st.success(), "cargo build -p cupreempt-runtime failed");
    assert!(dir.join("libcupreempt_runtime.so").is_file());
    (bin, dir)
}
