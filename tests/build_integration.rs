//! Build integration without a GPU: the CMake package (`cmake/cupreemptConfig.cmake`) and the
//! compiler launcher build `examples/cmake-project` (four CUDA sources, a template kernel in a
//! header launched from two of them, a kernel declared in a header and launched from a source
//! that does not define it) with CMake and Ninja; the objects of the launching sources hold or
//! name the preemptible wrappers; touching the header rebuilds exactly those two; the Make
//! example builds the same sources; a refused kernel is compiled as written with a warning,
//! and stops the build under CUPREEMPT_STRICT=1. CMake and Ninja come from PyPI with nvcc
//! (scripts/test.sh); without them the test fails, it never passes silently.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tool that scripts/test.sh installs next to nvcc's virtual environment (`bin/NAME`), else
/// PATH.
fn tool(name: &str) -> PathBuf {
    let venv = support::root().join("target/nvcc-venv/bin").join(name);
    if venv.is_file() {
        return venv;
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} not found: run the tests through scripts/test.sh (it installs {name} from PyPI into target/nvcc-venv)")
    })
}

fn run(c: &mut Command, what: &str) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what} failed:\n{text}");
    text
}

/// Sets a file's modification time to now, as an edit would: after the outputs built from it,
/// and not in the future (a time ahead of the rebuilt objects would make them stale again).
fn touch(file: &Path) {
    std::thread::sleep(std::time::Duration::from_millis(50));
    let f = std::fs::File::options().append(true).open(file).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
}

#[test]
fn cmake_ninja_project_builds_through_the_launcher() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (cmake, ninja) = (tool("cmake"), tool("ninja"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("cmake-project");
    // A copy of the project: the test touches its header.
    let project = dir.join("project");
    for rel in [
        "CMakeLists.txt",
        "src/scale.cuh",
        "src/main.cu",
        "src/scale_float.cu",
        "src/scale_double.cu",
        "src/axpy.cuh",
        "src/axpy.cu",
    ] {
        let to = project.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(
            support::root().join("examples/cmake-project").join(rel),
            &to,
        )
        .unwrap();
    }
    let build = dir.join("build");
    run(
        Command::new(&cmake)
            .args(["-G", "Ninja", "-S"])
            .arg(&project)
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_MAKE_PROGRAM={}", ninja.display()))
            .arg(format!("-DCMAKE_CUDA_COMPILER={}", nvcc.display()))
            .arg("-DCMAKE_CUDA_ARCHITECTURES=90")
            .arg(format!(
                "-Dcupreempt_DIR={}",
                support::root().join("cmake").display()
            ))
            .arg(format!("-DCUPREEMPT_EXECUTABLE={}", bin.display())),
        "cmake configure",
    );
    let first = run(
        Command::new(&cmake).arg("--build").arg(&build),
        "cmake --build",
    );
    assert!(build.join("scale_add").is_file(), "{first}");
    let objects = build.join("CMakeFiles/scale_add.dir/src");
    for (src, instance) in [("scale_float", "IfE"), ("scale_double", "IdE")] {
        let obj = objects.join(format!("{src}.cu.o"));
        assert!(
            support::file_contains(&obj, &format!("scale_add__cupreempt{instance}")),
            "{} holds no preemptible wrapper of its scale_add instance",
            obj.display()
        );
        // The depfile Ninja read named the originals, not the private copies.
    }
    // `axpy` is defined in axpy.cu and launched from main.cu, which sees only its declaration:
    // main.cu's object names the wrapper that axpy.cu's object defines.
    for src in ["axpy", "main"] {
        let obj = objects.join(format!("{src}.cu.o"));
        assert!(
            support::file_contains(&obj, "axpy__cupreempt"),
            "{} does not name axpy's preemptible wrapper",
            obj.display()
        );
    }
    let deps = run(
        Command::new(&ninja).arg("-C").arg(&build).args([
            "-t",
            "deps",
            "CMakeFiles/scale_add.dir/src/scale_float.cu.o",
        ]),
        "ninja -t deps",
    );
    let header = project.join("src/scale.cuh").canonicalize().unwrap();
    assert!(
        deps.lines().any(|l| l.trim() == header.to_str().unwrap()),
        "the depfile does not name the original header:\n{deps}"
    );
    assert!(
        !deps.contains(".cupreempt/scale_float-"),
        "the depfile names a private copy:\n{deps}"
    );

    touch(&header);
    let again = run(Command::new(&cmake).arg("--build").arg(&build), "rebuild");
    let rebuilt: Vec<&str> = again
        .lines()
        .filter(|l| l.contains("Building CUDA object"))
        .collect();
    assert_eq!(rebuilt.len(), 2, "touching the header rebuilt:\n{again}");
    assert!(
        rebuilt
            .iter()
            .all(|l| l.contains("scale_float") || l.contains("scale_double")),
        "{again}"
    );
    let idle = run(
        Command::new(&cmake).arg("--build").arg(&build),
        "no-op build",
    );
    assert!(idle.contains("no work to do"), "{idle}");
}

#[test]
fn make_example_builds_through_the_launcher() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let build = support::tempdir("make-project");
    let extra = support::toolkit_flags(&nvcc).join(" ");
    let out = run(
        Command::new("make")
            .arg("-C")
            .arg(support::root().join("examples/make-project"))
            .arg(format!("CUPREEMPT={}", bin.display()))
            .arg(format!("NVCC={}", nvcc.display()))
            .arg(format!("BUILD={}", build.display()))
            .arg(format!("EXTRA={extra}")),
        "make",
    );
    assert!(build.join("scale_add").is_file(), "{out}");
    assert!(support::file_contains(
        &build.join("scale_float.o"),
        "scale_add__cupreemptIfE"
    ));
    let dep = std::fs::read_to_string(build.join("scale_double.d")).unwrap();
    assert!(dep.contains("cmake-project/src/scale.cuh"), "{dep}");
    assert!(!dep.contains(".cupreempt/scale_double-"), "{dep}");
}

