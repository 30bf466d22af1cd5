//! The policies (docs/scheduling.md describes each). Each keeps no hidden queue: the order of the
//! ready set is computed from the system view, so the same code can drive the real runtime.

use crate::model::{KernelId, KernelView, Status, SystemView};
use crate::policy::{fill_idle, Action, Event, Policy};
use std::collections::BTreeSet;

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
        let key = |k: &KernelView| -(k.spec.priority as f64) * 1e18 + k.expected_remaining();
        preemptive(event, sys, key, |r, n| {
            n.spec.priority > r.spec.priority
                || (n.spec.priority == r.spec.priority
                    && r.expected_remaining()
                        > n.expected_remaining() + r.spec.preemption_overhead())
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
            |k| k.expected_work(),
            |r, n| n.expected_work() < r.expected_work(),
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
            |k| k.expected_remaining(),
            |r, n| n.expected_remaining() < r.expected_remaining(),
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
        timesliced(false, event, sys, |k| k.ready_since, |_| self.quantum)
    }
}

/// TReM's Priority (Pavlidakis et al.): user-facing kernels before batch kernels on every GPU,
/// each class in arrival order. A user-facing kernel that finds every GPU busy revokes a batch
/// kernel (progress lost), the one that started most recently (least work lost), unless it was
/// already revoked `max_revocations` times (bounding starvation).
#[derive(Debug)]
pub struct TremPriority {
    pub max_revocations: u32,
}

impl TremPriority {
    pub fn new(max_revocations: u32) -> TremPriority {
        TremPriority { max_revocations }
    }
}

/// Batch kernels to revoke so that `waiting()` user-facing kernels get a GPU: the most recently
/// started revocable ones, counting revocations already under way. `worth` filters victims.
/// `waiting` is asked only when there is a victim: counting walks the whole backlog, and a long
/// simulation asks at every event.
fn revoke_for(
    sys: &SystemView,
    waiting: impl FnOnce() -> usize,
    max: u32,
    worth: impl Fn(&KernelView) -> bool,
) -> Vec<Action> {
    let mut victims: Vec<&KernelView> = sys
        .on_gpus()
        .filter(|k| {
            k.status == Status::Running && !k.spec.user_facing && k.revocations < max && worth(k)
        })
        .collect();
    if victims.is_empty() {
        return Vec::new();
    }
    let under_way = sys
        .on_gpus()
        .filter(|k| k.status == Status::Revoking)
        .count();
    victims.sort_by(|a, b| {
        b.run_since
            .partial_cmp(&a.run_since)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.id.cmp(&b.id))
    });
    victims
        .into_iter()
        .take(waiting().saturating_sub(under_way))
        .map(|k| Action::Revoke { kernel: k.id })
        .collect()
}

/// User-facing first, then arrival order.
fn trem_key(k: &KernelView) -> f64 {
    (if k.spec.user_facing { 0.0 } else { 1e18 }) + k.spec.arrival
}

impl Policy for TremPriority {
    fn name(&self) -> &'static str {
        "priority"
    }
    fn on_event(&mut self, _: Event, sys: &SystemView) -> Vec<Action> {
        let mut actions = fill_idle(sys, |k| trem_key(&sys.kernels[k]));
        let placed = actions.len();
        let waiting = || {
            sys.ready()
                .filter(|k| k.spec.user_facing)
                .count()
                .saturating_sub(placed)
        };
        actions.extend(revoke_for(sys, waiting, self.max_revocations, |_| true));
        actions
    }
}

/// TReM's Elastic: every `period` µs and at each completion, L_max = l_e · q (l_e: running mean
/// of user-facing execution time, q: outstanding user-facing kernels) and U = ⌈L_max / SLA⌉
/// GPUs (the first U) serve user-facing kernels, the rest batch. A batch kernel on a user GPU
/// is revoked for a waiting user-facing kernel only if its remaining time exceeds the
/// revocation latency. Idle GPUs of either side take the other side's work when their own
/// side has none waiting (work-conserving).
#[derive(Debug)]
pub struct TremElastic {
    pub period: f64,
    pub max_revocations: u32,
    /// User-facing execution times seen so far (sum, count).
    seen: (f64, u32),
    ticking: bool,
    /// GPUs currently given to user-facing work.
    pub user_gpus: usize,
}

