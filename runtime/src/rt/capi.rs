//! The C ABI (`cuda_support/cupreempt/runtime.h`): what nvcc-built programs and the launch shim
//! call. Handles are numbers, never pointers, so a stale or made-up handle is an error
//! (`CUPREEMPT_ERROR_UNKNOWN_HANDLE`), not a crash. Every function checks its pointers before it
//! touches anything, returns a status code, and never unwinds into C.

// The plan's entry points live beside the launch history (`plan.rs`); they are the C ABI too.
use super::driver::ContextKey;
use super::fast_hash::FastMap;
use super::history::LaunchKey;
pub use super::plan::{cupreempt_rt_launch_planned, cupreempt_rt_plan};
use super::steps::{self, Step};
use super::{Error, Function, Kernel, KernelArgs, LaunchConfig, Runtime, StreamRef, Target};
use crate::smset::{SmSet, MAX_SMS};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

pub type Handle = u64;

pub const CUPREEMPT_OK: c_int = 0;
/// A Rust panic inside the runtime (a bug): reported, never unwound into C.
pub const CUPREEMPT_ERROR_INTERNAL: c_int = 8;

/// Runs when a program linked with the C library starts: starts the setup thread (`setup.rs`).
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = {
    extern "C" fn at_load() {
        super::setup::start();
    }
    at_load
};

#[derive(Default)]
struct Registry {
    /// The runtime of each context, by its key: a reset device's new context at the old address
    /// gets a runtime of its own.
    runtimes: Vec<(ContextKey, Runtime)>,
    kernels: FastMap<Handle, Arc<Mutex<Kernel>>>,
    next: Handle,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// The last call's error message; none after a call that succeeded (most calls: kept
    /// without an allocation for them).
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Runs `f`, records its error for `cupreempt_rt_last_error`, and maps it to a status code.
pub(super) fn guard(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    let (status, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => (CUPREEMPT_OK, None),
        Ok(Err(e)) => (e.status(), Some(e.to_string())),
        Err(_) => (
            CUPREEMPT_ERROR_INTERNAL,
            Some("internal error (panic) in the runtime".into()),
        ),
    };
    LAST_ERROR.with(|l| *l.borrow_mut() = message.map(|m| CString::new(m).unwrap_or_default()));
    status
}

/// Runs `f` on kernel `h`, holding only that kernel's lock (other handles stay usable).
fn with_kernel<T>(h: Handle, f: impl FnOnce(&mut Kernel) -> Result<T, Error>) -> Result<T, Error> {
    let k = lock(registry())
        .kernels
        .get(&h)
        .cloned()
        .ok_or(Error::UnknownHandle(h))?;
    let mut k = lock(&k);
    f(&mut k)
}

/// Answers a query on kernel `h`: fails with `null` when an output pointer is missing
/// (`outputs_set` false), otherwise runs `f` on the kernel and hands its result to `store`.
fn answer<T>(
    h: Handle,
    outputs_set: bool,
    null: &'static str,
    f: impl FnOnce(&mut Kernel) -> Result<T, Error>,
    store: impl FnOnce(T),
) -> c_int {
    guard(|| {
        if !outputs_set {
            return Err(Error::InvalidArgument(null));
        }
        store(with_kernel(h, f)?);
        Ok(())
    })
}

pub(super) use super::driver::current_context;

impl Registry {
    /// The runtime made for context `ctx`, if any.
    fn runtime_of(&self, ctx: ContextKey) -> Option<Runtime> {
        self.runtimes
            .iter()
            .find(|(c, _)| *c == ctx)
            .map(|(_, rt)| rt.clone())
    }

    /// Registers `rt` as `ctx`'s runtime. The runtime of an earlier context at the same
    /// address is gone with its context (a device reset): it is set aside for good, never
    /// dropped, since dropping it would destroy streams and events and free memory by handles
    /// and addresses that the new context may have handed out again, to the program.
    fn add(&mut self, ctx: ContextKey, rt: Runtime) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.runtimes)
            .into_iter()
            .partition(|(c, _)| c.addr == ctx.addr && c.id != ctx.id);
        self.runtimes = kept;
        for (_, old) in gone {
            std::mem::forget(old);
        }
        self.runtimes.push((ctx, rt));
    }
}

thread_local! {
    /// The runtime this thread found last, and its context's key: a key's runtime never
    /// changes once registered (`Registry::add` only sets aside runtimes of other keys), so the
    /// registry's lock is taken only when the thread's context changes.
    static LAST_RUNTIME: RefCell<Option<(ContextKey, Runtime)>> = const { RefCell::new(None) };
}

