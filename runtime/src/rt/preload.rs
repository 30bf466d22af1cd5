//! Loading the transformed kernels' code before the program's first launch (on by default;
//! `CUPREEMPT_PRELOAD=0` leaves it to CUDA's lazy loading).
//!
//! With CUDA's lazy module loading, a program's first launch of a kernel loads that kernel's
//! code inside the launch. Each transformed unit registers, from a static initializer, a
//! function that looks up its kernels' handles (`cupreempt_rt_register_preload`, in
//! `launch.cuh`). A thread then waits for the program to make a device's primary context (it
//! polls the driver, which it never initializes itself: a program may fork before it uses CUDA)
//! and has the driver load every registered **original** kernel (`cuFuncLoad`), so that the
//! program's own first launches, which run the original, find the code loaded. A load holds
//! driver locks, so a program call made meanwhile waits for it; it comes right after the
//! context appears, usually while a program allocates and copies its inputs.
//!
//! The **wrappers** are loaded by the runtime's setup (`setup.rs`, `load_wrappers`), which
//! runs on the setup thread at a quiet moment once a launch was planned preemptible: before
//! that every launch runs the original, and a program whose launches all fit on the GPU at
//! once never loads them. Loading them with the originals put twice as many loads in the
//! window right after the context appears, where programs that time from `cudaSetDevice` on
//! (the samples' template) paid for them (docs/runtime.md, "Module loading").
//!
//! At exit the program's CUDA runtime tears the context down; a handler registered after the
//! CUDA runtime's own (so that it runs before it) waits for a load under way and stops the
//! rest.

use super::driver::{self, CUcontext, CUdevice};
use cudarc::driver::sys;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What a transformed unit registers: writes the CUfunction of the current context in `slot`
/// (0: the original kernel, 1 and 2: its wrappers) into `func` and returns 1, or returns 0 for
/// an empty slot. A lookup loads the function's code (lazy module loading), so each slot is
/// asked for only when it is to be loaded.
pub type Lookup = unsafe extern "C" fn(slot: c_int, func: *mut *mut c_void) -> c_int;

/// Slots of one lookup (the original kernel and its two wrappers).
const PER_LOOKUP: usize = 3;

struct Registry {
    lookups: Vec<Lookup>,
    /// Lookups already run (a prefix of `lookups`).
    done: usize,
    /// The polling thread has been started.
    started: bool,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        Mutex::new(Registry {
            lookups: Vec::new(),
            done: 0,
            started: false,
        })
    })
}

/// Held while kernels are being loaded; the exit handler takes it to wait for a load.
static LOADING: Mutex<()> = Mutex::new(());
static EXITING: AtomicBool = AtomicBool::new(false);

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !super::switched_off("CUPREEMPT_PRELOAD"))
}

/// Whether the driver loads modules lazily (`CUDA_MODULE_LOADING`, LAZY by default since CUDA
/// 12.2). Under EAGER every module is loaded with the context, so there is nothing to load
/// ahead, and the thread's polling and its context retain would only take driver locks that
/// the program's first calls wait for (template's first launch, a program timed from its
/// context on: docs/runtime.md, "Module loading").
fn loads_lazily(module_loading: Option<&str>) -> bool {
    !module_loading.is_some_and(|v| v.trim().eq_ignore_ascii_case("EAGER"))
}

/// Registers a unit's lookup; unless `CUPREEMPT_PRELOAD=0` or the driver loads modules eagerly,
/// starts the thread that runs them once a device's primary context exists.
pub(crate) fn register(lookup: Lookup) {
    let mut r = super::capi::lock(registry());
    r.lookups.push(lookup);
    let lazy = loads_lazily(std::env::var("CUDA_MODULE_LOADING").ok().as_deref());
    if !enabled() || !lazy || r.started {
        return;
    }
    r.started = std::thread::Builder::new()
        .name("cupreempt-preload".into())
        .spawn(watch)
        .is_ok();
}

/// How long to wait after the context appears before loading (`CUPREEMPT_PRELOAD_DELAY_US`,
/// default 1,000): a program's own setup calls (allocations, copies) follow its context at
/// once, and a load made meanwhile holds the driver's locks they wait for, inside the clock of
/// a program that times its work from its context on. A millisecond later most programs have
/// either set up (the load then precedes their first launch) or launched (and loaded lazily, as
/// the original does). Measured on the H100 (docs/runtime.md, "Module loading").
const DEFAULT_DELAY_US: u64 = 1_000;

