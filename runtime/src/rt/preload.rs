//! Loading the transformed kernels' code before the program's first launch (on by default;
//! `CUPREEMPT_PRELOAD=0` leaves it to CUDA's lazy loading).
//!
//! With CUDA's lazy module loading, a program's first launch of any kernel of a translation
//! unit loads that unit's module inside the launch, and a transformed unit's module carries the
//! wrappers too: on the H100 a WMMA GEMM's first launch took 165 µs longer transformed, though
//! the kernel ran the original's code (docs/runtime.md, "Module loading"). Each transformed
//! unit registers, from a static initializer, a function that looks up its kernels' handles
//! (`cupreempt_rt_register_preload`, in `launch.cuh`). A thread then waits for the program to
//! make a device's primary context (it polls the driver, which it never initializes itself: a
//! program may fork before it uses CUDA) and has the driver load every registered original
//! kernel (`cuFuncLoad`), so that the program's own first launches find the code loaded.
//!
//! A kernel's wrappers are loaded once the runtime plans a launch of it that is more than one
//! wave (`want_wrappers`, from the plan), on this thread while that launch runs as the original
//! or starts the runtime's setup: a kernel whose launches all fit on the GPU at once never runs
//! a wrapper, and loading them would only hold the driver while the program works. A load
//! holds driver locks, so a program call made meanwhile waits for it.
//!
//! At exit the program's CUDA runtime tears the context down; a handler registered after the
//! CUDA runtime's own (so that it runs before it) waits for a load under way and stops the
//! rest.

use super::driver::{self, CUcontext, CUdevice};
use cudarc::driver::sys;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What a transformed unit registers: writes up to `max` CUfunction handles of the current
/// context into `funcs` and returns how many.
pub type Lookup = unsafe extern "C" fn(funcs: *mut *mut c_void, max: c_int) -> c_int;

/// The most handles one lookup gives (the original kernel and its two wrappers).
const PER_LOOKUP: usize = 3;

/// CUfunction handles kept as integers (they cross threads; only the driver dereferences them).
type Handle = usize;

#[derive(Default)]
struct Registry {
    lookups: Vec<Lookup>,
    /// Lookups already run (a prefix of `lookups`).
    done: usize,
    /// The polling thread has been started.
    started: bool,
    /// The context the handles below belong to (0 before the first lookups ran).
    ctx: Handle,
    /// The wrappers not yet asked for, by their original kernel.
    wrappers: HashMap<Handle, Vec<Handle>>,
    /// Originals whose wrappers a launch asked for before the lookups ran.
    asked_early: HashSet<Handle>,
    /// Wrappers to load next.
    queue: Vec<Handle>,
}

impl Registry {
    /// Whether a launch's ask could still change anything (`want_wrappers`'s fast path).
    fn open(&self) -> bool {
        self.done < self.lookups.len() || !self.wrappers.is_empty()
    }

    /// Files the handles of lookups just run: the originals come back to be loaded now, the
    /// wrappers wait for a launch that needs them (or were asked for already).
    fn file(&mut self, handles: &[[Handle; PER_LOOKUP]]) -> Vec<Handle> {
        let mut originals = Vec::new();
        for h in handles {
            let wrappers: Vec<Handle> = h[1..].iter().copied().filter(|&w| w != 0).collect();
            if h[0] == 0 {
                continue;
            }
            originals.push(h[0]);
            if self.asked_early.remove(&h[0]) {
                self.queue.extend(wrappers);
            } else if !wrappers.is_empty() {
                self.wrappers.insert(h[0], wrappers);
            }
        }
        originals
    }

    /// A launch of `original` needs its wrappers (or soon will).
    fn ask(&mut self, original: Handle) -> bool {
        if let Some(w) = self.wrappers.remove(&original) {
            self.queue.extend(w);
            true
        } else {
            if self.done < self.lookups.len() {
                self.asked_early.insert(original);
            }
            false
        }
    }
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Registry::default()))
}

/// Wakes the loading thread: wrappers queued, or the program exiting.
static WAKE: Condvar = Condvar::new();
/// Whether `want_wrappers` must look at the registry (`Registry::open`).
static OPEN: AtomicBool = AtomicBool::new(false);
/// Held while kernels are being loaded; the exit handler takes it to wait for a load.
static LOADING: Mutex<()> = Mutex::new(());
static EXITING: AtomicBool = AtomicBool::new(false);

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("CUPREEMPT_PRELOAD").is_ok_and(|v| v.trim() == "0"))
}

/// Registers a unit's lookup; unless `CUPREEMPT_PRELOAD=0`, starts the thread that runs them
/// once a device's primary context exists.
pub(crate) fn register(lookup: Lookup) {
    let mut r = super::capi::lock(registry());
    r.lookups.push(lookup);
    OPEN.store(true, Ordering::Release);
    if !enabled() || r.started {
        return;
    }
    r.started = std::thread::Builder::new()
        .name("cupreempt-preload".into())
        .spawn(watch)
        .is_ok();
}