impl TremElastic {
    pub fn new(period: f64, max_revocations: u32) -> TremElastic {
        TremElastic {
            period,
            max_revocations,
            seen: (0.0, 0),
            ticking: false,
            user_gpus: 0,
        }
    }

    /// U for the current system.
    pub fn user_gpus(&self, sys: &SystemView) -> usize {
        let outstanding: Vec<&KernelView> = sys
            .active
            .iter()
            .map(|&k| &sys.kernels[k])
            .filter(|k| k.spec.user_facing)
            .collect();
        if outstanding.is_empty() {
            return 0;
        }
        // l_e: the running mean once kernels finished, the predictions (Te) before.
        let l_e = if self.seen.1 > 0 {
            self.seen.0 / self.seen.1 as f64
        } else {
            outstanding.iter().map(|k| k.expected_work()).sum::<f64>() / outstanding.len() as f64
        };
        let sla = outstanding
            .iter()
            .map(|k| k.spec.sla)
            .filter(|s| *s > 0.0)
            .fold(f64::INFINITY, f64::min);
        let sla = if sla.is_finite() { sla } else { l_e };
        let l_max = l_e * outstanding.len() as f64;
        ((l_max / sla).ceil() as usize).clamp(1, sys.gpus.len())
    }
}

impl Policy for TremElastic {
    fn name(&self) -> &'static str {
        "elastic"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        let mut actions = Vec::new();
        match event {
            Event::Finished(k) if sys.kernels[k].spec.user_facing => {
                self.seen.0 += sys.kernels[k].expected_work();
                self.seen.1 += 1;
            }
            Event::Tick => self.ticking = false,
            _ => {}
        }
        if !self.ticking && !sys.active.is_empty() {
            actions.push(Action::SetTick {
                at: sys.now + self.period,
            });
            self.ticking = true;
        }
        // Recompute U on ticks and completions (and when there was none yet).
        if matches!(event, Event::Tick | Event::Finished(_)) || self.user_gpus == 0 {
            self.user_gpus = self.user_gpus(sys);
        }
        let u = self.user_gpus;
        let mut user: Vec<&KernelView> = sys.ready().filter(|k| k.spec.user_facing).collect();
        let mut batch: Vec<&KernelView> = sys.ready().filter(|k| !k.spec.user_facing).collect();
        let fcfs = |a: &&KernelView, b: &&KernelView| {
            a.spec
                .arrival
                .partial_cmp(&b.spec.arrival)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.id.cmp(&b.id))
        };
        user.sort_by(fcfs);
        batch.sort_by(fcfs);
        let (mut user, mut batch) = (user.into_iter(), batch.into_iter());
        for gpu in sys.idle_gpus() {
            // Work-conserving: either side takes the other's work when it has none waiting.
            let pick = if gpu < u {
                user.next().or_else(|| batch.next())
            } else {
                batch.next().or_else(|| user.next())
            };
            if let Some(k) = pick {
                actions.push(Action::Run { kernel: k.id, gpu });
            }
        }
        // User-facing kernels still waiting: revoke batch work on user GPUs worth revoking.
        actions.extend(revoke_for(
            sys,
            || user.count(),
            self.max_revocations,
            |k| k.gpu.is_some_and(|g| g < u) && k.expected_remaining() > k.spec.revoke_latency,
        ));
        actions
    }
}

/// SJF with aging (Shao et al.): non-preemptive; the job with the smallest declared time limit
/// (its predicted duration when it declares none) goes first, minus `aging` µs of priority for
/// every µs it has waited, so that long jobs do not starve. Dependencies (DAGs) and the
/// killing of jobs that exceed their limit are the simulator's part.
#[derive(Debug)]
pub struct SjfAging {
    pub aging: f64,
}

impl SjfAging {
    pub fn new(aging: f64) -> SjfAging {
        SjfAging { aging }
    }
    pub fn score(&self, k: &KernelView) -> f64 {
        let declared = if k.spec.time_limit > 0.0 {
            k.spec.time_limit
        } else {
            k.expected_work()
        };
        declared - self.aging * k.waited
    }
}