/// This thread's last runtime, where it is `ctx`'s.
fn last_runtime(ctx: ContextKey) -> Option<Runtime> {
    LAST_RUNTIME.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|(k, _)| *k == ctx)
            .map(|(_, rt)| rt.clone())
    })
}

fn remember(ctx: ContextKey, rt: &Runtime) {
    LAST_RUNTIME.with(|l| *l.borrow_mut() = Some((ctx, rt.clone())));
}

/// The runtime of the context current on this thread, made on first use.
pub(super) fn current_runtime() -> Result<Runtime, Error> {
    let ctx = current_context()?;
    if let Some(rt) = last_runtime(ctx) {
        return Ok(rt);
    }
    let mut reg = lock(registry());
    let rt = match reg.runtime_of(ctx) {
        Some(rt) => rt,
        None => {
            let rt = Runtime::from_current_context()?;
            reg.add(ctx, rt.clone());
            rt
        }
    };
    drop(reg);
    remember(ctx, &rt);
    Ok(rt)
}

/// The runtime of context `ctx` (the current one, `current_context`), or none yet: then the
/// setup thread is asked to make it (`setup::make_later`) and the caller runs the original
/// kernel meanwhile.
pub(super) fn current_runtime_or_later(ctx: ContextKey) -> Result<Option<Runtime>, Error> {
    if ctx.is_none() {
        return Err(Error::InvalidArgument("no CUDA context is current"));
    }
    let found = last_runtime(ctx).or_else(|| {
        let rt = lock(registry()).runtime_of(ctx)?;
        remember(ctx, &rt);
        Some(rt)
    });
    if found.is_none() {
        super::setup::make_later(ctx);
    }
    Ok(found)
}

/// Registers the runtime that the setup thread made for context `ctx`, unless a launch made
/// one meanwhile (`current_runtime`).
pub(super) fn register_runtime(ctx: ContextKey, rt: Runtime) {
    let mut reg = lock(registry());
    if reg.runtime_of(ctx).is_none() {
        reg.add(ctx, rt);
    }
}

/// # Safety
/// `p`, when not null, must point to `MAX_SMS / 32` readable words.
unsafe fn target(sm_mask: *const c_uint) -> Target {
    if sm_mask.is_null() {
        return Target::All;
    }
    let mut words = [0u32; MAX_SMS / 32];
    std::ptr::copy_nonoverlapping(sm_mask, words.as_mut_ptr(), words.len());
    Target::Sms(SmSet::from_words(words))
}

/// The launch's arguments and configuration, checked.
///
/// # Safety
/// As for `cupreempt_rt_launch`.
unsafe fn launch_request(
    func: *mut c_void,
    grid: *const c_uint,
    block: *const c_uint,
    smem: usize,
    args: *const *const c_void,
    sizes: *const usize,
    nargs: usize,
) -> Result<(KernelArgs, LaunchConfig), Error> {
    if func.is_null() || grid.is_null() || block.is_null() {
        return Err(Error::InvalidArgument("null func, grid, block or out"));
    }
    if nargs > 0 && (args.is_null() || sizes.is_null()) {
        return Err(Error::InvalidArgument("null args or sizes"));
    }
    let bytes = (0..nargs).map(|i| *sizes.add(i)).sum();
    let mut kargs = KernelArgs::with_capacity(nargs, bytes);
    for i in 0..nargs {
        let (p, n) = (*args.add(i), *sizes.add(i));
        if p.is_null() {
            return Err(Error::InvalidArgument("null argument pointer"));
        }
        kargs.push_raw(p, n);
    }
    Ok((kargs, launch_config(grid, block, smem)?))
}

/// The configuration of a launch.
///
/// # Safety
/// `grid` and `block` must point to 3 words each.
pub(super) unsafe fn launch_config(
    grid: *const c_uint,
    block: *const c_uint,
    smem: usize,
) -> Result<LaunchConfig, Error> {
    let smem = u32::try_from(smem)
        .map_err(|_| Error::InvalidConfiguration(format!("{smem} bytes of shared memory")))?;
    Ok(LaunchConfig::new(
        [*grid, *grid.add(1), *grid.add(2)],
        [*block, *block.add(1), *block.add(2)],
        smem,
    ))
}

/// Registers a launched kernel and returns its handle.
pub(super) fn register(k: Box<Kernel>) -> Handle {
    let mut reg = lock(registry());
    reg.next += 1;
    let h = reg.next;
    reg.kernels.insert(h, Arc::new(Mutex::new(*k)));
    h
}