#[test]
fn refused_kernels_compile_as_written_unless_strict() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-strict");
    let src = dir.join("refused.cu");
    std::fs::copy(support::root().join("fixtures/grid_sync.cu"), &src).unwrap();
    let compile = |strict: bool| {
        let mut c = Command::new(&bin);
        c.arg(&nvcc)
            .args(["-arch=sm_90", "-std=c++17", "-c"])
            .args(support::toolkit_flags(&nvcc))
            .arg(&src)
            .arg("-o")
            .arg(dir.join("refused.o"))
            .current_dir(&dir);
        if strict {
            c.env("CUPREEMPT_STRICT", "1");
        }
        c.output().expect("cupreempt nvcc")
    };
    let o = compile(false);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    assert!(err.contains("CP002"), "the refusal is reported:\n{err}");
    // The refused kernel is compiled as written; the other one is transformed.
    assert!(support::file_contains(&dir.join("refused.o"), "two_phase"));
    assert!(support::file_contains(
        &dir.join("refused.o"),
        "simple_copy__cupreempt"
    ));
    std::fs::remove_file(dir.join("refused.o")).unwrap();
    let o = compile(true);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !dir.join("refused.o").exists(),
        "nothing compiled under CUPREEMPT_STRICT=1"
    );
}

/// A unit whose transformed copy does not compile is compiled as written, with a warning that
/// quotes nvcc, so that the build never fails where the original builds; under
/// CUPREEMPT_STRICT=1 it fails. A unit that fails as written too fails with its own messages.
/// (The source sees cupreempt's support headers only in the transformed compile, where the
/// launcher puts them on the include path.)
#[test]
fn a_unit_whose_transformed_copy_does_not_compile_is_compiled_as_written() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-as-written");
    let good = dir.join("good.cu");
    std::fs::write(
        &good,
        "__global__ void fill(int* p) { p[blockIdx.x] = 1; }\n\
         #if __has_include(\"cupreempt/launch.cuh\")\n\
         #error \"a transformed compile only\"\n\
         #endif\n",
    )
    .unwrap();
    let bad = dir.join("bad.cu");
    std::fs::write(
        &bad,
        "__global__ void fill(int* p) { p[blockIdx.x] = undeclared_name; }\n",
    )
    .unwrap();
    let compile = |src: &Path, strict: bool| {
        let obj = src.with_extension("o");
        let _ = std::fs::remove_file(&obj);
        let mut c = Command::new(&bin);
        c.arg(&nvcc)
            .args(["-arch=sm_90", "-std=c++17", "-c"])
            .args(support::toolkit_flags(&nvcc))
            .arg(src)
            .arg("-o")
            .arg(&obj)
            .current_dir(&dir);
        if strict {
            c.env("CUPREEMPT_STRICT", "1");
        }
        let o = c.output().expect("cupreempt nvcc");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        (o.status.success(), obj.is_file(), err)
    };
    let (ok, obj, err) = compile(&good, false);
    assert!(ok && obj, "compiled as written:\n{err}");
    assert!(
        err.contains("the transformed source did not compile; compiled as written")
            && err.contains("a transformed compile only"),
        "the warning quotes nvcc:\n{err}"
    );
    assert!(support::file_contains(&dir.join("good.o"), "fill"));
    assert!(
        !support::file_contains(&dir.join("good.o"), "fill__cupreempt"),
        "the object is the original's"
    );
    let (ok, obj, err) = compile(&good, true);
    assert!(!ok && !obj, "fails under CUPREEMPT_STRICT=1:\n{err}");
    assert!(err.contains("a transformed compile only"), "{err}");
    let (ok, _, err) = compile(&bad, false);
    assert!(!ok, "fails as written too:\n{err}");
    assert!(
        err.contains("undeclared_name"),
        "the program's own error:\n{err}"
    );
    assert!(!err.contains("compiled as written"), "{err}");
}

/// A source that is not UTF-8 (a Latin-1 character in a comment) is transformed like any
/// other: its kernel gets its wrappers, and the copy nvcc compiles keeps the byte.
#[test]
fn a_latin1_source_is_transformed_through_the_launcher() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-latin1");
    let src = dir.join("latin1.cu");
    let mut text = b"// caf".to_vec();
    text.push(0xE9);
    text.extend_from_slice(
        b"\n__global__ void scale_l1(float* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] *= 2.0f;\n}\nvoid go(float* p, int n) { scale_l1<<<(n + 255) / 256, 256>>>(p, n); }\n",
    );
    std::fs::write(&src, &text).unwrap();
    let o = Command::new(&bin)
        .arg(&nvcc)
        .args(["-arch=sm_90", "-std=c++17", "-c"])
        .args(support::toolkit_flags(&nvcc))
        .arg(&src)
        .arg("-o")
        .arg(dir.join("latin1.o"))
        .current_dir(&dir)
        .output()
        .expect("cupreempt nvcc");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("not UTF-8"), "{err}");
    assert!(
        support::file_contains(&dir.join("latin1.o"), "scale_l1__cupreempt"),
        "the kernel is transformed:\n{err}"
    );
    assert_eq!(
        std::fs::read(&src).unwrap(),
        text,
        "the source is untouched"
    );
}

/// `-MD` without `-MF`: nvcc names the depfile after the output, and the launcher rewrites that
/// one to name the originals.
#[test]
fn depfile_named_after_the_output_names_the_originals() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-md");
    let src = support::root().join("examples/cmake-project/src/scale_float.cu");
    let o = Command::new(&bin)
        .arg(&nvcc)
        .args(["-arch=sm_90", "-std=c++17", "-MD", "-c"])
        .args(support::toolkit_flags(&nvcc))
        .arg(&src)
        .arg("-o")
        .arg(dir.join("scale_float.o"))
        .output()
        .expect("cupreempt nvcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dep = std::fs::read_to_string(dir.join("scale_float.d")).expect("nvcc wrote OUT.d");
    let header = support::root().join("examples/cmake-project/src/scale.cuh");
    assert!(
        dep.contains(header.canonicalize().unwrap().to_str().unwrap()),
        "{dep}"
    );
    assert!(!dep.contains(".cupreempt/scale_float-"), "{dep}");
}

/// Separate compilation (`-rdc=true -dc`, then a link through nvcc): the launcher transforms at
/// each compile step, adds the runtime at the link, and the program links.
#[test]
fn relocatable_device_code_builds_through_the_launcher() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-rdc");
    let src = support::root().join("examples/cmake-project/src");
    let mut objects = Vec::new();
    for f in ["main", "scale_float", "scale_double", "axpy"] {
        let obj = dir.join(format!("{f}.o"));
        run(
            Command::new(&bin)
                .arg(&nvcc)
                .args(["-arch=sm_90", "-std=c++17", "-rdc=true", "-dc"])
                .args(support::toolkit_flags(&nvcc))
                .arg(src.join(format!("{f}.cu")))
                .arg("-o")
                .arg(&obj),
            f,
        );
        objects.push(obj);
    }
    assert!(support::file_contains(
        &objects[1],
        "scale_add__cupreemptIfE"
    ));
    let app = dir.join("scale_add");
    let out = run(
        Command::new(&bin)
            .arg(&nvcc)
            .args(["-arch=sm_90", "-rdc=true"])
            .args(support::toolkit_flags(&nvcc))
            .args(&objects)
            .arg("-o")
            .arg(&app),
        "link",
    );
    assert!(app.is_file(), "{out}");
}

