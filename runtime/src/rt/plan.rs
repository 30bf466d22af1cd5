//! The C ABI's launch plans: which launches run preemptible and which run the original kernel
//! as written (`cupreempt_rt_plan`), and the launch of a planned preemptible kernel
//! (`cupreempt_rt_launch_planned`). The rules are in `history.rs` and docs/runtime.md ("Which
//! launches are preemptible").

use super::capi::{
    current_runtime, current_runtime_or_later, detach_unregistered, guard, launch_config, lock,
    register, Handle, LaunchCall, CUPREEMPT_OK,
};
use super::driver::Event;
use super::history::{LaunchKey, Stopwatch};
use super::steps::Step;
use super::{Error, Function, LaunchConfig, Original, Runtime};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Not an error: the caller launches the original kernel as written (see
/// `cupreempt_rt_plan`).
pub const CUPREEMPT_RUN_ORIGINAL: c_int = 9;
/// Not an error: launch the original kernel, then call `cupreempt_rt_original_launched`.
pub const CUPREEMPT_RUN_ORIGINAL_TIMED: c_int = 10;

/// A timed trial of the original kernel: events before and after its launch.
struct EventPair {
    start: Event,
    end: Event,
}

// SAFETY: CUDA events may be queried and destroyed from any thread.
unsafe impl Send for EventPair {}

impl Stopwatch for EventPair {
    fn elapsed_ns(&self) -> Option<u64> {
        match self.end.is_done() {
            Ok(true) => self
                .end
                .since(&self.start)
                .ok()
                .map(|ms| (ms as f64 * 1e6) as u64),
            _ => None,
        }
    }
}

thread_local! {
    /// The original's capacity (blocks at once) that this thread's last plan looked up, for
    /// the launch that follows it (`cupreempt_rt_launch_planned`): the same key has the same
    /// capacity (a CUfunction belongs to one context), so it is not looked up twice.
    static LAST_CAPACITY: std::cell::Cell<Option<(LaunchKey, u64)>> =
        const { std::cell::Cell::new(None) };
    /// The trial that `cupreempt_rt_plan` started on this thread, until the launch is made.
    static TRIAL: std::cell::RefCell<Option<(Runtime, LaunchKey, Event)>> =
        const { std::cell::RefCell::new(None) };
}

/// The launch's history key: the original kernel and the configuration.
///
/// # Safety
/// `grid` and `block` must point to 3 words each.
unsafe fn planned_key(
    original: *mut c_void,
    grid: *const c_uint,
    block: *const c_uint,
    smem: usize,
) -> Result<(LaunchKey, LaunchConfig), Error> {
    if original.is_null() || grid.is_null() || block.is_null() {
        return Err(Error::InvalidArgument("null original, grid or block"));
    }
    let cfg = launch_config(grid, block, smem)?;
    let key = LaunchKey {
        func: original as usize,
        grid: cfg.grid,
        block: cfg.block,
        smem: cfg.shared_mem_bytes,
    };
    Ok((key, cfg))
}

/// Decides the form of a launch of the original kernel `original` (its CUfunction) with this
/// configuration on `stream`: `CUPREEMPT_OK`, launch it preemptible (`cupreempt_rt_launch_planned`),
/// or `CUPREEMPT_RUN_ORIGINAL`, launch the original kernel as written, where a preemptible
/// launch would not pay or cannot work: a launch while the runtime's setup thread is still at
/// work; a grid that fits on the GPU at once as the original kernel; a short launch (see
/// `history.rs`); a stream being captured into a graph; a stream less urgent than another
/// that the program launches on. Asks nothing of the persistent
/// wrappers, so that a program whose launches run the original never loads them. With
/// `CUPREEMPT_VERBOSE` set, each reason is said once per kernel and configuration.
///
/// # Safety
/// `grid` and `block` must point to 3 words each; `original` must be a CUfunction of the
/// current context.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_plan(
    original: *mut c_void,
    grid: *const c_uint,
    block: *const c_uint,
    smem: usize,
    stream: *mut c_void,
) -> c_int {
    let mut why = None;
    let mut timed = false;
    let status = guard(|| {
        let (key, cfg) = planned_key(original, grid, block, smem)?;
        if unscheduled() {
            // Before any driver call: this launch needs nothing of the runtime.
            why = Some(Original::Unscheduled);
            say_once(key, Original::Unscheduled);
            return Ok(());
        }
        super::driver::init()?;
        // Before anything else: a capture forbids what the runtime's first use does.
        let capturing = super::driver::is_capturing(stream.cast())?;
        trace_first_plan("plan: capture query");
        let lower = if capturing || eager() {
            None
        } else {
            lower_priority(stream)?
        };
        let runtime = || {
            if eager() || setup_waits() {
                current_runtime().map(Some)
            } else {
                current_runtime_or_later(super::capi::current_context()?)
            }
        };
        why = if capturing {
            Some(Original::Capture)
        } else if lower.is_some() {
            lower
        } else if let Some(rt) = runtime()? {
            let why = plan(&rt, &key, &cfg, original)?;
            if matches!(why, Some(Original::Trial(_))) {
                // A trial that cannot be timed is an untimed original launch.
                timed = start_trial(rt, key, stream).is_ok();
            }
            why
        } else {
            trace_first_plan("plan: runtime asked for");
            super::setup::note_plan();
            trace_first_plan("plan: launch noted");
            Some(Original::Setup)
        };
        if let Some(why) = why {
            say_once(key, why);
        }
        Ok(())
    });
    PLAN_COUNTS[outcome(status, why)].fetch_add(1, Ordering::Relaxed);
    verbose(); // registers the counts' line at exit, for launches that were all preemptible too
    match (status, why) {
        (CUPREEMPT_OK, Some(_)) if timed => CUPREEMPT_RUN_ORIGINAL_TIMED,
        (CUPREEMPT_OK, Some(_)) => CUPREEMPT_RUN_ORIGINAL,
        _ => status,
    }
}

