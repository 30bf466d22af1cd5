//! Workloads: generated (Pareto durations, exponential inter-arrival, user-facing:batch mix,
//! priorities, a load factor, a seed) or read from JSON so that real traces can be replayed.

use crate::model::KernelSpec;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub kernels: Vec<KernelSpec>,
}

impl Workload {
    pub fn from_json(s: &str) -> Result<Workload, serde_json::Error> {
        serde_json::from_str(s)
    }
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("workloads serialize")
    }
}

/// A kind of task a job may be made of (`Generator::task_table`): its name (the duration
/// model's key), its standalone time, and the SMs it can fill (0: the whole GPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableTask {
    pub name: String,
    pub work: f64,
    #[serde(default)]
    pub max_sms: u32,
}

/// Reads a task table: one task kind per line, `name,work_us[,max_sms]`; blank lines and lines
/// starting with `#` are skipped, and so is a first line whose work is not a number (a header).
pub fn parse_task_table(text: &str) -> Result<Vec<TableTask>, String> {
    let mut rows = Vec::new();
    let mut first = true;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let header = first && fields.get(1).is_some_and(|w| w.parse::<f64>().is_err());
        first = false;
        if header {
            continue;
        }
        let at = |what: &str| format!("line {}: {what}: `{line}`", i + 1);
        if !(2..=3).contains(&fields.len()) || fields[0].is_empty() {
            return Err(at("expected `name,work_us[,max_sms]`"));
        }
        let work = fields[1]
            .parse::<f64>()
            .ok()
            .filter(|w| w.is_finite() && *w > 0.0)
            .ok_or_else(|| at("the work must be a positive number of µs"))?;
        let max_sms = match fields.get(2) {
            Some(f) => f
                .parse::<u32>()
                .map_err(|_| at("max_sms must be a whole number of SMs"))?,
            None => 0,
        };
        rows.push(TableTask {
            name: fields[0].to_string(),
            work,
            max_sms,
        });
    }
    if rows.is_empty() {
        return Err("the task table has no task".into());
    }
    Ok(rows)
}

/// SplitMix64: small, fast, and the same sequence on every platform and crate version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
    /// Pareto with shape `alpha` (> 1) and the given mean.
    pub fn pareto(&mut self, alpha: f64, mean: f64) -> f64 {
        let scale = mean * (alpha - 1.0) / alpha;
        scale / self.unit().powf(1.0 / alpha)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    pub kernels: usize,
    pub seed: u64,
    /// Pareto shape of durations.
    pub alpha: f64,
    /// Mean duration of user-facing and of batch kernels, µs.
    pub mean_user: f64,
    pub mean_batch: f64,
    /// Share of user-facing kernels (0.5 for 50:50, 0.8 for 80:20).
    pub user_share: f64,
    /// Mean inter-arrival time at load 1, µs.
    pub mean_interarrival: f64,
    /// Offered load: the mean inter-arrival time is divided by it.
    pub load: f64,
    /// Priority levels (user-facing kernels get the upper half).
    pub priorities: u8,
    /// Preemption latency and resume overhead of every kernel, µs.
    pub preempt_latency: f64,
    pub resume_overhead: f64,
    /// Revocation latency (TReM) and the user-facing response-time goal, µs.
    pub revoke_latency: f64,
    pub sla: f64,
    /// Multi-kernel applications: each job is 1..=this many kernels (uniform), arriving
    /// together and outstanding at once, sharing the job's drawn duration equally. `kernels`
    /// still counts kernels. 1: every job is one kernel.
    pub tasks_per_job: usize,
    /// Closed loop: at most this many of a job's kernels outstanding at once, each further one
    /// released when the one this many places before it finishes (`after`); its SLA counts
    /// from that release. 0: every kernel of a job arrives at once.
    #[serde(default)]
    pub job_window: usize,
    /// SMs each kernel can fill (`KernelSpec::max_sms`), drawn uniformly from this list; empty:
    /// every kernel fills the whole GPU.
    #[serde(default)]
    pub sm_widths: Vec<u32>,
    /// Distinct programs the kernels come from (named `p0`, `p1`, ...), each with features
    /// (grid, block, input, shared memory) from which the duration model can learn: a program
    /// spends its own time per block, and the grid follows the drawn duration within
    /// `feature_noise` (relative). 0: kernels are anonymous, without features.
    #[serde(default)]
    pub programs: usize,
    #[serde(default)]
    pub feature_noise: f64,
    /// Jobs made of tasks of these kinds: each kernel of a job is a row drawn uniformly (its
    /// name and its own work; the job's drawn duration is not used), as a job of FLEP's and
    /// TReM's experiments runs kernels of measured programs. Empty: a job's kernels share its
    /// drawn duration equally. Replaces `programs`.
    #[serde(default)]
    pub task_table: Vec<TableTask>,
}