#[test]
fn a_source_named_only_in_an_options_file_is_transformed() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-optf");
    let src = support::root().join("examples/cmake-project/src/scale_float.cu");
    let obj = dir.join("scale_float.o");
    // As a build system writes one for a long line: the source, its output and flags.
    let optf = dir.join("compile.rsp");
    std::fs::write(
        &optf,
        format!(
            "-arch=sm_90 -std=c++17 -c \"{}\" -o \"{}\"\n",
            src.display(),
            obj.display()
        ),
    )
    .unwrap();
    run(
        Command::new(&bin)
            .arg(&nvcc)
            .args(support::toolkit_flags(&nvcc))
            .arg("--options-file")
            .arg(&optf),
        "compile through an options file",
    );
    assert!(
        support::file_contains(&obj, "scale_add__cupreemptIfE"),
        "the object holds no preemptible wrapper: the source was compiled as written"
    );
}

/// Writes `files` (name, text) into a fresh folder `tag` and compiles its `k.cu` to `k.o`
/// through the launcher: the object and what the launcher printed.
fn launcher_object(tag: &str, files: &[(&str, &str)]) -> (PathBuf, String) {
    launcher_object_with(tag, files, &[])
}

/// `launcher_object` with variables set in the launcher's environment.
fn launcher_object_with(
    tag: &str,
    files: &[(&str, &str)],
    env: &[(&str, &str)],
) -> (PathBuf, String) {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir(tag);
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let obj = dir.join("k.o");
    (obj.clone(), compile_k(&bin, &nvcc, &dir, &obj, env))
}

/// Compiles `dir/k.cu` to `obj` through the launcher; what it printed.
fn compile_k(bin: &Path, nvcc: &Path, dir: &Path, obj: &Path, env: &[(&str, &str)]) -> String {
    run(
        Command::new(bin)
            .envs(env.iter().copied())
            .arg(nvcc)
            .args(["-arch=sm_90", "-std=c++17", "-c"])
            .args(support::toolkit_flags(nvcc))
            .arg(dir.join("k.cu"))
            .arg("-o")
            .arg(obj),
        "compile through the launcher",
    )
}

/// A kernel that calls a helper of a project header that reads blockIdx: the launcher
/// transforms the header's copy too (the helper gets its task-context form), so the kernel is
/// transformed, not refused, and its object holds the wrapper.
#[test]
fn a_kernel_calling_a_block_id_helper_of_a_header_builds_through_the_launcher() {
    let (obj, out) = launcher_object(
        "launcher-header-helper",
        &[
            (
                "ids.cuh",
                "#pragma once\n__device__ inline unsigned global_id() { return blockIdx.x * blockDim.x + threadIdx.x; }\n",
            ),
            (
                "k.cu",
                "#include \"ids.cuh\"\n__global__ void fill(unsigned* out) { out[global_id()] = global_id(); }\n\
                 void run(unsigned* out) { fill<<<64, 128>>>(out); }\n",
            ),
        ],
    );
    assert!(!out.contains("CP008"), "{out}");
    assert!(
        support::file_contains(&obj, "fill__cupreempt"),
        "the object holds no preemptible wrapper:\n{out}"
    );
}

/// A kernel spelled with an execution-space macro (`GLOBAL void fill(...)`, the macro defined in
/// another header) in a header that names no `__global__` itself: the launcher still takes the
/// header, and the kernel launched from the source is transformed.
#[test]
fn a_kernel_spelled_with_a_macro_in_a_header_builds_through_the_launcher() {
    let (obj, out) = launcher_object(
        "launcher-space-macro",
        &[
            (
                "cu.h",
                "#pragma once\n#ifdef __CUDACC__\n#define GLOBAL __global__\n#else\n#define GLOBAL\n#endif\n",
            ),
            (
                "kernels.h",
                "#pragma once\n#include \"cu.h\"\nGLOBAL void fill(unsigned* out) { out[blockIdx.x] = blockIdx.x; }\n",
            ),
            (
                "k.cu",
                "#include \"kernels.h\"\nvoid run(unsigned* out) { fill<<<64, 1>>>(out); }\n",
            ),
        ],
    );
    assert!(!out.contains("CP101"), "{out}");
    assert!(
        support::file_contains(&obj, "fill__cupreempt"),
        "the object holds no preemptible wrapper:\n{out}"
    );
}

/// A unit with no kernel of its own that defines macros named like words of the standard
/// library (`base`) and then includes a file whose kernels are transformed (HeCBench's sw4ck):
/// cupreempt's header, with the standard headers it includes, comes first in the unit as it does
/// in a transformed file, not only where the transformed file includes it, after the macros.
#[test]
fn a_unit_defining_library_words_as_macros_before_a_transformed_include_builds() {
    let (obj, out) = launcher_object(
        "launcher-macros-before-include",
        &[
            (
                "grid.h",
                "#pragma once\n#define ni (last - first + 1)\n#define base (-(first + ni))\n",
            ),
            (
                "kernels.cpp",
                "__global__ void shift(float* a, int first, int last) {\n  a[blockIdx.x * blockDim.x + threadIdx.x + base + ni] += 1.0f;\n}\n\
                 void run(float* a, int first, int last) { shift<<<64, 128>>>(a, first, last); }\n",
            ),
            ("k.cu", "#include \"grid.h\"\n#include \"kernels.cpp\"\n"),
        ],
    );
    assert!(!out.contains("did not compile"), "{out}");
    assert!(
        support::file_contains(&obj, "shift__cupreempt"),
        "the object holds no preemptible wrapper:\n{out}"
    );
}

