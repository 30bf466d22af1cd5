//! What the scheduler knows about kernels and GPUs. Times are in microseconds.

use serde::{Deserialize, Serialize};

pub type KernelId = usize;
pub type GpuId = usize;

/// A kernel as a workload describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSpec {
    /// Arrival time.
    pub arrival: f64,
    /// Standalone duration `Te` (the time it takes alone on a GPU).
    pub work: f64,
    /// Higher runs first under priority policies.
    #[serde(default)]
    pub priority: u8,
    /// Share under weighted-fair policies.
    #[serde(default = "one")]
    pub weight: f64,
    /// User-facing (latency-bound) rather than batch.
    #[serde(default)]
    pub user_facing: bool,
    /// Time from the preemption request until the GPU is free (work goes on meanwhile).
    #[serde(default)]
    pub preempt_latency: f64,
    /// Extra work each resumption costs (relaunch, refilling caches).
    #[serde(default)]
    pub resume_overhead: f64,
    /// Time a revocation (kill, progress lost) keeps the GPU busy.
    #[serde(default)]
    pub revoke_latency: f64,
    /// Response-time goal (µs) for user-facing kernels; 0: none.
    #[serde(default)]
    pub sla: f64,
    /// Declared GPU-time limit (Shao et al.): the kernel is killed when it runs longer; 0: none.
    #[serde(default)]
    pub time_limit: f64,
    /// Kernels (earlier in the workload) that must finish before this one may run.
    #[serde(default)]
    pub after: Vec<KernelId>,
}

fn one() -> f64 {
    1.0
}

impl KernelSpec {
    pub fn new(arrival: f64, work: f64) -> KernelSpec {
        KernelSpec {
            arrival,
            work,
            priority: 0,
            weight: 1.0,
            user_facing: false,
            preempt_latency: 0.0,
            resume_overhead: 0.0,
            revoke_latency: 0.0,
            sla: 0.0,
            time_limit: 0.0,
            after: Vec::new(),
        }
    }
    pub fn time_limit(mut self, limit: f64) -> Self {
        self.time_limit = limit;
        self
    }
    pub fn after(mut self, deps: &[KernelId]) -> Self {
        self.after = deps.to_vec();
        self
    }
    pub fn user_facing(mut self, sla: f64) -> Self {
        self.user_facing = true;
        self.sla = sla;
        self
    }
    pub fn revoke_latency(mut self, l: f64) -> Self {
        self.revoke_latency = l;
        self
    }
    pub fn priority(mut self, p: u8) -> Self {
        self.priority = p;
        self
    }
    pub fn weight(mut self, w: f64) -> Self {
        self.weight = w;
        self
    }
    pub fn overheads(mut self, latency: f64, resume: f64) -> Self {
        self.preempt_latency = latency;
        self.resume_overhead = resume;
        self
    }
    /// `O` of POLICIES.md: what one preemption costs this kernel.
    pub fn preemption_overhead(&self) -> f64 {
        self.preempt_latency + self.resume_overhead
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Not arrived yet.
    Future,
    /// Arrived, waiting for the kernels it depends on.
    Blocked,
    /// Arrived, waiting for a GPU.
    Ready,
    Running,
    /// Asked to yield; still on its GPU until the preemption completes.
    Yielding,
    /// Being killed; still holds its GPU until the revocation completes.
    Revoking,
    Done,
}

/// A kernel as policies see it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelView {
    pub id: KernelId,
    pub spec: KernelSpec,
    pub status: Status,
    /// `Tr`: standalone work left (resume overheads included once incurred).
    pub remaining: f64,
    /// `Tw`: time spent active but not running.
    pub waited: f64,
    /// When it last became ready (arrival or preemption), for FCFS and round robin.
    pub ready_since: f64,
    pub gpu: Option<GpuId>,
    /// When it last started running.
    pub run_since: f64,
    pub preemptions: u32,
    pub revocations: u32,
    /// GPU time whose results a revocation threw away.
    pub wasted: f64,
    /// Killed for exceeding its declared time limit.
    pub killed: bool,
}

impl KernelView {
    /// A kernel of a workload before anything happened to it.
    pub fn new(id: KernelId, spec: KernelSpec) -> KernelView {
        KernelView {
            id,
            status: Status::Future,
            remaining: spec.work,
            waited: 0.0,
            ready_since: spec.arrival,
            gpu: None,
            run_since: 0.0,
            preemptions: 0,
            revocations: 0,
            wasted: 0.0,
            killed: false,
            spec,
        }
    }

    /// Active: arrived and not finished.
    pub fn active(&self) -> bool {
        matches!(
            self.status,
            Status::Ready | Status::Running | Status::Yielding
        )
    }
}

/// The whole system at one moment.
#[derive(Debug, Clone)]
pub struct SystemView {
    pub now: f64,
    /// What each GPU runs (a kernel that is Running or Yielding), or None.
    pub gpus: Vec<Option<KernelId>>,
    pub kernels: Vec<KernelView>,
    /// Kernels that have arrived and not finished, in arrival order.
    pub active: Vec<KernelId>,
}

impl SystemView {
    pub fn ready(&self) -> impl Iterator<Item = &KernelView> {
        self.active
            .iter()
            .map(|&k| &self.kernels[k])
            .filter(|k| k.status == Status::Ready)
    }
    /// Kernels on a GPU (running or yielding).
    pub fn on_gpus(&self) -> impl Iterator<Item = &KernelView> {
        self.gpus.iter().flatten().map(|&k| &self.kernels[k])
    }
    pub fn idle_gpus(&self) -> impl Iterator<Item = GpuId> + '_ {
        self.gpus
            .iter()
            .enumerate()
            .filter(|(_, k)| k.is_none())
            .map(|(g, _)| g)
    }
    pub fn running_on(&self, gpu: GpuId) -> Option<&KernelView> {
        self.gpus[gpu].map(|k| &self.kernels[k])
    }
}