/// The most urgent stream priority (CUDA's number: lower is more urgent) of any stream that
/// `cupreempt_rt_plan` has seen a launch on in this process; `i32::MAX` before the first.
static MOST_URGENT: AtomicI32 = AtomicI32::new(i32::MAX);

/// `Some(Original::LowerPriority)` where `stream` is less urgent than another stream the
/// program has launched on. CUDA hands a freed SM to the most urgent stream's waiting blocks,
/// so as written a low-priority kernel's blocks make way for an urgent kernel as they end; a
/// persistent kernel's blocks end only with the kernel, and unscheduled nothing preempts it.
/// On the H100 (scripts/probes/priority_timeline.sh, the shape of fixtures/bench's
/// priority_streams) each urgent launch then waited 34 us after the low launch it depends on
/// instead of 6 us. Every plan records its stream's priority, whatever its outcome.
fn lower_priority(stream: *mut c_void) -> Result<Option<Original>, Error> {
    let own = super::driver::stream_priority(stream.cast())?;
    Ok(less_urgent(&MOST_URGENT, own))
}

/// Records priority `own` in `most_urgent`; `Some` where an earlier one was more urgent.
fn less_urgent(most_urgent: &AtomicI32, own: i32) -> Option<Original> {
    let urgent = most_urgent.fetch_min(own, Ordering::Relaxed).min(own);
    (own > urgent).then_some(Original::LowerPriority(own, urgent))
}

/// Outcomes of `cupreempt_rt_plan` (`cupreempt_rt_plan_counts_n`, in runtime.h's order). New
/// outcomes are appended, so that a caller's array of an older header's size gets the same
/// outcomes in the same places.
pub const PLAN_OUTCOMES: usize = 11;
/// The outcomes that `cupreempt_rt_plan_counts` writes: as many as runtime.h had when that was
/// the only call, so that a program built then never gets more words than its array holds.
const FIRST_PLAN_OUTCOMES: usize = 9;
static PLAN_COUNTS: [AtomicU64; PLAN_OUTCOMES] = [const { AtomicU64::new(0) }; PLAN_OUTCOMES];