/// A split unit's wrapper module holds a capped wrapper only for a kernel whose plain wrapper
/// needs more than 32 registers (the module's originals have no body, so their counts are
/// unknown there; the runtime compares them): `sums` keeps one, the one-line `tiny` does not,
/// from ptxas's report of a first module compile; a rebuild compiles the module once.
#[test]
fn a_split_units_module_holds_capped_wrappers_only_above_32_registers() {
    let source = format!(
        "__global__ void tiny(float* p) {{ p[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f; }}\n{}\
         void run(const float* in, float* out, int n, int s) {{ tiny<<<n / 256, 256>>>(out); sums<<<n / 256, 256>>>(in, out, n, s); }}\n",
        thirteen_sums()
    );
    let verbose = [("CUPREEMPT_VERBOSE", "1")];
    let (obj, out) = launcher_object_with("launcher-split-capped", &[("k.cu", &source)], &verbose);
    assert!(
        out.contains("in a module of their own; wrappers held to 32 registers there: sums (2 module compiles;"),
        "the unit was not split, or its module's capped wrappers were not chosen:\n{out}"
    );
    assert!(
        !out.contains("ptxas info"),
        "the module's report was shown:\n{out}"
    );
    // The object embeds the module and its table of names.
    assert!(
        support::file_contains(&obj, "sums__cupreempt_r32"),
        "sums lost its capped wrapper:\n{out}"
    );
    assert!(
        !support::file_contains(&obj, "tiny__cupreempt_r32"),
        "the module kept a capped wrapper of tiny, whose wrapper needs at most 32 registers:\n{out}"
    );
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cupreempt"));
    let out = compile_k(&bin, &nvcc, obj.parent().unwrap(), &obj, &verbose);
    assert!(
        out.contains("wrappers held to 32 registers there: sums (1 module compile;"),
        "a rebuild compiled the module twice:\n{out}"
    );
    assert!(support::file_contains(&obj, "sums__cupreempt_r32"));
}

/// Thirteen running sums: 32 registers as written, 40 in the plain wrapper with nvcc 13.5 for
/// sm_90 (a change to the task loop can move that; the tests that use it then say to pick
/// another count).
fn thirteen_sums() -> String {
    let a: Vec<String> = (0..13).map(|i| format!("a{i}")).collect();
    let loads: String = (0..13)
        .map(|i| format!("    a{i} += in[j + {i} * stride];\n"))
        .collect();
    let muls: String = (0..6)
        .map(|i| format!("    a{i} *= a{};\n", 12 - i))
        .collect();
    format!(
        "__global__ void sums(const float* __restrict__ in, float* __restrict__ out, int n, int stride) {{\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n  float {};\n\
         \x20 for (int j = i; j + 12 * stride < n; j += 13 * stride) {{\n{loads}{muls}  }}\n\
         \x20 out[i] = {};\n}}\n",
        a.iter().map(|v| format!("{v} = 0")).collect::<Vec<_>>().join(", "),
        a.join(" + ")
    )
}

/// The launcher keeps a wrapper held to 32 registers only for a kernel whose original needs at
/// most 32 registers and whose plain wrapper more (the only launches that choose it), reading
/// ptxas's report of a first compile: here thirteen running sums (`thirteen_sums`) get one, a
/// one-line kernel does not;
/// ptxas's report is not shown; a rebuild compiles once, with what the last compile needed.
#[test]
fn only_kernels_that_need_it_get_the_wrapper_held_to_32_registers() {
    let sums = thirteen_sums();
    let source = format!(
        "__global__ void tiny(float* p) {{ p[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f; }}\n{sums}\
         void run(const float* in, float* out, int n, int s) {{ tiny<<<n / 256, 256>>>(out); sums<<<n / 256, 256>>>(in, out, n, s); }}\n"
    );
    // The unit compiled whole, where the choice knows the originals' counts.
    let verbose = [("CUPREEMPT_VERBOSE", "1"), ("CUPREEMPT_SPLIT", "0")];
    let (obj, out) = launcher_object_with("launcher-capped", &[("k.cu", &source)], &verbose);
    assert!(
        !out.contains("ptxas info"),
        "the launcher's own ptxas report was shown:\n{out}"
    );
    assert!(
        out.contains("for sums (ptxas"),
        "a clean build compiles again for sums (unless `sums` is no longer in the band, original at most 32 registers and wrapper more: then change its count of sums):\n{out}"
    );
    assert!(
        support::file_contains(&obj, "sums__cupreempt_r32"),
        "sums lost its capped wrapper:\n{out}"
    );
    assert!(
        support::file_contains(&obj, "tiny__cupreempt"),
        "tiny is not transformed:\n{out}"
    );
    assert!(
        !support::file_contains(&obj, "tiny__cupreempt_r32"),
        "tiny kept a capped wrapper that no launch would choose:\n{out}"
    );
    // A rebuild starts from what the last compile needed: one compile.
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cupreempt"));
    let out = compile_k(&bin, &nvcc, obj.parent().unwrap(), &obj, &verbose);
    assert!(
        out.contains("wrappers held to 32 registers: sums") && !out.contains("compiling again"),
        "a rebuild compiled twice:\n{out}"
    );
    assert!(support::file_contains(&obj, "sums__cupreempt_r32"));
}

