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
    /// Which program this is (the duration model learns per name); empty: anonymous.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What the duration model predicts from: grid size, block size, input bytes, shared bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<[f64; 4]>,
    /// SMs beyond which the kernel runs no faster (its CTAs fill only that many); 0: all.
    /// With `s` SMs it progresses at `min(s, p) / p` of its standalone speed, `p` this limit.
    #[serde(default)]
    pub max_sms: u32,
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
            name: String::new(),
            features: None,
            max_sms: 0,
        }
    }
    pub fn named(mut self, name: &str, features: [f64; 4]) -> Self {
        self.name = name.to_string();
        self.features = Some(features);
        self
    }
    pub fn max_sms(mut self, sms: u32) -> Self {
        self.max_sms = sms;
        self
    }
    /// The SMs it can use on a GPU of `total` SMs.
    pub fn useful_sms(&self, total: u32) -> u32 {
        if self.max_sms == 0 {
            total
        } else {
            self.max_sms.min(total)
        }
    }
    /// Its progress per µs with `sms` of `total` SMs (1: as fast as alone on the GPU).
    pub fn speed(&self, sms: u32, total: u32) -> f64 {
        let p = self.useful_sms(total).max(1);
        sms.min(p) as f64 / p as f64
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
    /// What one preemption costs this kernel: its preemption latency plus its resume overhead.
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
    /// `Tw`: time spent active but not running (kept by the simulator for policies that read
    /// it, `Policy::reads_waited`).
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
    /// SMs it holds while on a GPU (all of them when it runs alone).
    pub sms: u32,
    /// A spatial preemption under way: the SMs it will keep when it completes.
    pub shrinking_to: Option<u32>,
    /// Completed spatial preemptions (SMs taken away while it kept running).
    pub shrinks: u32,
    /// The standalone duration policies believe: `spec.work` itself, or the duration model's
    /// prediction when the simulation runs with one (policies never see the truth then).
    pub estimate: f64,
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
            sms: 0,
            shrinking_to: None,
            shrinks: 0,
            estimate: spec.work,
            spec,
        }
    }

    /// `Te` as the scheduler knows it (see `estimate`).
    pub fn expected_work(&self) -> f64 {
        self.estimate
    }

    /// `Tr` as the scheduler knows it: the estimate less the progress made (overheads paid
    /// included); never below zero even when the estimate was too low.
    pub fn expected_remaining(&self) -> f64 {
        (self.remaining + self.estimate - self.spec.work).max(0.0)
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
    /// The kernel that holds each GPU whole (Running, Yielding or Revoking), or None (the GPU
    /// is idle or shared: see `used_sms`).
    pub gpus: Vec<Option<KernelId>>,
    /// SMs per GPU.
    pub sms: u32,
    /// SMs held on each GPU, by a whole-GPU kernel or by the kernels sharing it.
    pub used_sms: Vec<u32>,
    pub kernels: Vec<KernelView>,
    /// Kernels that have arrived and not finished, in arrival order.
    pub active: Vec<KernelId>,
    /// Kernels on a GPU (whole or sharing it), by id: kept by `place` and `vacate`, so that
    /// `on_gpus` need not walk every active kernel at every event (a backlog of thousands made
    /// long simulations quadratic).
    pub placed: Vec<KernelId>,
}

impl SystemView {
    pub fn ready(&self) -> impl Iterator<Item = &KernelView> {
        self.active
            .iter()
            .map(|&k| &self.kernels[k])
            .filter(|k| k.status == Status::Ready)
    }
    /// Kernels on a GPU (running, yielding or being revoked), whole or sharing it.
    pub fn on_gpus(&self) -> impl Iterator<Item = &KernelView> {
        self.placed.iter().map(|&k| &self.kernels[k])
    }
    /// GPUs with every SM free.
    pub fn idle_gpus(&self) -> impl Iterator<Item = GpuId> + '_ {
        self.used_sms
            .iter()
            .enumerate()
            .filter(|(_, used)| **used == 0)
            .map(|(g, _)| g)
    }
    pub fn free_sms(&self, gpu: GpuId) -> u32 {
        self.sms - self.used_sms[gpu]
    }
    /// Kernels sharing (or holding) `gpu`.
    pub fn tenants(&self, gpu: GpuId) -> impl Iterator<Item = &KernelView> {
        self.on_gpus().filter(move |k| k.gpu == Some(gpu))
    }
    pub fn running_on(&self, gpu: GpuId) -> Option<&KernelView> {
        self.gpus[gpu].map(|k| &self.kernels[k])
    }
    /// Puts a ready kernel on `sms` SMs of `gpu` at `now` (`whole`: it holds the GPU alone),
    /// or says why it cannot go there. The simulator and the daemon both place kernels so.
    pub fn place(
        &mut self,
        kernel: KernelId,
        gpu: GpuId,
        sms: u32,
        whole: bool,
    ) -> Result<(), &'static str> {
        if gpu >= self.gpus.len() {
            return Err("no such GPU");
        }
        if (whole && self.used_sms[gpu] > 0) || self.gpus[gpu].is_some() {
            return Err("the GPU is busy");
        }
        if sms == 0 || sms > self.free_sms(gpu) {
            return Err("that many SMs are not free");
        }
        if kernel >= self.kernels.len() || self.kernels[kernel].status != Status::Ready {
            return Err("the kernel is not ready");
        }
        let kv = &mut self.kernels[kernel];
        kv.status = Status::Running;
        kv.gpu = Some(gpu);
        kv.run_since = self.now;
        kv.sms = sms;
        self.used_sms[gpu] += sms;
        if whole {
            self.gpus[gpu] = Some(kernel);
        }
        if let Err(at) = self.placed.binary_search(&kernel) {
            self.placed.insert(at, kernel);
        }
        Ok(())
    }
    /// Takes a kernel off its GPU (the SMs it held are free), if it is on one.
    pub fn vacate(&mut self, kernel: KernelId) {
        let kv = &mut self.kernels[kernel];
        if let Some(g) = kv.gpu.take() {
            if self.gpus[g] == Some(kernel) {
                self.gpus[g] = None;
            }
            self.used_sms[g] -= kv.sms;
            kv.sms = 0;
            if let Ok(at) = self.placed.binary_search(&kernel) {
                self.placed.remove(at);
            }
        }
    }
}