/// Whether some registered kernel's wrappers have not been asked for yet (early loading on).
pub(crate) fn asking() -> bool {
    OPEN.load(Ordering::Acquire) && enabled()
}

/// A launch of `original` (a CUfunction) was planned that is not one wave: its wrappers will
/// be wanted (now, or once the runtime's setup is done), so the loading thread loads them.
/// Cheap once every registered kernel's wrappers were asked for.
pub(crate) fn want_wrappers(original: *mut c_void) {
    if !asking() {
        return;
    }
    let mut r = super::capi::lock(registry());
    if r.ask(original as Handle) {
        WAKE.notify_all();
    }
    OPEN.store(r.open(), Ordering::Release);
}

/// How long to wait before looking again, `since` the thread started: often at first (programs
/// make their context early), then rarely (a program that uses CUDA late, or never).
fn pause(since: Duration) -> Duration {
    if since < Duration::from_secs(5) {
        Duration::from_millis(1)
    } else {
        Duration::from_millis(50)
    }
}

/// Waits for a device's primary context, loads every registered original kernel there, then
/// the wrappers that launches ask for, until the program exits.
fn watch() {
    if !driver::driver_available() {
        return;
    }
    let start = Instant::now();
    let dev = loop {
        if EXITING.load(Ordering::Acquire) {
            return;
        }
        if let Some(dev) = active_device() {
            break dev;
        }
        std::thread::sleep(pause(start.elapsed()));
    };
    // After the program's CUDA runtime registered its exit handler (it has made a context),
    // so that ours runs first.
    register_exit_handler();
    loop {
        let (lookups, queue) = {
            let mut r = super::capi::lock(registry());
            loop {
                if EXITING.load(Ordering::Acquire) {
                    return;
                }
                if r.done < r.lookups.len() || !r.queue.is_empty() {
                    break;
                }
                r = WAKE.wait(r).unwrap_or_else(|e| e.into_inner());
            }
            let lookups = r.lookups[r.done..].to_vec();
            r.done = r.lookups.len();
            (lookups, std::mem::take(&mut r.queue))
        };
        if !load_on(dev, &lookups, &queue) {
            // The context is gone or was made again: the handles mean nothing now.
            let mut r = super::capi::lock(registry());
            r.wrappers.clear();
            r.asked_early.clear();
            OPEN.store(false, Ordering::Release);
            return;
        }
    }
}

/// The first device whose primary context is active; none while the driver is not initialized
/// (asking does not initialize it).
fn active_device() -> Option<CUdevice> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: a query; before cuInit it answers CUDA_ERROR_NOT_INITIALIZED and changes nothing.
    if unsafe { sys::cuCtxGetCurrent(&mut ctx) } == sys::CUresult::CUDA_ERROR_NOT_INITIALIZED {
        return None;
    }
    let mut count = 0;
    // SAFETY: queries of an initialized driver.
    unsafe {
        if sys::cuDeviceGetCount(&mut count) != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        (0..count).find_map(|ordinal| {
            let mut dev: CUdevice = 0;
            is_active(&mut dev, ordinal).then_some(dev)
        })
    }
}

/// Whether device `ordinal` (written to `dev`) has an active primary context.
///
/// # Safety
/// The driver is initialized.
unsafe fn is_active(dev: &mut CUdevice, ordinal: c_int) -> bool {
    let (mut flags, mut active) = (0u32, 0i32);
    sys::cuDeviceGet(dev, ordinal) == sys::CUresult::CUDA_SUCCESS
        && sys::cuDevicePrimaryCtxGetState(*dev, &mut flags, &mut active)
            == sys::CUresult::CUDA_SUCCESS
        && active != 0
}