/// The launcher puts the source's folder on the search path of quoted includes only: an
/// include line with angle brackets that names a header next to the source fails as it does
/// with nvcc alone (a local `boost/` folder must not stand in for the system's), while a
/// computed quoted include, which the copy cannot redirect, still finds it.
#[test]
fn only_quoted_includes_search_the_sources_folder() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-iquote");
    std::fs::write(dir.join("only_here.h"), "#define ONLY_HERE 3\n").unwrap();
    let kernel = "__global__ void k(int* p) { p[blockIdx.x] = ONLY_HERE; }\nvoid run(int* p) { k<<<4, 1>>>(p); }\n";
    // A system folder with a library whose header includes its neighbour by a quoted name.
    let sys = dir.join("sys/lib");
    std::fs::create_dir_all(&sys).unwrap();
    std::fs::write(sys.join("a.h"), "#include \"lib/b.h\"\n").unwrap();
    std::fs::write(sys.join("b.h"), "#define LIB_B 1\n").unwrap();
    let compile = |name: &str, text: String, launcher: bool| {
        std::fs::write(dir.join(name), text).unwrap();
        let mut c = Command::new(if launcher { &bin } else { &nvcc });
        if launcher {
            c.arg(&nvcc);
        }
        c.args(["-arch=sm_90", "-std=c++17", "-c", "-isystem"])
            .arg(dir.join("sys"))
            .args(support::toolkit_flags(&nvcc))
            .arg(dir.join(name))
            .arg("-o")
            .arg(dir.join(format!("{name}.o")))
            .current_dir(std::env::temp_dir())
            .output()
            .expect("nvcc")
    };
    let angle = format!("#include <only_here.h>\n{kernel}");
    assert!(
        !compile("angle.cu", angle.clone(), false).status.success(),
        "nvcc alone found it"
    );
    let o = compile("angle.cu", angle, true);
    assert!(
        !o.status.success(),
        "through the launcher an angle-bracket include found a header next to the source"
    );
    let computed = format!("#define HEADER \"only_here.h\"\n#include HEADER\n{kernel}");
    let o = compile("computed.cu", computed, true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(support::file_contains(
        &dir.join("computed.cu.o"),
        "k__cupreempt"
    ));
    // A system header's quoted include never searched the source's folder: a partial copy of
    // the library next to the source (HeCBench's interval has a `boost/`) is not read.
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join("lib/b.h"), "#define LIB_B 2\n").unwrap();
    let system = format!(
        "#include <lib/a.h>\nstatic_assert(LIB_B == 1, \"the source's lib/b.h was read\");\n#define ONLY_HERE LIB_B\n{kernel}"
    );
    let o = compile("system.cu", system, true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Run under the name `nvcc` (a link ahead of the real nvcc on PATH, as ccache is used), cupreempt
/// is the launcher for the next nvcc on PATH: a build whose compiler must be one word (a
/// Makefile passing `CC=$(CC)` unquoted to another make) can use it. With no other nvcc on
/// PATH it says so.
/// Flags in nvcc's own `NVCC_APPEND_FLAGS` count for the launcher's decisions: an include
/// folder named only there holds the header that defines the kernel, which the launcher then
/// finds and transforms with the unit (without that, the launch stays plain: no wrapper in the
/// object); and the flags reach nvcc once (a define given twice with different values would
/// warn; here `-DSCALE` must arrive, or the unit does not compile).
#[test]
fn nvcc_environment_flags_count_for_the_launcher() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-environment-flags");
    let inc = dir.join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(
        inc.join("fill.cuh"),
        "__global__ void fill(int* p) { p[blockIdx.x] = SCALE; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "#include \"fill.cuh\"\nvoid run(int* p) { fill<<<4, 1>>>(p); }\n",
    )
    .unwrap();
    let out = run(
        Command::new(&bin)
            .arg(&nvcc)
            .env(
                "NVCC_APPEND_FLAGS",
                format!("-I{} -DSCALE=3", inc.display()),
            )
            .env("CUPREEMPT_SPLIT", "0")
            .args(["-arch=sm_90", "-std=c++17", "-c"])
            .args(support::toolkit_flags(&nvcc))
            .arg(dir.join("k.cu"))
            .arg("-o")
            .arg(dir.join("k.o")),
        "compile with the include folder in NVCC_APPEND_FLAGS",
    );
    assert!(
        support::file_contains(&dir.join("k.o"), "fill__cupreempt"),
        "the header named through NVCC_APPEND_FLAGS was not transformed:\n{out}"
    );
}

#[test]
fn run_as_nvcc_it_launches_the_next_nvcc_on_path() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let nvcc = nvcc.canonicalize().unwrap_or(nvcc);
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-masquerade");
    let front = dir.join("front");
    std::fs::create_dir_all(&front).unwrap();
    let link = front.join("nvcc");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&bin, &link).unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "__global__ void fill(int* p) { p[blockIdx.x] = 1; }\nvoid run(int* p) { fill<<<4, 1>>>(p); }\n",
    )
    .unwrap();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        [front.clone(), nvcc.parent().unwrap().to_path_buf()]
            .into_iter()
            .chain(std::env::split_paths(&rest)),
    )
    .unwrap();
    let out = run(
        Command::new("nvcc")
            .env("PATH", &path)
            .args(["-arch=sm_90", "-std=c++17", "-c"])
            .args(support::toolkit_flags(&nvcc))
            .arg(dir.join("k.cu"))
            .arg("-o")
            .arg(dir.join("k.o")),
        "compile with the link named nvcc",
    );
    assert!(
        support::file_contains(&dir.join("k.o"), "fill__cupreempt"),
        "not transformed:\n{out}"
    );
    let alone = Command::new(&link)
        .env("PATH", &front)
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&alone.stderr).contains("no other nvcc is on PATH"),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
}

/// `__FILE__` in a source and in its headers reads as it does in the original's build (the
/// source as the command names it, a header as the preprocessor finds it), not the copy's
/// path: programs print it in their error messages, and a transformed build must print the
/// same.
#[test]
fn file_names_read_as_in_the_original_build() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-file-names");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::create_dir_all(dir.join("inc")).unwrap();
    std::fs::write(
        dir.join("sub/near.cuh"),
        "inline const char* near_name() { return \"at:\" __FILE__; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("inc/far.h"),
        "inline const char* far_name() { return \"at:\" __FILE__; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("sub/names.cu"),
        "#include \"near.cuh\"\n#include <far.h>\n__global__ void bump(int* p) { p[blockIdx.x] += 1; }\n\
         const char* main_name() { return \"at:\" __FILE__; }\n\
         void go(int* p) { bump<<<4, 1>>>(p); }\n\
         const char* all_names() { return near_name() ? far_name() : main_name(); }\n",
    )
    .unwrap();
    let compile = |launcher: bool, out: &str| {
        let mut c = if launcher {
            let mut c = Command::new(&bin);
            c.arg(&nvcc);
            c
        } else {
            Command::new(&nvcc)
        };
        c.args([
            "-arch=sm_90",
            "-std=c++17",
            "-c",
            "-Iinc",
            "sub/names.cu",
            "-o",
            out,
        ])
        .args(support::toolkit_flags(&nvcc))
        .current_dir(&dir);
        run(&mut c, "compile");
    };
    compile(false, "orig.o");
    compile(true, "launcher.o");
    assert!(
        support::file_contains(&dir.join("launcher.o"), "bump__cupreempt"),
        "the kernel is transformed"
    );
    // A header that begins with a byte order mark: the copy's `#line 1` goes after it (the
    // compiler skips a mark only at a file's very start, as in HeCBench's btree).
    let far = std::fs::read_to_string(dir.join("inc/far.h")).unwrap();
    std::fs::write(dir.join("inc/far.h"), format!("\u{feff}{far}")).unwrap();
    compile(true, "launcher.o");
    for name in ["at:sub/names.cu", "at:sub/near.cuh", "at:inc/far.h"] {
        assert!(
            support::file_contains(&dir.join("orig.o"), name),
            "the original's build names {name}"
        );
        assert!(
            support::file_contains(&dir.join("launcher.o"), name),
            "the launcher's build names {name} as the original's does"
        );
    }
    assert!(!support::file_contains(
        &dir.join("launcher.o"),
        ".cupreempt/"
    ));
}

