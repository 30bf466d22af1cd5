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
//! preemptible again to measure anew.
//!
//! A configuration not seen before (programs whose grids change from launch to launch) is
//! judged from the same kernel with the same block size and shared memory: its time per wave
//! (run time over the waves of resident blocks it took) times the new grid's waves. That
//! prediction must come in under half the limit, as tasks may do more work in a larger grid.
//! A launch with nothing measured yet is preemptible.
//!
//! The persistent form of a kernel of very short tasks can take several times as long as the
//! original (its claims and bookkeeping), so a launch whose original form is short may measure
//! long preemptible. A configuration whose preemptible launch ran at most `TRIAL_FACTOR` times
//! the limit therefore gets one *timed trial*: its next launch runs the original kernel between
//! two timed events (and launches made before the trial's end is known run the original too).
//! If that took at most the limit, the configuration is short on the trial's time; every
//! `REMEASURE`-th launch is then another timed trial (cheaper than a preemptible run), and a
//! trial over the limit makes the configuration preemptible again, with no other trial until
//! `REMEASURE` preemptible launches have been made.

use super::fast_hash::FastMap;
use super::pool::Mirror;
use crate::control::HostMirror;
use std::ptr::addr_of;
use std::sync::Mutex;

/// Launches in the original form between two measuring (preemptible) launches.
const REMEASURE: u32 = 128;
/// Default short-launch limit: the preemption latency the runtime promises (docs/runtime.md).
const DEFAULT_SHORT_NS: u64 = 30_000;
/// Preemptible launches up to this many times the limit get a timed trial of the original.
const TRIAL_FACTOR: u64 = 4;

/// A timed trial of the original kernel: its run time once its end event is done.
pub(crate) trait Stopwatch: Send {
    /// `None` while the launch is still running (or its time cannot be read).
    fn elapsed_ns(&self) -> Option<u64>;
}

/// A kernel and the configuration of one of its launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LaunchKey {
    pub func: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
}

impl LaunchKey {
    fn shape(&self) -> (usize, [u32; 3], u32) {
        (self.func, self.block, self.smem)
    }
    pub(crate) fn tasks(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }
}

/// Waves of `capacity` resident blocks that `tasks` tasks take.
fn waves(tasks: u64, capacity: u64) -> u64 {
    tasks.div_ceil(capacity.max(1)).max(1)
}

#[derive(Default)]
struct Entry {
    /// Resident blocks of the measured launches (per SM times SMs).
    capacity: u64,
    /// Run time of the newest measured preemptible launch.
    run_ns: Option<u64>,
    /// The newest preemptible launch not yet measured: its mirror and launch number.
    pending: Option<(Mirror, u64)>,
    /// Original-form launches since the last measurement.
    original_since: u32,
    /// Run time of the newest timed trial of the original form, when it is newer than
    /// `run_ns`.
    trial_ns: Option<u64>,
    /// A timed trial still running.
    trial: Option<Box<dyn Stopwatch>>,
    /// A trial found the original form long; no other until `REMEASURE` preemptible launches
    /// have been made since (counted in `preemptible_since_trial`).
    tried: bool,
    /// Preemptible launches since the last timed trial.
    preemptible_since_trial: u32,
}

// SAFETY: the mirror pointers point to pinned memory that lives as long as the runtime, and
// are only read (volatile) under the history's lock.
unsafe impl Send for Entry {}

#[derive(Default)]
struct Entries {
    by_config: FastMap<LaunchKey, Entry>,
    /// Per kernel, block size and shared memory: the newest time per wave measured.
    per_wave_ns: FastMap<(usize, [u32; 3], u32), u64>,
    /// Launches in the original form on a prediction, per kernel shape, since a measurement.
    predicted_since: FastMap<(usize, [u32; 3], u32), u32>,
}

pub(crate) struct History {
    entries: Mutex<Entries>,
    /// Launches that ran at most this long are short (0: every launch is preemptible).
    short_ns: u64,
}