/// The arguments of a launch call, as the C ABI takes them.
pub(super) struct LaunchCall {
    pub func: *mut c_void,
    pub grid: *const c_uint,
    pub block: *const c_uint,
    pub smem: usize,
    pub stream: *mut c_void,
    pub args: *const *const c_void,
    pub sizes: *const usize,
    pub nargs: usize,
    pub chunk: c_uint,
    pub budget_ns: c_uint,
    /// A planned launch's history key: its earlier launches' time per task sizes the first
    /// chunks (`LaunchConfig::task_ns`).
    pub history: Option<LaunchKey>,
}

impl LaunchCall {
    /// Checks the call and launches the wrapper preemptible.
    ///
    /// # Safety
    /// As for `cupreempt_rt_launch`.
    pub(super) unsafe fn launch(&self) -> Result<(Runtime, Box<Kernel>, LaunchConfig), Error> {
        let (kargs, mut cfg) = launch_request(
            self.func, self.grid, self.block, self.smem, self.args, self.sizes, self.nargs,
        )?;
        cfg.chunk = self.chunk;
        cfg.budget_ns = self.budget_ns;
        steps::lap(Step::Arguments);
        let rt = current_runtime()?;
        steps::lap(Step::Runtime);
        let measured = self
            .history
            .as_ref()
            .and_then(|key| rt.inner.history.measured(key));
        cfg.task_ns = measured.map_or(0, |(_, task_ns)| task_ns);
        let run_ns = measured.map(|(run_ns, _)| run_ns);
        // MPS is asked for (a driver call, once) only where a scheduler steers the process
        // (not where it leaves the process alone: `lean`).
        let scheduled = super::scheduler::socket().is_some() && !super::scheduler::lean();
        let mps = if scheduled { rt.inner.mps() } else { None };
        cfg.links =
            super::links::links_for(super::links::Setting::from_env(), scheduled, mps, run_ns);
        steps::lap(Step::History);
        // A preemptible launch: the runtime's streams (commands, resumes) should be ready
        // before a preemption needs them.
        rt.request_setup();
        steps::lap(Step::Setup);
        // A scheduler daemon's standing order: the launch starts off these SMs.
        let off = super::scheduler::kept_off();
        steps::lap(Step::KeptOff);
        let k = rt.launch_owned(
            &Function::from_raw(self.func.cast()),
            &cfg,
            StreamRef::from_raw(self.stream.cast()),
            kargs,
            off.as_ref(),
        )?;
        Ok((rt, k, cfg))
    }
}

/// Launches the persistent wrapper `func` for the original launch `grid`/`block`/`smem` on
/// `stream`. `args[i]` points to parameter i (after `cupreempt_launch`), `sizes[i]` bytes.
///
/// # Safety
/// Pointers must be valid as the header documents; `func` a CUfunction of the current context.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_launch(
    func: *mut c_void,
    grid: *const c_uint,
    block: *const c_uint,
    smem: usize,
    stream: *mut c_void,
    args: *const *const c_void,
    sizes: *const usize,
    nargs: usize,
    chunk: c_uint,
    budget_ns: c_uint,
    out: *mut Handle,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Error::InvalidArgument("null func, grid, block or out"));
        }
        let call = LaunchCall {
            func,
            grid,
            block,
            smem,
            stream,
            args,
            sizes,
            nargs,
            chunk,
            budget_ns,
            history: None,
        };
        let (_, k, _) = call.launch()?;
        *out = register(k);
        Ok(())
    })
}

/// Preempts on every SM (`sm_mask` null) or on the SMs whose bits are set in `sm_mask[8]`.
///
/// # Safety
/// `sm_mask` is null or points to 8 words.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_preempt(h: Handle, sm_mask: *const c_uint) -> c_int {
    guard(|| with_kernel(h, |k| k.preempt(target(sm_mask))))
}

/// Registers a transformed unit's kernel lookup for early loading (`preload.rs`).
#[no_mangle]
pub extern "C" fn cupreempt_rt_register_preload(lookup: Option<super::preload::Lookup>) {
    if let Some(l) = lookup {
        super::preload::register(l);
    }
}

