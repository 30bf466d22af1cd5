//! Simultaneous multi-tenancy with a CTA-count knob (Bashizade, Li, Lebeck):
//! several kernels share one GPU at once, each with some number of persistent CTAs. The greedy
//! allocation gives the next profile point to the kernel with the largest estimated remaining
//! time while it fits, which minimizes the largest remaining time (maximizes STP).
//!
//! Its own small simulator of one shared GPU: the common `Policy` interface gives a kernel a
//! whole GPU, not a share of one. Shrinking a kernel costs its preemption latency (its CTAs
//! must finish their chunks); growing launches another instance on the same task counter.

/// One profile point: with `ctas` persistent CTAs the kernel alone takes `time` µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub ctas: u32,
    pub time: f64,
}

/// A kernel for the multi-tenant simulator.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub arrival: f64,
    /// Offline profile, any order; pruned to strictly faster points by [`prune`].
    pub profile: Vec<Point>,
    /// Cost of taking CTAs away (the preemption latency), µs of lost progress.
    pub shrink_cost: f64,
}

/// Sorts by CTA count and keeps only points faster than every point with fewer CTAs, so that
/// time decreases monotonically with CTAs (the paper's pruning).
pub fn prune(profile: &[Point]) -> Vec<Point> {
    let mut p: Vec<Point> = profile.iter().copied().filter(|p| p.ctas > 0).collect();
    p.sort_by(|a, b| a.ctas.cmp(&b.ctas).then(a.time.total_cmp(&b.time)));
    let mut out: Vec<Point> = Vec::new();
    for pt in p {
        if out.last().is_none_or(|l| pt.time < l.time) {
            out.push(pt);
        }
    }
    out
}

/// Greedy allocation over pruned profiles: `remaining[i]` is kernel i's fraction of work left.
/// Every kernel starts at its first point; repeatedly the unmarked kernel with the largest
/// estimated remaining time `T_i(c) × remaining_i` gets its next point if the CTAs still fit
/// `capacity`, else it is marked; stops when all are marked. Returns the point index of each.
pub fn greedy(profiles: &[&[Point]], remaining: &[f64], capacity: u32) -> Vec<usize> {
    let n = profiles.len();
    let mut at = vec![0usize; n];
    let mut marked = vec![false; n];
    let mut used: u64 = profiles.iter().map(|p| p[0].ctas as u64).sum();
    loop {
        let pick = (0..n).filter(|&i| !marked[i]).max_by(|&a, &b| {
            let ra = profiles[a][at[a]].time * remaining[a];
            let rb = profiles[b][at[b]].time * remaining[b];
            ra.total_cmp(&rb).then(b.cmp(&a))
        });
        let Some(i) = pick else { break };
        let p = profiles[i];
        if at[i] + 1 < p.len() {
            let extra = (p[at[i] + 1].ctas - p[at[i]].ctas) as u64;
            if used + extra <= capacity as u64 {
                used += extra;
                at[i] += 1;
                continue;
            }
        }
        marked[i] = true;
    }
    at
}

/// The fastest point of a pruned profile that fits `ctas` (the first point if none does).
fn best_within(profile: &[Point], ctas: u32) -> usize {
    profile.iter().rposition(|p| p.ctas <= ctas).unwrap_or(0)
}

/// How the simulator shares the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// The greedy STP allocation, recomputed on every arrival and departure.
    Greedy,
    /// Every running kernel gets an equal share of the CTA slots (its best point within it).
    Even,
    /// One kernel at a time with its fastest point, in arrival order (FIFO, no sharing).
    Exclusive,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SmtOutcome {
    pub finish: Vec<f64>,
    /// Σ T_alone / T_shared over the kernels (higher is better).
    pub stp: f64,
    /// Mean of T_shared / T_alone (1 is best).
    pub antt: f64,
    /// Allocation changes that took CTAs from a kernel.
    pub shrinks: u64,
}