/// Why a launch runs the original kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Original {
    /// An earlier launch of the kernel with the same configuration ran this long (ns).
    Short(u64),
    /// Launches of the kernel with the same block size in other grids predict this (ns).
    Predicted(u64),
    /// The grid (this many blocks) fits on the GPU at once as the original kernel: every block
    /// starts together, a started task is never interrupted, so the persistent form could
    /// hold nothing back and would only add its costs (and, with more registers than the
    /// original, fewer blocks at once).
    OneWave(u64),
    /// The runtime's setup thread has not made its first slab of control blocks yet.
    Setup,
    /// The stream is being captured into a graph: the launch becomes a graph node, and the
    /// runtime's per-launch state (control block, events) cannot follow it there.
    Capture,
    /// A timed trial of the original kernel: the last preemptible launch ran this long (ns),
    /// a few times the limit, or this many launches ran the original since the last trial.
    Trial(u64),
    /// A timed trial of this kernel and configuration has not ended yet.
    TrialRunning,
    /// The stream's priority (CUDA's number) is below the most urgent one the process has
    /// launched on (the second number): unscheduled, nothing preempts this launch, and as the
    /// original its blocks give the SMs to the urgent stream's blocks as they end, as the
    /// program asked; a persistent kernel's blocks hold them to its end.
    LowerPriority(i32, i32),
    /// Nothing can preempt the launch: no scheduler daemon, no chaos mode, and the launch
    /// shim lets go of the handle at once. The persistent form would cost its time and buy
    /// nothing (`CUPREEMPT_PREEMPTIBLE=1` plans such launches as a scheduled process's).
    Unscheduled,
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
            Original::Predicted(ns) => write!(
                f,
                "short launch: launches of this kernel with this block size in other grids \
                 predict {:.1} us, less than a preemption takes",
                *ns as f64 / 1e3
            ),
            Original::OneWave(blocks) => write!(
                f,
                "all {blocks} blocks fit on the GPU at once, so every task starts at once \
                 and none could be held back"
            ),
            Original::Setup => write!(
                f,
                "the runtime is still setting up (streams, first control blocks); \
                 CUPREEMPT_SETUP=wait makes launches wait for it"
            ),
            Original::Capture => write!(
                f,
                "the stream is being captured into a CUDA graph; graph launches are not \
                 preemptible"
            ),
            Original::TrialRunning => write!(
                f,
                "a timed trial of the original kernel in this configuration is still running"
            ),
            Original::Unscheduled => write!(
                f,
                "no scheduler daemon (CUPREEMPT_SCHEDULER) or chaos mode (CUPREEMPT_CHAOS) \
                 can preempt it; CUPREEMPT_PREEMPTIBLE=1 makes long launches preemptible anyway"
            ),
            Original::LowerPriority(own, urgent) => write!(
                f,
                "the stream's priority ({own}) is below that of another stream the program \
                 launches on ({urgent}); unscheduled, nothing preempts this launch, and as \
                 written its blocks leave the SMs to the urgent stream's kernels as they end"
            ),
            Original::Trial(ns) => write!(
                f,
                "timed trial: the last measurement of this kernel and configuration was \
                 {:.1} us; the original kernel's own time decides whether it is short",
                *ns as f64 / 1e3
            ),
        }
    }
}

