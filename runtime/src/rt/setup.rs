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

use super::runtime::Inner;
use cudarc::driver::sys;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

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
            let _ = super::driver::driver_available();
            for inner in rx {
                set_up(&inner);
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
    set_up(&inner);
}

fn set_up(inner: &Inner) {
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