/// Registers the wrapper picker of the transformed kernel whose host stub is `original`, for
/// launches that know a kernel only by pointer (`any_kernels.rs`). Null arguments are ignored.
#[no_mangle]
pub extern "C" fn cupreempt_rt_register_any(
    original: Option<super::any_kernels::AnyFn>,
    pick: Option<super::any_kernels::AnyPick>,
) {
    if let (Some(o), Some(p)) = (original, pick) {
        let _ = catch_unwind(|| super::any_kernels::register(o, p));
    }
}

/// A key of the context current on this thread: its id (`cuCtxGetId`) plus one, or 0 where
/// none is current or the driver cannot say. A context's id is unique in the process and never reused, where its
/// address may be (a reset device's primary context): launch sites key the functions they look
/// up by it (launch.cuh's `FunctionCache`), so that a lookup of the same kernel in the same
/// context is not made again. Two driver queries, no lock, no allocation.
#[no_mangle]
pub extern "C" fn cupreempt_rt_context_id() -> u64 {
    let key = catch_unwind(|| match current_context() {
        // 0 says "none", so that no id, 0 included, reads as none.
        Ok(ctx) if !ctx.is_none() && ctx.id != 0 => ctx.id.wrapping_add(1),
        _ => 0,
    });
    key.unwrap_or(0)
}

/// The wrapper picker registered for the kernel whose host stub is `original`, or null.
#[no_mangle]
pub extern "C" fn cupreempt_rt_any_pick(
    original: Option<super::any_kernels::AnyFn>,
) -> Option<super::any_kernels::AnyPick> {
    original.and_then(|o| catch_unwind(|| super::any_kernels::pick_of(o)).unwrap_or(None))
}

/// Registers a unit's wrapper module (`wrapper_modules.rs`): `image` a fatbin that lives as
/// long as the program, `names` 3 * `n` mangled names (each original kernel, its wrapper, its
/// 32-register wrapper or ""). Returns the unit's number for its launches (0: not registered).
///
/// # Safety
/// As `wrapper_modules::register`.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_register_wrapper_module(
    image: *const c_void,
    names: *const *const c_char,
    n: c_uint,
) -> c_int {
    catch_unwind(|| super::wrapper_modules::register(image, names, n)).unwrap_or(0)
}

/// The wrapper of `original` (a CUfunction of the current context) from the registered
/// wrapper modules, with the original's dynamic shared-memory limit where `smem` exceeds the
/// default; null where no module has one. `unit`: what the launching unit's registration
/// returned, or 0.
#[no_mangle]
pub extern "C" fn cupreempt_rt_module_wrapper(
    original: *mut c_void,
    smem: usize,
    unit: c_int,
) -> *mut c_void {
    let original = original as super::driver::CUfunction;
    catch_unwind(
        || match super::wrapper_modules::wrapper_of(original, unit) {
            Some(w) => {
                super::wrapper_modules::copy_smem_limit(original, w, smem);
                w as *mut c_void
            }
            None => std::ptr::null_mut(),
        },
    )
    .unwrap_or(std::ptr::null_mut())
}

/// Returns once no block of the kernel runs on the preempted SMs.
#[no_mangle]
pub extern "C" fn cupreempt_rt_wait_yielded(h: Handle) -> c_int {
    guard(|| with_kernel(h, |k| k.wait_yielded()))
}

/// Resumes on every SM (`sm_mask` null) or on the SMs set in `sm_mask[8]`.
///
/// # Safety
/// `sm_mask` is null or points to 8 words.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_resume(h: Handle, sm_mask: *const c_uint) -> c_int {
    guard(|| with_kernel(h, |k| k.resume(target(sm_mask))))
}

/// # Safety
/// `done` and `total` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_progress(
    h: Handle,
    done: *mut u64,
    total: *mut u64,
) -> c_int {
    let outputs_set = !done.is_null() && !total.is_null();
    answer(
        h,
        outputs_set,
        "null done or total",
        |k| k.progress(),
        |p| {
            (*done, *total) = (p.done, p.total);
        },
    )
}

/// # Safety
/// `complete` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_is_complete(h: Handle, complete: *mut c_int) -> c_int {
    answer(
        h,
        !complete.is_null(),
        "null complete",
        |k| k.is_complete(),
        |c| {
            *complete = c as c_int;
        },
    )
}

/// The launch's task count and the block count of its first (persistent) instance.
///
/// # Safety
/// `blocks` and `tasks` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_info(
    h: Handle,
    blocks: *mut c_uint,
    tasks: *mut u64,
) -> c_int {
    let outputs_set = !blocks.is_null() && !tasks.is_null();
    answer(
        h,
        outputs_set,
        "null blocks or tasks",
        |k| Ok((k.persistent_blocks(), k.total_tasks())),
        |(b, t)| {
            (*blocks, *tasks) = (b, t);
        },
    )
}