/// With `dev`'s primary context current here: runs `lookups` and loads the originals they
/// name, then loads `queue`. False where the context is no longer the one the handles belong
/// to (the program reset the device); nothing is loaded then.
fn load_on(dev: CUdevice, lookups: &[Lookup], queue: &[Handle]) -> bool {
    let _loading = super::capi::lock(&LOADING);
    if EXITING.load(Ordering::Acquire) {
        return true;
    }
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: a query. Retaining an inactive primary context would make one the program did
    // not ask for.
    if unsafe { sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active) }
        != sys::CUresult::CUDA_SUCCESS
        || active == 0
    {
        return false;
    }
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: retains the context the program made (it stays alive while we use it).
    if unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) } != sys::CUresult::CUDA_SUCCESS {
        return false;
    }
    let same = {
        let mut r = super::capi::lock(registry());
        if r.ctx == 0 {
            r.ctx = ctx as Handle;
        }
        r.ctx == ctx as Handle
    };
    if same && driver::make_current(ctx).is_ok() {
        let mut handles = Vec::with_capacity(lookups.len());
        for lookup in lookups {
            let mut funcs = [std::ptr::null_mut::<c_void>(); PER_LOOKUP];
            // SAFETY: the unit's lookup writes at most PER_LOOKUP handles.
            let n = unsafe { lookup(funcs.as_mut_ptr(), PER_LOOKUP as c_int) };
            let mut h = [0; PER_LOOKUP];
            for (slot, f) in h
                .iter_mut()
                .zip(funcs)
                .take(n.clamp(0, PER_LOOKUP as c_int) as usize)
            {
                *slot = f as Handle;
            }
            handles.push(h);
        }
        let (originals, mut wrappers) = {
            let mut r = super::capi::lock(registry());
            let originals = r.file(&handles);
            let early = std::mem::take(&mut r.queue);
            OPEN.store(r.open(), Ordering::Release);
            (originals, early)
        };
        wrappers.extend_from_slice(queue);
        for &f in originals.iter().chain(&wrappers) {
            if EXITING.load(Ordering::Acquire) {
                break;
            }
            load(f as *mut c_void);
        }
        super::trace_setup(&format!(
            "preload: {} original kernels, {} wrappers loaded",
            originals.len(),
            wrappers.len()
        ));
        // SAFETY: unbinds this thread from the context; the program's threads are untouched.
        unsafe { sys::cuCtxSetCurrent(std::ptr::null_mut()) };
    }
    // SAFETY: the retain above.
    unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
    same
}

/// Has the driver load one function's code (`cuFuncLoad`, CUDA 12.4 and later; with an older
/// driver, asking for an attribute, which also loads it).
fn load(f: *mut c_void) {
    if f.is_null() {
        return;
    }
    let f = f as sys::CUfunction;
    // cudarc panics at a call of a symbol the driver lacks: ask the library once instead.
    static HAS_FUNC_LOAD: OnceLock<bool> = OnceLock::new();
    // SAFETY: looks the symbol up without calling it; the library is present (`watch`).
    let has = *HAS_FUNC_LOAD.get_or_init(|| {
        unsafe { sys::culib().get::<unsafe extern "C" fn()>(b"cuFuncLoad\0") }.is_ok()
    });
    // SAFETY: a function handle of the current context, from the program's own lookup.
    let loaded = has && unsafe { sys::cuFuncLoad(f) } == sys::CUresult::CUDA_SUCCESS;
    if !loaded {
        let mut regs = 0;
        // SAFETY: as above.
        unsafe {
            sys::cuFuncGetAttribute(
                &mut regs,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS,
                f,
            )
        };
    }
}

/// Once: at exit, wait for a load under way and start no other.
fn register_exit_handler() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        extern "C" fn at_exit() {
            EXITING.store(true, Ordering::Release);
            WAKE.notify_all();
            drop(super::capi::lock(&LOADING));
        }
        extern "C" {
            fn atexit(f: extern "C" fn()) -> c_int;
        }
        // SAFETY: registers a handler that only touches this module's statics.
        unsafe { atexit(at_exit) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Originals load at once; a kernel's wrappers only once a launch asks for them, also
    /// where it asked before the lookups ran; a kernel never asked for keeps its wrappers
    /// unloaded (a program of one-wave launches never runs them).
    #[test]
    fn wrappers_wait_for_a_launch_that_needs_them() {
        let mut r = Registry {
            lookups: vec![two, two, two],
            ..Registry::default()
        };
        assert!(!r.ask(4), "nothing filed yet");
        assert!(r.asked_early.contains(&4));
        r.done = 3;
        let originals = r.file(&[[1, 2, 3], [4, 5, 0], [6, 0, 0]]);
        assert_eq!(originals, [1, 4, 6]);
        assert_eq!(r.queue, [5], "asked for before the lookups ran");
        assert!(r.open(), "1's wrappers still wait");
        assert!(!r.ask(6), "no wrappers");
        assert!(r.ask(1));
        assert_eq!(r.queue, [5, 2, 3]);
        assert!(!r.ask(1), "asked once");
        assert!(!r.open());
        assert!(
            r.asked_early.is_empty(),
            "an ask after the lookups ran is not kept"
        );
    }

    #[test]
    fn polling_slows_down_after_the_first_seconds() {
        assert_eq!(pause(Duration::from_millis(10)), Duration::from_millis(1));
        assert_eq!(pause(Duration::from_secs(6)), Duration::from_millis(50));
    }

    unsafe extern "C" fn two(funcs: *mut *mut c_void, max: c_int) -> c_int {
        assert!(max >= 2);
        *funcs = std::ptr::null_mut();
        *funcs.add(1) = std::ptr::null_mut();
        2
    }

    /// Registration keeps every lookup in order and runs nothing before a context exists.
    #[test]
    fn registered_lookups_wait_for_a_context() {
        let before = super::super::capi::lock(registry()).lookups.len();
        register(two);
        register(two);
        let r = super::super::capi::lock(registry());
        assert_eq!(r.lookups.len(), before + 2);
        assert_eq!(r.done, 0, "nothing runs before a context exists");
    }
}
