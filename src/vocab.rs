//! Every name the transformer emits: the generated functions and types, the parameters and
//! locals it adds, and the names of the device headers' API that generated code calls. A name
//! here that the headers in `cuda_support/` also spell must change in both; those headers point
//! back here.

/// The line that makes a file's generated code compile (and marks a transformed file).
pub const INCLUDE: &str = "#include \"cupreempt.cuh\"\n";

/// An upper bound of the static shared memory the task loop itself declares in a wrapper
/// (`run_tasks` in cuda_support/cupreempt/task_loop.cuh: 232 bytes on sm_90, 256 in a build
/// with looks inside chunks, CUPREEMPT_LOOKS), and the dynamic shared memory a launch adds
/// where the loop keeps it there (CUPREEMPT_LOOP_SHARED_BYTES, control.h). A kernel whose own
/// static shared memory leaves less than this under 48 KB gets that form
/// (`analysis::shared_size`); fixtures/shared_memory_at_the_limit.cu compiles a wrapper at
/// exactly this bound, so the bound is checked whenever the task loop changes.
pub const TASK_LOOP_SHARED_BYTES: u64 = 256;

/// What a block may declare statically (every architecture: 48 KB; more only as dynamic shared
/// memory, after `cudaFuncSetAttribute`): `analysis::shared_size`, and the per-instance choice
/// of the launch types (`rewrite::kernel`).
pub const STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// The task-context parameter every shared body and rewritten helper takes.
pub const CTX: &str = "__cp";
/// The task context's type parameter.
pub const CTX_TYPE: &str = "CupreemptCtx";
/// The predicated form's flag: the thread has not returned from the task.
pub const CTX_LIVE: &str = "__cp_live";
/// A live copy's result where its helper returns a value in several places.
pub const LIVE_RESULT: &str = "__cp_ret";
/// The shared body's parameter that carries the running kernel's `__PRETTY_FUNCTION__` (where
/// the body names its function; rewrite/function_name.rs).
pub const FUNCTION_PARAM: &str = "__cp_function";
/// The wrapper's first parameter: the launch's description (`cupreempt_launch`, control.h).
pub const LAUNCH_PARAM: &str = "__cp_launch";

/// Blocks of 1,024 threads that the 32-register wrapper asks to fit on an SM (task_loop.cuh):
/// 2 where an SM holds 2,048 threads (65,536 registers / 2,048 = 32), 1 where it holds fewer,
/// where asking for 2 is out of range.
pub const R32_MIN_BLOCKS: &str = "CUPREEMPT_R32_MIN_BLOCKS";

/// The capped wrapper's blocks per SM for a kernel with its own `__launch_bounds__(T, M)`
/// (task_loop.cuh): `CUPREEMPT_R32_BLOCKS_OF((T), (M))`, as many blocks of T threads as an SM
/// holds, never fewer than M.
pub const R32_BLOCKS_OF: &str = "CUPREEMPT_R32_BLOCKS_OF";

/// Defined by the compiler launcher once ptxas has told it the kernels' register counts
/// (src/cli/capped.rs): then only the kernels named by `capped_macro` get the capped wrapper,
/// those whose original needs at most 32 registers and plain wrapper more, the only ones
/// `launch.cuh` would launch it for. Any other capped wrapper would be code in the module,
/// loaded at its first use, that no launch runs.
pub const CAPPED_CHOSEN: &str = "CUPREEMPT_R32_CHOSEN";

/// Defined by the compiler launcher for the object it links when a unit's wrappers are
/// compiled into a module of their own (src/cli/split.rs): the wrappers are then only
/// declared, and the launch types' wrapper members are null (launch.cuh finds the wrappers by
/// the original's name, through the runtime).
pub const SPLIT_UNIT: &str = "CUPREEMPT_SPLIT_UNIT";

/// Defined by the compiler launcher for the compile of a split unit's wrapper module: there
/// the original kernels' symbols get no body (nothing launches them from that module; the
/// object's own module has them), so that each kernel's code is compiled once fewer.
pub const WRAPPER_MODULE: &str = "CUPREEMPT_WRAPPER_MODULE";

/// The macro that keeps `kernel`'s capped wrapper where `CAPPED_CHOSEN` is defined.
pub fn capped_macro(kernel: &str) -> String {
    format!("CUPREEMPT_R32_{kernel}")
}

/// The macro through which a kernel's wrapper instances written in another macro's replacement
/// pass (`rewrite/kernel.rs`, `macro_instantiations`): defined to its arguments where the
/// wrapper (`capped`: the one held to 32 registers) is built in the unit, to nothing elsewhere.
pub fn instances_macro(kernel: &str, capped: bool) -> String {
    if capped {
        format!("CUPREEMPT_R32_INSTANCES_{kernel}")
    } else {
        format!("CUPREEMPT_INSTANCES_{kernel}")
    }
}

