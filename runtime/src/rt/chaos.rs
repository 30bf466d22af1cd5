//! Chaos mode, for users: `CUPREEMPT_CHAOS=SEED[,MEAN_US]` makes the runtime itself preempt and
//! resume the launches of a transformed program at random moments, with no scheduler, so that
//! anyone can run a program twice (with and without) and compare outputs to check that its
//! kernels survive preemption.
//!
//! With it, every launch that the C ABI plans is preemptible (only stream captures run the
//! original kernel), and each launch whose handle the program lets go of (the launch shim does
//! at once) goes to one chaos thread. That thread waits a random time (uniform, mean
//! `MEAN_US` microseconds, 200 by default), preempts the kernel (on every SM, or on a random
//! half of them one time in four), waits until it has yielded, waits again, resumes it, and so
//! on, until the kernel is complete or has been preempted `MAX_CYCLES` times; then it lets it
//! run to its end. A kernel is never left preempted: dropping a handle resumes it.
//! The random moments come from `SEED` alone, but when they fall in a kernel's run depends on
//! timing: two runs with one seed preempt at different tasks.
//!
//! **One launch preempted at a time, and only once it has started.** A program that queues
//! launches faster than the GPU runs them (HeCBench's lud: 1,534 launches in 0.6 s) fills the
//! driver's command queue behind a preempted kernel; its thread then waits inside
//! `cuLaunchKernel` holding a driver lock, and every driver call of the chaos thread waits
//! for that lock (seen with gdb on the H100: `cuStreamWriteValue32` in `pthread_rwlock_rdlock`).
//! A resume writes the command in the host mirror before any driver call, so the preempted
//! kernel's sleeping block still sees it and finishes the work, the queue drains and the lock
//! comes free. But a second launch preempted meanwhile would never be resumed: the chaos
//! thread waits in a driver call for the first, the second's stream holds the queue full.
//! So while one launch is preempted no other is, and a launch still queued behind earlier
//! work (not started) gets a later moment instead: preempting it tests little and costs a
//! wait for its command to land. The runtime also keeps its own launches from filling the
//! driver's queue (`queued.rs`); this rule covers a queue filled by the program's other work.
//!
//! With `CUPREEMPT_VERBOSE` the chaos thread says at exit what it did (launches, preemptions,
//! waits for yields) and, every 10 s while it works, also what it is doing and where each
//! thread of the process waits: the first clue to a hang.

use super::capi::lock;
use super::command::Target;
use super::kernel::Kernel;
use crate::smset::SmSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Preemptions per launch at most: every launch ends, however short the waits.
pub const MAX_CYCLES: u32 = 8;
const DEFAULT_MEAN_US: u64 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chaos {
    pub seed: u64,
    pub mean_us: u64,
}

/// `SEED[,MEAN_US]`, decimal or 0x-hexadecimal seed, mean wait at least 1 µs.
pub fn parse(v: &str) -> Result<Chaos, String> {
    let (seed, mean) = match v.split_once(',') {
        Some((s, m)) => (s.trim(), Some(m.trim())),
        None => (v.trim(), None),
    };
    let seed = match seed.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => seed.parse::<u64>(),
    }
    .map_err(|_| format!("CUPREEMPT_CHAOS: `{seed}` is no seed (a whole number)"))?;
    let mean_us = match mean {
        None => DEFAULT_MEAN_US,
        Some(m) => match m.parse::<u64>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(format!(
                    "CUPREEMPT_CHAOS: `{m}` is no mean wait (whole microseconds, at least 1)"
                ))
            }
        },
    };
    Ok(Chaos { seed, mean_us })
}