/// Runs `tenants` on one GPU with `capacity` CTA slots.
pub fn simulate_smt(tenants: &[Tenant], capacity: u32, sharing: Sharing) -> SmtOutcome {
    let profiles: Vec<Vec<Point>> = tenants.iter().map(|t| prune(&t.profile)).collect();
    let n = tenants.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        tenants[a]
            .arrival
            .total_cmp(&tenants[b].arrival)
            .then(a.cmp(&b))
    });
    let mut remaining = vec![1.0f64; n];
    let mut point = vec![0usize; n];
    let mut finish = vec![f64::NAN; n];
    let mut active: Vec<usize> = Vec::new();
    let mut next_arrival = 0;
    let mut now = order.first().map_or(0.0, |&i| tenants[i].arrival);
    let mut shrinks = 0;
    let empty = |i: usize| profiles[i].is_empty();
    loop {
        // Admit arrivals due now (kernels without a profile finish at once).
        while next_arrival < n && tenants[order[next_arrival]].arrival <= now {
            let i = order[next_arrival];
            next_arrival += 1;
            if empty(i) {
                finish[i] = now;
            } else {
                active.push(i);
            }
        }
        // Who runs, with which point.
        let running: Vec<usize> = match sharing {
            Sharing::Exclusive => active.first().copied().into_iter().collect(),
            _ => active.clone(),
        };
        let new_points: Vec<usize> = match sharing {
            Sharing::Greedy => {
                let ps: Vec<&[Point]> = running.iter().map(|&i| profiles[i].as_slice()).collect();
                let rem: Vec<f64> = running.iter().map(|&i| remaining[i]).collect();
                greedy(&ps, &rem, capacity)
            }
            Sharing::Even => {
                let share = capacity / running.len().max(1) as u32;
                running
                    .iter()
                    .map(|&i| best_within(&profiles[i], share))
                    .collect()
            }
            Sharing::Exclusive => running
                .iter()
                .map(|&i| best_within(&profiles[i], capacity))
                .collect(),
        };
        for (&i, &p) in running.iter().zip(&new_points) {
            if p < point[i] {
                // Taking CTAs away costs the preemption latency in lost progress.
                remaining[i] += tenants[i].shrink_cost / profiles[i][p].time;
                shrinks += 1;
            }
            point[i] = p;
        }
        // Advance to the next completion or arrival.
        let completion = running
            .iter()
            .map(|&i| (now + remaining[i] * profiles[i][point[i]].time, i))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let arrival = (next_arrival < n).then(|| tenants[order[next_arrival]].arrival);
        let t = match (completion, arrival) {
            (None, None) => break,
            (Some((c, _)), Some(a)) => c.min(a),
            (Some((c, _)), None) => c,
            (None, Some(a)) => a,
        };
        for &i in &running {
            remaining[i] -= (t - now) / profiles[i][point[i]].time;
        }
        now = t;
        if let Some((c, i)) = completion {
            if c <= t {
                remaining[i] = 0.0;
                finish[i] = now;
                active.retain(|&k| k != i);
            }
        }
    }
    let (mut stp, mut antt, mut counted) = (0.0, 0.0, 0);
    for i in 0..n {
        if let Some(best) = profiles[i].iter().rfind(|p| p.ctas <= capacity) {
            let shared = finish[i] - tenants[i].arrival;
            if shared > 0.0 {
                stp += best.time / shared;
                antt += shared / best.time;
                counted += 1;
            }
        }
    }
    SmtOutcome {
        finish,
        stp,
        antt: if counted > 0 {
            antt / counted as f64
        } else {
            1.0
        },
        shrinks,
    }
}

