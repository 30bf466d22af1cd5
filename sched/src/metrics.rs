//! Metrics (Eyerman & Eeckhout): NTT, ANTT, STP, DNTT, response percentiles.

use crate::model::{KernelSpec, KernelView};
use serde::Serialize;

/// A kernel occupied `share` of a GPU's SMs (1: all of it) from `start` to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub gpu: usize,
    pub kernel: usize,
    pub start: f64,
    pub end: f64,
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub kernels: usize,
    /// Mean normalized turnaround time (≥ 1, lower is better).
    pub antt: f64,
    /// System throughput: Σ T_alone / T_shared (0..n, higher is better).
    pub stp: f64,
    /// Standard deviation of NTT (lower is fairer).
    pub dntt: f64,
    /// Turnaround (finish − arrival) percentiles, µs.
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub preemptions: u64,
    /// Spatial preemptions: SMs taken from a kernel that kept running on the others.
    pub shrinks: u64,
    pub revocations: u64,
    /// Kernels killed for exceeding their declared time limit.
    pub killed: u64,
    /// GPU time thrown away by revocations / total useful GPU time (Σ work).
    pub wasted_work: f64,
    /// Share of kernels with an SLA that met it, counted from each kernel's release (None when
    /// no kernel has one).
    pub sla_attainment: Option<f64>,
    /// Last finish − first arrival.
    pub makespan: f64,
    /// GPU time used, including preemption overheads (a kernel on part of a GPU counts that
    /// part).
    pub busy: f64,
    /// Mean relative error of the durations policies were told (None: they saw the truth).
    pub estimate_error: Option<f64>,
    /// NTT of each kernel, in workload order.
    #[serde(skip)]
    pub ntt: Vec<f64>,
}

impl Metrics {
    pub fn compute(
        specs: &[KernelSpec],
        finish: &[f64],
        released: &[f64],
        kernels: &[KernelView],
        intervals: &[Interval],
    ) -> Metrics {
        let n = specs.len();
        let turnaround: Vec<f64> = specs
            .iter()
            .zip(finish)
            .map(|(s, f)| f - s.arrival)
            .collect();
        let ntt: Vec<f64> = turnaround
            .iter()
            .zip(specs)
            .map(|(t, s)| t / s.work)
            .collect();
        let mean = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let antt = mean(&ntt);
        let dntt = (mean(&ntt.iter().map(|x| (x - antt).powi(2)).collect::<Vec<_>>())).sqrt();
        let stp = ntt.iter().map(|x| 1.0 / x).sum();
        let mut sorted = turnaround.clone();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let first = specs
            .iter()
            .map(|s| s.arrival)
            .fold(f64::INFINITY, f64::min);
        let last = finish.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Metrics {
            kernels: n,
            antt,
            stp,
            dntt,
            p50: percentile(&sorted, 0.50),
            p95: percentile(&sorted, 0.95),
            p99: percentile(&sorted, 0.99),
            preemptions: kernels.iter().map(|k| k.preemptions as u64).sum(),
            shrinks: kernels.iter().map(|k| k.shrinks as u64).sum(),
            revocations: kernels.iter().map(|k| k.revocations as u64).sum(),
            killed: kernels.iter().filter(|k| k.killed).count() as u64,
            wasted_work: {
                let useful: f64 = specs.iter().map(|s| s.work).sum();
                if useful > 0.0 {
                    kernels.iter().map(|k| k.wasted).sum::<f64>() / useful
                } else {
                    0.0
                }
            },
            // Counted from release (TReM): a task waiting for an earlier one of its job has
            // no response time yet.
            sla_attainment: {
                let with: Vec<bool> = specs
                    .iter()
                    .zip(finish.iter().zip(released))
                    .filter(|(s, _)| s.sla > 0.0)
                    .map(|(s, (f, r))| f - r.max(s.arrival) <= s.sla)
                    .collect();
                (!with.is_empty())
                    .then(|| with.iter().filter(|m| **m).count() as f64 / with.len() as f64)
            },
            makespan: if n == 0 { 0.0 } else { last - first },
            busy: intervals.iter().map(|i| (i.end - i.start) * i.share).sum(),
            estimate_error: None,
            ntt,
        }
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}
