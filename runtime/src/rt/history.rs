//! Which form a launch of the C ABI takes: preemptible (the persistent wrapper) or the original
//! kernel as written.
//!
//! Preempting a launch that ends sooner than a preemption would land buys nothing: waiting for
//! its end keeps the same latency promise. Such launches pay the persistent form's fixed costs
//! (claims, the tail's wait, the end event: microseconds per launch) for no gain, and programs
//! that launch many short kernels lose most to them. So the runtime remembers, per kernel and
//! configuration, how long its last preemptible launch ran (the tail reports it in the host
//! mirror, [`HostMirror::run_ns`]); while that is at most the short-launch limit, launches of
//! the same kernel and configuration run the original kernel, and every `REMEASURE`-th one runs
//! preemptible again to measure anew. A launch with nothing measured yet is preemptible.

use super::pool::Mirror;
use crate::control::HostMirror;
use std::collections::HashMap;
use std::ptr::addr_of;
use std::sync::Mutex;

/// Launches in the original form between two measuring (preemptible) launches.
const REMEASURE: u32 = 128;
/// Default short-launch limit: the preemption latency the runtime promises (docs/runtime.md).
const DEFAULT_SHORT_NS: u64 = 30_000;

/// A kernel and the configuration of one of its launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LaunchKey {
    pub func: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
}

#[derive(Default)]
struct Entry {
    /// Run time of the newest measured preemptible launch.
    run_ns: Option<u64>,
    /// The newest preemptible launch not yet measured: its mirror and launch number.
    pending: Option<(Mirror, u64)>,
    /// Original-form launches since the last preemptible one.
    original_since: u32,
}

// SAFETY: the mirror pointers point to pinned memory that lives as long as the runtime, and
// are only read (volatile) under the history's lock.
unsafe impl Send for Entry {}

pub(crate) struct History {
    entries: Mutex<HashMap<LaunchKey, Entry>>,
    /// Launches that ran at most this long are short (0: every launch is preemptible).
    short_ns: u64,
}

/// Why a launch runs the original kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Original {
    /// An earlier launch of the kernel with the same configuration ran this long (ns).
    Short(u64),
    /// The stream is being captured into a graph: the launch becomes a graph node, and the
    /// runtime's per-launch state (control block, events) cannot follow it there.
    Capture,
}

impl std::fmt::Display for Original {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Original::Short(ns) => write!(
                f,
                "short launch: the last preemptible launch of this kernel and configuration \
                 ran {:.1} us, less than a preemption takes",
                *ns as f64 / 1e3
            ),
            Original::Capture => write!(
                f,
                "the stream is being captured into a CUDA graph; graph launches are not \
                 preemptible"
            ),
        }
    }
}

impl History {
    /// The limit from `CUPREEMPT_SHORT_US` (microseconds; 0 turns the original form off).
    pub fn from_env() -> History {
        let short_ns = std::env::var("CUPREEMPT_SHORT_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SHORT_NS, |us| us.saturating_mul(1000));
        History {
            entries: Mutex::new(HashMap::new()),
            short_ns,
        }
    }

    /// `Some(why)` when this launch should run the original kernel.
    pub fn choose(&self, key: &LaunchKey) -> Option<Original> {
        if self.short_ns == 0 {
            return None;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.get_mut(key)?;
        if let Some((mirror, launch)) = e.pending {
            match measured(mirror, launch) {
                Measured::Ran(ns) => {
                    e.run_ns = Some(ns);
                    e.pending = None;
                }
                Measured::Reused => e.pending = None,
                Measured::Running => {}
            }
        }
        match e.run_ns {
            Some(ns) if ns <= self.short_ns && e.original_since < REMEASURE => {
                e.original_since += 1;
                Some(Original::Short(ns))
            }
            _ => None,
        }
    }

    /// Records a preemptible launch of `key`, whose tail will report its run time in `mirror`.
    pub fn launched(&self, key: LaunchKey, mirror: Mirror, launch: u64) {
        if self.short_ns == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.entry(key).or_default();
        e.original_since = 0;
        if e.pending.is_none() {
            e.pending = Some((mirror, launch));
        }
    }
}

enum Measured {
    Ran(u64),
    Running,
    /// The mirror belongs to a later launch now: that measurement is lost.
    Reused,
}

fn measured(mirror: Mirror, launch: u64) -> Measured {
    let m: *const HostMirror = mirror.host;
    // SAFETY: the mirror is pinned memory owned by the runtime for its whole life; the kernel
    // writes `run_ns` once, the host writes `launch` when it hands the slot out.
    let (ran, owner) = unsafe {
        (
            addr_of!((*m).run_ns).read_volatile(),
            addr_of!((*m).launch).read_volatile(),
        )
    };
    if owner != launch {
        Measured::Reused
    } else if ran == 0 {
        Measured::Running
    } else {
        Measured::Ran(ran)
    }
}