impl Default for Generator {
    fn default() -> Generator {
        Generator {
            kernels: 1000,
            seed: 1,
            alpha: 1.5,
            mean_user: 1_000.0,
            mean_batch: 20_000.0,
            user_share: 0.5,
            mean_interarrival: 10_000.0,
            load: 1.0,
            priorities: 2,
            preempt_latency: 30.0,
            resume_overhead: 10.0,
            revoke_latency: 10_000.0,
            sla: 200_000.0,
            tasks_per_job: 1,
            job_window: 0,
            sm_widths: Vec::new(),
            programs: 0,
            feature_noise: 0.05,
            task_table: Vec::new(),
        }
    }
}

impl Generator {
    pub fn generate(&self) -> Workload {
        let mut rng = Rng::new(self.seed);
        let mut t = 0.0;
        let levels = self.priorities.max(1);
        let mut kernels = Vec::with_capacity(self.kernels);
        while kernels.len() < self.kernels {
            t += rng.exponential(self.mean_interarrival / self.load.max(1e-9));
            let user = rng.unit() <= self.user_share;
            let work = rng.pareto(
                self.alpha,
                if user {
                    self.mean_user
                } else {
                    self.mean_batch
                },
            );
            let half = levels.div_ceil(2);
            let band = rng.next_u64() % half as u64;
            let priority = if user {
                levels - 1 - band as u8
            } else {
                band as u8
            };
            let tasks = if self.tasks_per_job > 1 {
                1 + (rng.next_u64() % self.tasks_per_job as u64) as usize
            } else {
                1
            };
            let first = kernels.len();
            for task in 0..tasks.min(self.kernels - kernels.len()) {
                let row = if self.task_table.is_empty() {
                    None
                } else {
                    let r = (rng.next_u64() % self.task_table.len() as u64) as usize;
                    Some(&self.task_table[r])
                };
                let max_sms = if let Some(r) = row.filter(|r| r.max_sms > 0) {
                    r.max_sms
                } else if self.sm_widths.is_empty() {
                    0
                } else {
                    self.sm_widths[(rng.next_u64() % self.sm_widths.len() as u64) as usize]
                };
                let work = row.map_or(work / tasks as f64, |r| r.work);
                let (name, features) = if let Some(r) = row {
                    (r.name.clone(), None)
                } else if self.programs == 0 {
                    (String::new(), None)
                } else {
                    let p = (rng.next_u64() % self.programs as u64) as usize;
                    let per_block = 0.01 * (1 + p) as f64; // µs per block
                    let noise = 1.0 + self.feature_noise * (2.0 * rng.unit() - 1.0);
                    let grid = (work / per_block * noise).round().max(1.0);
                    let block = 256.0;
                    let smem = if p % 2 == 0 { 0.0 } else { 16_384.0 };
                    (
                        format!("p{p}"),
                        Some([grid, block, grid * block * 4.0, smem]),
                    )
                };
                kernels.push(KernelSpec {
                    arrival: t,
                    work,
                    priority: priority.min(levels - 1),
                    weight: 1.0,
                    user_facing: user,
                    preempt_latency: self.preempt_latency,
                    resume_overhead: self.resume_overhead,
                    revoke_latency: self.revoke_latency,
                    sla: if user { self.sla } else { 0.0 },
                    time_limit: 0.0,
                    after: if self.job_window > 0 && task >= self.job_window {
                        vec![first + task - self.job_window]
                    } else {
                        Vec::new()
                    },
                    name,
                    features,
                    max_sms,
                });
            }
        }
        Workload { kernels }
    }
}
