//! Whether a kernel may use shared memory. If it may, the persistent loop keeps a barrier
//! between two tasks of a chunk, so that the next task cannot overwrite shared memory the
//! current one still reads; if it cannot, that barrier is dropped (it costs memory-bound
//! kernels several percent). Conservative: anything this file does not show counts as use.

use super::body::BodyFacts;
use super::callgraph::CallGraph;
use super::HelperPlan;
use crate::lang::text;
use std::ops::Range;

const SHARED: &str = "__shared__";

/// Device functions that never touch shared memory on their own: math, conversions, atomics
/// and intrinsics (`__` names: barriers, shuffles, fences, `__ldg`, ...).
const BUILTINS: &[&str] = &[
    "abs",
    "acos",
    "acosf",
    "asin",
    "asinf",
    "assert",
    "atan",
    "atan2",
    "atan2f",
    "atanf",
    "cbrt",
    "cbrtf",
    "ceil",
    "ceilf",
    "copysign",
    "copysignf",
    "cos",
    "cosf",
    "cosh",
    "coshf",
    "erf",
    "erfc",
    "erfcf",
    "erff",
    "exp",
    "exp10",
    "exp10f",
    "exp2",
    "exp2f",
    "expf",
    "expm1",
    "expm1f",
    "fabs",
    "fabsf",
    "fdivide",
    "fdividef",
    "floor",
    "floorf",
    "fma",
    "fmaf",
    "fmax",
    "fmaxf",
    "fmin",
    "fminf",
    "fmod",
    "fmodf",
    "hypot",
    "hypotf",
    "isfinite",
    "isinf",
    "isnan",
    "llabs",
    "llmax",
    "llmin",
    "log",
    "log10",
    "log10f",
    "log1p",
    "log1pf",
    "log2",
    "log2f",
    "logf",
    "lrint",
    "lrintf",
    "lround",
    "lroundf",
    "max",
    "min",
    "norm3d",
    "norm3df",
    "pow",
    "powf",
    "printf",
    "rcbrt",
    "rcbrtf",
    "rint",
    "rintf",
    "round",
    "roundf",
    "rsqrt",
    "rsqrtf",
    "signbit",
    "sin",
    "sincos",
    "sincosf",
    "sinf",
    "sinh",
    "sinhf",
    "sqrt",
    "sqrtf",
    "tan",
    "tanf",
    "tanh",
    "tanhf",
    "trunc",
    "truncf",
    "ullmax",
    "ullmin",
    "umax",
    "umin",
];

pub(super) fn builtin(name: &str) -> bool {
    name.starts_with("__")
        || name.starts_with("atomic")
        || name.starts_with("make_")
        || BUILTINS.binary_search(&name).is_ok()
}

/// Keywords that a macro's text follows with `(`, which its facts list as calls.
const NOT_CALLS: &[&str] = &[
    "for", "while", "if", "switch", "sizeof", "return", "alignof",
];

/// True when `__shared__` appears in `src` outside every function body in `bodies` (file-scope
/// `extern __shared__` arrays, macros): then any kernel may use it.
pub fn file_scope_shared(src: &str, bodies: &[Range<usize>]) -> bool {
    src.match_indices(SHARED)
        .any(|(at, _)| !bodies.iter().any(|b| b.contains(&at)))
}

/// Whether a kernel whose body has `facts` (text `body`) may use shared memory, looking
/// through the same-file helpers it calls.
pub fn may_use_shared(
    body: &str,
    facts: &BodyFacts,
    helpers: &[HelperPlan],
    graph: &CallGraph,
    src: &str,
) -> bool {
    // A call to a function this file does not define may touch anything. A call to a macro of
    // this file is what its text says (closed over the macros it uses): harmless when it names
    // no `__shared__` and calls nothing but built-ins (a grid-stride loop head, `MAX(a, b)`).
    let harmless_macro = |f: &BodyFacts, name: &str| {
        f.macro_uses
            .iter()
            .find(|m| m.name == name)
            .is_some_and(|m| {
                !m.facts.shared
                    && m.facts
                        .calls
                        .iter()
                        .all(|c| builtin(c) || NOT_CALLS.contains(&c.as_str()))
            })
    };
    let unknown_call = |f: &BodyFacts| {
        f.calls.iter().any(|c| {
            !graph.by_name.contains_key(&c.name) && !builtin(&c.name) && !harmless_macro(f, &c.name)
        })
    };
    // Inline PTX may name shared memory itself (`ld.shared`, `mbarrier.init.shared`).
    let names_shared = |text: &str| text.contains(SHARED) || text.contains(".shared");
    names_shared(body)
        || unknown_call(facts)
        || graph.reachable(facts, helpers).into_iter().any(|i| {
            let h = &helpers[i];
            names_shared(text(h.site.body, src)) || unknown_call(&h.facts)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_sorted_for_binary_search() {
        assert!(
            BUILTINS.windows(2).all(|w| w[0] < w[1]),
            "keep BUILTINS sorted"
        );
        assert!(
            builtin("sqrtf") && builtin("__ldg") && builtin("atomicAdd") && builtin("make_float4")
        );
        assert!(!builtin("load_tile"));
    }

    /// A macro call counts by the macro's text: a loop head or an expression of built-ins needs
    /// no barrier between tasks; a macro naming `__shared__`, directly or through another
    /// macro, or calling a function of the file, does.
    #[test]
    fn macro_calls_count_by_their_text() {
        let barrier = |src: &str| -> bool {
            let t = crate::transform(src, "m.cu", &crate::Options::default());
            assert!(t.output.contains("run_tasks"), "{}", t.output);
            t.output.contains("task_barrier=*/true")
        };
        let k =
            "__global__ void k(float* y, int n) {\n  LOOP(i, n) { y[i] = MAX(y[i], 0.0f); }\n}\n";
        let plain = "#define LOOP(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)\n#define MAX(a, b) fmaxf(a, b)\n";
        assert!(!barrier(&format!("{plain}{k}")));
        let staged = "#define TILE __shared__ float t[32]; t[threadIdx.x % 32] = a; b\n\
                      #define LOOP(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)\n\
                      #define MAX(a, b) [&] { TILE; return a; }()\n";
        assert!(barrier(&format!("{staged}{k}")));
        let helper = "__device__ float keep(float a) { __shared__ float s[1]; s[0] = a; return s[0]; }\n\
                      #define LOOP(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)\n\
                      #define MAX(a, b) keep(a)\n";
        assert!(barrier(&format!("{helper}{k}")));
    }

    #[test]
    fn shared_outside_bodies_counts() {
        let src = "extern __shared__ float s[];\n__global__ void k() { s[0] = 1; }";
        let body = src.find('{').unwrap()..src.len();
        assert!(file_scope_shared(src, std::slice::from_ref(&body)));
        let src2 = "__global__ void k() { __shared__ float s[4]; }";
        let body2 = src2.find('{').unwrap()..src2.len();
        assert!(!file_scope_shared(src2, std::slice::from_ref(&body2)));
    }
}
