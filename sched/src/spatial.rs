//! Spatial multitasking behind the common `Policy` interface: the greedy STP allocation of
//! Bashizade, Li and Lebeck (`smt::greedy`) applied to the SMs of each GPU, in
//! the common simulator. Up to `max_tenants` kernels share a GPU; whenever a kernel arrives or
//! finishes, the allocation of the GPU concerned is recomputed from each tenant's profile
//! (its standalone time on `s` SMs, from `KernelSpec::speed`, in steps of `step` SMs) and its
//! remaining work. Tenants that lose SMs are shrunk (a spatial preemption, which takes their
//! preemption latency); the SMs they free go to the others when the shrink completes.

use crate::model::{GpuId, KernelId, KernelView, Status, SystemView};
use crate::policy::{Action, Event, Policy};
use crate::smt::{greedy, Point};
use std::collections::BTreeMap;

/// How a GPU's SMs are divided among its tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Division {
    /// The greedy STP allocation (`spatial`): throughput first, weights ignored.
    Throughput,
    /// In proportion to the tenants' weights (`shares`), each capped at the SMs it can fill,
    /// what a capped tenant cannot use going to the others.
    Weights,
    /// Equally among every kernel that has arrived, weights ignored, with no scheduler's
    /// choice (`concurrent`): a baseline for kernels that the hardware runs side by side as
    /// they come (up to 128 at once, as an H100 runs), each losing SMs to every newcomer.
    Equal,
}

#[derive(Debug, Clone)]
pub struct SpatialGreedy {
    /// Allocation granularity, SMs (also the least a tenant gets).
    pub step: u32,
    pub max_tenants: usize,
    pub division: Division,
    /// The last allocation per kernel: applied as SMs become free, recomputed only when a
    /// kernel arrives or finishes (recomputing on every shrink would make allocations chase
    /// each other).
    targets: BTreeMap<KernelId, u32>,
    /// The GPU each kernel was placed on (it may wait there for SMs).
    homes: BTreeMap<KernelId, GpuId>,
}

impl SpatialGreedy {
    pub fn new(step: u32, max_tenants: usize) -> SpatialGreedy {
        SpatialGreedy {
            step: step.max(1),
            max_tenants: max_tenants.max(1),
            division: Division::Throughput,
            targets: BTreeMap::new(),
            homes: BTreeMap::new(),
        }
    }

    /// SMs in proportion to the weights (`Division::Weights`).
    pub fn shares(step: u32, max_tenants: usize) -> SpatialGreedy {
        SpatialGreedy {
            division: Division::Weights,
            ..SpatialGreedy::new(step, max_tenants)
        }
    }

    /// The concurrent-kernel baseline (`Division::Equal`): every kernel placed as it arrives,
    /// up to 128 per GPU, the SMs split equally in steps of one.
    pub fn concurrent() -> SpatialGreedy {
        SpatialGreedy {
            division: Division::Equal,
            ..SpatialGreedy::new(1, 128)
        }
    }

    /// The kernel's profile: standalone time on step, 2·step, ... SMs, up to what it can fill.
    fn profile(&self, k: &KernelView, total: u32) -> Vec<Point> {
        let first = self.step.min(total);
        let top = k.spec.useful_sms(total).max(first);
        let mut points = Vec::new();
        let mut sms = first;
        loop {
            points.push(Point {
                ctas: sms,
                time: k.expected_work() / k.spec.speed(sms, total),
            });
            if sms >= top {
                return points;
            }
            sms = (sms + self.step).min(top);
        }
    }

    /// Recomputes the targets of the kernels placed on `gpu`: running or waiting for SMs.
    fn allocate(&mut self, sys: &SystemView, gpu: GpuId) {
        let who: Vec<&KernelView> = self
            .homes
            .iter()
            .filter(|(_, &g)| g == gpu)
            .map(|(&k, _)| &sys.kernels[k])
            .filter(|k| matches!(k.status, Status::Running | Status::Ready))
            .collect();
        if self.division != Division::Throughput {
            let caps: Vec<u32> = who.iter().map(|k| k.spec.useful_sms(sys.sms)).collect();
            let weights: Vec<f64> = who
                .iter()
                .map(|k| match self.division {
                    Division::Equal => 1.0,
                    _ => k.spec.weight,
                })
                .collect();
            let at = weighted_shares(&weights, &caps, sys.sms, self.step);
            for (k, sms) in who.iter().zip(at) {
                self.targets.insert(k.id, sms);
            }
            return;
        }
        let profiles: Vec<Vec<Point>> = who.iter().map(|k| self.profile(k, sys.sms)).collect();
        let refs: Vec<&[Point]> = profiles.iter().map(|p| p.as_slice()).collect();
        let left: Vec<f64> = who
            .iter()
            .map(|k| k.expected_remaining() / k.expected_work().max(1e-9))
            .collect();
        let at = greedy(&refs, &left, sys.sms);
        for (i, k) in who.iter().enumerate() {
            self.targets.insert(k.id, profiles[i][at[i]].ctas);
        }
    }