/// The kernel entry points of an object's device code, as cuobjdump lists them.
fn entries(obj: &Path) -> Vec<String> {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let tool = nvcc.with_file_name("cuobjdump");
    let dump = run(
        Command::new(&tool).arg("--dump-elf-symbols").arg(obj),
        "cuobjdump",
    );
    dump.lines()
        .filter(|l| l.starts_with("FUNC") && l.contains("ENTRY"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// The launcher compiles a unit's wrappers into a module of their own: the object's device
/// code holds the original kernels only (a program's first launch loads no wrapper), and the
/// object carries the wrapper module and the table of mangled names the runtime finds them by.
/// A unit with a module-scope `__constant__` variable stays whole: a second module would hold
/// a copy of it that the program's `cudaMemcpyToSymbol` never fills.
#[test]
fn wrappers_go_to_a_module_of_their_own_unless_the_unit_has_device_variables() {
    let source = "template <typename T>\n__global__ void scale(T* a, T s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= s; }\n\
                  __global__ void fill(unsigned* out) { out[blockIdx.x] = blockIdx.x; }\n\
                  void run(float* a, unsigned* o, int n) { scale<<<n / 256, 256>>>(a, 2.0f, n); fill<<<64, 1>>>(o); }\n";
    let verbose = [("CUPREEMPT_VERBOSE", "1")];
    let (obj, out) = launcher_object_with("launcher-split", &[("k.cu", source)], &verbose);
    assert!(
        out.contains("wrappers of 2 kernels in a module of their own"),
        "{out}"
    );
    let e = entries(&obj);
    assert!(e.contains(&"_Z5scaleIfEvPT_S0_i".to_string()), "{e:?}");
    assert!(e.contains(&"_Z4fillPj".to_string()), "{e:?}");
    assert!(
        !e.iter().any(|n| n.contains("__cupreempt")),
        "the object's module holds a wrapper: {e:?}"
    );
    for wrapper in [
        "_Z16scale__cupreemptIfEv16cupreempt_launchPT_S1_i",
        "_Z15fill__cupreempt16cupreempt_launchPj",
    ] {
        assert!(
            support::file_contains(&obj, wrapper),
            "the object's table does not name {wrapper}:\n{out}"
        );
    }
    // The wrapper module compiles the originals' symbols without their bodies (the object's
    // own module runs them): its `fill` stores nothing, its wrapper does, and so does the
    // object's `fill`.
    let module = walk(obj.parent().unwrap())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "fatbin"))
        .unwrap_or_else(|| panic!("no wrapper module near {}", obj.display()));
    let stores = |file: &Path, function: &str| -> usize {
        let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
        let sass = run(
            Command::new(nvcc.with_file_name("cuobjdump"))
                .args(["-sass", "-fun", function])
                .arg(file),
            "cuobjdump -sass",
        );
        sass.lines().filter(|l| l.contains("STG")).count()
    };
    assert_eq!(
        stores(&module, "_Z4fillPj"),
        0,
        "the module's fill has a body"
    );
    assert!(stores(&module, "_Z15fill__cupreempt16cupreempt_launchPj") > 0);
    assert!(
        stores(&obj, "_Z4fillPj") > 0,
        "the object's fill lost its body"
    );

    // Relocatable device code (CMake's CUDA_SEPARABLE_COMPILATION, the CUDA samples' setting):
    // the wrapper module is compiled without it and loaded alone; the object's relocatable
    // device code holds the originals only.
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let rdc_obj = obj.with_file_name("k-rdc.o");
    let out = run(
        Command::new(&bin)
            .envs(verbose)
            .arg(&nvcc)
            .args(["-arch=sm_90", "-std=c++17", "-rdc=true", "-dc"])
            .args(support::toolkit_flags(&nvcc))
            .arg(obj.with_file_name("k.cu"))
            .arg("-o")
            .arg(&rdc_obj),
        "compile with -rdc=true -dc through the launcher",
    );
    assert!(
        out.contains("wrappers of 2 kernels in a module of their own"),
        "{out}"
    );
    assert!(
        support::file_contains(&rdc_obj, "_Z15fill__cupreempt16cupreempt_launchPj"),
        "{out}"
    );

    let with_constant = format!(
        "__constant__ float coef[4];\n{}",
        source.replace("*= s;", "*= s * coef[0];")
    );
    let (obj, out) = launcher_object_with(
        "launcher-split-constant",
        &[("k.cu", &with_constant)],
        &verbose,
    );
    assert!(
        out.contains("wrappers kept in the unit: module-scope device variables (coef)"),
        "{out}"
    );
    assert!(
        entries(&obj).iter().any(|n| n.contains("fill__cupreempt")),
        "the whole unit's module lacks its wrapper:\n{out}"
    );
    // Found in the preprocessed unit, before the wrapper module's compile (a full device
    // compile): no module was compiled.
    let private = obj.with_file_name("k.o.cupreempt");
    let files = walk(&private);
    assert!(
        !files.is_empty(),
        "no private folder at {}",
        private.display()
    );
    let modules: Vec<_> = files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "fatbin"))
        .collect();
    assert!(
        modules.is_empty(),
        "a wrapper module was compiled: {modules:?}"
    );

    // Immutable tables (const with their values, as ggml's quantization tables) are copied
    // into the wrapper module: the unit is split, and both modules read the same values.
    let with_tables = format!(
        "static const __device__ float gain[4] = {{1.0f, 2.0f, 3.0f, 4.0f}};
         __constant__ const unsigned stride[2] = {{1u, 2u}};
{}",
        source
            .replace("*= s;", "*= s * gain[i % 4];")
            .replace("= blockIdx.x;", "= blockIdx.x * stride[1];")
    );
    let (obj, out) =
        launcher_object_with("launcher-split-tables", &[("k.cu", &with_tables)], &verbose);
    assert!(
        out.contains("wrappers of 2 kernels in a module of their own"),
        "a unit with only immutable tables must be split:\n{out}"
    );
    assert!(
        !entries(&obj).iter().any(|n| n.contains("__cupreempt")),
        "the object's module holds a wrapper:\n{out}"
    );
}