/// The chaos setting of this process (`CUPREEMPT_CHAOS`), read once; a bad value is said on
/// stderr and turns chaos off.
pub fn config() -> Option<Chaos> {
    static C: OnceLock<Option<Chaos>> = OnceLock::new();
    *C.get_or_init(|| {
        let v = std::env::var("CUPREEMPT_CHAOS").ok()?;
        match parse(&v) {
            Ok(c) => {
                eprintln!(
                    "cupreempt: chaos mode: launches preempted and resumed at random (seed {}, mean wait {} us)",
                    c.seed, c.mean_us
                );
                Some(c)
            }
            Err(e) => {
                eprintln!("cupreempt: {e}; chaos mode off");
                None
            }
        }
    })
}

/// Whether chaos mode is on: then `adopt` takes every launch it is given (unless no thread
/// can be had), and a released launch needs a shared handle (`capi::detach_unregistered`).
pub fn enabled() -> bool {
    config().is_some()
}

/// A small deterministic generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A wait, uniform in [0, 2 × mean_us] microseconds.
    pub fn wait(&mut self, mean_us: u64) -> Duration {
        Duration::from_micros(self.next_u64() % (2 * mean_us + 1))
    }
    /// Every SM (three times in four), or a random half of them.
    pub fn target(&mut self, sm_count: u32) -> Target {
        if self.next_u64() % 4 != 0 || sm_count < 2 {
            return Target::All;
        }
        let mut set = SmSet::default();
        let mut chosen = 0;
        for sm in 0..sm_count {
            if self.next_u64() % 2 == 0 && chosen + 1 < sm_count {
                let _ = set.insert(sm);
                chosen += 1;
            }
        }
        if chosen == 0 {
            Target::All
        } else {
            Target::Sms(set)
        }
    }
}

/// What the chaos thread has done, for `CUPREEMPT_VERBOSE`'s lines (at exit, and every
/// `PROGRESS_EVERY` while it works).
struct Counts {
    launches: AtomicU64,
    preemptions: AtomicU64,
    spatial: AtomicU64,
    /// Moments that fell before the launch had started (queued behind earlier work): passed.
    not_started: AtomicU64,
    /// Time spent in `wait_yielded`, in all and at most.
    yield_wait_ns: AtomicU64,
    longest_yield_wait_ns: AtomicU64,
}

static COUNTS: Counts = Counts {
    launches: AtomicU64::new(0),
    preemptions: AtomicU64::new(0),
    spatial: AtomicU64::new(0),
    not_started: AtomicU64::new(0),
    yield_wait_ns: AtomicU64::new(0),
    longest_yield_wait_ns: AtomicU64::new(0),
};

const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Where the chaos thread is, for the progress lines: a step and since when (µs after
/// `EPOCH`), and what it last saw of its launches (refreshed at most once a second).
static STEP: AtomicU64 = AtomicU64::new(0);
static STEP_SINCE_US: AtomicU64 = AtomicU64::new(0);
static SEEN: Mutex<String> = Mutex::new(String::new());
const STEPS: [&str; 6] = [
    "waiting for launches",
    "taking a launch's lock",
    "preempting",
    "waiting for a yield",
    "resuming",
    "asking whether a launch is complete",
];

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn step(n: u64) {
    STEP.store(n, Ordering::Relaxed);
    STEP_SINCE_US.store(epoch().elapsed().as_micros() as u64, Ordering::Relaxed);
}

/// Every `PROGRESS_EVERY`: the counts, the chaos thread's step, what it last saw.
fn watch() {
    loop {
        std::thread::sleep(PROGRESS_EVERY);
        let now = epoch().elapsed().as_micros() as u64;
        let since = now.saturating_sub(STEP_SINCE_US.load(Ordering::Relaxed));
        let step = STEPS
            .get(STEP.load(Ordering::Relaxed) as usize)
            .copied()
            .unwrap_or("?");
        eprintln!(
            "{} so far; the chaos thread: {step} for {:.3} s; {}; threads: {}",
            counts_line(),
            since as f64 / 1e6,
            lock(&SEEN),
            threads()
        );
    }
}

/// Each thread of the process: its name, state and the system call it is in (Linux's
/// /proc/self/task), e.g. `main S futex`: where a process that stopped moving waits.
fn threads() -> String {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return "unknown".into();
    };
    let mut out = Vec::new();
    for task in dir.flatten() {
        let path = task.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        let name = read("comm").trim().to_string();
        let stat = read("stat");
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let call = match read("syscall").split_whitespace().next() {
            Some("running") => "running".to_string(),
            Some("202") => "futex".to_string(),
            Some("16") => "ioctl".to_string(),
            Some("7") => "poll".to_string(),
            Some("35") => "nanosleep".to_string(),
            Some("230") => "clock_nanosleep".to_string(),
            Some(n) => format!("syscall {n}"),
            None => "?".to_string(),
        };
        out.push(format!("{name} {state} {call}"));
    }
    out.join(", ")
}

