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

#[derive(Debug, Clone)]
pub struct SpatialGreedy {
    /// Allocation granularity, SMs (also the least a tenant gets).
    pub step: u32,
    pub max_tenants: usize,
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
            targets: BTreeMap::new(),
            homes: BTreeMap::new(),
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

impl Policy for SpatialGreedy {
    fn name(&self) -> &'static str {
        "spatial"
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
                .filter(|&g| count[g] < self.max_tenants)
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