/// A kernel whose static shared memory fills the 48 KB keeps the task loop's state in dynamic
/// shared memory; its wrappers (`K__cupreempt_dyn`) stay in the object where the launcher splits
/// the unit, and the wrapper module's table never names them: a launch that found them there by
/// name would not add the state's bytes. The other kernel's wrapper goes to the module.
#[test]
fn wrappers_that_keep_the_loop_state_in_dynamic_shared_memory_stay_in_the_object() {
    let source = "__global__ void full(int* out) {\n  __shared__ int cells[12 * 1024];\n  cells[threadIdx.x] = threadIdx.x;\n  __syncthreads();\n  out[blockIdx.x * blockDim.x + threadIdx.x] = cells[(threadIdx.x + 1) % blockDim.x];\n}\n\
                  __global__ void fill(unsigned* out) { out[blockIdx.x] = blockIdx.x; }\n\
                  void run(int* a, unsigned* o) { full<<<64, 256>>>(a); fill<<<64, 1>>>(o); }\n";
    let verbose = [("CUPREEMPT_VERBOSE", "1")];
    let (obj, out) = launcher_object_with("launcher-split-dynamic", &[("k.cu", source)], &verbose);
    assert!(
        out.contains("wrappers of 1 kernel in a module of their own"),
        "{out}"
    );
    let e = entries(&obj);
    assert!(
        e.contains(&"_Z19full__cupreempt_dyn16cupreempt_launchPi".to_string()),
        "the object lacks the wrapper that keeps the state in dynamic shared memory: {e:?}"
    );
    assert!(
        !e.iter().any(|n| n.contains("fill__cupreempt")),
        "the object's module holds fill's wrapper: {e:?}"
    );
    let module = walk(obj.parent().unwrap())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "fatbin"))
        .unwrap_or_else(|| panic!("no wrapper module near {}", obj.display()));
    let in_module = entries(&module);
    assert!(
        in_module.iter().any(|n| n.contains("fill__cupreempt")),
        "{in_module:?}"
    );
    assert!(
        !in_module.iter().any(|n| n.contains("full__cupreempt")),
        "the wrapper module holds full's wrappers: {in_module:?}"
    );
}

/// A launch macro whose kernel is one of its parameters (NVIDIA Warp's `wp_launch_device`
/// shape: the kernel and its parenthesized arguments passed in): in a unit the launcher
/// splits, its launches go through the kernel's pointer to the runtime, which finds the
/// wrapper by the kernel's name (`cupreempt::launch_any`); the object holds that launch path.
/// Without it the launch stays as written (CP101) and nothing of it is in the object.
#[test]
fn a_launch_macro_of_a_kernel_parameter_launches_through_the_runtime_in_a_split_unit() {
    let source = "#define LAUNCH_DEVICE(kernel, dim, args) { const int blocks = (dim + 255) / 256; \\\n                  kernel<<<blocks, 256, 0, 0>>>args; }\n                  __global__ void fill(unsigned* out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = i; }\n                  void run(unsigned* o, int n) { LAUNCH_DEVICE(fill, n, (o, n)); }\n";
    let verbose = [("CUPREEMPT_VERBOSE", "1")];
    let (obj, out) = launcher_object_with("launcher-macro-kernel", &[("k.cu", source)], &verbose);
    assert!(
        out.contains("wrappers of 1 kernel in a module of their own"),
        "{out}"
    );
    assert!(
        !out.contains("CP101"),
        "the macro's launch was left:\n{out}"
    );
    let host = std::fs::read(&obj).unwrap();
    let has = |needle: &str| host.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        has("11AnyLauncher") && has("cupreempt_rt_module_wrapper"),
        "the object has no launch through the kernel's pointer:\n{out}"
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Two files each with a `static` kernel of one name and signature (tests/gpu/static_kernels*.cu):
/// the launch code instantiated for one must not be the other's. launch.cuh's templates are
/// instantiated per launch-types struct, and the linker keeps one instance of each external
/// symbol: were the structs of the two `fill`s one name with external linkage, one file's
/// launches would run the other file's kernel. No defined symbol that names `fill`'s launch
/// types may appear in both objects. (gpu-check runs the program.)
#[test]
fn static_kernels_of_two_files_get_launch_code_of_their_own() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-static-kernels");
    let symbols = |f: &str| -> std::collections::BTreeSet<String> {
        let obj = dir.join(format!("{f}.o"));
        run(
            Command::new(&bin)
                .arg(&nvcc)
                .args(["-arch=sm_90", "-std=c++17", "-c"])
                .args(support::toolkit_flags(&nvcc))
                .arg(support::root().join(format!("tests/gpu/{f}.cu")))
                .arg("-o")
                .arg(&obj),
            f,
        );
        let nm = run(Command::new("nm").arg("--defined-only").arg(&obj), "nm");
        nm.lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter(|s| s.contains("fill__cupreempt_kernels"))
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (symbols("static_kernels"), symbols("static_kernels_other"));
    assert!(
        !a.is_empty() && !b.is_empty(),
        "no launch code for fill: {a:?} {b:?}"
    );
    let shared: Vec<_> = a.intersection(&b).collect();
    assert!(
        shared.is_empty(),
        "launch code both files define: {shared:?}"
    );
}

/// A split unit's object and wrapper module compile side by side: the object's compile, with a
/// header that only calls the unit's registration function, runs while the launcher compiles
/// the module, and the host compiler joins a host object holding the module's bytes into the
/// object (`-r`). Linked with a program that stands in for the runtime (it exports the
/// registration and `cupreempt_rt_plan`, by which the object's lookup knows a runtime in the
/// program: runtime_library.h), the object registers its module before `main` with the same
/// table whether compiled side by
/// side, one after the other (`CUPREEMPT_SIDE_BY_SIDE=0`), or compiled again after a join that
/// failed (a host compiler that refuses `-r`).
#[test]
fn a_split_units_object_and_module_compile_side_by_side() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = support::cupreempt_and_runtime();
    let dir = support::tempdir("launcher-side-by-side");
    std::fs::write(
        dir.join("k.cu"),
        "__global__ void fill(unsigned* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x; }\n\
         void run(unsigned* o) { fill<<<64, 128>>>(o); }\n",
    )
    .unwrap();
    // Records what the object registers; the program's own definition, not the runtime's.
    std::fs::write(
        dir.join("main.cpp"),
        "#include <cstdio>\n#include <cstring>\n\
         static unsigned seen_n; static const char* const* seen_names; static unsigned magic;\n\
         extern \"C\" int cupreempt_rt_register_wrapper_module(const void* image, const char* const* names, unsigned n) {\n\
           seen_n = n; seen_names = names; std::memcpy(&magic, image, 4); return 7; }\n\
         extern \"C\" int cupreempt_rt_plan() { return 0; }\n\
         int main() { std::printf(\"registered %u magic %x\", seen_n, magic);\n\
           for (unsigned i = 0; i < 3 * seen_n; ++i) std::printf(\" [%s]\", seen_names[i]);\n\
           std::printf(\"\\n\"); return 0; }\n",
    )
    .unwrap();
    // A host compiler that refuses relocatable links, and otherwise is g++.
    let refusing = dir.join("refusing-g++");
    std::fs::write(
        &refusing,
        "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -r ] && { echo 'no -r here' >&2; exit 1; }; done\nexec g++ \"$@\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&refusing, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let build = |tag: &str, env: &[(&str, &str)], extra: &[&str]| -> (String, String) {
        let obj = dir.join(format!("k-{tag}.o"));
        let said = run(
            Command::new(&bin)
                .env("CUPREEMPT_VERBOSE", "1")
                .envs(env.iter().copied())
                .arg(&nvcc)
                .args(["-arch=sm_90", "-std=c++17", "-c"])
                .args(extra)
                .args(support::toolkit_flags(&nvcc))
                .arg(dir.join("k.cu"))
                .arg("-o")
                .arg(&obj),
            "compile through the launcher",
        );
        let prog = dir.join(format!("prog-{tag}"));
        run(
            Command::new(&nvcc)
                .args(extra)
                .arg(dir.join("main.cpp"))
                .arg(&obj)
                .arg("-o")
                .arg(&prog)
                .arg("-Xlinker=--export-dynamic"),
            "link the program",
        );
        (said, run(&mut Command::new(&prog), "run the program"))
    };
    let want = "registered 1 magic ba55ed50 [_Z4fillPj] [_Z15fill__cupreempt16cupreempt_launchPj]";
    let (said, side) = build("side", &[], &[]);
    assert!(
        said.contains("(1 module compile; the object compiled side by side)"),
        "{said}"
    );
    assert!(side.starts_with(want), "{side}");
    let (said, after) = build("after", &[("CUPREEMPT_SIDE_BY_SIDE", "0")], &[]);
    assert!(said.contains("; the object compiled after it)"), "{said}");
    assert_eq!(after, side);
    let ccbin = format!("-ccbin={}", refusing.display());
    let (said, again) = build("again", &[], &[&ccbin]);
    assert!(
        said.contains("could not join the object and the module's")
            && said.contains("; the object compiled again after it)"),
        "{said}"
    );
    assert_eq!(again, side);
}