/// The index of a plan's outcome in `PLAN_COUNTS`: 0 preemptible, 1-7 and 9 the original kernel
/// by reason, 8 an error of the plan (the shim then launches the original kernel).
fn outcome(status: c_int, why: Option<Original>) -> usize {
    match (status, why) {
        (CUPREEMPT_OK, None) => 0,
        (CUPREEMPT_OK, Some(Original::Capture)) => 1,
        (CUPREEMPT_OK, Some(Original::Setup)) => 2,
        (CUPREEMPT_OK, Some(Original::OneWave(_))) => 3,
        (CUPREEMPT_OK, Some(Original::Short(_))) => 4,
        (CUPREEMPT_OK, Some(Original::Predicted(_))) => 5,
        (CUPREEMPT_OK, Some(Original::Trial(_))) => 6,
        (CUPREEMPT_OK, Some(Original::TrialRunning)) => 7,
        (CUPREEMPT_OK, Some(Original::LowerPriority(..))) => 9,
        (CUPREEMPT_OK, Some(Original::Unscheduled)) => 10,
        _ => 8,
    }
}

/// Copies the counts of `cupreempt_rt_plan`'s outcomes since the process started into
/// `counts`: the first `n` outcomes (order in runtime.h), at most `PLAN_OUTCOMES`; words past
/// those are left as they are.
///
/// # Safety
/// `counts`, when not null, must point to `n` writable words.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_plan_counts_n(counts: *mut u64, n: c_uint) -> c_int {
    guard(|| {
        if counts.is_null() {
            return Err(Error::InvalidArgument("null counts"));
        }
        for (i, c) in PLAN_COUNTS.iter().enumerate().take(n as usize) {
            // SAFETY: as the caller promises (i < n).
            unsafe { counts.add(i).write(c.load(Ordering::Relaxed)) };
        }
        Ok(())
    })
}

/// The first nine outcomes' counts (`FIRST_PLAN_OUTCOMES`), for programs built against a
/// runtime.h that had nine.
///
/// # Safety
/// `counts`, when not null, must point to 9 writable words.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_plan_counts(counts: *mut u64) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { cupreempt_rt_plan_counts_n(counts, FIRST_PLAN_OUTCOMES as c_uint) }
}

/// `CUPREEMPT_TRACE_SETUP`'s steps of the first plans (where a first launch's time goes).
fn trace_first_plan(step: &str) {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if CALLS.load(std::sync::atomic::Ordering::Relaxed) < 8 {
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        super::trace_setup(step);
    }
}

/// Records the start of a timed trial on `stream`, kept for `cupreempt_rt_original_launched`.
fn start_trial(rt: Runtime, key: LaunchKey, stream: *mut c_void) -> Result<(), Error> {
    let start = Event::new(true)?;
    start.record_on(stream.cast())?;
    TRIAL.with(|t| *t.borrow_mut() = Some((rt, key, start)));
    Ok(())
}

/// Ends the timed trial that `cupreempt_rt_plan` started on this thread (it answered
/// `CUPREEMPT_RUN_ORIGINAL_TIMED`), after the caller launched the original kernel on `stream`.
///
/// # Safety
/// `stream` must be the stream given to that `cupreempt_rt_plan`.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_original_launched(stream: *mut c_void) -> c_int {
    guard(|| {
        let Some((rt, key, start)) = TRIAL.with(|t| t.borrow_mut().take()) else {
            return Err(Error::InvalidArgument(
                "no timed trial was started on this thread",
            ));
        };
        let end = Event::new(true)?;
        end.record_on(stream.cast())?;
        rt.inner
            .history
            .trial_started(key, Box::new(EventPair { start, end }));
        Ok(())
    })
}

