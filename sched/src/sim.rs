//! A discrete-event simulator that runs any policy on a workload over 1..N GPUs. Deterministic:
//! events at the same time are handled in the order they were scheduled.
//!
//! Model: a kernel needs `work` µs alone on a GPU. `Run` gives it a whole GPU; `RunOn` gives it
//! some of a GPU's SMs, and kernels then share the GPU (spatial multitasking): with `s` SMs a
//! kernel progresses at `KernelSpec::speed`, linear up to the SMs its CTAs can fill. A
//! preemption request takes `preempt_latency` µs to complete, during which the kernel keeps
//! working; then its SMs are free and the kernel is ready again, with `resume_overhead` µs
//! added to its remaining work (the cost of relaunching it). A spatial preemption (`Resize` to
//! fewer SMs) takes the same latency; the kernel keeps running on the SMs it keeps. Growing a
//! running kernel (another instance on the same task counter) is immediate.

use crate::duration::Estimator;
use crate::metrics::{Interval, Metrics};
use crate::model::{GpuId, KernelId, KernelSpec, KernelView, Status, SystemView};
use crate::policy::{Action, Event, Policy};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("policy {policy} asked to run kernel {kernel} on GPU {gpu}, which is not possible now ({why})")]
    BadRun {
        policy: &'static str,
        kernel: KernelId,
        gpu: GpuId,
        why: &'static str,
    },
    #[error(
        "policy {policy} asked to preempt, resize or revoke kernel {kernel}, which is not running"
    )]
    BadPreempt {
        policy: &'static str,
        kernel: KernelId,
    },
    #[error("policy {policy} asked for {sms} SMs for kernel {kernel}, which {why}")]
    BadSms {
        policy: &'static str,
        kernel: KernelId,
        sms: u32,
        why: &'static str,
    },
    #[error("policy {policy} left {left} kernels unfinished with nothing more to happen")]
    Stuck { policy: &'static str, left: usize },
    #[error("workload error: {0}")]
    Workload(String),
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub policy: &'static str,
    pub finish: Vec<f64>,
    pub intervals: Vec<Interval>,
    pub events: u64,
    pub metrics: Metrics,
    /// Every kernel at the end (preemptions, revocations, wasted work).
    pub kernels: Vec<KernelView>,
    /// When each kernel was released: its arrival, or its last predecessor's finish if later.
    pub released: Vec<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum What {
    Arrival(KernelId),
    Completion(KernelId, u32),
    YieldDone(KernelId, u32),
    RevokeDone(KernelId, u32),
    ShrinkDone(KernelId, u32),
    Kill(KernelId, u32),
    Timer(GpuId, u32),
    Tick(u32),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Scheduled {
    at: f64,
    seq: u64,
    what: What,
}

impl Eq for Scheduled {}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (time, sequence).
        o.at.partial_cmp(&self.at)
            .unwrap_or(Ordering::Equal)
            .then(o.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

struct Sim<'p> {
    policy: &'p mut dyn Policy,
    sys: SystemView,
    heap: BinaryHeap<Scheduled>,
    seq: u64,
    /// Bumped whenever a kernel starts, changes speed or is asked to yield: older events about
    /// it are stale.
    version: Vec<u32>,
    shrink_version: Vec<u32>,
    timer_version: Vec<u32>,
    tick_version: u32,
    /// When each running kernel's `remaining` was last brought up to date.
    synced_at: Vec<f64>,
    finish: Vec<f64>,
    released: Vec<f64>,
    started: Vec<Option<(GpuId, f64)>>,
    /// Unfinished predecessors of each kernel, and who waits for each kernel.
    pending: Vec<usize>,
    dependents: Vec<Vec<KernelId>>,
    intervals: Vec<Interval>,
    estimator: Option<&'p mut Estimator>,
    /// Context switch: a GPU that another kernel held whole last idles this long (µs) before
    /// the kernel that now starts there whole makes progress. 0: no cost.
    switch_us: f64,
    /// The kernel that last started on each GPU whole.
    last_on: Vec<Option<KernelId>>,
}

/// SMs per GPU when the caller does not say (an H100 SXM).
pub const DEFAULT_SMS: u32 = 132;

pub fn simulate(
    specs: &[KernelSpec],
    gpus: usize,
    policy: &mut dyn Policy,
) -> Result<Outcome, SimError> {
    simulate_sms(specs, gpus, DEFAULT_SMS, policy)
}

/// `simulate` on GPUs of `sms` SMs each.
pub fn simulate_sms(
    specs: &[KernelSpec],
    gpus: usize,
    sms: u32,
    policy: &mut dyn Policy,
) -> Result<Outcome, SimError> {
    simulate_switching(specs, gpus, sms, policy, None, 0.0)
}

/// `simulate_sms` where policies see the estimator's durations, not the workload's: each
/// kernel's `estimate` is set at its arrival, and the estimator learns from every completion.
pub fn simulate_predicted(
    specs: &[KernelSpec],
    gpus: usize,
    sms: u32,
    policy: &mut dyn Policy,
    estimator: &mut Estimator,
) -> Result<Outcome, SimError> {
    simulate_switching(specs, gpus, sms, policy, Some(estimator), 0.0)
}

/// `simulate_sms`, or `simulate_predicted` with an estimator, where a kernel that starts whole
/// on a GPU that another kernel held last waits `switch_us` µs first (a context switch: the GPU
/// idles, apart from the preemption latency that the kernel leaving has already paid).
pub fn simulate_switching(
    specs: &[KernelSpec],
    gpus: usize,
    sms: u32,
    policy: &mut dyn Policy,
    estimator: Option<&mut Estimator>,
    switch_us: f64,
) -> Result<Outcome, SimError> {
    if gpus == 0 || sms == 0 {
        return Err(SimError::Workload(
            "at least one GPU with one SM is needed".into(),
        ));
    }
    if !(switch_us.is_finite() && switch_us >= 0.0) {
        return Err(SimError::Workload(
            "the context switch cost must be a number of µs ≥ 0".into(),
        ));
    }
    if let Some((i, _)) = specs.iter().enumerate().find(|(i, s)| !valid(*i, s)) {
        return Err(SimError::Workload(format!(
            "kernel {i} needs work > 0 and arrival ≥ 0"
        )));
    }
    let kernels = specs
        .iter()
        .enumerate()
        .map(|(id, s)| KernelView::new(id, s.clone()))
        .collect();
    let n = specs.len();
    let mut sim = Sim {
        policy,
        sys: SystemView {
            now: 0.0,
            gpus: vec![None; gpus],
            sms,
            used_sms: vec![0; gpus],
            kernels,
            active: Vec::new(),
            placed: Vec::new(),
        },
        heap: BinaryHeap::with_capacity(2 * n),
        seq: 0,
        version: vec![0; n],
        shrink_version: vec![0; n],
        timer_version: vec![0; gpus],
        tick_version: 0,
        synced_at: vec![0.0; n],
        finish: vec![f64::NAN; n],
        released: vec![f64::NAN; n],
        started: vec![None; n],
        pending: specs.iter().map(|s| s.after.len()).collect(),
        estimator,
        switch_us,
        last_on: vec![None; gpus],
        dependents: {
            let mut d = vec![Vec::new(); n];
            for (k, s) in specs.iter().enumerate() {
                for &p in &s.after {
                    d[p].push(k);
                }
            }
            d
        },
        intervals: Vec::new(),
    };
    for (k, s) in specs.iter().enumerate() {
        sim.schedule(s.arrival, What::Arrival(k));
    }
    let mut events = 0u64;
    while let Some(ev) = sim.heap.pop() {
        let Some(event) = sim.happen(ev) else {
            continue;
        };
        events += 1;
        let actions = sim.policy.on_event(event, &sim.sys);
        for a in actions {
            sim.apply(a)?;
        }
    }
    let left = sim.finish.iter().filter(|f| f.is_nan()).count();
    if left > 0 {
        return Err(SimError::Stuck {
            policy: sim.policy.name(),
            left,
        });
    }
    let mut metrics = Metrics::compute(
        specs,
        &sim.finish,
        &sim.released,
        &sim.sys.kernels,
        &sim.intervals,
    );
    if sim.estimator.is_some() && n > 0 {
        // How far off what the policies were told was (every kernel got its estimate).
        let off: f64 = sim
            .sys
            .kernels
            .iter()
            .map(|k| ((k.estimate - k.spec.work) / k.spec.work).abs())
            .sum();
        metrics.estimate_error = Some(off / n as f64);
    }
    Ok(Outcome {
        policy: sim.policy.name(),
        finish: sim.finish,
        intervals: sim.intervals,
        events,
        metrics,
        kernels: sim.sys.kernels,
        released: sim.released,
    })
}

/// Positive, finite work; a finite, non-negative arrival (NaN fails every comparison);
/// dependencies only on earlier kernels (so the graph has no cycle).
fn valid(id: KernelId, s: &KernelSpec) -> bool {
    s.work.is_finite()
        && s.work > 0.0
        && s.arrival.is_finite()
        && s.arrival >= 0.0
        && s.after.iter().all(|&d| d < id)
}

impl Sim<'_> {
    fn schedule(&mut self, at: f64, what: What) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            what,
        });
    }

    /// Brings time forward to `t`: work done by running kernels, waiting by ready ones.
    fn advance(&mut self, t: f64) {
        let dt = t - self.sys.now;
        if dt > 0.0 {
            // Only kernels on a GPU progress; walking every active kernel at every event made
            // long simulations quadratic.
            for &k in &self.sys.placed {
                let kv = &mut self.sys.kernels[k];
                // A kernel waiting out a context switch makes progress only from its end.
                if matches!(kv.status, Status::Running | Status::Yielding) && t > self.synced_at[k]
                {
                    let speed = kv.spec.speed(kv.sms, self.sys.sms);
                    kv.remaining = (kv.remaining - (t - self.synced_at[k]) * speed).max(0.0);
                    self.synced_at[k] = t;
                }
            }
            if self.policy.reads_waited() {
                for &k in &self.sys.active {
                    let kv = &mut self.sys.kernels[k];
                    if kv.status == Status::Ready {
                        kv.waited += dt;
                    }
                }
            }
        }
        self.sys.now = t;
    }

    /// Applies a scheduled happening; None if it is stale.
    fn happen(&mut self, ev: Scheduled) -> Option<Event> {
        match ev.what {
            What::Completion(k, v)
            | What::YieldDone(k, v)
            | What::RevokeDone(k, v)
            | What::Kill(k, v)
                if v != self.version[k] =>
            {
                return None
            }
            What::ShrinkDone(k, v) if v != self.shrink_version[k] => return None,
            What::Timer(g, v) if v != self.timer_version[g] => return None,
            What::Tick(v) if v != self.tick_version => return None,
            _ => {}
        }
        self.advance(ev.at);
        Some(match ev.what {
            What::Arrival(k) => {
                // Also used to release a blocked kernel once its last predecessor is done.
                let kv = &mut self.sys.kernels[k];
                if kv.status == Status::Future {
                    self.sys.active.push(k);
                    if let Some(e) = self.estimator.as_deref_mut() {
                        kv.estimate = e.estimate(&kv.spec);
                    }
                }
                if self.pending[k] > 0 {
                    kv.status = Status::Blocked;
                    return None;
                }
                kv.status = Status::Ready;
                kv.ready_since = ev.at;
                self.released[k] = ev.at;
                Event::Arrived(k)
            }
            What::Completion(k, _) | What::Kill(k, _) => {
                self.leave_gpu(k, ev.at);
                let kv = &mut self.sys.kernels[k];
                kv.status = Status::Done;
                kv.killed = matches!(ev.what, What::Kill(..));
                if let (Some(e), false) = (self.estimator.as_deref_mut(), kv.killed) {
                    e.completed(&kv.spec);
                }
                kv.remaining = 0.0;
                self.finish[k] = ev.at;
                self.sys.active.retain(|&a| a != k);
                // A finished (or killed) kernel releases the kernels that waited for it.
                for i in 0..self.dependents[k].len() {
                    let d = self.dependents[k][i];
                    self.pending[d] -= 1;
                    if self.pending[d] == 0 && self.sys.kernels[d].status == Status::Blocked {
                        self.schedule(ev.at, What::Arrival(d));
                    }
                }
                Event::Finished(k)
            }
            What::YieldDone(k, _) => {
                let kv = self.back_to_ready(k, ev.at);
                kv.preemptions += 1;
                kv.remaining += kv.spec.resume_overhead;
                Event::Preempted(k)
            }
            What::RevokeDone(k, _) => {
                let kv = self.back_to_ready(k, ev.at);
                kv.revocations += 1;
                kv.remaining = kv.spec.work; // everything starts over
                Event::Revoked(k)
            }
            What::ShrinkDone(k, _) => {
                let to = self.sys.kernels[k].shrinking_to.take().unwrap_or(0);
                self.set_sms(k, to, ev.at);
                self.sys.kernels[k].shrinks += 1;
                if self.sys.kernels[k].status == Status::Running {
                    self.schedule_end(k);
                }
                Event::Shrunk(k)
            }
            What::Timer(g, _) => Event::QuantumExpired(g),
            What::Tick(_) => Event::Tick,
        })
    }

    /// Changes the SMs a kernel on a GPU holds, splitting its occupancy interval.
    fn set_sms(&mut self, k: KernelId, sms: u32, at: f64) {
        let Some(g) = self.sys.kernels[k].gpu else {
            return;
        };
        self.close_interval(k, at);
        let kv = &mut self.sys.kernels[k];
        self.sys.used_sms[g] = self.sys.used_sms[g] - kv.sms + sms;
        kv.sms = sms;
        self.started[k] = Some((g, at));
    }

    fn close_interval(&mut self, k: KernelId, at: f64) {
        if let Some((gpu, start)) = self.started[k].take() {
            self.intervals.push(Interval {
                gpu,
                kernel: k,
                start,
                end: at,
                share: self.sys.kernels[k].sms as f64 / self.sys.sms as f64,
            });
        }
    }

    /// When a running kernel ends at its current speed, and how: completion, or the kill when
    /// its declared time limit comes first (the limit counts the kernel's progress so far).
    fn end_of(&self, k: KernelId) -> (f64, What) {
        let v = self.version[k];
        let kv = &self.sys.kernels[k];
        let speed = kv.spec.speed(kv.sms, self.sys.sms);
        let remaining = kv.remaining;
        let limit = kv.spec.time_limit;
        let used = kv.spec.work - remaining;
        // From the end of a context switch it is still waiting out.
        let from = self.sys.now.max(self.synced_at[k]);
        if limit > 0.0 && limit - used < remaining {
            (from + (limit - used).max(0.0) / speed, What::Kill(k, v))
        } else {
            (from + remaining / speed, What::Completion(k, v))
        }
    }

    /// (Re)schedules the end of a running kernel at its current speed.
    fn schedule_end(&mut self, k: KernelId) {
        self.version[k] += 1;
        let (at, what) = self.end_of(k);
        self.schedule(at, what);
    }

    /// A preempted or revoked kernel leaves its GPU and waits again.
    fn back_to_ready(&mut self, k: KernelId, at: f64) -> &mut KernelView {
        self.leave_gpu(k, at);
        let kv = &mut self.sys.kernels[k];
        kv.status = Status::Ready;
        kv.ready_since = at;
        kv
    }

    fn leave_gpu(&mut self, k: KernelId, at: f64) {
        self.close_interval(k, at);
        self.shrink_version[k] += 1;
        self.sys.kernels[k].shrinking_to = None;
        self.sys.vacate(k);
    }

    /// Preempting or revoking needs a running kernel.
    fn check_running(&self, kernel: KernelId) -> Result<(), SimError> {
        match self.sys.kernels.get(kernel) {
            Some(k) if k.status == Status::Running => Ok(()),
            _ => Err(SimError::BadPreempt {
                policy: self.policy.name(),
                kernel,
            }),
        }
    }

    /// Puts a ready kernel on `sms` SMs of `gpu` (`whole`: it holds the GPU alone).
    fn start(
        &mut self,
        kernel: KernelId,
        gpu: GpuId,
        sms: u32,
        whole: bool,
    ) -> Result<(), SimError> {
        let now = self.sys.now;
        let policy = self.policy.name();
        self.sys
            .place(kernel, gpu, sms, whole)
            .map_err(|why| SimError::BadRun {
                policy,
                kernel,
                gpu,
                why,
            })?;
        let switch = whole && self.last_on[gpu].is_some_and(|last| last != kernel);
        self.synced_at[kernel] = if switch { now + self.switch_us } else { now };
        if whole {
            self.last_on[gpu] = Some(kernel);
        }
        self.started[kernel] = Some((gpu, now));
        self.schedule_end(kernel);
        Ok(())
    }

    fn apply(&mut self, a: Action) -> Result<(), SimError> {
        let now = self.sys.now;
        let name = self.policy.name();
        match a {
            Action::Run { kernel, gpu } => {
                let sms = self.sys.sms;
                self.start(kernel, gpu, sms, true)?;
            }
            Action::RunOn { kernel, gpu, sms } => {
                self.start(kernel, gpu, sms, false)?;
            }
            Action::Resize { kernel, sms } => {
                self.check_running(kernel)?;
                let kv = &self.sys.kernels[kernel];
                let g = kv.gpu.expect("a running kernel has a GPU");
                let bad = |why| SimError::BadSms {
                    policy: name,
                    kernel,
                    sms,
                    why,
                };
                if kv.shrinking_to.is_some() {
                    return Err(bad("is already being shrunk"));
                }
                if self.sys.gpus[g] == Some(kernel) {
                    return Err(bad("holds its GPU whole (use RunOn to share)"));
                }
                if sms == 0 {
                    return Err(bad("would keep no SM (preempt it instead)"));
                }
                if sms > kv.sms {
                    if sms - kv.sms > self.sys.free_sms(g) {
                        return Err(bad("would need more SMs than are free"));
                    }
                    self.set_sms(kernel, sms, now);
                    self.schedule_end(kernel);
                } else if sms < kv.sms {
                    // Spatial preemption: its blocks on the SMs it gives up finish their chunks.
                    let latency = kv.spec.preempt_latency;
                    self.sys.kernels[kernel].shrinking_to = Some(sms);
                    self.shrink_version[kernel] += 1;
                    let v = self.shrink_version[kernel];
                    self.schedule(now + latency, What::ShrinkDone(kernel, v));
                }
            }
            Action::Preempt { kernel } => {
                self.check_running(kernel)?;
                // A spatial preemption under way is overtaken: the kernel leaves every SM.
                self.shrink_version[kernel] += 1;
                let kv = &mut self.sys.kernels[kernel];
                kv.shrinking_to = None;
                kv.status = Status::Yielding;
                let latency = kv.spec.preempt_latency;
                self.version[kernel] += 1;
                let v = self.version[kernel];
                // It keeps working while it yields: if it finishes, or reaches its time limit,
                // before it could yield, that comes first.
                let (end, what) = self.end_of(kernel);
                if end <= now + latency {
                    self.schedule(end, what);
                } else {
                    self.schedule(now + latency, What::YieldDone(kernel, v));
                }
            }
            Action::Revoke { kernel } => {
                self.check_running(kernel)?;
                self.shrink_version[kernel] += 1;
                let kv = &mut self.sys.kernels[kernel];
                kv.shrinking_to = None;
                kv.status = Status::Revoking;
                kv.wasted += kv.spec.work - kv.remaining; // progress so far is lost
                let latency = kv.spec.revoke_latency;
                self.version[kernel] += 1;
                self.schedule(
                    now + latency,
                    What::RevokeDone(kernel, self.version[kernel]),
                );
            }
            Action::SetTick { at } => {
                self.tick_version += 1;
                self.schedule(at.max(now), What::Tick(self.tick_version));
            }
            Action::SetTimer { gpu, at } => {
                if gpu < self.timer_version.len() {
                    self.timer_version[gpu] += 1;
                    self.schedule(at.max(now), What::Timer(gpu, self.timer_version[gpu]));
                }
            }
        }
        Ok(())
    }
}