/// An object compiled through the launcher names no runtime function at link time: a
/// Makefile whose link step is the host compiler's (`g++ -o prog *.o -lcudart`, Rodinia's
/// dwt2d and srad) links it without the runtime, which the program then loads by the path the
/// launcher wrote into the copy's `runtime_path.h` (runtime_library.h). Both a unit whose
/// wrappers are split into a module of their own and one compiled whole (a variable of its own)
/// are checked; before, each left `cupreempt_rt_*` undefined and the link failed.
#[test]
fn objects_link_with_the_host_compiler_without_naming_the_runtime() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let (bin, lib) = support::cupreempt_and_runtime();
    let dir = support::tempdir("host-link");
    let kernel = "__global__ void scale(float* v, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) v[i] *= 2.0f;\n}\n";
    std::fs::write(dir.join("split.cu"), format!("{kernel}void run_split(float* v, int n) {{ scale<<<(n + 255) / 256, 256>>>(v, n); }}\n")).unwrap();
    std::fs::write(
        dir.join("whole.cu"),
        "__device__ int hits;\n__global__ void count(int n) {\n  if (blockIdx.x * blockDim.x + threadIdx.x < n) atomicAdd(&hits, 1);\n}\nvoid run_whole(int n) { count<<<(n + 127) / 128, 128>>>(n); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.cpp"),
        "void run_split(float*, int);\nvoid run_whole(int);\nint main(int argc, char**) { if (argc > 5) { run_split(nullptr, 0); run_whole(0); } return 0; }\n",
    )
    .unwrap();
    let mut objects = Vec::new();
    for unit in ["split", "whole"] {
        let obj = dir.join(format!("{unit}.o"));
        let said = run(
            Command::new(&bin)
                .env("CUPREEMPT_VERBOSE", "1")
                .arg(&nvcc)
                .args(["-arch=sm_90", "-std=c++17", "-c"])
                .args(support::toolkit_flags(&nvcc))
                .arg(dir.join(format!("{unit}.cu")))
                .arg("-o")
                .arg(&obj),
            "compile through the launcher",
        );
        let nm = run(Command::new("nm").arg("-u").arg(&obj), "nm -u");
        assert!(
            !nm.contains("cupreempt_rt_"),
            "{unit}.o names runtime functions at link time:\n{nm}\nlauncher said:\n{said}"
        );
        objects.push(obj);
    }
    // The runtime's path, as the copies' runtime_path.h names it.
    let header = walk(&dir)
        .into_iter()
        .find(|p| p.ends_with("cupreempt/runtime_path.h"))
        .expect("the launcher's runtime_path.h");
    let text = std::fs::read_to_string(&header).unwrap();
    let expected = format!(
        "#define CUPREEMPT_RUNTIME_LIBRARY \"{}\"",
        lib.join("libcupreempt_runtime.so").display()
    );
    assert!(text.contains(&expected), "{}:\n{text}", header.display());
    // The host compiler's link, with the CUDA runtime and without cupreempt's.
    let toolkit_lib = nvcc.parent().and_then(Path::parent).map(|t| t.join("lib"));
    let cudart = toolkit_lib
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libcudart.so"))
        })
        .expect("libcudart.so in the toolkit's lib folder");
    let exe = dir.join("prog");
    run(
        Command::new("g++")
            .arg(dir.join("main.cpp"))
            .args(&objects)
            .arg(&cudart)
            .arg("-o")
            .arg(&exe),
        "link with g++, the runtime not named",
    );
}