/// A profile of a kernel that speeds up linearly until `saturate` CTAs, then no more (memory-
/// bound kernels saturate early, compute-bound ones late): points at powers of two.
pub fn saturating_profile(work: f64, saturate: u32, max_ctas: u32) -> Vec<Point> {
    let mut v = Vec::new();
    let mut c = 1;
    while c <= max_ctas {
        v.push(Point {
            ctas: c,
            time: work / c.min(saturate) as f64,
        });
        c *= 2;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(ctas: u32, time: f64) -> Point {
        Point { ctas, time }
    }

    #[test]
    fn pruning_keeps_strictly_faster_points_in_cta_order() {
        let p = prune(&[
            pt(4, 30.0),
            pt(1, 100.0),
            pt(8, 35.0),
            pt(2, 50.0),
            pt(16, 20.0),
            pt(0, 1.0),
        ]);
        assert_eq!(
            p,
            vec![pt(1, 100.0), pt(2, 50.0), pt(4, 30.0), pt(16, 20.0)]
        );
    }

    #[test]
    fn greedy_grows_the_longest_remaining_kernel_first() {
        // Capacity 6. A: 1 CTA 100, 2 CTAs 50, 4 CTAs 25. B: 1 CTA 40, 2 CTAs 30.
        // Start 1+1 = 2 used. A (100) grows to 2 (3 used); A (50) grows to 4 (5 used); now B
        // (40) is the longest: grows to 2 (6 used); A (25) cannot grow (last point): marked;
        // B (30) has no next point: marked.
        let a = [pt(1, 100.0), pt(2, 50.0), pt(4, 25.0)];
        let b = [pt(1, 40.0), pt(2, 30.0)];
        assert_eq!(greedy(&[&a, &b], &[1.0, 1.0], 6), vec![2, 1]);
        // With 5 slots B cannot grow after A took 4: B stays at 1.
        assert_eq!(greedy(&[&a, &b], &[1.0, 1.0], 5), vec![2, 0]);
        // A nearly done: B is the longest and grows first.
        assert_eq!(greedy(&[&a, &b], &[0.1, 1.0], 3), vec![0, 1]);
    }

    #[test]
    fn greedy_never_exceeds_capacity() {
        let mut rng = crate::Rng::new(7);
        for _ in 0..200 {
            let n = 1 + (rng.next_u64() % 6) as usize;
            let profiles: Vec<Vec<Point>> = (0..n)
                .map(|_| {
                    let sat = 1 + (rng.next_u64() % 64) as u32;
                    prune(&saturating_profile(100.0 + rng.unit() * 1000.0, sat, 128))
                })
                .collect();
            let refs: Vec<&[Point]> = profiles.iter().map(|p| p.as_slice()).collect();
            let rem: Vec<f64> = (0..n).map(|_| rng.unit()).collect();
            let cap = n as u32 + (rng.next_u64() % 256) as u32;
            let at = greedy(&refs, &rem, cap);
            let used: u32 = at.iter().zip(&profiles).map(|(&i, p)| p[i].ctas).sum();
            assert!(used <= cap.max(n as u32), "{used} > {cap}");
        }
    }

    #[test]
    fn a_kernel_alone_takes_its_fastest_time_and_sharing_helps_throughput() {
        let t = |arrival: f64, work: f64, sat: u32| Tenant {
            arrival,
            profile: saturating_profile(work, sat, 64),
            shrink_cost: 0.0,
        };
        let alone = simulate_smt(&[t(5.0, 6400.0, 64)], 64, Sharing::Greedy);
        assert!((alone.finish[0] - 105.0).abs() < 1e-9, "{:?}", alone.finish);
        assert!((alone.stp - 1.0).abs() < 1e-9);
        // Two kernels that each saturate at 16 CTAs on a 64-slot GPU: sharing runs both at
        // full speed (STP 2), one at a time does not (STP 1.5: the second waits).
        let pair = [t(0.0, 1600.0, 16), t(0.0, 1600.0, 16)];
        let shared = simulate_smt(&pair, 64, Sharing::Greedy);
        let exclusive = simulate_smt(&pair, 64, Sharing::Exclusive);
        assert!((shared.stp - 2.0).abs() < 1e-9, "{shared:?}");
        assert!((exclusive.stp - 1.5).abs() < 1e-9, "{exclusive:?}");
        assert_eq!(shared.finish, vec![100.0, 100.0]);
    }
}