fn delay() -> Duration {
    static D: OnceLock<Duration> = OnceLock::new();
    *D.get_or_init(|| {
        let us = std::env::var("CUPREEMPT_PRELOAD_DELAY_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_DELAY_US);
        Duration::from_micros(us)
    })
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

/// Waits for a device's primary context, then loads every registered kernel there.
fn watch() {
    if !driver::driver_available() {
        return;
    }
    let start = Instant::now();
    loop {
        if EXITING.load(Ordering::Acquire) {
            return;
        }
        if let Some(dev) = active_device() {
            // After the program's CUDA runtime registered its exit handler (it has made a
            // context), so that ours runs first.
            register_exit_handler();
            std::thread::sleep(delay());
            load_on(dev);
            return;
        }
        std::thread::sleep(pause(start.elapsed()));
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
        for ordinal in 0..count {
            let mut dev: CUdevice = 0;
            let (mut flags, mut active) = (0u32, 0i32);
            if sys::cuDeviceGet(&mut dev, ordinal) == sys::CUresult::CUDA_SUCCESS
                && sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active)
                    == sys::CUresult::CUDA_SUCCESS
                && active != 0
            {
                return Some(dev);
            }
        }
    }
    None
}

/// Runs the lookups not yet run with `dev`'s primary context current here, and loads the
/// original kernels they name.
fn load_on(dev: CUdevice) {
    let _loading = super::capi::lock(&LOADING);
    if EXITING.load(Ordering::Acquire) {
        return;
    }
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: retains the context the program made (it stays alive while we use it).
    if unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) } != sys::CUresult::CUDA_SUCCESS {
        return;
    }
    if driver::make_current(ctx).is_ok() {
        let lookups: Vec<Lookup> = {
            let mut r = super::capi::lock(registry());
            let new = r.lookups[r.done..].to_vec();
            r.done = r.lookups.len();
            new
        };
        let loaded = load_all(&lookups, 0..1);
        super::trace_setup(&format!("preload: {loaded} original kernels loaded"));
        // SAFETY: unbinds this thread from the context; the program's threads are untouched.
        unsafe { sys::cuCtxSetCurrent(std::ptr::null_mut()) };
    }
    // SAFETY: the retain above.
    unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
}

/// Loads every registered unit's persistent wrappers into the current context: the runtime's
/// setup calls it (on the setup thread, at a quiet moment), once a launch was planned
/// preemptible, so that the first preemptible launch finds them loaded and a program whose
/// launches all run the original kernel never loads them.
pub(crate) fn load_wrappers() {
    if !enabled() || !driver::driver_available() {
        return;
    }
    let _loading = super::capi::lock(&LOADING);
    if EXITING.load(Ordering::Acquire) {
        return;
    }
    let lookups = super::capi::lock(registry()).lookups.clone();
    let loaded = load_all(&lookups, 1..PER_LOOKUP);
    // Units whose wrappers the compiler launcher put in a module of their own.
    let apart = super::wrapper_modules::load_all_into_current(|f| load(f as *mut c_void));
    super::trace_setup(&format!(
        "setup thread: {loaded} wrappers loaded, {apart} from wrapper modules"
    ));
}

/// Looks up and loads slots `slots` of each of `lookups` in the current context, slot by slot
/// across the units (every unit's first wrapper before any second one). Returns how many it
/// loaded; stops when the program exits.
fn load_all(lookups: &[Lookup], slots: std::ops::Range<usize>) -> usize {
    let mut loaded = 0;
    for (slot, lookup) in load_order(lookups, slots) {
        if EXITING.load(Ordering::Acquire) {
            break;
        }
        let mut f = std::ptr::null_mut::<c_void>();
        // SAFETY: the unit's lookup writes one handle of the current context, or nothing.
        if unsafe { lookup(slot as c_int, &mut f) } == 1 && !f.is_null() {
            load(f);
            loaded += 1;
        }
    }
    loaded
}

/// The (slot, lookup) pairs to ask, slot by slot across the units.
fn load_order<T: Copy>(
    lookups: &[T],
    slots: std::ops::Range<usize>,
) -> impl Iterator<Item = (usize, T)> + '_ {
    slots.flat_map(move |slot| lookups.iter().map(move |&l| (slot, l)))
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
    // The library is present (`watch`).
    let has = *HAS_FUNC_LOAD.get_or_init(|| driver::has_call(b"cuFuncLoad\0"));
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
            drop(super::capi::lock(&LOADING));
        }
        super::at_exit(at_exit);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slot by slot across units, only the slots asked for.
    #[test]
    fn load_order_goes_slot_by_slot() {
        let units = ['a', 'b'];
        let order = |slots| -> Vec<(usize, char)> { load_order(&units, slots).collect() };
        assert_eq!(order(0..1), [(0, 'a'), (0, 'b')], "originals only");
        assert_eq!(
            order(1..PER_LOOKUP),
            [(1, 'a'), (1, 'b'), (2, 'a'), (2, 'b')]
        );
    }

    #[test]
    fn nothing_to_load_ahead_when_the_driver_loads_eagerly() {
        assert!(loads_lazily(None), "CUDA's default is lazy loading");
        assert!(loads_lazily(Some("LAZY")));
        assert!(!loads_lazily(Some("EAGER")));
        assert!(!loads_lazily(Some(" eager\n")));
    }

    #[test]
    fn polling_slows_down_after_the_first_seconds() {
        assert_eq!(pause(Duration::from_millis(10)), Duration::from_millis(1));
        assert_eq!(pause(Duration::from_secs(6)), Duration::from_millis(50));
    }

    unsafe extern "C" fn two(slot: c_int, func: *mut *mut c_void) -> c_int {
        *func = std::ptr::null_mut();
        (slot < 2) as c_int
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