fn plan(
    rt: &Runtime,
    key: &LaunchKey,
    cfg: &LaunchConfig,
    original: *mut c_void,
) -> Result<Option<Original>, Error> {
    let history = &rt.inner.history;
    if eager() {
        // Chaos mode: every launch preemptible, so that every kernel meets preemption. A
        // process scheduled by cupreemptd: the daemon hears only of preemptible launches, and
        // a short urgent one is exactly what it must hear of to make room; unless the daemon
        // has said that it leaves this process's launches alone (`lean`, `super::scheduler`).
        rt.request_setup();
        return Ok(None);
    }
    let ready = rt.inner.is_ready();
    if !ready {
        // The setup thread waits for a pause in the application's launches.
        super::setup::note_plan();
    }
    // SAFETY: as the caller promises.
    let at_once = rt.capacity(unsafe { &Function::from_raw(original.cast()) }, cfg)?;
    LAST_CAPACITY.with(|c| c.set(Some((*key, at_once))));
    let tasks = key.tasks();
    if tasks <= at_once {
        return Ok(Some(Original::OneWave(tasks)));
    }
    if !ready && !setup_waits() {
        rt.request_setup();
        return Ok(Some(Original::Setup));
    }
    Ok(history.choose(key, at_once))
}

/// `cupreempt_rt_launch` for a launch that `cupreempt_rt_plan` made preemptible: the runtime
/// also learns how long it runs (for the plans of later launches of `original`). A null `out`
/// detaches the launch at once, as `cupreempt_rt_release` would (the shim's launches, whose
/// handles nobody keeps: no handle is registered for them).
///
/// # Safety
/// As for `cupreempt_rt_launch`; `original` as for `cupreempt_rt_plan`.
#[no_mangle]
pub unsafe extern "C" fn cupreempt_rt_launch_planned(
    func: *mut c_void,
    original: *mut c_void,
    grid: *const c_uint,
    block: *const c_uint,
    smem: usize,
    stream: *mut c_void,
    args: *const *const c_void,
    sizes: *const usize,
    nargs: usize,
    chunk: c_uint,
    budget_ns: c_uint,
    out: *mut Handle,
) -> c_int {
    guard(|| {
        super::steps::begin();
        let (key, _) = planned_key(original, grid, block, smem)?;
        super::steps::lap(Step::Key);
        let call = LaunchCall {
            func,
            grid,
            block,
            smem,
            stream,
            args,
            sizes,
            nargs,
            chunk,
            budget_ns,
            history: Some(key),
        };
        let (rt, k, cfg) = call.launch()?;
        let at_once = match LAST_CAPACITY.with(|c| c.get()) {
            Some((k, n)) if k == key => n,
            _ => rt.capacity(&Function::from_raw(original.cast()), &cfg)?,
        };
        super::steps::lap(Step::Capacity);
        let (mirror, number) = k.mirror();
        rt.inner.history.launched(key, at_once, mirror, number);
        super::steps::lap(Step::Launched);
        if out.is_null() {
            detach_unregistered(k);
        } else {
            *out = register(k);
            super::steps::lap(Step::Register);
        }
        Ok(())
    })
}

/// Whether every launch outside a capture is preemptible (`CUPREEMPT_SHORT_US=0`, chaos mode,
/// a scheduler daemon that has not said `lean`), so that the runtime is made at the first
/// launch.
fn eager() -> bool {
    static EAGER: OnceLock<bool> = OnceLock::new();
    let always =
        *EAGER.get_or_init(|| super::history::short_ns_from_env() == 0 || super::chaos::enabled());
    always || (super::scheduler::socket().is_some() && !super::scheduler::lean())
}

/// Reads the settings every plan asks for (rule 7's, `CUPREEMPT_VERBOSE`) and a launch's
/// parameters need (`CUPREEMPT_LOOKS`), so that a program's first launch finds them read: on
/// the setup thread, at load.
pub(crate) fn read_settings() {
    unscheduled();
    eager();
    verbose();
    super::leftover_slots();
}

