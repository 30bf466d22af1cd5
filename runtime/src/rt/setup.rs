//! The runtime's one-time setup, off the first launch's path.
//!
//! A runtime is made for a context after its first planned launch, by the setup thread at a
//! quiet moment (below): that launch, and every one until the runtime exists, runs the original
//! kernel, so that a program's first launch (which many programs time) costs the driver's
//! current context and a message, not the runtime's queries (the SM count, the original
//! kernel's occupancy). What a preemptible launch needs beyond the runtime costs far more than
//! a launch: the runtime's streams (about 300 us of host time on the H100) and the
//! first slab of control blocks, whose host mirrors are the process's first pinned, mapped
//! memory (about 1 ms the first time, measured with scripts/probes/pinned_setup.cu). A setup
//! thread does both; until it is done, launches planned by `cupreempt_rt_plan` run
//! the original kernel (a launch that asks for a preemptible kernel outright waits for the
//! slab instead). The thread is started when the library is loaded, where it also finds and
//! opens libcuda and faults in the library's own pages (`warm.rs`), so that the first launch
//! pays for none of these.
//!
//! The setup's driver calls hold locks that the application's own calls wait for: a launch
//! made meanwhile returns only when the pinned allocation or a stream is made, and a program
//! that times its launches with events sees that time as its kernel's
//! (scripts/probes/setup_interference.sh: the kernel itself runs no slower). So the setup
//! starts only when a launch needs it (the first one planned preemptible, `request_setup`),
//! and then at a quiet moment: once the application has planned no launch for `QUIET`, which
//! is usually when it waits for its work or does host work between launches (or after
//! `MAX_WAIT`, should its launches never pause).

use super::driver::ContextKey;
use super::runtime::{Inner, Runtime};
use cudarc::driver::sys;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// When the application last planned a launch (`now_ns`), of any context.
static LAST_PLAN_NS: AtomicU64 = AtomicU64::new(0);

/// A launch is being planned: the setup waits for a pause.
pub(crate) fn note_plan() {
    LAST_PLAN_NS.store(now_ns(), Ordering::Relaxed);
}

/// Waits until the application has planned no launch for `QUIET`, or `MAX_WAIT` has passed.
fn wait_for_quiet() {
    let start = Instant::now();
    while start.elapsed() < MAX_WAIT {
        let since = now_ns().saturating_sub(LAST_PLAN_NS.load(Ordering::Relaxed));
        let quiet_ns = QUIET.as_nanos() as u64;
        if since >= quiet_ns {
            return;
        }
        std::thread::sleep(Duration::from_nanos(quiet_ns - since));
    }
}

/// What the setup thread does: make the runtime of a context (a `CUcontext` as an address), or
/// a runtime's streams and first slab.
enum Job {
    Make(ContextKey),
    SetUp(Arc<Inner>),
}

/// The setup thread's queue, and the process that started it (a forked child has no thread).
type Worker = Option<(u32, Sender<Job>)>;
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
    let (tx, rx) = channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("cupreempt-setup".into())
        .spawn(move || {
            super::driver::preload();
            super::warm::fault_in_own_pages();
            // The plan's settings (the environment), read here rather than in a first launch.
            super::plan::read_settings();
            for job in rx {
                match job {
                    Job::Make(ctx) => make(ctx, true),
                    Job::SetUp(inner) => set_up(&inner, true),
                }
            }
        });
    *w = spawned.ok().map(|_| (std::process::id(), tx));
}

/// Hands `job` to the setup thread; gives it back when no thread can be had.
fn send(job: Job) -> Option<Job> {
    start();
    let w = worker().lock().unwrap_or_else(|p| p.into_inner());
    match w.as_ref() {
        Some((_, tx)) => tx.send(job).err().map(|e| e.0),
        None => Some(job),
    }
}

/// Has `inner` set up in the background (or here, when no thread can be had).
pub(crate) fn set_up_later(inner: Arc<Inner>) {
    if let Some(Job::SetUp(inner)) = send(Job::SetUp(inner)) {
        set_up(&inner, false);
    }
}

/// Has the runtime of context `ctx` made in the background (or here, when no thread can be
/// had), once per context.
pub(crate) fn make_later(ctx: ContextKey) {
    static ASKED: Mutex<Vec<(u32, ContextKey)>> = Mutex::new(Vec::new());
    {
        let mut asked = ASKED.lock().unwrap_or_else(|p| p.into_inner());
        let me = (std::process::id(), ctx);
        if asked.contains(&me) {
            return;
        }
        asked.push(me);
    }
    if let Some(Job::Make(ctx)) = send(Job::Make(ctx)) {
        make(ctx, false);
    }
}

/// Makes and registers the runtime of context `ctx` (`quiet`: first wait for a quiet moment).
fn make(ctx: ContextKey, quiet: bool) {
    if quiet {
        wait_for_quiet();
    }
    // Silently otherwise: the program may have destroyed the context meanwhile (a
    // cudaDeviceReset before it exits), and its launches then run the original kernel.
    if let Ok(rt) = Runtime::for_context(ctx.raw()) {
        // Made at the address of a context that a reset replaced meanwhile: the runtime is
        // the new context's, which a launch there will ask for under its own key.
        if ContextKey::of(ctx.raw()) == ctx {
            super::capi::register_runtime(ctx, rt);
        }
    }
    super::trace_setup("setup thread: runtime made");
}

/// `quiet`: first wait for a quiet moment (the setup thread; not the application's own).
fn set_up(inner: &Inner, quiet: bool) {
    if quiet {
        wait_for_quiet();
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
        let _ = inner.warm_command_path();
        super::preload::load_wrappers();
    }
    inner.mark_ready();
    super::trace_setup("setup thread: streams and first slab");
}
