//! `CUPREEMPT_TRACE_LAUNCH=1`: where a preemptible launch's host time goes. Each step of
//! `cupreempt_rt_launch_planned` and `cupreempt_rt_release` adds the host time since the
//! previous step of its thread to that step's total and to its histogram; at exit the process
//! prints each step's calls, median and mean time (scripts/probes/launch_path.sh). The mean
//! carries the rare slow calls (a new slab of control blocks, the first calls); the median is
//! the common launch. Off, a step costs one relaxed load.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// The steps, in the order a launch takes them.
#[derive(Clone, Copy)]
pub(crate) enum Step {
    Key,
    Arguments,
    Runtime,
    History,
    Setup,
    KeptOff,
    Limits,
    Occupancy,
    SlabScan,
    SlabZero,
    SlabGrow,
    ZeroWait,
    ControlBlock,
    Handle,
    LaunchCall,
    EndEvent,
    Capacity,
    Launched,
    Register,
    ReleaseLookup,
    ReleaseAdopt,
}

const STEPS: usize = Step::ReleaseAdopt as usize + 1;

const NAMES: [&str; STEPS] = [
    "launch key",
    "arguments copied",
    "runtime of the context",
    "history (task time)",
    "setup requested",
    "scheduler's SMs kept off",
    "limits and context",
    "occupancy",
    "control block: drained?",
    "control block: slab zeroing",
    "control block: new slab",
    "control block: zeroing check",
    "control block",
    "kernel handle",
    "cuLaunchKernel",
    "end event",
    "capacity",
    "history (launched)",
    "handle registered",
    "release: lookup",
    "release: adopt or drop",
];

static TOTAL_NS: [AtomicU64; STEPS] = [const { AtomicU64::new(0) }; STEPS];
static CALLS: [AtomicU64; STEPS] = [const { AtomicU64::new(0) }; STEPS];
/// Histogram buckets of `BUCKET_NS` each; the last one holds everything above.
const BUCKETS: usize = 256;
const BUCKET_NS: u64 = 50;
static HISTOGRAM: [[AtomicU64; BUCKETS]; STEPS] =
    [const { [const { AtomicU64::new(0) }; BUCKETS] }; STEPS];

thread_local! {
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = std::env::var_os("CUPREEMPT_TRACE_LAUNCH").is_some();
        if on {
            super::at_exit(print_at_exit);
        }
        on
    })
}

/// Starts this thread's clock (the entry of a traced call).
pub(crate) fn begin() {
    if on() {
        LAST.with(|l| l.set(Some(Instant::now())));
    }
}

/// Ends `step`: the time since the thread's previous step (or `begin`) is its.
pub(crate) fn lap(step: Step) {
    if !on() {
        return;
    }
    let now = Instant::now();
    if let Some(prev) = LAST.with(|l| l.replace(Some(now))) {
        let (i, ns) = (step as usize, (now - prev).as_nanos() as u64);
        TOTAL_NS[i].fetch_add(ns, Ordering::Relaxed);
        CALLS[i].fetch_add(1, Ordering::Relaxed);
        HISTOGRAM[i][((ns / BUCKET_NS) as usize).min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The median of step `i` in µs: the middle of its bucket (">" past the last one).
fn median_us(i: usize, calls: u64) -> String {
    let mut seen = 0;
    for (b, n) in HISTOGRAM[i].iter().enumerate() {
        seen += n.load(Ordering::Relaxed);
        if 2 * seen >= calls {
            if b == BUCKETS - 1 {
                return format!(">{:.2}", (b as u64 * BUCKET_NS) as f64 / 1e3);
            }
            return format!("{:.3}", (b as u64 * BUCKET_NS + BUCKET_NS / 2) as f64 / 1e3);
        }
    }
    "-".to_string()
}

fn table() -> String {
    let mut out = String::from(
        "cupreempt: preemptible launch, host time by step (median, bucket of 0.05 us; mean):\n",
    );
    let mut sum = 0.0;
    for i in 0..STEPS {
        let calls = CALLS[i].load(Ordering::Relaxed);
        if calls == 0 {
            continue;
        }
        let mean_us = TOTAL_NS[i].load(Ordering::Relaxed) as f64 / calls as f64 / 1e3;
        sum += mean_us;
        let median = median_us(i, calls);
        out += &format!(
            "  {:28} {calls:8} calls {median:>8} us {mean_us:8.3} us\n",
            NAMES[i]
        );
    }
    out += &format!(
        "  {:28} {:14} {:>8}    {sum:8.3} us\n",
        "sum of means", "", ""
    );
    out
}

extern "C" fn print_at_exit() {
    use std::io::Write;
    // Not eprint!: it panics when stderr is gone, and a panic here would abort the exit.
    let _ = write!(std::io::stderr(), "{}", table());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_has_a_name_and_the_table_lists_the_steps_taken() {
        assert_eq!(NAMES.len(), STEPS);
        let i = Step::LaunchCall as usize;
        TOTAL_NS[i].fetch_add(4_120, Ordering::Relaxed);
        CALLS[i].fetch_add(3, Ordering::Relaxed);
        HISTOGRAM[i][20].fetch_add(2, Ordering::Relaxed);
        HISTOGRAM[i][BUCKETS - 1].fetch_add(1, Ordering::Relaxed);
        let t = table();
        let line = t
            .lines()
            .find(|l| l.contains("cuLaunchKernel"))
            .unwrap_or_default();
        assert!(line.contains("3 calls"), "{t}");
        assert!(
            line.contains("1.025 us"),
            "median, middle of bucket 20: {t}"
        );
        assert!(line.contains("1.373 us"), "mean: {t}");
        assert!(!t.contains("release: lookup"), "{t}");
    }
}