    /// Moves every GPU towards its targets: shrinks first; grows and starts only with SMs that
    /// are free now.
    fn apply(&self, sys: &SystemView) -> Vec<Action> {
        let mut out = Vec::new();
        for gpu in 0..sys.gpus.len() {
            let mut free = sys.free_sms(gpu);
            let tenants: Vec<&KernelView> = sys.tenants(gpu).collect();
            for k in &tenants {
                let Some(&t) = self.targets.get(&k.id) else {
                    continue;
                };
                if k.status == Status::Running && k.shrinking_to.is_none() && t < k.sms {
                    out.push(Action::Resize {
                        kernel: k.id,
                        sms: t,
                    });
                }
            }
            for k in &tenants {
                let Some(&t) = self.targets.get(&k.id) else {
                    continue;
                };
                if k.status == Status::Running && k.shrinking_to.is_none() && t > k.sms && free > 0
                {
                    let sms = t.min(k.sms + free);
                    free -= sms - k.sms;
                    out.push(Action::Resize { kernel: k.id, sms });
                }
            }
            for (&k, &t) in &self.targets {
                let kv = &sys.kernels[k];
                if kv.status == Status::Ready
                    && self.homes.get(&k) == Some(&gpu)
                    && free >= self.step.min(t)
                {
                    let sms = t.min(free);
                    free -= sms;
                    out.push(Action::RunOn {
                        kernel: k,
                        gpu,
                        sms,
                    });
                }
            }
        }
        out
    }
}

/// `total` SMs divided in proportion to `weights`, tenant i getting at most `caps[i]` (what it
/// can fill) and at least `min(step, caps[i])` while SMs last. Water-filling: what a capped
/// tenant cannot use goes to the others by weight; whole SMs by largest remainder.
pub fn weighted_shares(weights: &[f64], caps: &[u32], total: u32, step: u32) -> Vec<u32> {
    let n = weights.len();
    let w: Vec<f64> = weights
        .iter()
        .map(|&w| if w.is_finite() && w > 0.0 { w } else { 1.0 })
        .collect();
    let mut share = vec![0.0f64; n];
    let mut open: Vec<usize> = (0..n).filter(|&i| caps[i] > 0).collect();
    let mut left = total as f64;
    while !open.is_empty() && left > 1e-9 {
        let sum: f64 = open.iter().map(|&i| w[i]).sum();
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| share[i] + left * w[i] / sum >= caps[i] as f64)
            .collect();
        if capped.is_empty() {
            for &i in &open {
                share[i] += left * w[i] / sum;
            }
            break;
        }
        for &i in &capped {
            left -= caps[i] as f64 - share[i];
            share[i] = caps[i] as f64;
        }
        open.retain(|i| !capped.contains(i));
    }
    let mut sms: Vec<u32> = share.iter().map(|s| s.floor() as u32).collect();
    let mut spare = total.saturating_sub(sms.iter().sum());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| (share[b] - share[b].floor()).total_cmp(&(share[a] - share[a].floor())));
    for &i in &order {
        if spare > 0 && sms[i] < caps[i] && share[i] > sms[i] as f64 {
            sms[i] += 1;
            spare -= 1;
        }
    }
    // The least a tenant runs on, taken from the largest.
    for i in 0..n {
        let least = step.min(caps[i]);
        while sms[i] < least {
            let Some(j) = (0..n)
                .filter(|&j| j != i && sms[j] > step.min(caps[j]))
                .max_by_key(|&j| sms[j])
            else {
                break;
            };
            sms[j] -= 1;
            sms[i] += 1;
        }
    }
    sms
}