/// Rule 7: nothing can preempt a launch that the shim plans (it lets go of the handle at
/// once) in a process with no scheduler daemon (`CUPREEMPT_SCHEDULER`) and no chaos mode, so
/// it runs the original kernel, as written: the persistent form would cost its time and buy
/// nothing. `CUPREEMPT_PREEMPTIBLE=1` plans as a scheduled process that its daemon leaves
/// alone (`lean`) does, rules 2-6 (to measure what such a process pays, without a daemon);
/// `CUPREEMPT_SHORT_US=0` makes every launch preemptible. Read once.
fn unscheduled() -> bool {
    static UNSCHEDULED: OnceLock<bool> = OnceLock::new();
    *UNSCHEDULED.get_or_init(|| {
        let asked = std::env::var("CUPREEMPT_PREEMPTIBLE").is_ok_and(|v| v.trim() == "1");
        unscheduled_by(
            asked,
            super::scheduler::socket().is_some(),
            super::history::short_ns_from_env() == 0 || super::chaos::enabled(),
        )
    })
}

/// Rule 7's decision from what the process was given: `preemptible_asked`
/// (`CUPREEMPT_PREEMPTIBLE=1`), a scheduler daemon's socket, every launch preemptible
/// (`CUPREEMPT_SHORT_US=0`, chaos mode).
fn unscheduled_by(preemptible_asked: bool, scheduler: bool, every_launch: bool) -> bool {
    !(preemptible_asked || scheduler || every_launch)
}

/// `CUPREEMPT_SETUP=wait`: launches wait for the runtime's setup instead of running the
/// original kernel meanwhile (for programs whose very first launches must be preemptible).
fn setup_waits() -> bool {
    static WAIT: OnceLock<bool> = OnceLock::new();
    *WAIT.get_or_init(|| std::env::var("CUPREEMPT_SETUP").is_ok_and(|v| v == "wait"))
}

/// `CUPREEMPT_VERBOSE`, read once; when set, the process also says at its exit how many
/// launches it planned, by outcome (`counts_at_exit`).
pub(crate) fn verbose() -> bool {
    static VERBOSE: OnceLock<bool> = OnceLock::new();
    *VERBOSE.get_or_init(|| {
        let on = std::env::var_os("CUPREEMPT_VERBOSE").is_some();
        if on {
            super::at_exit(counts_at_exit);
        }
        on
    })
}

/// The names of `PLAN_COUNTS`' outcomes, as runtime.h's `CUPREEMPT_PLAN_OUTCOME_NAMES`.
const OUTCOME_NAMES: [&str; PLAN_OUTCOMES] = [
    "preemptible",
    "capture",
    "setup",
    "one_wave",
    "short",
    "predicted",
    "trial",
    "trial_running",
    "error",
    "lower_priority",
    "unscheduled",
];

