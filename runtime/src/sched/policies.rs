//! Policies (definitions: shared/POLICIES.md). Each keeps no hidden queue: the order of the
//! ready set is computed from the system view, so the same code can drive the real runtime.

use super::model::{KernelId, KernelView, Status, SystemView};
use super::policy::{fill_idle, Action, Event, Policy};

/// FIFO without preemption: the baseline everyone is compared to.
#[derive(Debug, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn on_event(&mut self, _: Event, sys: &SystemView) -> Vec<Action> {
        fill_idle(sys, |k| sys.kernels[k].spec.arrival)
    }
}

/// The running kernel that a newcomer `by` should replace, if any: among kernels that are
/// running (not already yielding), the one `worse` ranks highest, if `should` says so.
fn victim<'a>(
    sys: &'a SystemView,
    by: &KernelView,
    worse: impl Fn(&KernelView) -> f64,
    should: impl Fn(&KernelView, &KernelView) -> bool,
) -> Option<&'a KernelView> {
    sys.on_gpus()
        .filter(|k| k.status == Status::Running)
        .max_by(|a, b| {
            worse(a)
                .partial_cmp(&worse(b))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(b.id.cmp(&a.id))
        })
        .filter(|r| should(r, by))
}

/// On arrival: idle GPUs first; otherwise preempt the victim the policy names.
fn preemptive(
    event: Event,
    sys: &SystemView,
    key: impl Fn(&KernelView) -> f64,
    should: impl Fn(&KernelView, &KernelView) -> bool,
) -> Vec<Action> {
    let mut actions = fill_idle(sys, |k| key(&sys.kernels[k]));
    if let Event::Arrived(n) = event {
        let placed = actions
            .iter()
            .any(|a| matches!(a, Action::Run { kernel, .. } if *kernel == n));
        if !placed && sys.idle_gpus().next().is_none() {
            if let Some(v) = victim(sys, &sys.kernels[n], &key, should) {
                actions.push(Action::Preempt { kernel: v.id });
            }
        }
    }
    actions
}

/// FLEP's HPF: highest priority first; within a priority, shortest remaining time, and a
/// running kernel of equal priority is preempted only if Tr(Kr) > Tr(Ks) + O(Kr).
#[derive(Debug, Default)]
pub struct Hpf;

impl Policy for Hpf {
    fn name(&self) -> &'static str {
        "hpf"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        // Order: priority descending, then Tr ascending (encoded in one key).
        let key = |k: &KernelView| -(k.spec.priority as f64) * 1e18 + k.remaining;
        preemptive(event, sys, key, |r, n| {
            n.spec.priority > r.spec.priority
                || (n.spec.priority == r.spec.priority
                    && r.remaining > n.remaining + r.spec.preemption_overhead())
        })
    }
}

/// SJF (López-Albelda et al.): shortest total duration first, preemptive.
#[derive(Debug, Default)]
pub struct Sjf;

impl Policy for Sjf {
    fn name(&self) -> &'static str {
        "sjf"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        preemptive(
            event,
            sys,
            |k| k.spec.work,
            |r, n| n.spec.work < r.spec.work,
        )
    }
}

/// SRT: shortest remaining time first, recomputed at each arrival, preemptive.
#[derive(Debug, Default)]
pub struct Srt;

impl Policy for Srt {
    fn name(&self) -> &'static str {
        "srt"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        preemptive(
            event,
            sys,
            |k| k.remaining,
            |r, n| n.remaining < r.remaining,
        )
    }
}

/// Round robin: equal priority, a fixed quantum, FCFS order, a preempted kernel goes to the
/// back (its `ready_since` is the moment it left the GPU).
#[derive(Debug)]
pub struct RoundRobin {
    pub quantum: f64,
}

impl RoundRobin {
    pub fn new(quantum: f64) -> RoundRobin {
        RoundRobin { quantum }
    }
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Event::QuantumExpired(gpu) = event {
            match sys.running_on(gpu) {
                Some(k) if k.status == Status::Running && sys.ready().next().is_some() => {
                    actions.push(Action::Preempt { kernel: k.id });
                }
                Some(k) if k.status == Status::Running => {
                    actions.push(Action::SetTimer {
                        gpu,
                        at: sys.now + self.quantum,
                    });
                }
                _ => {}
            }
        }
        for run in fill_idle(sys, |k: KernelId| sys.kernels[k].ready_since) {
            if let Action::Run { gpu, .. } = run {
                actions.push(run);
                actions.push(Action::SetTimer {
                    gpu,
                    at: sys.now + self.quantum,
                });
            }
        }
        actions
    }
}

/// The policies by name, for the command line.
pub fn by_name(name: &str, quantum: f64) -> Option<Box<dyn Policy>> {
    Some(match name {
        "fifo" => Box::new(Fifo),
        "hpf" => Box::new(Hpf),
        "sjf" => Box::new(Sjf),
        "srt" => Box::new(Srt),
        "rr" => Box::new(RoundRobin::new(quantum)),
        _ => return None,
    })
}

pub const NAMES: &[&str] = &["fifo", "hpf", "sjf", "srt", "rr"];