/// Blocks until the kernel is complete (an error while it is preempted).
#[no_mangle]
pub extern "C" fn cupreempt_rt_wait(h: Handle) -> c_int {
    guard(|| with_kernel(h, |k| k.wait()))
}

/// GPU time from the last preempt request to the end of the kernel's last instance, in µs;
/// negative when there is none yet.
///
/// # Safety
/// `us` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_yield_latency_us(h: Handle, us: *mut f64) -> c_int {
    answer(
        h,
        !us.is_null(),
        "null us",
        |k| k.last_yield_latency_ms(),
        |ms| {
            *us = ms.map_or(-1.0, |ms| ms as f64 * 1e3);
        },
    )
}

/// Detaches the handle: the kernel runs on (resumed everywhere if it was preempted) and its
/// resources are reused once it is done.
#[no_mangle]
pub extern "C" fn cupreempt_rt_release(h: Handle) -> c_int {
    guard(|| {
        steps::begin();
        let k = lock(registry())
            .kernels
            .remove(&h)
            .ok_or(Error::UnknownHandle(h))?;
        steps::lap(Step::ReleaseLookup);
        detach(k);
        Ok(())
    })
}

/// What becomes of a launch whose handle the caller let go of: chaos mode (CUPREEMPT_CHAOS)
/// preempts and resumes it at random until it ends; else a scheduler daemon
/// (CUPREEMPT_SCHEDULER) steers it; else it runs to its end.
pub(super) fn detach(k: Arc<Mutex<Kernel>>) {
    if let Err(k) = super::chaos::adopt(k) {
        drop(super::scheduler::adopt(k));
    }
    steps::lap(Step::ReleaseAdopt);
}

/// As [`detach`], for a launch that was never registered (`cupreempt_rt_launch_planned` with
/// no handle asked for): with neither chaos mode nor a scheduler daemon it is simply dropped,
/// with no shared handle made for it.
pub(super) fn detach_unregistered(k: Box<Kernel>) {
    if super::chaos::enabled() || super::scheduler::adopts() {
        detach(Arc::new(Mutex::new(*k)));
    } else {
        drop(k);
        steps::lap(Step::ReleaseAdopt);
    }
}

/// Turns timestamps on the runtime's events on or off (off by default; on makes
/// `cupreempt_rt_yield_latency_us` work for launches and preemptions made afterwards).
#[no_mangle]
pub extern "C" fn cupreempt_rt_set_timing(on: c_int) -> c_int {
    guard(|| {
        super::set_event_timing(on != 0);
        Ok(())
    })
}

/// A static description of a status code.
#[no_mangle]
pub extern "C" fn cupreempt_rt_status_string(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        0 => c"success",
        1 => c"no CUDA driver",
        2 => c"CUDA driver call failed",
        3 => c"invalid launch configuration",
        4 => c"invalid argument",
        5 => c"unknown kernel handle",
        6 => c"already preempted",
        7 => c"not preempted",
        8 => c"internal error in the runtime",
        9 => c"run the original kernel",
        _ => c"unknown status",
    };
    s.as_ptr()
}

