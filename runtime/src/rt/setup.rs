//! The runtime's one-time setup, off the first launch's path.
//!
//! A runtime is made at the first launch of a context (it needs the context, which exists only
//! once the program has called CUDA). What a preemptible launch needs beyond that costs far
//! more than a launch: the runtime's streams (about 300 us of host time on the H100) and the
//! first slab of control blocks, whose host mirrors are the process's first pinned, mapped
//! memory (about 1 ms the first time, measured with scripts/probes/pinned_setup.cu). A setup
//! thread does both; until it is done, launches planned by `cupreempt_rt_plan` run
//! the original kernel (a launch that asks for a preemptible kernel outright waits for the
//! slab instead). The thread is started when the library is loaded, where it also finds and
//! opens libcuda, so that the first launch pays for neither.
//!
//! The setup's driver calls hold locks that the application's own calls wait for: a launch
//! made meanwhile returns only when the pinned allocation or a stream is made, and a program
//! that times its launches with events sees that time as its kernel's
//! (scripts/probes/setup_interference.sh: the kernel itself runs no slower). So the setup
//! starts only when a launch needs it (the first one planned preemptible, `request_setup`),
//! and then at a quiet moment: once the application has planned no launch for `QUIET`, which
//! is usually when it waits for its work or does host work between launches (or after
//! `MAX_WAIT`, should its launches never pause).

use super::runtime::Inner;
use cudarc::driver::sys;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long the application must have planned no launch before the setup starts.
const QUIET: Duration = Duration::from_micros(200);
/// The setup starts after this long whether or not the application pauses.
const MAX_WAIT: Duration = Duration::from_millis(50);

/// A monotonic clock in ns (since the process first looked at it), cheap enough for every
/// planned launch to stamp `Inner::last_plan_ns`.
pub(crate) fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Waits until the application has planned no launch for `QUIET`, or `MAX_WAIT` has passed.
fn wait_for_quiet(inner: &Inner) {
    let start = Instant::now();
    while start.elapsed() < MAX_WAIT {
        let since = now_ns().saturating_sub(inner.last_plan_ns.load(Ordering::Relaxed));
        let quiet_ns = QUIET.as_nanos() as u64;
        if since >= quiet_ns {
            return;
        }
        std::thread::sleep(Duration::from_nanos(quiet_ns - since));
    }
}

/// The setup thread's queue, and the process that started it (a forked child has no thread).
type Worker = Option<(u32, Sender<Arc<Inner>>)>;
static WORKER: OnceLock<Mutex<Worker>> = OnceLock::new();

fn worker() -> &'static Mutex<Worker> {
    WORKER.get_or_init(|| Mutex::new(None))
}

/// Starts the setup thread (once per process); it opens libcuda first.
pub(crate) fn start() {
    let mut w = worker().lock().unwrap_or_else(|p| p.into_inner());
    if w.as_ref()
        .is_some_and(|(pid, _)| *pid == std::process::id())
    {
        return;
    }
    let (tx, rx) = channel::<Arc<Inner>>();
    let spawned = std::thread::Builder::new()
        .name("cupreempt-setup".into())
        .spawn(move || {
            if super::driver::driver_available() {
                // The driver API's library handle and a first symbol, so that the first
                // launch does not search the library path again (no cuInit here: a program
                // may fork before it uses CUDA, and a child of an initialized driver cannot).
                // SAFETY: the library is present; cuDriverGetVersion needs no cuInit.
                unsafe {
                    let _ = sys::culib();
                    let mut version = 0;
                    let _ = sys::cuDriverGetVersion(&mut version);
                }
            }
            for inner in rx {
                set_up(&inner, true);
            }
        });
    *w = spawned.ok().map(|_| (std::process::id(), tx));
}

/// Has `inner` set up in the background (or here, when no thread can be had).
pub(crate) fn set_up_later(inner: Arc<Inner>) {
    start();
    let w = worker().lock().unwrap_or_else(|p| p.into_inner());
    let inner = match w.as_ref() {
        Some((_, tx)) => match tx.send(inner) {
            Ok(()) => return,
            Err(e) => e.0,
        },
        None => inner,
    };
    drop(w);
    set_up(&inner, false);
}

/// `quiet`: first wait for a quiet moment (the setup thread; not the application's own).
fn set_up(inner: &Inner, quiet: bool) {
    if quiet {
        wait_for_quiet(inner);
        super::trace_setup("setup thread: the application paused");
    }
    if inner.current().is_ok() {
        // Another thread may be capturing a stream in the global mode, which forbids every
        // thread the allocations below unless this one says it works outside captures.
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a thread-local setting of this thread, which only does setup.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        let _ = inner.streams();
        let _ = inner.first_slab();
    }
    inner.mark_ready();
    super::trace_setup("setup thread: streams and first slab");
}