/// The plans' counts as one line: `cupreempt: N launches planned: preemptible P, ...` (the
/// outcomes that happened).
fn counts_line(counts: &[u64; PLAN_OUTCOMES]) -> String {
    let total: u64 = counts.iter().sum();
    let parts: Vec<String> = OUTCOME_NAMES
        .iter()
        .zip(counts)
        .filter(|(_, &n)| n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    format!(
        "cupreempt: {total} launches planned: {}",
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    )
}

extern "C" fn counts_at_exit() {
    use std::io::Write;
    let counts: [u64; PLAN_OUTCOMES] =
        std::array::from_fn(|i| PLAN_COUNTS[i].load(Ordering::Relaxed));
    // Not eprintln!: it panics when stderr is gone, and a panic here would abort the exit.
    let _ = writeln!(std::io::stderr(), "{}", counts_line(&counts));
}

/// `CUPREEMPT_VERBOSE`: why launches run the original kernel, once per kernel, configuration
/// and kind of reason.
fn say_once(key: LaunchKey, why: Original) {
    static SAID: Mutex<Vec<(LaunchKey, bool)>> = Mutex::new(Vec::new());
    if !verbose() {
        return;
    }
    let kind = matches!(
        why,
        Original::Capture | Original::OneWave(_) | Original::Setup
    );
    let mut said = lock(&SAID);
    if said.len() < 1024 && !said.contains(&(key, kind)) {
        said.push((key, kind));
        eprintln!(
            "cupreempt: grid {:?} block {:?}: launching the original kernel: {why}",
            key.grid, key.block
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// runtime.h's CUPREEMPT_ERROR_INVALID_ARGUMENT.
    const INVALID_ARGUMENT: c_int = 4;

    #[test]
    fn the_exit_line_names_the_outcomes_that_happened() {
        let mut counts = [0u64; PLAN_OUTCOMES];
        assert_eq!(counts_line(&counts), "cupreempt: 0 launches planned: none");
        counts[0] = 5;
        counts[3] = 2;
        counts[6] = 1;
        assert_eq!(
            counts_line(&counts),
            "cupreempt: 8 launches planned: preemptible 5, one_wave 2, trial 1"
        );
    }

    #[test]
    fn the_outcome_names_are_runtime_h_s() {
        let header = include_str!("../../../cuda_support/cupreempt/runtime.h");
        let start = header
            .find("#define CUPREEMPT_PLAN_OUTCOME_NAMES")
            .expect("runtime.h defines the names");
        let list = &header[start..];
        let list = &list[list.find('{').expect("{")..=list.find('}').expect("}")];
        let names: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
        assert_eq!(names, OUTCOME_NAMES);
        assert!(header.contains(&format!("#define CUPREEMPT_PLAN_OUTCOMES {PLAN_OUTCOMES}")));
    }

    #[test]
    fn every_outcome_has_its_own_count() {
        let whys = [
            None,
            Some(Original::Capture),
            Some(Original::Setup),
            Some(Original::OneWave(4)),
            Some(Original::Short(1_000)),
            Some(Original::Predicted(1_000)),
            Some(Original::Trial(1_000)),
            Some(Original::TrialRunning),
        ];
        let indices: Vec<usize> = whys.iter().map(|&w| outcome(CUPREEMPT_OK, w)).collect();
        assert_eq!(indices, (0..8).collect::<Vec<_>>());
        // Appended after the first nine (the error is the ninth), so that older callers'
        // arrays keep their places.
        assert_eq!(outcome(INVALID_ARGUMENT, None), 8);
        assert_eq!(
            outcome(CUPREEMPT_OK, Some(Original::LowerPriority(0, -1))),
            9
        );
        assert_eq!(outcome(CUPREEMPT_OK, Some(Original::Unscheduled)), 10);
    }

    /// Rule 7 answers before any driver call: here, with no driver (CI) as with one.
    #[test]
    fn an_unscheduled_plan_runs_the_original_without_asking_the_driver() {
        let set: Vec<String> = [
            "CUPREEMPT_SCHEDULER",
            "CUPREEMPT_CHAOS",
            "CUPREEMPT_PREEMPTIBLE",
            "CUPREEMPT_SHORT_US",
        ]
        .into_iter()
        .filter(|v| std::env::var_os(v).is_some())
        .map(String::from)
        .collect();
        if !set.is_empty() {
            eprintln!("skipped: the test's environment sets {set:?}");
            return;
        }
        let (grid, block) = ([4096u32, 1, 1], [256u32, 1, 1]);
        let mut kernel = 0u8;
        let before = PLAN_COUNTS[10].load(Ordering::Relaxed);
        // SAFETY: grid and block are 3 words each; the plan does not dereference `original`.
        let status = unsafe {
            cupreempt_rt_plan(
                (&mut kernel as *mut u8).cast(),
                grid.as_ptr(),
                block.as_ptr(),
                0,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(status, CUPREEMPT_RUN_ORIGINAL);
        assert!(PLAN_COUNTS[10].load(Ordering::Relaxed) > before);
    }

    #[test]
    fn launches_nothing_can_preempt_run_the_original() {
        // Nothing given: no daemon, no chaos, no request.
        assert!(unscheduled_by(false, false, false));
        // CUPREEMPT_PREEMPTIBLE=1, a daemon's socket (lean or not), every launch preemptible.
        assert!(!unscheduled_by(true, false, false));
        assert!(!unscheduled_by(false, true, false));
        assert!(!unscheduled_by(false, false, true));
    }

    #[test]
    fn a_stream_less_urgent_than_one_launched_on_before_runs_the_original() {
        let most_urgent = AtomicI32::new(i32::MAX);
        // CUDA's numbers: 0 is the least urgent (default streams), -5 the most on an H100.
        assert_eq!(less_urgent(&most_urgent, 0), None);
        assert_eq!(less_urgent(&most_urgent, 0), None, "one priority only");
        assert_eq!(
            less_urgent(&most_urgent, -2),
            None,
            "the most urgent so far"
        );
        assert_eq!(
            less_urgent(&most_urgent, 0),
            Some(Original::LowerPriority(0, -2))
        );
        assert_eq!(
            less_urgent(&most_urgent, -1),
            Some(Original::LowerPriority(-1, -2))
        );
        assert_eq!(
            less_urgent(&most_urgent, -2),
            None,
            "as urgent as the most urgent"
        );
        assert_eq!(less_urgent(&most_urgent, -5), None);
        assert_eq!(
            less_urgent(&most_urgent, -2),
            Some(Original::LowerPriority(-2, -5))
        );
    }

    #[test]
    fn the_counts_reach_the_caller_in_order() {
        let mut before = [0u64; PLAN_OUTCOMES];
        // SAFETY: PLAN_OUTCOMES words.
        assert_eq!(
            unsafe { cupreempt_rt_plan_counts_n(before.as_mut_ptr(), PLAN_OUTCOMES as c_uint) },
            CUPREEMPT_OK
        );
        PLAN_COUNTS[3].fetch_add(2, Ordering::Relaxed);
        PLAN_COUNTS[7].fetch_add(1, Ordering::Relaxed);
        PLAN_COUNTS[9].fetch_add(1, Ordering::Relaxed);
        let mut after = [0u64; PLAN_OUTCOMES];
        // SAFETY: as above.
        assert_eq!(
            unsafe { cupreempt_rt_plan_counts_n(after.as_mut_ptr(), PLAN_OUTCOMES as c_uint) },
            CUPREEMPT_OK
        );
        assert!(after[3] >= before[3] + 2 && after[7] > before[7] && after[9] > before[9]);
        // SAFETY: null is refused, not written.
        assert_eq!(
            unsafe { cupreempt_rt_plan_counts_n(std::ptr::null_mut(), 4) },
            INVALID_ARGUMENT
        );
    }

    #[test]
    fn a_caller_s_array_gets_no_more_words_than_it_asked_for() {
        const UNTOUCHED: u64 = 0xC0FF_EE00_C0FF_EE00;
        PLAN_COUNTS[9].fetch_add(1, Ordering::Relaxed);
        let mut words = [UNTOUCHED; PLAN_OUTCOMES + 2];
        // SAFETY: 3 words asked for, PLAN_OUTCOMES + 2 there.
        assert_eq!(
            unsafe { cupreempt_rt_plan_counts_n(words.as_mut_ptr(), 3) },
            CUPREEMPT_OK
        );
        assert!(words[3..].iter().all(|&w| w == UNTOUCHED));
        // More asked for than there are outcomes: the outcomes, and not a word more.
        // SAFETY: PLAN_OUTCOMES + 2 words.
        assert_eq!(
            unsafe { cupreempt_rt_plan_counts_n(words.as_mut_ptr(), PLAN_OUTCOMES as c_uint + 2) },
            CUPREEMPT_OK
        );
        assert!(words[PLAN_OUTCOMES..].iter().all(|&w| w == UNTOUCHED));
        // The call that programs built against a header of nine outcomes make: nine words.
        let mut old = [UNTOUCHED; PLAN_OUTCOMES];
        // SAFETY: PLAN_OUTCOMES words, 9 written.
        assert_eq!(
            unsafe { cupreempt_rt_plan_counts(old.as_mut_ptr()) },
            CUPREEMPT_OK
        );
        assert!(old[..9].iter().all(|&w| w != UNTOUCHED));
        assert_eq!(old[9], UNTOUCHED, "the tenth word belongs to the caller");
    }
}