/// What the chaos thread sees of its launches, in words.
fn seen(tracked: &[Tracked]) -> String {
    let preempted: Vec<String> = tracked
        .iter()
        .filter(|t| t.preempted.is_some())
        .filter_map(|t| {
            let k = t.kernel.try_lock().ok()?;
            // Host memory only, no event query (see `action`).
            let p = k.progress_in_host_memory();
            Some(format!(
                "{} {}/{}{}",
                k.function_name(),
                p.done,
                p.total,
                if k.is_parked() { " parked" } else { "" }
            ))
        })
        .collect();
    let started = tracked
        .iter()
        .filter(|t| t.kernel.try_lock().is_ok_and(|k| k.started()))
        .count();
    format!(
        "{} launches tracked, {started} started; preempted now: [{}]",
        tracked.len(),
        preempted.join(", ")
    )
}

fn counts_line() -> String {
    let c = &COUNTS;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let preemptions = n(&c.preemptions);
    format!(
        "cupreempt: chaos: {} launches, {} preemptions ({} of part of the GPU), {} moments before a launch started; waits for yields {:.1} us mean, {:.1} us longest",
        n(&c.launches),
        preemptions,
        n(&c.spatial),
        n(&c.not_started),
        n(&c.yield_wait_ns) as f64 / 1e3 / preemptions.max(1) as f64,
        n(&c.longest_yield_wait_ns) as f64 / 1e3,
    )
}

extern "C" fn counts_at_exit() {
    use std::io::Write;
    // Not eprintln!: it panics when stderr is gone, and a panic here would abort the exit.
    let _ = writeln!(std::io::stderr(), "{}", counts_line());
}

/// A launch handed over, shared with nobody else once the program has let go of it.
type Shared = Arc<Mutex<Kernel>>;

struct Tracked {
    kernel: Shared,
    due: Instant,
    preempted: Option<Target>,
    cycles: u32,
}

