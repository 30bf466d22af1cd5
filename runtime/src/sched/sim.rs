//! A discrete-event simulator that runs any policy on a workload over 1..N GPUs. Deterministic:
//! events at the same time are handled in the order they were scheduled.
//!
//! Model: a GPU runs one kernel at a time. A kernel needs `work` µs of GPU time. A preemption
//! request takes `preempt_latency` µs to complete, during which the kernel keeps working; then
//! the GPU is free and the kernel is ready again, with `resume_overhead` µs added to its
//! remaining work (the cost of relaunching it).

use super::metrics::{Interval, Metrics};
use super::model::{GpuId, KernelId, KernelSpec, KernelView, Status, SystemView};
use super::policy::{Action, Event, Policy};
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
    #[error("policy {policy} asked to preempt or revoke kernel {kernel}, which is not running")]
    BadPreempt {
        policy: &'static str,
        kernel: KernelId,
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
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum What {
    Arrival(KernelId),
    Completion(KernelId, u32),
    YieldDone(KernelId, u32),
    RevokeDone(KernelId, u32),
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
    /// Bumped whenever a kernel starts or is asked to yield: older events about it are stale.
    version: Vec<u32>,
    timer_version: Vec<u32>,
    tick_version: u32,
    /// When each running kernel's `remaining` was last brought up to date.
    synced_at: Vec<f64>,
    finish: Vec<f64>,
    started: Vec<Option<(GpuId, f64)>>,
    /// Unfinished predecessors of each kernel, and who waits for each kernel.
    pending: Vec<usize>,
    dependents: Vec<Vec<KernelId>>,
    intervals: Vec<Interval>,
}

pub fn simulate(
    specs: &[KernelSpec],
    gpus: usize,
    policy: &mut dyn Policy,
) -> Result<Outcome, SimError> {
    if gpus == 0 {
        return Err(SimError::Workload("at least one GPU is needed".into()));
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
            kernels,
            active: Vec::new(),
        },
        heap: BinaryHeap::with_capacity(2 * n),
        seq: 0,
        version: vec![0; n],
        timer_version: vec![0; gpus],
        tick_version: 0,
        synced_at: vec![0.0; n],
        finish: vec![f64::NAN; n],
        started: vec![None; n],
        pending: specs.iter().map(|s| s.after.len()).collect(),
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
    let metrics = Metrics::compute(specs, &sim.finish, &sim.sys.kernels, &sim.intervals);
    Ok(Outcome {
        policy: sim.policy.name(),
        finish: sim.finish,
        intervals: sim.intervals,
        events,
        metrics,
        kernels: sim.sys.kernels,
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
            for &k in &self.sys.active {
                let kv = &mut self.sys.kernels[k];
                match kv.status {
                    Status::Running | Status::Yielding => {
                        kv.remaining = (kv.remaining - (t - self.synced_at[k])).max(0.0);
                        self.synced_at[k] = t;
                    }
                    Status::Ready => kv.waited += dt,
                    _ => {}
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
                }
                if self.pending[k] > 0 {
                    kv.status = Status::Blocked;
                    return None;
                }
                kv.status = Status::Ready;
                kv.ready_since = ev.at;
                Event::Arrived(k)
            }
            What::Completion(k, _) | What::Kill(k, _) => {
                self.leave_gpu(k, ev.at);
                let kv = &mut self.sys.kernels[k];
                kv.status = Status::Done;
                kv.killed = matches!(ev.what, What::Kill(..));
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
            What::Timer(g, _) => Event::QuantumExpired(g),
            What::Tick(_) => Event::Tick,
        })
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
        let kv = &mut self.sys.kernels[k];
        if let Some(g) = kv.gpu.take() {
            self.sys.gpus[g] = None;
            if let Some((sg, start)) = self.started[k].take() {
                self.intervals.push(Interval {
                    gpu: sg,
                    kernel: k,
                    start,
                    end: at,
                });
            }
        }
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

    fn apply(&mut self, a: Action) -> Result<(), SimError> {
        let now = self.sys.now;
        let name = self.policy.name();
        match a {
            Action::Run { kernel, gpu } => {
                let why = if gpu >= self.sys.gpus.len() {
                    Some("no such GPU")
                } else if self.sys.gpus[gpu].is_some() {
                    Some("the GPU is busy")
                } else if kernel >= self.sys.kernels.len()
                    || self.sys.kernels[kernel].status != Status::Ready
                {
                    Some("the kernel is not ready")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(SimError::BadRun {
                        policy: name,
                        kernel,
                        gpu,
                        why,
                    });
                }
                let kv = &mut self.sys.kernels[kernel];
                kv.status = Status::Running;
                kv.gpu = Some(gpu);
                kv.run_since = now;
                let remaining = kv.remaining;
                self.sys.gpus[gpu] = Some(kernel);
                self.synced_at[kernel] = now;
                self.started[kernel] = Some((gpu, now));
                self.version[kernel] += 1;
                let v = self.version[kernel];
                // A declared time limit counts the kernel's GPU time so far.
                let limit = self.sys.kernels[kernel].spec.time_limit;
                let used = self.sys.kernels[kernel].spec.work - remaining;
                if limit > 0.0 && limit - used < remaining {
                    self.schedule(now + (limit - used).max(0.0), What::Kill(kernel, v));
                } else {
                    self.schedule(now + remaining, What::Completion(kernel, v));
                }
            }
            Action::Preempt { kernel } => {
                self.check_running(kernel)?;
                let kv = &mut self.sys.kernels[kernel];
                kv.status = Status::Yielding;
                let (remaining, latency) = (kv.remaining, kv.spec.preempt_latency);
                self.version[kernel] += 1;
                let v = self.version[kernel];
                if remaining <= latency {
                    // It finishes before it could yield.
                    self.schedule(now + remaining, What::Completion(kernel, v));
                } else {
                    self.schedule(now + latency, What::YieldDone(kernel, v));
                }
            }
            Action::Revoke { kernel } => {
                self.check_running(kernel)?;
                let kv = &mut self.sys.kernels[kernel];
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