/// The launch description's C type (control.h).
pub const LAUNCH_TYPE: &str = "cupreempt_launch";
/// The context that reads the hardware's blockIdx/gridDim (task_loop.cuh).
pub const NATIVE_CTX: &str = "cupreempt::NativeCtx";
/// Makes a declaration weak (launch.cuh): wrappers of kernels defined in other files.
pub const WEAK: &str = "CUPREEMPT_WEAK";
/// The contexts' method that gives the thread's index (task_loop.cuh).
pub const THREAD_INDEX: &str = "thread_index";
/// The context of one task of a persistent block (task_loop.cuh).
pub const TASK_CTX: &str = "cupreempt::TaskCtx";
/// The persistent loop over tasks that a wrapper runs (task_loop.cuh).
pub const RUN_TASKS: &str = "cupreempt::run_tasks";
/// Calls a functor's context form where its class has one, else the functor as written
/// (task_loop.cuh; `CallGraph::functor_calls`).
pub const CALL_FUNCTOR: &str = "::cupreempt::call_functor";
/// Evaluates an initializer only in threads that have not returned (task_loop.cuh).
pub const LIVE_VALUE: &str = "cupreempt::live_value";
/// The live copy of a synchronizing helper `f` that returned threads call in the predicated
/// form (`analysis::predicate`): `f__cp_live(__cp_live, ...)`.
pub const LIVE_COPY_SUFFIX: &str = "__cp_live";
pub fn live_copy_name(helper: &str) -> String {
    format!("{helper}{LIVE_COPY_SUFFIX}")
}
/// The shared body's type for a kernel parameter of class type passed by value, and what the
/// wrapper passes for it per task (task_loop.cuh).
pub const BODY_PARAM: &str = "cupreempt::body_param_t";
pub const BODY_CONST_PARAM: &str = "cupreempt::body_const_param_t";
pub const TASK_PARAM: &str = "cupreempt::task_param";
pub const TRIVIAL_PARAMS: &str = "cupreempt::all_trivially_destructible";
/// What a rewritten launch site calls (launch.cuh).
pub const LAUNCH: &str = "cupreempt::launch";
/// A launch through a local variable that holds the kernel (launch.cuh, `launch_through`).
pub const LAUNCH_THROUGH: &str = "cupreempt::launch_through";
/// A launch through a kernel's pointer, the kernel known at run time only (launch.cuh).
pub const LAUNCH_ANY: &str = "::cupreempt::launch_any";
/// A macro's launch of the kernel a use names (launch.cuh): `CUPREEMPT_LAUNCH_ANY(k)(CONFIG)`.
pub const LAUNCH_ANY_MACRO: &str = "CUPREEMPT_LAUNCH_ANY";
/// The task's grid group (task_loop.cuh): what `cg::this_grid()` becomes before a query of the
/// grid's shape or of a thread's place in it.
pub const TASK_GRID: &str = "::cupreempt::task_grid";
/// The members of a kernel's launch-types struct that launch.cuh reads: the original kernel,
/// its wrapper and the wrapper held to 32 registers.
pub const MEMBER_ORIGINAL: &str = "original";
pub const MEMBER_WRAPPER: &str = "wrapper";
pub const MEMBER_WRAPPER_R32: &str = "wrapper_r32";

/// The shared body that the original kernel and its wrappers call.
pub fn body_name(kernel: &str) -> String {
    format!("{kernel}__cupreempt_body")
}

/// The persistent, preemptible wrapper.
pub fn wrapper_name(kernel: &str) -> String {
    format!("{kernel}__cupreempt")
}

/// The same wrapper, held to 32 registers.
pub fn capped_wrapper_name(kernel: &str) -> String {
    format!("{kernel}__cupreempt_r32")
}

/// The wrappers of a kernel whose task loop keeps its state in dynamic shared memory
/// (`KernelPlan::loop_state_dynamic`): names of their own, so that no launch finds them by the
/// usual names without adding the state's bytes (another unit's weak declarations, the compiler
/// launcher's table of a wrapper module).
pub fn dynamic_wrapper_name(kernel: &str, capped: bool) -> String {
    format!(
        "{kernel}__cupreempt_dyn{}",
        if capped { "_r32" } else { "" }
    )
}

/// The launch types' member that says the wrappers add the loop's state to a launch's dynamic
/// shared memory (launch.cuh, `loop_shared_bytes`).
pub const MEMBER_LOOP_STATE_DYNAMIC: &str = "loop_state_dynamic";
/// `run_tasks`' third template argument for that form (task_loop.cuh).
pub const IN_DYNAMIC_SHARED: &str = "cupreempt::InDynamicShared";

/// The struct of launch types that launch sites name; overloads are numbered.
/// The static initializer that registers a kernel's launch types for launches that know the
/// kernel only by pointer (`launch_any`, launch.cuh).
pub fn any_registration_name(kernels_struct: &str) -> String {
    format!("{kernels_struct}_any")
}

/// The struct of a kernel's launch types (original, wrappers) that launch sites name.
pub fn kernels_struct_name(kernel: &str, overload: Option<usize>) -> String {
    match overload {
        Some(n) => format!("{kernel}__cupreempt_kernels_{n}"),
        None => format!("{kernel}__cupreempt_kernels"),
    }
}

/// The declaration that deduces the launch types from a launch's arguments (templates and
/// overloads).
pub fn selector_name(kernel: &str) -> String {
    format!("{kernel}__cupreempt_select")
}

/// The name given to the unnamed parameter at `index`, so that it can be forwarded.
pub fn unnamed_param(index: usize) -> String {
    format!("__cp_arg{index}")
}

/// The label after a run of guarded statements in the predicated form.
pub fn after_label(n: u32) -> String {
    format!("__cp_after_{n}")
}
