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
        );
        let out = dir.join(format!("{name}.transformed.cu"));
        std::fs::write(&out, &t.output).unwrap();
        let extra = support::nvcc_flags(&src);
        // `// NVCC-CONFIG: -DX ...` lines: more configurations of the file, each compiled
        // with its flags added (a list the preprocessor chooses from, in each of its forms).
        let configs = std::iter::once(String::new()).chain(
            support::directives(&src, "NVCC-CONFIG")
                .into_iter()
                .map(String::from),
        );
        for config in configs {
            for (what, file) in [("original", path.clone()), ("transformed", out.clone())] {
                let o = support::compiles(
                    support::nvcc_compile(&nvcc, &dir.join(format!("{name}.{what}.o")))
                        .args(&extra)
                        .args(config.split_whitespace())
                        .arg(&file),
                    &format!(
                        "{name} ({what}{}{config})",
                        if config.is_empty() { "" } else { ", " }
                    ),
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
        }
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The fixture at `path` transformed and written to `dir/NAME.TAG.transformed.cu`: its source
/// and that file; Err where no kernel was transformed.
fn transformed_fixture(
    path: &std::path::Path,
    dir: &std::path::Path,
    tag: &str,
) -> Result<(String, std::path::PathBuf), String> {
    let src = std::fs::read_to_string(path).unwrap();
    let name = path.file_stem().unwrap().to_string_lossy().to_string();
    let t = cupreempt::transform(&src, &name, &cupreempt::Options::default());
    if t.transformed_count() == 0 {
        return Err(format!("{name}: no kernel transformed"));
    }
    let out = dir.join(format!("{name}.{tag}.transformed.cu"));
    std::fs::write(&out, &t.output).unwrap();
    Ok((src, out))
}

/// Kernels of several shapes compile with looks inside chunks (`-DCUPREEMPT_LOOKS`,
/// docs/transformation.md): barriers between tasks or none, shared memory, 2-D and 3-D grids, a
/// template, a float atomic on shared memory, tensor cores. Default builds leave that code out,
/// so without this test a change to it would first fail on a GPU.
#[test]
fn kernels_compile_with_looks_inside_chunks() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-looks");
    let names = [
        "grid_1d",
        "grid_2d",
        "grid_3d",
        "shared_static",
        "shared_dynamic",
        "shared_float_atomic",
        "syncthreads_count",
        "template_kernel",
        "tensor_core_gemm",
        "reduction_loop_after_return",
    ];
    let paths: Vec<std::path::PathBuf> = names
        .iter()
        .map(|n| support::root().join(format!("fixtures/{n}.cu")))
        .collect();
    let failures = support::parallel(&paths, 2, |path| {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let (src, out) = transformed_fixture(path, &dir, "looks")?;
        let extra = support::nvcc_flags(&src);
        support::compiles(
            support::nvcc_compile(&nvcc, &dir.join(format!("{name}.o")))
                .args(&extra)
                .arg("-DCUPREEMPT_LOOKS")
                .arg(&out),
            &format!("{name} (transformed, CUPREEMPT_LOOKS)"),
        )?;
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Programs that build as C++11 or C++14 (CMake's `CMAKE_CXX_STANDARD 11` passes -std=c++11 to
/// nvcc, as utcs-scea/altis does) compile transformed too: the headers and the generated code
/// use nothing newer (no `if constexpr`, variable templates, `std::*_t` aliases or index
/// sequences). Otherwise the compiler launcher compiles such units as written and their kernels
/// are not preemptible. Kernels of several shapes: class parameters by value (the per-task
/// copy), templates, launches through macros (`launch_any`), the predicated form, dynamic
/// shared memory, a 3-D grid.
#[test]
fn kernels_compile_as_cxx11_and_cxx14() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-cxx11");
    let names = [
        "by_value_param_with_host_destructor",
        "template_kernel",
        "launch_in_macro",
        "launch_in_macro_dispatch",
        "reduction_loop_after_return",
        "shared_dynamic",
        "grid_3d",
        "multiple_kernels",
        "launch_with_null_argument",
        "functor_of_template_parameter",
    ];
    let jobs: Vec<(std::path::PathBuf, &str)> = names
        .iter()
        .flat_map(|n| {
            let p = support::root().join(format!("fixtures/{n}.cu"));
            [(p.clone(), "c++11"), (p, "c++14")]
        })
        .collect();
    let failures = support::parallel(&jobs, 2, |(path, std)| {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let (src, out) = transformed_fixture(path, &dir, std)?;
        let mut warnings = Vec::new();
        for (what, file) in [("original", path.clone()), ("transformed", out)] {
            let o = support::compiles(
                support::nvcc_compile_as(&nvcc, &dir.join(format!("{name}.{std}.{what}.o")), std)
                    .args(support::nvcc_flags(&src))
                    .arg(&file),
                &format!("{name} ({what}, -std={std})"),
            )?;
            warnings.push(warning_messages(&String::from_utf8_lossy(&o.stderr)));
        }
        // A warning of the older dialect (an inline variable, a C++17 attribute) fails a
        // build with -Werror: the transformed unit warns of nothing the original does not.
        let new: Vec<&String> = warnings[1].difference(&warnings[0]).collect();
        if !new.is_empty() {
            return Err(format!(
                "{name} (-std={std}): the transformed unit warns: {new:?}"
            ));
        }
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The text of each warning nvcc or the host compiler printed, without its file and line.
fn warning_messages(stderr: &str) -> std::collections::BTreeSet<String> {
    stderr
        .lines()
        .filter_map(|l| l.find("warning").map(|at| l[at..].trim().to_string()))
        .collect()
}

/// The whole programs that scripts/gpu-check.sh runs on a GPU (tests/gpu/*.cu) compile as
/// written and transformed, so that a GPU run never starts with a program that cannot build.
#[test]
fn gpu_check_programs_compile_as_written_and_transformed() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-gpu-programs");
    let mut programs: Vec<std::path::PathBuf> =
        std::fs::read_dir(support::root().join("tests/gpu"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .collect();
    programs.sort();
    assert!(
        programs.iter().any(|p| p.ends_with("queued_launches.cu")),
        "{programs:?}"
    );
    let failures = support::parallel(&programs, 2, |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        // A program with a header of its own (`NAME.cuh`) is transformed with it, as the
        // compiler launcher transforms a unit's headers: the header's transform makes what
        // the program's kernels call (live copies of synchronizing helpers).
        let header = path.with_extension("cuh");
        let out = if header.exists() {
            let folder = dir.join(&name);
            let o = support::cupreempt(
                &[
                    "transform",
                    "--out-dir",
                    &folder.to_string_lossy(),
                    &path.to_string_lossy(),
                    &header.to_string_lossy(),
                ],
                &dir,
            );
            if !o.status.success() {
                return Err(format!("{name}: {}", support::stderr(&o)));
            }
            let out = folder.join(format!("{name}.cu"));
            if std::fs::read_to_string(&out).map_err(|e| e.to_string())? == src {
                return Err(format!("{name}: no kernel transformed"));
            }
            out
        } else {
            let t = cupreempt::transform(&src, &name, &cupreempt::Options::default());
            if t.output == src {
                return Err(format!("{name}: no kernel transformed"));
            }
            let out = dir.join(format!("{name}.transformed.cu"));
            std::fs::write(&out, &t.output).unwrap();
            out
        };
        for (what, file) in [("original", path.clone()), ("transformed", out)] {
            support::compiles(
                support::nvcc_compile(&nvcc, &dir.join(format!("{name}.{what}.o"))).arg(&file),
                &format!("{name} ({what})"),
            )?;
        }
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The task loop's long division (more than 2^32 tasks) agrees with `/` and `%`, run on the
/// host (it is `__host__ __device__`; no GPU needed).
#[test]
fn wide_task_numbers_split_like_division() {
    runs_on_host(
        "divide",
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
    );
}

/// A block's first adaptive chunk (task_loop.cuh, `first_chunk_size`, run on the host): one
/// task when no time per task is known, else as many as fit the budget and half the fair share,
/// at most 3, never fewer than 1.
#[test]
fn the_first_chunk_fits_the_budget_and_the_fair_share() {
    runs_on_host(
        "first_chunk",
        r#"#include <cstdio>
#include "cupreempt.cuh"
int main() {
  struct Case { unsigned budget, task_ns; unsigned long long total; unsigned blocks, want; };
  const Case cases[] = {
      {20000, 0, 65536, 1056, 1},      // nothing measured
      {20000, 6400, 65536, 1056, 3},   // 3.1 fit
      {20000, 9000, 65536, 1056, 2},   // 2.2 fit
      {20000, 25000, 65536, 1056, 1},  // a task longer than the budget
      {20000, 100, 65536, 1056, 3},    // the cap
      {20000, 100, 4000, 1000, 2},     // half the fair share: 2
      {20000, 100, 1000, 1000, 1},     // fewer tasks than two per block
      {20000, 100, 65536, 0, 1},       // no grid
  };
  int bad = 0;
  for (const Case& c : cases) {
    const unsigned got = cupreempt::first_chunk_size(c.budget, c.task_ns, c.total, c.blocks);
    if (got != c.want)
      std::printf("budget %u task %u total %llu blocks %u: %u, want %u\n", c.budget, c.task_ns,
                  c.total, c.blocks, got, c.want), ++bad;
  }
  return bad;
}
"#,
    );
}

/// Builds `src` (a program with its own `main` that includes cupreempt.cuh) with nvcc and runs
/// it on the host: its exit status must be 0, its output says what went wrong.
fn runs_on_host(name: &str, src: &str) {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir(&format!("nvcc-{name}"));
    let cu = dir.join(format!("{name}.cu"));
    std::fs::write(&cu, src).unwrap();
    let exe = dir.join(name);
    support::compiles(support::nvcc_build(&nvcc, &exe).arg(&cu), name)
        .unwrap_or_else(|e| panic!("{e}"));
    let o = std::process::Command::new(&exe).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `cupreempt::call_functor` (task_loop.cuh) calls a functor's context form where its class has
/// one, and the callable as written where not (a functor without one, a lambda, a function
/// pointer), in C++11 as in C++17: checked by the return types, which differ here.
#[test]
fn call_functor_calls_the_context_form_where_there_is_one() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-call-functor");
    let src = "#include \"cupreempt.cuh\"\n#include <type_traits>\n\
               struct WithCtx {\n  template <class C> __device__ int operator()(C&, int) const { return 1; }\n  __device__ void operator()(int) const {}\n};\n\
               struct Plain { __device__ void operator()(int) const {} };\n\
               __device__ float by_pointer(int) { return 0.0f; }\n\
               __global__ void probe(int x) {\n  cupreempt::NativeCtx cp;\n  const WithCtx w{};\n  Plain p;\n  auto l = [](int) { return 'c'; };\n  auto fp = &by_pointer;\n\
               static_assert(std::is_same<decltype(cupreempt::call_functor(cp, w, x)), int>::value, \"context form\");\n\
               static_assert(std::is_same<decltype(cupreempt::call_functor(cp, p, x)), void>::value, \"as written\");\n\
               static_assert(std::is_same<decltype(cupreempt::call_functor(cp, l, x)), char>::value, \"a lambda\");\n\
               static_assert(std::is_same<decltype(cupreempt::call_functor(cp, fp, x)), float>::value, \"a pointer\");\n\
               cupreempt::call_functor(cp, w, x);\n}\n";
    let cu = dir.join("call_functor.cu");
    std::fs::write(&cu, src).unwrap();
    for std in ["c++11", "c++17"] {
        support::compiles(
            support::nvcc_compile_as(&nvcc, &dir.join(format!("call_functor.{std}.o")), std)
                .arg("-I")
                .arg(support::root().join("cuda_support"))
                .arg(&cu),
            &format!("call_functor.cu (-std={std})"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Launches that know a kernel only by its pointer (`cupreempt::launch_any`, a macro's launch of
/// the kernel its use names) find the launch types of every transformed kernel that is no
/// template: its file registers them with the runtime by the original's address before `main`.
/// A template's instance that no launch site names is not registered. Linked with the runtime
/// and run on the host (no launch, no GPU).
#[test]
fn transformed_kernels_register_their_launch_types_by_address() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-any-registry");
    let src = "#include <cstdio>\n\
               __global__ void plain(int* p) { p[blockIdx.x] = 1; }\n\
               template <class T> __global__ void twice(T* p) { p[blockIdx.x] *= 2; }\n\
               int main() {\n\
                 using namespace cupreempt::detail;\n\
                 const bool plain_found = any_pick_of(reinterpret_cast<AnyFn>(&plain)) ==\n\
                                          &any_pick<plain__cupreempt_kernels>;\n\
                 const bool twice_absent = !any_pick_of(reinterpret_cast<AnyFn>(&twice<int>));\n\
                 std::printf(\"plain %d twice %d\\n\", plain_found, twice_absent);\n\
                 return plain_found && twice_absent ? 0 : 1;\n\
               }\n";
    let t = cupreempt::transform(src, "registry.cu", &cupreempt::Options::default());
    assert_eq!(t.transformed_count(), 2, "{:?}", t.diagnostics);
    let cu = dir.join("registry.cu");
    std::fs::write(&cu, &t.output).unwrap();
    let exe = dir.join("registry");
    // The table is the runtime's: linked as a program links it (`-lcupreempt_runtime`). Its
    // registrations and lookups need no GPU.
    let (_, lib) = support::cupreempt_and_runtime();
    support::compiles(
        support::nvcc_build(&nvcc, &exe)
            .arg(&cu)
            .arg(format!("-L{}", lib.display()))
            .arg("-lcupreempt_runtime")
            .arg(format!("-Xlinker=-rpath,{}", lib.display())),
        "registry",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = std::process::Command::new(&exe).output().unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A kernel launched in one file and defined in another: the launch goes through the wrapper
/// of the defining file when that file was transformed, and the program still links when it
/// was not (the wrappers are declared weak; the launch shim then runs the original).
#[test]
fn a_kernel_defined_in_another_file_links_with_or_without_its_wrappers() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-declared");
    let launch = "__global__ void fill(float* p, int n);\n\
                  void run(float* p, int n) { fill<<<(n + 255) / 256, 256>>>(p, n); }\n\
                  int main() { run(nullptr, 0); return 0; }\n";
    let define = "__global__ void fill(float* p, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = 1.0f;\n}\n";
    let launch_t = transformed(launch, "launch.cu");
    assert!(
        launch_t.contains("cupreempt::launch<fill__cupreempt_kernels>"),
        "{launch_t}"
    );
    std::fs::write(dir.join("define.t.cu"), transformed(define, "define.cu")).unwrap();
    // With the defining file transformed the wrapper is defined (text); without it the
    // program links all the same, the wrapper a weak undefined symbol.
    links_with_or_without_wrappers(
        &nvcc,
        &dir,
        &launch_t,
        define,
        &[],
        "_Z15fill__cupreempt16cupreempt_launchPfi",
        "T",
    );
}

/// The same for a kernel template (declared in the launching file, defined and explicitly
/// instantiated in another, as a quantization library's operators launch its kernels; CUDA 13
/// needs `-static-global-template-stub=false` for that): the launching file declares the
/// wrapper templates weak, and the defining file's transformed instantiations define them.
/// Without the defining file transformed the program still links (a weak undefined instance).
#[test]
fn a_kernel_template_instantiated_in_another_file_links_with_or_without_its_wrappers() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-declared-template");
    let launch = "template <typename T, int F> __global__ void fill(T* p, T v, int n);\n\
                  void run(float* p, int n) { fill<float, 1><<<(n + 255) / 256, 256>>>(p, 2.0f, n); }\n\
                  int main() { run(nullptr, 0); return 0; }\n";
    let define = "template <typename T, int F> __global__ void fill(T* p, T v, int n) {\n\
                  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = v * F;\n}\n\
                  template __global__ void fill<float, 1>(float* p, float v, int n);\n";
    let launch_t = transformed(launch, "launch.cu");
    assert!(
        launch_t.contains("cupreempt::launch<fill__cupreempt_kernels<float, 1>>")
            && launch_t.contains("CUPREEMPT_WEAK fill__cupreempt("),
        "{launch_t}"
    );
    let define_t = transformed(define, "define.cu");
    assert!(
        define_t.contains("template __global__ void fill__cupreempt<float, 1>(cupreempt_launch __cp_launch, float* p, float v, int n);"),
        "{define_t}"
    );
    std::fs::write(dir.join("define.t.cu"), &define_t).unwrap();
    // With the defining file transformed the wrapper is defined (a template instance, weak); without it the
    // program links all the same, the wrapper a weak undefined symbol.
    links_with_or_without_wrappers(
        &nvcc,
        &dir,
        &launch_t,
        define,
        &["-static-global-template-stub=false"],
        "_Z15fill__cupreemptIfLi1EEv16cupreempt_launchPT_S1_i",
        "W",
    );
}

/// The same with the instantiation written in a macro's replacement and the macro used once
/// per instance (`MAKE_FILL(float, 1)`, as the quantization library instantiates its optimizer
/// kernels): the wrappers' instances ride in the replacement, and the launching unit's weak
/// wrapper finds its definition (without it, a weak undefined symbol).
#[test]
fn a_kernel_template_instantiated_in_a_macro_links_with_or_without_its_wrappers() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-macro-instances");
    let launch = "template <typename T, int F> __global__ void fill(T* p, T v, int n);\n\
                  void run(float* p, int n) { fill<float, 1><<<(n + 255) / 256, 256>>>(p, 2.0f, n); }\n\
                  int main() { run(nullptr, 0); return 0; }\n";
    let define = "template <typename T, int F> __global__ void fill(T* p, T v, int n) {\n\
                  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = v * F;\n}\n\
                  #define MAKE_FILL(T, f) \\\n  template __global__ void fill<T, f>(T* p, \\\n    T v, int n);\n\
                  MAKE_FILL(float, 1)\nMAKE_FILL(int, 2)\n";
    let define_t = transformed(define, "define.cu");
    assert!(
        define_t.contains("CUPREEMPT_INSTANCES_fill(template __global__ void fill__cupreempt<T, f>(cupreempt_launch __cp_launch, T* p, \\\n    T v, int n);)"),
        "{define_t}"
    );
    std::fs::write(dir.join("define.t.cu"), &define_t).unwrap();
    links_with_or_without_wrappers(
        &nvcc,
        &dir,
        &transformed(launch, "launch.cu"),
        define,
        &["-static-global-template-stub=false"],
        "_Z15fill__cupreemptIfLi1EEv16cupreempt_launchPT_S1_i",
        "W",
    );
}

/// `launch.cuh`'s kernel-independent launch functions (`launch_values`, `launch_erased`) are
/// each unit's own (internal linkage): they ask for the unit's wrapper module, and an instance
/// shared by two units (the linker's pick among identical ones) made one unit's launches of a
/// `static` kernel run the other unit's kernel of that name and signature (gpu-check's static
/// kernels program, 65,535 wrong elements on the H200).
#[test]
fn the_launch_path_functions_are_each_units_own() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-launch-linkage");
    let src = std::fs::read_to_string(support::root().join("tests/gpu/static_kernels.cu")).unwrap();
    let t = cupreempt::transform(&src, "static_kernels.cu", &cupreempt::Options::default()).output;
    std::fs::write(dir.join("k.cu"), &t).unwrap();
    support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("k.o")).arg(dir.join("k.cu")),
        "static_kernels",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let nm = std::process::Command::new("nm")
        .arg(dir.join("k.o"))
        .output()
        .unwrap_or_else(|e| panic!("nm is needed for this test: {e}"));
    let text = String::from_utf8_lossy(&nm.stdout).to_string();
    let launch: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("launch_values") || l.contains("launch_erased"))
        .collect();
    assert!(
        !launch.is_empty(),
        "no launch function in the object:\n{text}"
    );
    for l in launch {
        // Local code or data (the functions' statics too); `u` (unique global) and upper case
        // (global, weak) are shared across units.
        let kind = l.split_whitespace().rev().nth(1).unwrap_or("");
        assert!(
            ["t", "b", "d", "r"].contains(&kind),
            "not the unit's own: {l}"
        );
    }
}

/// `src` through `cupreempt transform` with the default options, as file `name`.
fn transformed(src: &str, name: &str) -> String {
    cupreempt::transform(src, name, &cupreempt::Options::default()).output
}

/// Compiles `launch` (transformed), `define` as written and `dir/define.t.cu` (its transform,
/// written by the caller) with `flags`, links the launching object with each defining one, and
/// checks the `nm` type of `symbol`: `defined` with the transformed definition, weak undefined
/// (or absent) with the original.
fn links_with_or_without_wrappers(
    nvcc: &std::path::Path,
    dir: &std::path::Path,
    launch: &str,
    define: &str,
    flags: &[&str],
    symbol: &str,
    defined: &str,
) {
    std::fs::write(dir.join("launch.cu"), launch).unwrap();
    std::fs::write(dir.join("define.cu"), define).unwrap();
    let compile = |src: &str, obj: &str| {
        support::compiles(
            support::nvcc_compile(nvcc, &dir.join(obj))
                .arg("-DCUPREEMPT_STANDALONE")
                .args(flags)
                .arg(dir.join(src)),
            src,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    };
    compile("launch.cu", "launch.o");
    compile("define.cu", "define.o");
    compile("define.t.cu", "define.t.o");
    let symbol_in = |exe: &str, def: &str| {
        support::compiles(
            support::nvcc_build(nvcc, &dir.join(exe))
                .args(flags)
                .arg(dir.join("launch.o"))
                .arg(dir.join(def)),
            exe,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let nm = std::process::Command::new("nm")
            .arg(dir.join(exe))
            .output()
            .unwrap_or_else(|e| panic!("nm is needed for this test: {e}"));
        String::from_utf8_lossy(&nm.stdout)
            .lines()
            .find(|l| l.ends_with(symbol))
            .map(|l| l.split_whitespace().rev().nth(1).unwrap_or("").to_string())
    };
    assert_eq!(symbol_in("with", "define.t.o").as_deref(), Some(defined));
    let without = symbol_in("without", "define.o");
    assert!(
        matches!(without.as_deref(), None | Some("w")),
        "{without:?}"
    );
}

/// A transformed file included after the program's own macros (a `main.cu` that defines
/// `#define grid_x Variables[7]` and then includes its kernels' `.cu` file, as a public
/// benchmark does) compiles, in both modes, and the program's macros are back after it: the
/// headers that `cupreempt.cuh` reads would otherwise expand them (a field `grid_x` became
/// `Variables[7]`). Without the shield (cuda_support/cupreempt/shield_begin.h) it fails.
#[test]
fn macros_defined_before_a_transformed_file_do_not_reach_the_headers() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-macros");
    let kernels = "__global__ void scale(float* y, const float* x, int count) {\n\
                   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
                   if (i < count) y[i] = 2.0f * x[i];\n}\n\
                   void run(float* y, const float* x, int count) { scale<<<(count + 127) / 128, 128>>>(y, x, count); }\n";
    let t = cupreempt::transform(kernels, "kernels.cu", &cupreempt::Options::default()).output;
    std::fs::write(dir.join("kernels.cu"), &t).unwrap();
    // Names that the headers use for fields, parameters, locals and template parameters.
    let main = "static float Variables[16];\n\
                #define grid_x Variables[7]\n#define grid_y Variables[8]\n\
                #define first Variables[9]\n#define chunk Variables[10]\n#define L Variables[5]\n\
                #define P 3\n#define tail 4\n#define stop() 5\n#define host \"host\"\n\
                #include \"kernels.cu\"\n\
                static_assert(P == 3, \"the program's macros are back after the include\");\n\
                float use() { return grid_x + L + first + chunk; }\n";
    std::fs::write(dir.join("main.cu"), main).unwrap();
    for mode in [None, Some("-DCUPREEMPT_STANDALONE")] {
        support::compiles(
            support::nvcc_compile(&nvcc, &dir.join("main.o"))
                .args(mode)
                .arg(dir.join("main.cu")),
            &format!("main.cu including a transformed file ({mode:?})"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A device assertion in a transformed kernel that runs as the original prints what the
/// original prints: the file, line and function its `__assertfail` call passes, read from the
/// PTX of both builds, with the nvcc launcher's line directives (`#line N "FILE"`) and with
/// those of a file written in place (`#line N`). Without the body's function-name parameter
/// the function would be `K__cupreempt_body(...)`; without line directives the lines differ.
#[test]
fn assertions_name_the_original_kernel_file_and_line() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-assert");
    let src = "#include <cassert>\n\
               \n\
               __global__ void checked(int* out, int n) {\n\
               \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
               \x20 assert(i < n);\n\
               \x20 out[i] = i;\n\
               }\n\
               \n\
               template <typename T>\n\
               __global__ void checked_t(T* out, int n) {\n\
               \x20 assert(n > 0 && \"n is positive\");\n\
               \x20 out[blockIdx.x] = T(n);\n\
               }\n\
               \n\
               void run(int* a, float* b, int n) {\n\
               \x20 checked<<<n / 128, 128>>>(a, n);\n\
               \x20 checked_t<<<n, 1>>>(b, n);\n\
               }\n";
    // Each build compiles `assert.cu` from its own folder, as a build names its sources.
    let ptx = |folder: &std::path::Path| {
        let out = folder.join("assert.ptx");
        support::compiles(
            support::nvcc_build(&nvcc, &out)
                .current_dir(folder)
                .arg("-ptx")
                .arg("assert.cu"),
            &folder.to_string_lossy(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::read_to_string(out).unwrap()
    };
    std::fs::write(dir.join("assert.cu"), src).unwrap();
    let o = ptx(&dir);
    let o_strings = ptx_strings(&o);
    for want in [
        "void checked(int *, int)",
        "void checked_t(T *, int) [with T = float]",
    ] {
        assert!(
            o_strings.iter().any(|s| s == want),
            "the original's PTX lacks {want:?}: {o_strings:?}"
        );
    }
    let o_lines = assert_lines(&o);
    assert_eq!(o_lines.len(), 2, "{o_lines:?}");
    // `#line N "assert.cu"` (the nvcc launcher's), and `#line N` (a file written in place).
    for keep_name in [false, true] {
        let t = cupreempt::transform(
            src,
            "assert.cu",
            &cupreempt::Options {
                verify: true,
                line_directives: true,
                line_directives_keep_name: keep_name,
                ..cupreempt::Options::default()
            },
        );
        let folder = dir.join(format!("transformed-{keep_name}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("assert.cu"), &t.output).unwrap();
        let tr = ptx(&folder);
        let t_strings = ptx_strings(&tr);
        for s in &o_strings {
            assert!(
                t_strings.contains(s),
                "transformed PTX lacks {s:?}: {t_strings:?}"
            );
        }
        let t_lines = assert_lines(&tr);
        for l in &o_lines {
            assert!(
                t_lines.contains(l),
                "no assertion at line {l} in {t_lines:?}"
            );
        }
    }
}

/// The byte strings a PTX file defines (`.global .align 1 .b8 NAME[N] = {...};`).
fn ptx_strings(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.trim().strip_prefix(".global .align 1 .b8 "))
        .filter_map(|l| l.split_once("= {"))
        .map(|(_, bytes)| {
            let bytes: Vec<u8> = bytes
                .trim_end_matches("};")
                .split(',')
                .filter_map(|b| b.trim().parse().ok())
                .take_while(|&b| b != 0)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .collect()
}

/// The line numbers passed to `__assertfail` (its third parameter), as PTX spells constants.
fn assert_lines(ptx: &str) -> std::collections::BTreeSet<u32> {
    ptx.lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            ["st.param.b32", "[param2+0],", v] => v.trim_end_matches(';').parse().ok(),
            _ => None,
        })
        .collect()
}

/// The persistent wrappers of a kernel that uses no local memory use none either: every
/// benchmark program (fixtures/bench), transformed and compiled to PTX for sm_90, has no
/// `__local_depot` in any wrapper where its original kernels have none. A wrapper that copies
/// its launch parameters to local memory (an array member read at an index the compiler turns
/// into a register) writes them from every thread: 26 MB per launch of 270,000 threads.
#[test]
fn wrappers_use_no_local_memory_where_their_kernels_use_none() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-local");
    let bench = support::root().join("fixtures/bench");
    let mut programs: Vec<std::path::PathBuf> = std::fs::read_dir(&bench)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    programs.sort();
    assert!(programs.len() >= 10, "benchmark programs not found");
    let failures = support::parallel(&programs, 2, |path| {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let src = std::fs::read_to_string(path).unwrap();
        let t = cupreempt::transform(&src, &name, &cupreempt::Options::default());
        let cu = dir.join(format!("{name}.cu"));
        std::fs::write(&cu, &t.output).unwrap();
        let ptx = dir.join(format!("{name}.ptx"));
        support::compiles(
            support::nvcc_build(&nvcc, &ptx)
                .arg(format!("-I{}", bench.display()))
                .arg("-ptx")
                .arg(&cu),
            &name,
        )?;
        let text = std::fs::read_to_string(&ptx).unwrap();
        // (entry name, whether its body has a local depot)
        let entries: Vec<(String, bool)> = text
            .split(".entry ")
            .skip(1)
            .map(|e| {
                let name = e.split(['(', ' ', '\n']).next().unwrap_or("").to_string();
                let body = e.split("\n}\n").next().unwrap_or("");
                (name, body.contains("__local_depot"))
            })
            .collect();
        let wrappers: Vec<&(String, bool)> = entries
            .iter()
            .filter(|(n, _)| n.contains("__cupreempt"))
            .collect();
        if wrappers.is_empty() {
            return Err(format!("{name}: no wrapper in the PTX"));
        }
        if entries
            .iter()
            .any(|(n, l)| *l && !n.contains("__cupreempt"))
        {
            return Ok(()); // an original kernel uses local memory itself
        }
        let local: Vec<&str> = wrappers
            .iter()
            .filter(|(_, l)| *l)
            .map(|(n, _)| n.as_str())
            .collect();
        if local.is_empty() {
            Ok(())
        } else {
            Err(format!("{name}: wrappers with local memory: {local:?}"))
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A kernel with its own `__launch_bounds__(1024, 1)` that needs at most 32 registers as written
/// gets a capped wrapper that needs at most 32 too (its bounds raised to two blocks per SM on
/// sm_90), so that the launch keeps the original's two 1,024-thread blocks per SM; its plain
/// wrapper keeps the bounds as written (fixtures/launch_bounds_raised_in_capped_wrapper.cu).
#[test]
fn a_kernels_own_launch_bounds_are_raised_to_32_registers_in_its_capped_wrapper() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-own-bounds");
    let path = support::root().join("fixtures/launch_bounds_raised_in_capped_wrapper.cu");
    let src = std::fs::read_to_string(&path).unwrap();
    let t = cupreempt::transform(&src, "bounds.cu", &cupreempt::Options::default());
    let cu = dir.join("bounds.cu");
    std::fs::write(&cu, &t.output).unwrap();
    let o = support::compiles(
        support::nvcc_compile(&nvcc, &dir.join("bounds.o"))
            .args(["-O3", "-Xptxas", "-v"])
            .arg(&cu),
        "bounds.cu",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    // Each entry's register count, by the entry's mangled name.
    let mut registers: Vec<(String, u32)> = Vec::new();
    let mut entry = String::new();
    for line in log.lines() {
        if let Some(at) = line.find("Compiling entry function '") {
            entry = line[at + 26..].split('\'').next().unwrap_or("").to_string();
        } else if let Some(at) = line.find("Used ") {
            let n = line[at + 5..]
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok());
            if let Some(n) = n {
                registers.push((entry.clone(), n));
            }
        }
    }
    let of = |suffix: &str| {
        registers
            .iter()
            .find(|(e, _)| e.contains(&format!("scale_rows{suffix}")))
            .map(|(_, n)| *n)
            .unwrap_or_else(|| panic!("no entry scale_rows{suffix}:\n{log}"))
    };
    assert!(
        of("PKf") <= 32,
        "the original needs more than 32 registers:\n{log}"
    );
    assert!(
        of("__cupreempt_r32") <= 32,
        "the capped wrapper needs more than 32:\n{log}"
    );
}

/// With relocatable device code (`-rdc=true`, CMake's CUDA_SEPARABLE_COMPILATION) the task
/// loop's steps are inlined into the wrappers: compiled as separate functions they go through
/// the call ABI there, and the device link gives every wrapper the callees' registers and a
/// stack frame (52 registers and 88 bytes of stack for each wrapper of the CUDA samples'
/// sortingNetworks, against 24-40 and none inlined). The benchmark's bitonic sort (1-D grid)
/// and grid3d (3-D grid, whose task numbers are split) compiled to PTX under -rdc define no
/// function for any step, while the same files without -rdc still call them.
#[test]
fn with_relocatable_device_code_the_task_loop_steps_are_inlined() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("nvcc-rdc");
    let bench = support::root().join("fixtures/bench");
    let steps = [
        "5enter",
        "10next_chunk",
        "5leave",
        "5split",
        "9give_back",
        "13take_leftover",
    ];
    for name in ["bitonic_sort", "grid3d"] {
        let src = std::fs::read_to_string(bench.join(format!("{name}.cu"))).unwrap();
        let t = cupreempt::transform(&src, name, &cupreempt::Options::default());
        let cu = dir.join(format!("{name}.cu"));
        std::fs::write(&cu, &t.output).unwrap();
        let step_functions = |rdc: bool| {
            let ptx = dir.join(format!("{name}-{rdc}.ptx"));
            let mut cmd = support::nvcc_build(&nvcc, &ptx);
            cmd.arg(format!("-I{}", bench.display())).arg("-ptx");
            if rdc {
                cmd.arg("-rdc=true");
            }
            support::compiles(cmd.arg(&cu), name).unwrap_or_else(|e| panic!("{e}"));
            let text = std::fs::read_to_string(&ptx).unwrap();
            text.lines()
                .filter(|l| l.contains(".func") && l.contains("9cupreempt"))
                .filter(|l| steps.iter().any(|s| l.contains(s)))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let with_rdc = step_functions(true);
        assert!(
            with_rdc.is_empty(),
            "{name}: steps compiled as functions under -rdc: {with_rdc:?}"
        );
        assert!(
            !step_functions(false).is_empty(),
            "{name}: without -rdc the steps should stay out of line (the check would test nothing)"
        );
    }
}

/// The lines of each function of `cuobjdump -sass` output: (name, instructions).
fn sass_functions(sass: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in sass.lines() {
        if let Some(name) = line.trim().strip_prefix("Function : ") {
            out.push((name.to_string(), Vec::new()));
        } else if let (Some((_, code)), Some(last)) = (line.split_once("*/"), out.last_mut()) {
            let code = code.trim().trim_end_matches(';').trim();
            if line.trim_start().starts_with("/*") && !code.is_empty() && !code.starts_with("/*") {
                last.1.push(code.to_string());
            }
        }
    }
    out
}

/// Where a compare-and-swap loop that ptxas made for an atomic (`ATOMS.CAST`: a floating-point
/// atomicAdd on shared memory) is followed by a barrier with no reconvergence (`BSYNC`,
/// `WARPSYNC`) in between: the index of the atomic. Each lane leaves such a loop when its own
/// swap succeeds, and the first lane of a warp at an aligned barrier counts for the whole warp.
fn unreconverged_atomics(code: &[String]) -> Vec<usize> {
    let mut bad = Vec::new();
    for (i, ins) in code.iter().enumerate() {
        if !ins.contains("ATOMS.CAST") {
            continue;
        }
        for next in &code[i + 1..] {
            if next.starts_with("BSYNC") || next.starts_with("WARPSYNC") {
                break;
            }
            if next.starts_with("BAR.SYNC") || next.contains(" BAR.SYNC") {
                bad.push(i);
                break;
            }
        }
    }
    bad
}

/// Persistent wrappers of kernels that add floats and doubles atomically in shared memory and
/// then synchronize (fixtures/shared_float_atomic.cu): in the machine code, every lane of a
/// warp is back before the barrier, as in the original kernels. With the task loop's rounds
/// as a loop around the chunk loop, ptxas (nvcc 13.5, sm_90) left the reconvergence out of the
/// wrappers: on the H100 one lane per warp was counted (HeCBench's expdist, 1/32 of its sum).
/// Needs cuobjdump and nvdisasm next to nvcc (scripts/test.sh installs them from PyPI).
#[test]
fn barriers_after_expanded_atomics_wait_for_the_whole_warp() {
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let bin = nvcc.parent().expect("nvcc's folder").to_path_buf();
    let cuobjdump = bin.join("cuobjdump");
    assert!(
        cuobjdump.is_file() && bin.join("nvdisasm").is_file(),
        "cuobjdump and nvdisasm not next to {}: run the tests through scripts/test.sh",
        nvcc.display()
    );
    let dir = support::tempdir("nvcc-atomics");
    let path = support::root().join("fixtures/shared_float_atomic.cu");
    let src = std::fs::read_to_string(&path).unwrap();
    let t = cupreempt::transform(
        &src,
        "shared_float_atomic.cu",
        &cupreempt::Options::default(),
    );
    let cu = dir.join("atomics.cu");
    std::fs::write(&cu, &t.output).unwrap();
    let cubin = dir.join("atomics.cubin");
    support::compiles(
        support::nvcc_build(&nvcc, &cubin)
            .args(["-O3", "-cubin"])
            .arg(&cu),
        "shared_float_atomic (transformed)",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path_var = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let o = std::process::Command::new(&cuobjdump)
        .env("PATH", path_var)
        .arg("-sass")
        .arg(&cubin)
        .output()
        .expect("cuobjdump");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let functions = sass_functions(&String::from_utf8_lossy(&o.stdout));
    let wrappers = functions
        .iter()
        .filter(|(n, code)| {
            n.contains("__cupreempt") && code.iter().any(|c| c.contains("ATOMS.CAST"))
        })
        .count();
    assert!(
        wrappers >= 2,
        "no wrapper with an expanded atomic: {functions:?}"
    );
    let bad: Vec<String> = functions
        .iter()
        .filter_map(|(n, code)| {
            let at = unreconverged_atomics(code);
            (!at.is_empty()).then(|| {
                format!(
                    "{n}: {:?}",
                    at.iter().map(|&i| &code[i]).collect::<Vec<_>>()
                )
            })
        })
        .collect();
    assert!(
        bad.is_empty(),
        "barriers reached before the warp is back together:\n{}",
        bad.join("\n")
    );
}