/// The calling thread's last error in full (empty after a success); valid until the thread's
/// next call.
#[no_mangle]
pub extern "C" fn cupreempt_rt_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_deref().unwrap_or(c"").as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        unsafe { CStr::from_ptr(cupreempt_rt_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    /// `cupreempt_rt_launch` with a 1x1x1 grid and block, no shared memory, default stream.
    unsafe fn launch(
        func: *mut c_void,
        grid: *const c_uint,
        args: *const *const c_void,
        sizes: *const usize,
        nargs: usize,
        out: *mut Handle,
    ) -> c_int {
        let block = [1u32, 1, 1];
        cupreempt_rt_launch(
            func,
            grid,
            block.as_ptr(),
            0,
            std::ptr::null_mut(),
            args,
            sizes,
            nargs,
            0,
            0,
            out,
        )
    }

    #[test]
    fn null_pointers_are_invalid_arguments() {
        let g = [1u32, 1, 1];
        let mut h = 0;
        let f = std::ptr::dangling_mut::<c_void>(); // never dereferenced: checks come first
        let (no_args, no_sizes) = (std::ptr::null(), std::ptr::null());
        unsafe {
            assert_eq!(
                launch(
                    std::ptr::null_mut(),
                    g.as_ptr(),
                    no_args,
                    no_sizes,
                    0,
                    &mut h
                ),
                4
            );
            assert!(last().contains("null"));
            assert_eq!(launch(f, std::ptr::null(), no_args, no_sizes, 0, &mut h), 4);
            assert_eq!(launch(f, g.as_ptr(), no_args, no_sizes, 2, &mut h), 4);
            let args = [std::ptr::null::<c_void>()];
            let sizes = [8usize];
            assert_eq!(
                launch(f, g.as_ptr(), args.as_ptr(), sizes.as_ptr(), 1, &mut h),
                4
            );
            assert_eq!(
                launch(f, g.as_ptr(), no_args, no_sizes, 0, std::ptr::null_mut()),
                4
            );
            assert_eq!(
                cupreempt_rt_progress(1, std::ptr::null_mut(), std::ptr::null_mut()),
                4
            );
            assert_eq!(cupreempt_rt_is_complete(1, std::ptr::null_mut()), 4);
            assert_eq!(cupreempt_rt_yield_latency_us(1, std::ptr::null_mut()), 4);
            assert_eq!(
                cupreempt_rt_info(1, std::ptr::null_mut(), std::ptr::null_mut()),
                4
            );
        }
    }

    #[test]
    fn unknown_handles_are_errors_not_crashes() {
        let (mut d, mut t, mut c, mut us) = (0u64, 0u64, 0, 0.0);
        let h = 0xdead_beef;
        unsafe {
            assert_eq!(cupreempt_rt_preempt(h, std::ptr::null()), 5);
            assert!(last().contains("unknown kernel handle 3735928559"));
            let mask = [1u32; 8];
            assert_eq!(cupreempt_rt_preempt(h, mask.as_ptr()), 5);
            assert_eq!(cupreempt_rt_resume(h, std::ptr::null()), 5);
            assert_eq!(cupreempt_rt_progress(h, &mut d, &mut t), 5);
            assert_eq!(cupreempt_rt_is_complete(h, &mut c), 5);
            assert_eq!(cupreempt_rt_yield_latency_us(h, &mut us), 5);
            let (mut b, mut n) = (0u32, 0u64);
            assert_eq!(cupreempt_rt_info(h, &mut b, &mut n), 5);
        }
        assert_eq!(cupreempt_rt_wait_yielded(h), 5);
        assert_eq!(cupreempt_rt_wait(h), 5);
        assert_eq!(cupreempt_rt_release(h), 5);
        assert_eq!(cupreempt_rt_release(0), 5);
    }

    #[test]
    fn a_launch_without_a_driver_says_so() {
        if super::super::driver_available() {
            eprintln!("skipped: a CUDA driver is present here");
            return;
        }
        let g = [1u32, 1, 1];
        let mut h = 0;
        let f = std::ptr::dangling_mut::<c_void>();
        let s = unsafe { launch(f, g.as_ptr(), std::ptr::null(), std::ptr::null(), 0, &mut h) };
        assert_eq!(s, 1);
        assert!(last().contains("no CUDA driver"));
    }

    /// The last error is this thread's last call's: a call that succeeds clears it (it makes
    /// no string for that), and the next failure sets it again.
    #[test]
    fn a_call_that_succeeds_clears_the_last_error() {
        assert_eq!(cupreempt_rt_release(0xdead_beef), 5);
        assert!(last().contains("unknown kernel handle"), "{}", last());
        // A call with no side effect that succeeds without a driver.
        let mut counts = [0u64; 1];
        assert_eq!(
            unsafe { super::super::plan::cupreempt_rt_plan_counts_n(counts.as_mut_ptr(), 1) },
            0
        );
        assert_eq!(last(), "");
        assert_eq!(cupreempt_rt_release(7), 5);
        assert!(last().contains("unknown kernel handle 7"), "{}", last());
    }

    #[test]
    fn timing_can_be_switched() {
        assert_eq!(cupreempt_rt_set_timing(1), 0);
        assert!(super::super::timing());
        assert_eq!(cupreempt_rt_set_timing(0), 0);
        assert!(!super::super::timing());
    }

    #[test]
    fn every_status_has_a_description() {
        for s in 0..=8 {
            let d = unsafe { CStr::from_ptr(cupreempt_rt_status_string(s)) };
            assert_ne!(d.to_str().unwrap(), "unknown status", "{s}");
        }
        assert_eq!(
            unsafe { CStr::from_ptr(cupreempt_rt_status_string(99)) }.to_str(),
            Ok("unknown status")
        );
    }
}