impl Policy for SpatialGreedy {
    fn name(&self) -> &'static str {
        match self.division {
            Division::Throughput => "spatial",
            Division::Weights => "shares",
            Division::Equal => "concurrent",
        }
    }

    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action> {
        match event {
            Event::Arrived(_) | Event::Finished(_) | Event::Preempted(_) | Event::Revoked(_) => {}
            // Shrinks free SMs for the targets already set; nothing else changes them.
            Event::Shrunk(_) => return self.apply(sys),
            Event::QuantumExpired(_) | Event::Tick => return Vec::new(),
        }
        if let Event::Finished(k) = event {
            self.targets.remove(&k);
            self.homes.remove(&k);
        }
        // Ready kernels not yet placed go, in arrival order, to the GPU with the fewest
        // kernels placed on it, while it has room for another.
        let mut count = vec![0usize; sys.gpus.len()];
        for &g in self.homes.values() {
            count[g] += 1;
        }
        let mut placed: Vec<Vec<KernelId>> = vec![Vec::new(); sys.gpus.len()];
        for k in sys.ready() {
            if self.homes.contains_key(&k.id) {
                continue;
            }
            let Some(g) = (0..count.len())
                // Never more tenants than steps of SMs: each must get at least one step.
                .filter(|&g| count[g] < self.max_tenants.min((sys.sms / self.step).max(1) as usize))
                .min_by_key(|&g| (count[g], g))
            else {
                break;
            };
            count[g] += 1;
            placed[g].push(k.id);
        }
        // Recompute every GPU that changed: a kernel came or went.
        let touched: Vec<GpuId> = match event {
            Event::Finished(_) | Event::Preempted(_) | Event::Revoked(_) => {
                (0..sys.gpus.len()).collect()
            }
            _ => (0..sys.gpus.len())
                .filter(|&g| !placed[g].is_empty())
                .collect(),
        };
        for (g, ks) in placed.iter().enumerate() {
            for &k in ks {
                self.homes.insert(k, g);
            }
        }
        for g in touched {
            self.allocate(sys, g);
        }
        self.apply(sys)
    }
}

#[cfg(test)]
mod tests {
    use super::SpatialGreedy;
    use crate::model::KernelSpec;
    use crate::policies::Fifo;
    use crate::sim::simulate_sms;
    use proptest::prelude::*;

    #[test]
    fn two_half_width_kernels_share_a_gpu() {
        // Each can fill only half of the 16 SMs: side by side they both finish at 100.
        let specs = vec![
            KernelSpec::new(0.0, 100.0).max_sms(8),
            KernelSpec::new(0.0, 100.0).max_sms(8),
        ];
        let spatial = simulate_sms(&specs, 1, 16, &mut SpatialGreedy::new(4, 4)).unwrap();
        assert_eq!(spatial.finish, vec![100.0, 100.0]);
        assert!((spatial.metrics.stp - 2.0).abs() < 1e-9);
        let fifo = simulate_sms(&specs, 1, 16, &mut Fifo).unwrap();
        assert!(
            (fifo.metrics.stp - 1.5).abs() < 1e-9,
            "{}",
            fifo.metrics.stp
        );
    }

    #[test]
    fn a_newcomer_gets_sms_through_a_spatial_preemption() {
        // A wide kernel holds all 16 SMs; a narrow one arrives. The greedy allocation takes
        // SMs from the wide one (10 µs preemption latency), then starts the newcomer.
        let specs = vec![
            KernelSpec::new(0.0, 1000.0).overheads(10.0, 0.0),
            KernelSpec::new(100.0, 50.0).max_sms(4).overheads(10.0, 0.0),
        ];
        let out = simulate_sms(&specs, 1, 16, &mut SpatialGreedy::new(4, 4)).unwrap();
        assert_eq!(out.kernels[0].shrinks, 1);
        assert_eq!(out.kernels[0].preemptions, 0);
        // Started at 110 on its 4 SMs, done 50 µs later.
        assert!((out.finish[1] - 160.0).abs() < 1e-9, "{:?}", out.finish);
        let fifo = simulate_sms(&specs, 1, 16, &mut Fifo).unwrap();
        assert!(fifo.finish[1] > 1000.0);
        // The wide kernel lost 4 of 16 SMs for 50 µs (its 12 SMs ran at 3/4 speed), then got
        // them back when the newcomer finished.
        assert!(
            (out.finish[0] - (1000.0 + 50.0 / 4.0)).abs() < 1e-6,
            "{:?}",
            out.finish
        );
    }

    #[test]
    fn shares_follow_the_weights() {
        use super::weighted_shares;
        assert_eq!(
            weighted_shares(&[2.0, 1.0], &[132, 132], 132, 8),
            vec![88, 44]
        );
        assert_eq!(
            weighted_shares(&[1.0, 1.0, 1.0], &[132; 3], 132, 8),
            vec![44, 44, 44]
        );
        // A tenant that can fill only 10 SMs leaves the rest to the other.
        assert_eq!(
            weighted_shares(&[2.0, 1.0], &[10, 132], 132, 8),
            vec![10, 122]
        );
        // Largest remainders get the spare SMs; the sum is the GPU.
        let s = weighted_shares(&[1.0, 1.0, 1.0], &[132; 3], 100, 8);
        assert_eq!(s.iter().sum::<u32>(), 100);
        assert!(s.iter().all(|&x| x == 33 || x == 34), "{s:?}");
        // Every tenant gets at least a step, taken from the largest.
        assert_eq!(
            weighted_shares(&[100.0, 1.0], &[132, 132], 132, 8),
            vec![124, 8]
        );
    }