/// `CUPREEMPT_SHORT_US` in ns (default `DEFAULT_SHORT_NS`; 0: every launch preemptible).
pub fn short_ns_from_env() -> u64 {
    std::env::var("CUPREEMPT_SHORT_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_SHORT_NS, |us| us.saturating_mul(1000))
}

impl History {
    /// The limit from `CUPREEMPT_SHORT_US` (microseconds; 0 turns the original form off).
    pub fn from_env() -> History {
        History {
            entries: Mutex::new(Entries::default()),
            short_ns: short_ns_from_env(),
        }
    }

    /// `Some(why)` when this launch should run the original kernel. `capacity`: resident
    /// blocks of the wrapper for this configuration (per SM times SMs).
    pub fn choose(&self, key: &LaunchKey, capacity: u64) -> Option<Original> {
        if self.short_ns == 0 {
            return None;
        }
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entries = &mut *guard;
        if let Some(e) = entries.by_config.get_mut(key) {
            if let Some((mirror, launch)) = e.pending {
                match measured(mirror, launch) {
                    Measured::Ran(ns) => {
                        e.run_ns = Some(ns);
                        e.pending = None;
                        let per_wave = ns / waves(key.tasks(), e.capacity);
                        entries.per_wave_ns.insert(key.shape(), per_wave);
                        entries.predicted_since.insert(key.shape(), 0);
                    }
                    Measured::Reused => e.pending = None,
                    Measured::Running => {}
                }
            }
            if let Some(sw) = &e.trial {
                if let Some(ns) = sw.elapsed_ns() {
                    e.trial = None;
                    e.trial_ns = Some(ns);
                    let per_wave = ns / waves(key.tasks(), capacity);
                    entries.per_wave_ns.insert(key.shape(), per_wave);
                    entries.predicted_since.insert(key.shape(), 0);
                } else {
                    return Some(Original::TrialRunning);
                }
            }
            if let Some(ns) = e.trial_ns {
                if ns > self.short_ns {
                    e.trial_ns = None; // the original is long too: preemptible from now on
                    return None;
                }
                if e.original_since < REMEASURE {
                    e.original_since += 1;
                    return Some(Original::Short(ns));
                }
                return Some(Original::Trial(ns));
            }
            if let Some(ns) = e.run_ns {
                if ns <= self.short_ns && e.original_since < REMEASURE {
                    e.original_since += 1;
                    return Some(Original::Short(ns));
                }
                if ns > self.short_ns
                    && ns <= self.short_ns.saturating_mul(TRIAL_FACTOR)
                    && !e.tried
                {
                    return Some(Original::Trial(ns));
                }
                return None;
            }
        }
        let per_wave = *entries.per_wave_ns.get(&key.shape())?;
        let predicted = per_wave.saturating_mul(waves(key.tasks(), capacity));
        let since = entries.predicted_since.entry(key.shape()).or_default();
        if predicted.saturating_mul(2) <= self.short_ns && *since < REMEASURE {
            *since += 1;
            return Some(Original::Predicted(predicted));
        }
        None
    }

    /// The last measured preemptible launch of `key`: how long it ran (ns) and its time per
    /// task, from one look at the history (the launch path asks for both). The time per task
    /// is the run time over the tasks that each of its blocks ran one after another
    /// (`tasks / min(tasks, capacity)`). The ramp and the drain count as task time, so the
    /// figure errs long, which keeps the first chunks that it sizes short.
    pub fn measured(&self, key: &LaunchKey) -> Option<(u64, u32)> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.by_config.get(key)?;
        let run_ns = e.run_ns?;
        let tasks = key.tasks();
        let in_turn = tasks.div_ceil(tasks.min(e.capacity).max(1)).max(1);
        Some((
            run_ns,
            u32::try_from(run_ns / in_turn).unwrap_or(u32::MAX).max(1),
        ))
    }

    /// The time per task (ns) of `measured`, or 0 when none was measured.
    #[cfg(test)]
    fn task_ns(&self, key: &LaunchKey) -> u32 {
        self.measured(key).map_or(0, |(_, task_ns)| task_ns)
    }

    /// Records a timed trial of the original form of `key` (after `choose` said `Trial`).
    pub fn trial_started(&self, key: LaunchKey, stopwatch: Box<dyn Stopwatch>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.by_config.entry(key).or_default();
        e.trial = Some(stopwatch);
        e.tried = true;
        e.preemptible_since_trial = 0;
        e.original_since = 0;
    }

    /// Records a preemptible launch of `key`, whose tail will report its run time in `mirror`.
    pub fn launched(&self, key: LaunchKey, capacity: u64, mirror: Mirror, launch: u64) {
        if self.short_ns == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.by_config.entry(key).or_default();
        e.original_since = 0;
        // One trial per REMEASURE preemptible launches, not one per launch: a configuration
        // whose preemptible form runs a few times the limit and whose original is long too
        // would otherwise alternate a preemptible launch, a trial and the launches made while
        // the trial runs (all in the original form, none preemptible; on the H100 three in
        // four of stencil small's launches).
        e.preemptible_since_trial = e.preemptible_since_trial.saturating_add(1);
        if e.preemptible_since_trial >= REMEASURE {
            e.tried = false;
        }
        e.trial_ns = None;
        if e.pending.is_none() {
            e.pending = Some((mirror, launch));
            e.capacity = capacity;
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

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeMirror(Box<HostMirror>);

    impl FakeMirror {
        fn new(launch: u64) -> FakeMirror {
            // SAFETY: every field of HostMirror is an integer or an array of integers.
            let mut m: Box<HostMirror> = Box::new(unsafe { std::mem::zeroed() });
            m.launch = launch;
            FakeMirror(m)
        }
        fn mirror(&mut self) -> Mirror {
            Mirror {
                host: &mut *self.0,
                device: 0,
            }
        }
    }

    fn key(grid: u32) -> LaunchKey {
        LaunchKey {
            func: 0x1000,
            grid: [grid, 1, 1],
            block: [256, 1, 1],
            smem: 0,
        }
    }

    fn history(short_us: u64) -> History {
        History {
            entries: Mutex::new(Entries::default()),
            short_ns: short_us * 1000,
        }
    }

    const CAPACITY: u64 = 1000;

    #[test]
    fn preemptible_until_a_short_run_is_measured() {
        let h = history(30);
        let mut m = FakeMirror::new(7);
        assert_eq!(h.choose(&key(4000), CAPACITY), None, "nothing measured yet");
        h.launched(key(4000), CAPACITY, m.mirror(), 7);
        assert_eq!(h.choose(&key(4000), CAPACITY), None, "still running");
        m.0.run_ns = 12_000;
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::Short(12_000))
        );
    }

    #[test]
    fn long_runs_stay_preemptible() {
        let h = history(30);
        let mut m = FakeMirror::new(1);
        h.launched(key(4000), CAPACITY, m.mirror(), 1);
        m.0.run_ns = 30_000 * TRIAL_FACTOR + 1_000;
        assert_eq!(h.choose(&key(4000), CAPACITY), None);
        assert_eq!(h.choose(&key(4000), CAPACITY), None);
    }

    #[test]
    fn every_remeasure_th_launch_is_preemptible_again() {
        let h = history(30);
        let mut m = FakeMirror::new(1);
        h.launched(key(10), CAPACITY, m.mirror(), 1);
        m.0.run_ns = 5_000;
        for _ in 0..REMEASURE {
            assert!(h.choose(&key(10), CAPACITY).is_some());
        }
        assert_eq!(h.choose(&key(10), CAPACITY), None, "time to measure again");
        // The measuring launch runs long this time: the kernel stays preemptible.
        let mut m2 = FakeMirror::new(2);
        h.launched(key(10), CAPACITY, m2.mirror(), 2);
        m2.0.run_ns = 30_000 * TRIAL_FACTOR + 1_000;
        assert_eq!(h.choose(&key(10), CAPACITY), None);
    }

    #[test]
    fn a_reused_mirror_is_not_read_as_a_measurement() {
        let h = history(30);
        let mut m = FakeMirror::new(3);
        h.launched(key(10), CAPACITY, m.mirror(), 3);
        m.0.launch = 99; // the slot went to another launch
        m.0.run_ns = 1_000;
        assert_eq!(h.choose(&key(10), CAPACITY), None);
    }

    #[test]
    fn other_grids_are_predicted_per_wave_with_a_margin() {
        let h = history(30);
        let mut m = FakeMirror::new(1);
        // 4 waves in 20 us: 5 us per wave.
        h.launched(key(4000), CAPACITY, m.mirror(), 1);
        m.0.run_ns = 20_000;
        assert!(h.choose(&key(4000), CAPACITY).is_some());
        // 3 waves: 15 us, twice that is within 30 us.
        assert_eq!(
            h.choose(&key(2500), CAPACITY),
            Some(Original::Predicted(15_000))
        );
        // 4 waves predicted 20 us: twice that is over the limit.
        assert_eq!(h.choose(&key(3900), CAPACITY), None);
        // Another block size is another shape: nothing to predict from.
        let other = LaunchKey {
            block: [128, 1, 1],
            ..key(2500)
        };
        assert_eq!(h.choose(&other, CAPACITY), None);
    }

    /// A trial whose time is set by the test (None: still running).
    struct FakeStopwatch(std::sync::Arc<Mutex<Option<u64>>>);

    impl Stopwatch for FakeStopwatch {
        fn elapsed_ns(&self) -> Option<u64> {
            *self.0.lock().unwrap()
        }
    }

    fn measured_preemptible(h: &History, k: LaunchKey, m: &mut FakeMirror, ns: u64) {
        h.launched(k, CAPACITY, m.mirror(), m.0.launch);
        m.0.run_ns = ns;
    }

    #[test]
    fn time_per_task_comes_from_the_last_measured_preemptible_launch() {
        let h = history(30);
        assert_eq!(h.task_ns(&key(4000)), 0, "nothing launched");
        let mut m = FakeMirror::new(1);
        h.launched(key(4000), CAPACITY, m.mirror(), 1);
        assert_eq!(h.task_ns(&key(4000)), 0, "still running");
        m.0.run_ns = 80_000;
        h.choose(&key(4000), CAPACITY);
        // 4,000 tasks on 1,000 resident blocks: 4 in turn per block.
        assert_eq!(h.task_ns(&key(4000)), 20_000);
        assert_eq!(h.task_ns(&key(4001)), 0, "another configuration");
        let mut m = FakeMirror::new(2);
        measured_preemptible(&h, key(500), &mut m, 9_000);
        h.choose(&key(500), CAPACITY);
        assert_eq!(
            h.task_ns(&key(500)),
            9_000,
            "fewer tasks than blocks: one each"
        );
    }

    #[test]
    fn a_few_times_the_limit_gets_a_timed_trial_of_the_original() {
        let h = history(30);
        let mut m = FakeMirror::new(1);
        measured_preemptible(&h, key(4000), &mut m, 70_000);
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::Trial(70_000))
        );
        let time = std::sync::Arc::new(Mutex::new(None));
        h.trial_started(key(4000), Box::new(FakeStopwatch(time.clone())));
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::TrialRunning),
            "no second trial while the first runs"
        );
        *time.lock().unwrap() = Some(18_000);
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::Short(18_000))
        );
        // Every REMEASURE-th launch is another timed trial.
        for _ in 1..REMEASURE {
            assert_eq!(
                h.choose(&key(4000), CAPACITY),
                Some(Original::Short(18_000))
            );
        }
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::Trial(18_000))
        );
    }

    /// A configuration measured at 70 us preemptible, whose timed trial of the original then
    /// took 45 us (over the 30 us limit): the launch after the trial is preemptible.
    fn after_a_long_trial() -> History {
        let h = history(30);
        let mut m = FakeMirror::new(1);
        measured_preemptible(&h, key(4000), &mut m, 70_000);
        assert!(matches!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::Trial(_))
        ));
        let time = std::sync::Arc::new(Mutex::new(Some(45_000)));
        h.trial_started(key(4000), Box::new(FakeStopwatch(time)));
        assert_eq!(h.choose(&key(4000), CAPACITY), None);
        h
    }

    #[test]
    fn a_long_trial_makes_the_configuration_preemptible() {
        let h = after_a_long_trial();
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            None,
            "one trial per measurement"
        );
    }

    #[test]
    fn a_long_trial_holds_for_remeasure_preemptible_launches() {
        let h = after_a_long_trial();
        // Each later preemptible launch measures a few times the limit again: no trial (and
        // none of the launches made while one would run in the original form) until
        // REMEASURE of them have been made.
        for launch in 2..REMEASURE as u64 + 1 {
            let mut m = FakeMirror::new(launch);
            measured_preemptible(&h, key(4000), &mut m, 70_000);
            assert_eq!(
                h.choose(&key(4000), CAPACITY),
                None,
                "preemptible launch {launch} after a long trial"
            );
        }
        let mut m = FakeMirror::new(REMEASURE as u64 + 1);
        measured_preemptible(&h, key(4000), &mut m, 70_000);
        assert_eq!(
            h.choose(&key(4000), CAPACITY),
            Some(Original::Trial(70_000)),
            "time for another trial"
        );
    }

    #[test]
    fn far_over_the_limit_gets_no_trial() {
        let h = history(30);
        let mut m = FakeMirror::new(1);
        measured_preemptible(&h, key(4000), &mut m, 30_000 * TRIAL_FACTOR + 1);
        assert_eq!(h.choose(&key(4000), CAPACITY), None);
    }

    #[test]
    fn a_zero_limit_turns_the_original_form_off() {
        let h = history(0);
        let mut m = FakeMirror::new(1);
        h.launched(key(10), CAPACITY, m.mirror(), 1);
        m.0.run_ns = 1;
        assert_eq!(h.choose(&key(10), CAPACITY), None);
    }
}
