//! Launching, preempting and resuming transformed kernels through the CUDA driver (cudarc,
//! loaded at run time), and the C ABI that nvcc-built programs call.
//!
//! ```no_run
//! use cupreempt_runtime::rt::{KernelArgs, LaunchConfig, Runtime, StreamRef, Target};
//! # fn main() -> Result<(), cupreempt_runtime::rt::Error> {
//! let rt = Runtime::new(0)?;
//! // PTX of a transformed file, e.g. `nvcc -ptx -I cuda_support vadd.cupreempt.cu`.
//! let module = rt.load_module(std::fs::read("vadd.ptx").unwrap().as_slice())?;
//! let wrapper = module.function("vadd__cupreempt")?; // an extern "C" kernel's wrapper
//! let (a, b, out, n): (u64, u64, u64, i32) = (0, 0, 0, 1 << 20); // device pointers
//! let mut args = KernelArgs::new();
//! args.push(a).push(b).push(out).push(n);
//! let cfg = LaunchConfig::new([4096, 1, 1], [256, 1, 1], 0);
//! let mut k = rt.launch(&wrapper, &cfg, StreamRef::legacy_default(), &args)?;
//! k.preempt(Target::All)?;
//! k.wait_yielded()?;
//! println!("{:?}", k.progress()?);
//! k.resume(Target::All)?;
//! k.wait()?;
//! # Ok(()) }
//! ```

mod any_kernels;
pub mod capi;
pub mod chaos;
mod clock;
mod command;
mod config;
pub(crate) mod driver;
mod error;
mod fast_hash;
mod history;
mod kernel;
mod links;
mod plan;
mod pool;
mod preload;
mod queued;
mod recent;
mod runtime;
pub mod scheduler;
mod setup;
mod steps;
mod warm;
mod wrapper_modules;

pub use command::{Command, Target};

use std::sync::atomic::{AtomicBool, Ordering};

static EVENT_TIMING: AtomicBool = AtomicBool::new(false);

/// Whether the events that mark each preempt request (and the end of each instance) record
/// timestamps, so that [`Kernel::last_yield_latency_ms`] can measure preemption latency on
/// the GPU clock. Off by default: a timed event record costs about 1.4 µs more host time per
/// launch (measured on the H100), and the first timed launch loads a small stamp kernel.
pub fn set_event_timing(on: bool) {
    EVENT_TIMING.store(on, Ordering::Relaxed);
}

pub(crate) fn timing() -> bool {
    EVENT_TIMING.load(Ordering::Relaxed)
}

/// Whether launches get leftover slots (`LaunchParams::leftover`): a block that a command sends
/// away gives back there the chunk it claimed beside the command, and kernels built with
/// `CUPREEMPT_LOOKS` the rest of a chunk cut at a look between two tasks
/// (docs/transformation.md, "The task loop"). `CUPREEMPT_LOOKS=0` withholds them: such a build
/// then runs without looks, and a block runs a chunk it claimed beside a command before it
/// leaves.
pub(crate) fn leftover_slots() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !switched_off("CUPREEMPT_LOOKS"))
}

/// Whether a launch's first instance may start while the kernel before it in its stream
/// drains (programmatic dependent launch; docs/runtime.md, "Launches that overlap").
/// `CUPREEMPT_OVERLAP=0` launches every instance after its predecessor has ended.
pub fn overlap_launches() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !switched_off("CUPREEMPT_OVERLAP"))
}

/// Whether environment variable `name`, a switch that is on unless said, is `0`.
pub(crate) fn switched_off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "0")
}

/// Runs `f` at the process's exit (C's `atexit`: handlers registered later run earlier, which
/// the preload's handler relies on to run before the CUDA runtime's teardown). `f` must only
/// touch statics, and never panic.
pub(crate) fn at_exit(f: extern "C" fn()) {
    extern "C" {
        fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
    }
    // SAFETY: `atexit` only stores the pointer; `f` is a plain function that lives for ever.
    unsafe { atexit(f) };
}

/// `CUPREEMPT_TRACE_SETUP=1`: the runtime's one-time setup, step by step, on stderr: each
/// step with the host time since the previous one and since the first (the first call only
/// starts the clock), and the thread that took it. The first 40 lines only: the per-launch
/// steps would repeat for ever.
pub(crate) fn trace_setup(step: &str) {
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;
    static ON: OnceLock<bool> = OnceLock::new();
    static LAST: Mutex<(Option<(Instant, Instant)>, u32)> = Mutex::new((None, 0));
    if !*ON.get_or_init(|| std::env::var_os("CUPREEMPT_TRACE_SETUP").is_some()) {
        return;
    }
    let now = Instant::now();
    let mut guard = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let (clock, lines) = &mut *guard;
    if *lines >= 40 {
        return;
    }
    *lines += 1;
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("application");
    match *clock {
        Some((first, prev)) => eprintln!(
            "cupreempt setup: {step}: {:.1} us (at {:.1} us, {thread})",
            (now - prev).as_secs_f64() * 1e6,
            (now - first).as_secs_f64() * 1e6
        ),
        None => eprintln!("cupreempt setup: {step} ({thread})"),
    }
    *clock = Some((clock.map_or(now, |c| c.0), now));
}
pub use config::{persistent_blocks, LaunchConfig, Limits};
pub use driver::{driver_available, CUstream};
pub use error::{Error, Result};
pub use history::Original;
pub use kernel::StreamRef;
pub use kernel::{Kernel, KernelArgs, Progress};
pub use runtime::{Function, Module, Runtime};