    #[test]
    fn two_weighted_kernels_progress_in_proportion() {
        use crate::sim::simulate_sms;
        // Weights 2:1, both wide and long: the first runs on 2/3 of the SMs, so by the time
        // the first ends (at 1500), the second has done half its work.
        let specs = vec![
            KernelSpec::new(0.0, 1000.0).weight(2.0),
            KernelSpec::new(0.0, 1000.0).weight(1.0),
        ];
        let out = simulate_sms(&specs, 1, 12, &mut SpatialGreedy::shares(1, 4)).unwrap();
        assert!((out.finish[0] - 1500.0).abs() < 1e-6, "{:?}", out.finish);
        assert!((out.finish[1] - 2000.0).abs() < 1e-6, "{:?}", out.finish);
    }

    #[test]
    fn concurrent_kernels_split_the_gpu_equally_whatever_their_weights() {
        use crate::sim::simulate_sms;
        // Two wide 1000 µs kernels arriving together, weights 2:1: side by side on 6 SMs each
        // they both end at 2000 (shares would end the heavier one at 1500).
        let specs = vec![
            KernelSpec::new(0.0, 1000.0).weight(2.0),
            KernelSpec::new(0.0, 1000.0).weight(1.0),
        ];
        let out = simulate_sms(&specs, 1, 12, &mut SpatialGreedy::concurrent()).unwrap();
        assert_eq!(out.metrics.preemptions, 0);
        assert!((out.finish[0] - 2000.0).abs() < 1e-6, "{:?}", out.finish);
        assert!((out.finish[1] - 2000.0).abs() < 1e-6, "{:?}", out.finish);
        // More kernels than SMs: the GPU holds one per SM, the rest wait their turn.
        let many: Vec<KernelSpec> = (0..6).map(|_| KernelSpec::new(0.0, 100.0)).collect();
        let out = simulate_sms(&many, 1, 4, &mut SpatialGreedy::concurrent()).unwrap();
        assert!(out.finish.iter().all(|f| f.is_finite()));
    }

    fn workload() -> impl Strategy<Value = (Vec<KernelSpec>, usize, u32)> {
        let kernel = (0.0..500.0f64, 1.0..300.0f64, 0u32..40, 0.0..20.0f64)
            .prop_map(|(a, w, m, l)| KernelSpec::new(a, w).max_sms(m).overheads(l, 0.0));
        (prop::collection::vec(kernel, 1..20), 1usize..3, 8u32..40)
    }

    proptest! {
        #[test]
        fn spatial_sharing_keeps_the_invariants((specs, gpus, sms) in workload()) {
            let out = simulate_sms(&specs, gpus, sms, &mut SpatialGreedy::new(4, 4)).unwrap();
            for (i, s) in specs.iter().enumerate() {
                prop_assert!(out.finish[i] >= s.arrival + s.work - 1e-6, "kernel {i}");
                // Progress over its intervals is exactly its work.
                let done: f64 = out
                    .intervals
                    .iter()
                    .filter(|iv| iv.kernel == i)
                    .map(|iv| (iv.end - iv.start) * s.speed((iv.share * sms as f64).round() as u32, sms))
                    .sum();
                prop_assert!((done - s.work).abs() <= 1e-6 * s.work.max(1.0), "kernel {i}: {done} vs {}", s.work);
            }
            // No GPU ever had more SMs in use than it has.
            for g in 0..gpus {
                let iv: Vec<_> = out.intervals.iter().filter(|i| i.gpu == g).collect();
                for a in &iv {
                    let t = a.start;
                    let used: f64 = iv.iter().filter(|b| b.start <= t && t < b.end).map(|b| b.share).sum();
                    prop_assert!(used <= 1.0 + 1e-9, "GPU {g} at {t}: {used}");
                }
            }
            prop_assert_eq!(out.metrics.preemptions, 0);
            prop_assert!(out.metrics.stp > 0.0 && out.metrics.stp <= specs.len() as f64 + 1e-9);
            let again = simulate_sms(&specs, gpus, sms, &mut SpatialGreedy::new(4, 4)).unwrap();
            prop_assert_eq!(again.finish, out.finish);
        }
    }
}