impl Policy for SjfAging {
    fn name(&self) -> &'static str {
        "sjf-aging"
    }
    fn on_event(&mut self, _: Event, sys: &SystemView) -> Vec<Action> {
        fill_idle(sys, |k| self.score(&sys.kernels[k]))
    }
    fn reads_waited(&self) -> bool {
        true
    }
}

/// Every policy `by_name` knows, in the order the command line lists them. The one list:
/// `by_name` answers only these names, and the property tests run every one of them.
pub const NAMES: &[&str] = &[
    "fifo",
    "hpf",
    "sjf",
    "srt",
    "rr",
    "ffs",
    "cfs",
    "frs",
    "priority",
    "elastic",
    "sjf-aging",
    "spatial",
    "shares",
    "concurrent",
];

/// The policies by name, for the command line (`None` for a name not in `NAMES`). `quantum`:
/// RR's quantum, FRS's minimum quantum and a quarter of CFS's epoch (1 ms gives RR and FRS
/// 1 ms and CFS 4 ms); FFS allows 10% preemption overhead.
pub fn by_name(name: &str, quantum: f64) -> Option<Box<dyn Policy>> {
    if !NAMES.contains(&name) {
        return None;
    }
    Some(match name {
        "fifo" => Box::new(Fifo),
        "hpf" => Box::new(Hpf),
        "sjf" => Box::new(Sjf),
        "srt" => Box::new(Srt),
        "rr" => Box::new(RoundRobin::new(quantum)),
        "ffs" => Box::new(Ffs::new(0.10)),
        "cfs" => Box::new(Cfs::new(4.0 * quantum)),
        "frs" => Box::new(Frs::new(quantum)),
        "priority" => Box::new(TremPriority::new(5)),
        "elastic" => Box::new(TremElastic::new(100_000.0, 5)),
        "sjf-aging" => Box::new(SjfAging::new(1.0)),
        "spatial" => Box::new(super::spatial::SpatialGreedy::new(8, 4)),
        "shares" => Box::new(super::spatial::SpatialGreedy::shares(8, 4)),
        "concurrent" => Box::new(super::spatial::SpatialGreedy::concurrent()),
        _ => return None,
    })
}

/// Time-sliced policies share one mechanism: when a GPU is free, run the ready kernel that
/// `pick` ranks best (smaller key first) for `quantum` µs; when the quantum expires and someone
/// else is ready, preempt; otherwise extend. With `rearm`, quanta that depend on the active set
/// are recomputed at each arrival for the kernels already running (from when they started),
/// so a kernel that had its share already yields at once; fixed quanta (RR) are not re-armed.
fn timesliced(
    rearm: bool,
    event: Event,
    sys: &SystemView,
    pick: impl Fn(&KernelView) -> f64,
    quantum: impl Fn(&KernelView) -> f64,
) -> Vec<Action> {
    let mut actions = Vec::new();
    if let (true, Event::Arrived(_)) = (rearm, event) {
        for (gpu, k) in sys
            .gpus
            .iter()
            .enumerate()
            .filter_map(|(g, k)| k.map(|k| (g, &sys.kernels[k])))
        {
            if k.status == Status::Running {
                actions.push(Action::SetTimer {
                    gpu,
                    at: k.run_since + quantum(k),
                });
            }
        }
    }
    if let Event::QuantumExpired(gpu) = event {
        if let Some(k) = sys.running_on(gpu).filter(|k| k.status == Status::Running) {
            if sys.ready().next().is_some() {
                actions.push(Action::Preempt { kernel: k.id });
            } else {
                actions.push(Action::SetTimer {
                    gpu,
                    at: sys.now + quantum(k),
                });
            }
        }
    }
    for run in fill_idle(sys, |k| pick(&sys.kernels[k])) {
        if let Action::Run { gpu, kernel } = run {
            actions.push(run);
            actions.push(Action::SetTimer {
                gpu,
                at: sys.now + quantum(&sys.kernels[kernel]),
            });
        }
    }
    actions
}

/// FLEP's FFS: weighted round robin; kernel i runs T·W_i per round, with T the smallest epoch
/// for which Σ O_i / (T·Σ W_i) ≤ `max_overhead` over the active kernels.
#[derive(Debug)]
pub struct Ffs {
    pub max_overhead: f64,
    /// Lower bound on T (for kernels whose overhead is 0).
    pub min_epoch: f64,
}