/// Hands a launch whose handle the program let go of to the chaos thread; gives it back when
/// there is no thread to be had (then it is simply dropped: it runs to its end).
pub(crate) fn adopt(kernel: Shared) -> Result<(), Shared> {
    // `enabled()`'s condition, on which `capi::detach_unregistered` relies.
    let Some(chaos) = config() else {
        return Err(kernel);
    };
    static WORKER: OnceLock<Option<Mutex<Sender<Shared>>>> = OnceLock::new();
    let worker = WORKER.get_or_init(|| {
        let (tx, rx) = channel::<Shared>();
        std::thread::Builder::new()
            .name("cupreempt-chaos".into())
            .spawn(move || run(chaos, rx))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    match worker {
        Some(tx) => lock(tx).send(kernel).map_err(|e| e.0),
        None => Err(kernel),
    }
}

fn run(chaos: Chaos, rx: std::sync::mpsc::Receiver<Shared>) {
    let mut rng = Rng::new(chaos.seed);
    let mut tracked: Vec<Tracked> = Vec::new();
    // The chaos thread runs once per process: its exit line and watch are set up here.
    let verbose = super::plan::verbose();
    if verbose {
        super::at_exit(counts_at_exit);
        let _ = std::thread::Builder::new()
            .name("cupreempt-chaos-watch".into())
            .spawn(watch);
    }
    // At most one launch preempted at a time (module comment).
    let mut holding = false;
    let mut looked = Instant::now();
    loop {
        if verbose && looked.elapsed() >= Duration::from_secs(1) {
            looked = Instant::now();
            *lock(&SEEN) = seen(&tracked);
        }
        step(0);
        let now = Instant::now();
        let wait = tracked
            .iter()
            .map(|t| t.due.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1));
        match rx.recv_timeout(wait) {
            Ok(kernel) => {
                COUNTS.launches.fetch_add(1, Ordering::Relaxed);
                tracked.push(Tracked {
                    kernel,
                    due: Instant::now() + rng.wait(chaos.mean_us),
                    preempted: None,
                    cycles: 0,
                });
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) if tracked.is_empty() => return,
            Err(RecvTimeoutError::Disconnected) => {}
        }
        let now = Instant::now();
        tracked.retain_mut(|t| {
            if t.due > now {
                return true;
            }
            step(1);
            let mut k = lock(&t.kernel);
            step(5);
            let action = action(
                t.preempted.is_some(),
                t.cycles,
                holding,
                || !matches!(k.is_complete(), Ok(false)),
                || k.started(),
            );
            t.due = Instant::now() + rng.wait(chaos.mean_us);
            match action {
                Action::Resume => {
                    step(4);
                    if let Some(target) = t.preempted.take() {
                        let _ = k.resume(target);
                    }
                    holding = false;
                    t.cycles += 1;
                    true
                }
                Action::Drop => false,
                Action::Later(why) => {
                    if why == Later::NotStarted {
                        COUNTS.not_started.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                }
                Action::Preempt => {
                    let target = rng.target(k.sm_count());
                    step(2);
                    if k.preempt(target).is_ok() {
                        let asked = Instant::now();
                        step(3);
                        let _ = k.wait_yielded();
                        let waited = asked.elapsed().as_nanos() as u64;
                        COUNTS.preemptions.fetch_add(1, Ordering::Relaxed);
                        if matches!(target, Target::Sms(_)) {
                            COUNTS.spatial.fetch_add(1, Ordering::Relaxed);
                        }
                        COUNTS.yield_wait_ns.fetch_add(waited, Ordering::Relaxed);
                        COUNTS
                            .longest_yield_wait_ns
                            .fetch_max(waited, Ordering::Relaxed);
                        t.preempted = Some(target);
                        holding = true;
                        // Its wait starts once it has yielded.
                        t.due = Instant::now() + rng.wait(chaos.mean_us);
                    }
                    true
                }
            }
        });
    }
}

/// What the chaos thread does with a launch whose moment has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Resume,
    Preempt,
    /// Complete, or preempted `MAX_CYCLES` times: it runs to its end, untracked.
    Drop,
    /// Nothing now; another moment later.
    Later(Later),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Later {
    /// Still queued behind earlier work on its stream.
    NotStarted,
    /// Another launch is preempted now.
    Holding,
}

/// What the chaos thread does with a launch at its moment: `preempted` by it now, preempted
/// `cycles` times so far, `holding` another launch preempted; whether it is complete and has
/// started are asked only where the decision needs them. While another launch is preempted
/// nothing is asked: whether a launch is complete is an event query, a driver call, and one
/// can wait for a thread of the program that waits for the preempted kernel (docs/runtime.md,
/// "No wait inside the driver while preempted"); the preempted one would then never be resumed.
fn action(
    preempted: bool,
    cycles: u32,
    holding: bool,
    complete: impl FnOnce() -> bool,
    started: impl FnOnce() -> bool,
) -> Action {
    if preempted {
        return Action::Resume;
    }
    if holding {
        return Action::Later(Later::Holding);
    }
    if cycles >= MAX_CYCLES || complete() {
        return Action::Drop;
    }
    if !started() {
        return Action::Later(Later::NotStarted);
    }
    Action::Preempt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_or_refused() {
        assert_eq!(
            parse("42"),
            Ok(Chaos {
                seed: 42,
                mean_us: 200
            })
        );
        assert_eq!(
            parse("0x2a, 50"),
            Ok(Chaos {
                seed: 42,
                mean_us: 50
            })
        );
        assert!(parse("seed").unwrap_err().contains("no seed"));
        assert!(parse("1,0").unwrap_err().contains("no mean wait"));
        assert!(parse("1,x").is_err());
    }

    fn action(
        preempted: bool,
        cycles: u32,
        complete: bool,
        started: bool,
        holding: bool,
    ) -> Action {
        super::action(preempted, cycles, holding, || complete, || started)
    }

    /// scripts/gpu-check.sh and scripts/probes/chaos_bench.sh read the exit line's counts:
    /// `cupreempt: chaos: N launches, P preemptions (...`.
    #[test]
    fn the_exit_line_says_launches_then_preemptions() {
        let line = counts_line();
        let rest = line.strip_prefix("cupreempt: chaos: ").expect(&line);
        let (launches, rest) = rest.split_once(" launches, ").expect(&line);
        let (preemptions, rest) = rest.split_once(" preemptions (").expect(&line);
        assert!(
            launches.parse::<u64>().is_ok() && preemptions.parse::<u64>().is_ok(),
            "{line}"
        );
        assert!(rest.contains("of part of the GPU"), "{line}");
    }

    #[test]
    fn one_launch_is_preempted_at_a_time_and_only_once_it_has_started() {
        // A preempted launch is resumed at its next moment, whatever else holds.
        assert_eq!(action(true, 3, false, true, true), Action::Resume);
        // While one launch is preempted, no other is: its stream's queued work must be able to
        // drain once it is resumed (module comment).
        assert_eq!(
            action(false, 0, false, true, true),
            Action::Later(Later::Holding)
        );
        assert_eq!(action(false, 0, false, true, false), Action::Preempt);
        // Queued behind earlier work: a moment later.
        assert_eq!(
            action(false, 0, false, false, false),
            Action::Later(Later::NotStarted)
        );
        // Complete, or preempted enough: let go.
        assert_eq!(action(false, 0, true, true, false), Action::Drop);
        assert_eq!(action(false, MAX_CYCLES, false, true, false), Action::Drop);
    }

    #[test]
    fn while_one_launch_is_preempted_nothing_is_asked_of_another() {
        let asked =
            || -> bool { panic!("a question to the driver while holding a preempted launch") };
        assert_eq!(
            super::action(false, 0, true, asked, asked),
            Action::Later(Later::Holding)
        );
        assert_eq!(
            super::action(false, MAX_CYCLES, true, asked, asked),
            Action::Later(Later::Holding)
        );
        // The preempted one itself is resumed without a question either.
        assert_eq!(super::action(true, 0, true, asked, asked), Action::Resume);
    }

    #[test]
    fn waits_and_targets_come_from_the_seed() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.wait(200), b.wait(200));
        }
        let mut r = Rng::new(1);
        let waits: Vec<Duration> = (0..10_000).map(|_| r.wait(100)).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_micros(200)));
        let mean = waits.iter().map(|w| w.as_micros()).sum::<u128>() / waits.len() as u128;
        assert!((90..=110).contains(&mean), "mean wait {mean} us");
        let mut spatial = 0;
        for _ in 0..1000 {
            if let Target::Sms(set) = r.target(132) {
                spatial += 1;
                let n = (0..132).filter(|&s| set.contains(s)).count();
                assert!(n > 0 && n < 132, "a strict part of the GPU: {n} SMs");
            }
        }
        assert!((150..=350).contains(&spatial), "{spatial} spatial of 1000");
    }
}