impl Ffs {
    pub fn new(max_overhead: f64) -> Ffs {
        Ffs {
            max_overhead,
            min_epoch: 100.0,
        }
    }
    /// T for the active kernels of `sys`.
    pub fn epoch(&self, sys: &SystemView) -> f64 {
        let (o, w) = sys
            .active
            .iter()
            .map(|&k| &sys.kernels[k].spec)
            .fold((0.0, 0.0), |(o, w), s| {
                (o + s.preemption_overhead(), w + s.weight)
            });
        if w <= 0.0 {
            return self.min_epoch;
        }
        (o / (self.max_overhead * w)).max(self.min_epoch)
    }
}

impl Policy for Ffs {
    fn name(&self) -> &'static str {
        "ffs"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        let t = self.epoch(sys);
        timesliced(true, event, sys, |k| k.ready_since, |k| t * k.spec.weight)
    }
}

/// CFS (López-Albelda et al.): an epoch is split equally among the active kernels; every
/// active kernel gets one slice per epoch, and within the epoch the kernel that has been
/// waiting longest (since it last became ready) goes first.
#[derive(Debug)]
pub struct Cfs {
    pub epoch: f64,
    pub min_quantum: f64,
    /// Kernels that had their slice in the current epoch.
    served: BTreeSet<KernelId>,
}

impl Cfs {
    pub fn new(epoch: f64) -> Cfs {
        Cfs {
            epoch,
            min_quantum: 100.0,
            served: BTreeSet::new(),
        }
    }
}

impl Policy for Cfs {
    fn name(&self) -> &'static str {
        "cfs"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        if let Event::Finished(k) = event {
            self.served.remove(&k);
        }
        // A new epoch when every kernel waiting for a GPU has had its slice.
        if sys.ready().all(|k| self.served.contains(&k.id)) {
            self.served.clear();
        }
        // Each GPU serves its share of the active kernels.
        let per_gpu = (sys.active.len() as f64 / sys.gpus.len() as f64)
            .ceil()
            .max(1.0);
        let q = (self.epoch / per_gpu).max(self.min_quantum);
        let served = &self.served;
        let key = |k: &KernelView| {
            let waiting = sys.now - k.ready_since;
            if served.contains(&k.id) {
                f64::MAX / 2.0 - waiting
            } else {
                -waiting
            }
        };
        let actions = timesliced(true, event, sys, key, |_| q);
        for a in &actions {
            if let Action::Run { kernel, .. } = a {
                self.served.insert(*kernel);
            }
        }
        actions
    }
}

/// FRS (fair and responsive): run the ready kernel with the highest instantaneous slowdown
/// IS = (t + Tr) / Te (t: time since arrival) for the quantum after which the lowest IS has
/// risen to IS_max: q = IS_max·Te − Tr − t of the kernel with the minimum IS; at least
/// `min_quantum`.
#[derive(Debug)]
pub struct Frs {
    pub min_quantum: f64,
}

impl Frs {
    pub fn new(min_quantum: f64) -> Frs {
        Frs { min_quantum }
    }
    pub fn slowdown(k: &KernelView, now: f64) -> f64 {
        ((now - k.spec.arrival) + k.expected_remaining()) / k.expected_work().max(1e-9)
    }
    /// The quantum for the kernel with the highest slowdown, given all ready kernels.
    pub fn quantum(&self, ready: &[&KernelView], now: f64) -> f64 {
        let is = |k: &KernelView| Frs::slowdown(k, now);
        let max = ready
            .iter()
            .map(|k| is(k))
            .fold(f64::NEG_INFINITY, f64::max);
        let min = ready.iter().copied().min_by(|a, b| {
            is(a)
                .partial_cmp(&is(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        match min {
            Some(m) => (max * m.expected_work() - m.expected_remaining() - (now - m.spec.arrival))
                .max(self.min_quantum),
            None => self.min_quantum,
        }
    }
}

impl Policy for Frs {
    fn name(&self) -> &'static str {
        "frs"
    }
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        let now = sys.now;
        let ready: Vec<&KernelView> = sys.ready().collect();
        let q = self.quantum(&ready, now);
        timesliced(true, event, sys, |k| -Frs::slowdown(k, now), |_| q)
    }
}
