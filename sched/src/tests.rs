//! Hand-computed schedules for each policy, and properties every policy must keep.

use crate::policies::{
    by_name, Cfs, Ffs, Fifo, Frs, Hpf, RoundRobin, Sjf, SjfAging, Srt, TremElastic, TremPriority,
    NAMES,
};
use crate::*;
use proptest::prelude::*;

fn k(arrival: f64, work: f64) -> KernelSpec {
    KernelSpec::new(arrival, work)
}

/// A system at time 0 in which every kernel of `specs` has arrived and waits for one of `gpus`
/// GPUs of 132 SMs.
fn all_ready(specs: &[KernelSpec], gpus: usize) -> SystemView {
    SystemView {
        now: 0.0,
        gpus: vec![None; gpus],
        sms: 132,
        used_sms: vec![0; gpus],
        kernels: specs
            .iter()
            .enumerate()
            .map(|(id, s)| KernelView {
                status: Status::Ready,
                ..KernelView::new(id, s.clone())
            })
            .collect(),
        active: (0..specs.len()).collect(),
        placed: Vec::new(),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn fifo_runs_in_arrival_order_without_preempting() {
    let out = simulate(&[k(0.0, 100.0), k(10.0, 10.0)], 1, &mut Fifo).unwrap();
    assert_eq!(out.finish, vec![100.0, 110.0]);
    // NTT: 1 and 100/10 = 10.
    assert!(close(out.metrics.antt, 5.5));
    assert!(close(out.metrics.stp, 1.1));
    assert!(close(out.metrics.dntt, 4.5));
    assert_eq!(out.metrics.preemptions, 0);
}

#[test]
fn fifo_fills_every_gpu() {
    let out = simulate(&[k(0.0, 100.0), k(0.0, 100.0), k(0.0, 100.0)], 2, &mut Fifo).unwrap();
    assert_eq!(out.finish, vec![100.0, 100.0, 200.0]);
}

#[test]
fn hpf_preempts_for_higher_priority_and_charges_the_overheads() {
    let low = k(0.0, 1000.0).overheads(20.0, 10.0);
    let high = k(100.0, 100.0).priority(1);
    let out = simulate(&[low, high], 1, &mut Hpf).unwrap();
    // Request at 100, GPU free at 120 (low did 120 µs, has 880 + 10 left), high 120..220,
    // low resumes 220..1110.
    assert_eq!(out.finish, vec![1110.0, 220.0]);
    assert_eq!(out.metrics.preemptions, 1);
}

#[test]
fn hpf_equal_priority_preempts_only_when_tr_exceeds_ts_plus_overhead() {
    // Kr has Tr = 500 at t = 500 and O = 100.
    let kr = || k(0.0, 1000.0).overheads(50.0, 50.0);
    // Ks with Tr 450: 500 > 450 + 100 is false, so no preemption.
    let out = simulate(&[kr(), k(500.0, 450.0)], 1, &mut Hpf).unwrap();
    assert_eq!(out.metrics.preemptions, 0);
    assert_eq!(out.finish, vec![1000.0, 1450.0]);
    // Ks with Tr 300: 500 > 400, preempt (GPU free at 550, Kr has 450 + 50 left).
    let out = simulate(&[kr(), k(500.0, 300.0)], 1, &mut Hpf).unwrap();
    assert_eq!(out.metrics.preemptions, 1);
    assert_eq!(out.finish, vec![1350.0, 850.0]);
}

#[test]
fn sjf_uses_total_duration_and_srt_remaining_time() {
    // At t = 900 the running kernel has 100 left of 1000; the newcomer needs 500.
    let w = [k(0.0, 1000.0), k(900.0, 500.0)];
    let sjf = simulate(&w, 1, &mut Sjf).unwrap();
    assert_eq!(sjf.metrics.preemptions, 1, "SJF: 500 < 1000 total");
    assert_eq!(sjf.finish, vec![1500.0, 1400.0]);
    let srt = simulate(&w, 1, &mut Srt).unwrap();
    assert_eq!(srt.metrics.preemptions, 0, "SRT: 100 remaining < 500");
    assert_eq!(srt.finish, vec![1000.0, 1500.0]);
}

#[test]
fn round_robin_alternates_by_quantum() {
    let out = simulate(
        &[k(0.0, 250.0), k(0.0, 250.0)],
        1,
        &mut RoundRobin::new(100.0),
    )
    .unwrap();
    // 0..100 K0, 100..200 K1, 200..300 K0, 300..400 K1, 400..450 K0, 450..500 K1.
    assert_eq!(out.finish, vec![450.0, 500.0]);
    let starts: Vec<(usize, f64)> = out.intervals.iter().map(|i| (i.kernel, i.start)).collect();
    assert_eq!(
        starts,
        vec![
            (0, 0.0),
            (1, 100.0),
            (0, 200.0),
            (1, 300.0),
            (0, 400.0),
            (1, 450.0)
        ]
    );
}

#[test]
fn round_robin_alone_is_never_preempted() {
    let out = simulate(&[k(0.0, 1000.0)], 1, &mut RoundRobin::new(100.0)).unwrap();
    assert_eq!(out.finish, vec![1000.0]);
    assert_eq!(out.metrics.preemptions, 0);
}

#[test]
fn preemption_that_would_end_after_completion_is_a_completion() {
    let low = k(0.0, 110.0).overheads(50.0, 10.0);
    let out = simulate(&[low, k(100.0, 10.0).priority(1)], 1, &mut Hpf).unwrap();
    assert_eq!(out.finish, vec![110.0, 120.0]);
    assert_eq!(out.metrics.preemptions, 0);
}

#[test]
fn ffs_epoch_meets_the_overhead_cap_and_shares_follow_weights() {
    // O = 100 µs each, weights 2 and 1, cap 10%: T = 200 / (0.1 · 3) = 666.7 µs.
    let a = k(0.0, 10_000.0).weight(2.0).overheads(0.0, 100.0);
    let b = k(0.0, 10_000.0).weight(1.0).overheads(0.0, 100.0);
    let t = 200.0 / 0.3;
    let out = simulate(&[a, b], 1, &mut Ffs::new(0.10)).unwrap();
    let first: Vec<(usize, f64, f64)> = out
        .intervals
        .iter()
        .take(4)
        .map(|i| (i.kernel, i.start, i.end))
        .collect();
    let expect = [
        (0, 0.0, 2.0 * t),
        (1, 2.0 * t, 3.0 * t),
        (0, 3.0 * t, 5.0 * t),
        (1, 5.0 * t, 6.0 * t),
    ];
    for (got, want) in first.iter().zip(expect) {
        assert!(
            got.0 == want.0 && close(got.1, want.1) && close(got.2, want.2),
            "{got:?} vs {want:?}"
        );
    }
    // Overhead paid per round: 2 × 100 µs over a 3T = 2000 µs round = 10%.
    assert!(close(200.0 / (3.0 * t), 0.10));
}

#[test]
fn cfs_splits_the_epoch_and_serves_the_longest_waiting_first() {
    let w = [k(0.0, 3000.0), k(0.0, 3000.0), k(0.0, 3000.0)];
    let out = simulate(&w, 1, &mut Cfs::new(3000.0)).unwrap();
    // Quantum 1000: K0, K1, K2, K0 (waited 2000) ... K0 done at 7000; then the quantum grows.
    assert_eq!(out.finish, vec![7000.0, 8000.0, 9000.0]);
    let order: Vec<usize> = out.intervals.iter().take(4).map(|i| i.kernel).collect();
    assert_eq!(order, vec![0, 1, 2, 0]);
}

#[test]
fn frs_quantum_lifts_the_lowest_slowdown_to_the_highest() {
    let now = 1000.0;
    let view = |id, arrival, work: f64, remaining| KernelView {
        status: Status::Ready,
        remaining,
        ..KernelView::new(id, k(arrival, work))
    };
    let a = view(0, 0.0, 1000.0, 1000.0); // IS = (1000 + 1000) / 1000 = 2
    let b = view(1, 500.0, 100.0, 100.0); // IS = (500 + 100) / 100 = 6
    assert!(close(Frs::slowdown(&a, now), 2.0) && close(Frs::slowdown(&b, now), 6.0));
    // q = IS_max · Te(min) − Tr(min) − t(min) = 6 · 1000 − 1000 − 1000.
    assert!(close(Frs::new(100.0).quantum(&[&a, &b], now), 4000.0));
    // A lone kernel: no one to catch up with, the minimum quantum.
    assert!(close(Frs::new(100.0).quantum(&[&a], now), 100.0));
}

#[test]
fn trem_priority_revokes_the_most_recent_batch_kernel() {
    let w = [
        k(0.0, 10_000.0).revoke_latency(500.0),
        k(100.0, 10_000.0).revoke_latency(500.0),
        k(1000.0, 200.0).user_facing(1000.0),
    ];
    let out = simulate(&w, 2, &mut TremPriority::new(5)).unwrap();
    // At 1000 both GPUs are busy: the batch kernel started last (at 100) is revoked, losing
    // 900 µs; its GPU is free at 1500; the user-facing kernel runs 1500..1700; the revoked one
    // starts over 1700..11700.
    assert_eq!(out.finish, vec![10_000.0, 11_700.0, 1700.0]);
    assert_eq!(out.metrics.revocations, 1);
    assert!(close(out.metrics.wasted_work, 900.0 / 20_200.0));
    assert_eq!(out.metrics.sla_attainment, Some(1.0));

    // With no revocations allowed the user-facing kernel waits for a GPU and misses its SLA.
    let out = simulate(&w, 2, &mut TremPriority::new(0)).unwrap();
    assert_eq!(out.finish, vec![10_000.0, 10_100.0, 10_200.0]);
    assert_eq!(out.metrics.revocations, 0);
    assert_eq!(out.metrics.sla_attainment, Some(0.0));
}

#[test]
fn trem_elastic_sizes_the_user_partition_and_revokes_only_when_worth_it() {
    let batch = |a| k(a, 10_000.0).revoke_latency(100.0);
    let w = [batch(0.0), batch(0.0), k(500.0, 300.0).user_facing(1000.0)];
    let mut p = TremElastic::new(100_000.0, 5);
    let out = simulate(&w, 2, &mut p).unwrap();
    // q = 1, l_e = 300 (prediction), U = ⌈300 / 1000⌉ = 1: GPU 0 is for user-facing work; its
    // batch kernel has 9500 µs left > 100 µs, so it is revoked (free at 600); the user-facing
    // kernel runs 600..900; then U = 0 and the revoked kernel starts over 900..10900.
    assert_eq!(out.finish, vec![10_900.0, 10_000.0, 900.0]);
    assert_eq!(out.metrics.revocations, 1);

    // A batch kernel that is about to finish is not revoked: it has 50 µs left < 100 µs.
    let w = [
        k(0.0, 550.0).revoke_latency(100.0),
        batch(0.0),
        k(500.0, 300.0).user_facing(1000.0),
    ];
    let out = simulate(&w, 2, &mut TremElastic::new(100_000.0, 5)).unwrap();
    assert_eq!(out.metrics.revocations, 0);
    assert_eq!(out.finish[2], 850.0);
}

#[test]
fn trem_elastic_grows_with_outstanding_user_work() {
    // Four user-facing kernels of 600 µs with SLA 1000: L_max = 2400, U = 3 of 4 GPUs.
    let mut w: Vec<KernelSpec> = (0..4).map(|_| k(0.0, 600.0).user_facing(1000.0)).collect();
    w.push(k(0.0, 5000.0));
    let p = TremElastic::new(100_000.0, 5);
    let sys = all_ready(&w, 4);
    assert_eq!(p.user_gpus(&sys), 3);
}

/// One long job among a stream of short ones that never lets up until t = 4950.
fn adversarial_stream() -> Vec<KernelSpec> {
    let mut w = vec![
        k(0.0, 100.0).time_limit(100.0),
        k(1.0, 1000.0).time_limit(1000.0),
    ];
    w.extend((0..50).map(|i| k(50.0 + 100.0 * i as f64, 100.0).time_limit(100.0)));
    w
}

#[test]
fn aging_prevents_starvation_in_an_adversarial_stream() {
    // Without aging the long job waits for the whole stream: 51 short jobs end at 5100.
    let out = simulate(&adversarial_stream(), 1, &mut SjfAging::new(0.0)).unwrap();
    assert_eq!(out.finish[1], 6100.0);
    // With aging 1 µs/µs its score 1000 − waited drops below a fresh short job's (≥ 50) at
    // the decision at t = 1000 (waited 999): it runs 1000..2000.
    let out = simulate(&adversarial_stream(), 1, &mut SjfAging::new(1.0)).unwrap();
    assert_eq!(out.finish[1], 2000.0);
    assert_eq!(out.metrics.preemptions, 0, "non-preemptive");
}

#[test]
fn time_limits_kill_and_dependencies_wait() {
    // Job 0 declares 300 µs but needs 500: killed at 300, which releases job 1.
    let w = [k(0.0, 500.0).time_limit(300.0), k(0.0, 100.0).after(&[0])];
    let out = simulate(&w, 2, &mut SjfAging::new(1.0)).unwrap();
    assert_eq!(out.finish, vec![300.0, 400.0]);
    assert!(out.kernels[0].killed && !out.kernels[1].killed);
    assert_eq!(out.metrics.killed, 1);

    // A DAG on two GPUs: B waits for A although a GPU is free, C for both.
    let w = [
        k(0.0, 100.0),
        k(0.0, 100.0).after(&[0]),
        k(0.0, 50.0).after(&[0, 1]),
    ];
    let out = simulate(&w, 2, &mut Fifo).unwrap();
    assert_eq!(out.finish, vec![100.0, 200.0, 250.0]);

    // Dependencies must point backwards (no cycles).
    assert!(simulate(&[k(0.0, 1.0).after(&[1]), k(0.0, 1.0)], 1, &mut Fifo).is_err());
}

#[test]
fn a_kernel_that_reaches_its_limit_while_yielding_is_killed_at_the_limit() {
    // RR, quantum 100: K1 runs 100..200 and is then asked to yield, which takes 50 µs; it
    // keeps working meanwhile and reaches its 120 µs limit at 220, before the yield completes.
    let w = [
        k(0.0, 1000.0),
        k(0.0, 1000.0).time_limit(120.0).overheads(50.0, 0.0),
    ];
    let out = simulate(&w, 1, &mut RoundRobin::new(100.0)).unwrap();
    assert_eq!(out.finish, vec![1120.0, 220.0]);
    assert!(out.kernels[1].killed);
    assert_eq!(out.kernels[1].preemptions, 0);
    let used: f64 = out
        .intervals
        .iter()
        .filter(|i| i.kernel == 1)
        .map(|i| i.end - i.start)
        .sum();
    assert_eq!(used, 120.0);
}

struct RunsWhatIsNotReady;
impl Policy for RunsWhatIsNotReady {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn on_event(&mut self, _: Event, _: &SystemView) -> Vec<Action> {
        vec![Action::Run { kernel: 1, gpu: 0 }]
    }
}

#[test]
fn impossible_actions_and_bad_workloads_are_errors() {
    let err = simulate(&[k(0.0, 10.0), k(5.0, 10.0)], 1, &mut RunsWhatIsNotReady).unwrap_err();
    assert!(matches!(err, SimError::BadRun { kernel: 1, .. }), "{err}");
    assert!(simulate(&[k(0.0, 0.0)], 1, &mut Fifo).is_err());
    assert!(simulate(&[k(0.0, 1.0)], 0, &mut Fifo).is_err());
}

#[test]
fn multi_kernel_jobs_arrive_together_with_at_most_eight_outstanding() {
    let g = Generator {
        kernels: 500,
        tasks_per_job: 8,
        ..Generator::default()
    };
    let w = g.generate();
    assert_eq!(w.kernels.len(), 500);
    // Jobs: runs of kernels with one arrival time, one class and one work share.
    let mut jobs: Vec<Vec<&KernelSpec>> = Vec::new();
    for k in &w.kernels {
        match jobs.last_mut() {
            Some(j) if j[0].arrival == k.arrival => j.push(k),
            _ => jobs.push(vec![k]),
        }
    }
    assert!(jobs.iter().all(|j| (1..=8).contains(&j.len())));
    assert!(jobs.iter().any(|j| j.len() > 4), "sizes spread over 1..=8");
    for j in &jobs {
        assert!(j
            .iter()
            .all(|k| k.user_facing == j[0].user_facing && k.work == j[0].work));
    }
    // One kernel per job (the default): every kernel arrives on its own.
    let single = Generator {
        kernels: 50,
        ..Generator::default()
    }
    .generate();
    assert!(single
        .kernels
        .windows(2)
        .all(|p| p[0].arrival < p[1].arrival));
}

#[test]
fn generated_workloads_are_reproducible_and_round_trip_through_json() {
    let g = Generator {
        kernels: 200,
        seed: 7,
        ..Generator::default()
    };
    let a = g.generate();
    assert_eq!(a, g.generate());
    assert_ne!(
        a,
        Generator {
            seed: 8,
            ..g.clone()
        }
        .generate()
    );
    assert_eq!(Workload::from_json(&a.to_json()).unwrap(), a);
    let users = a.kernels.iter().filter(|k| k.user_facing).count();
    assert!(
        (60..140).contains(&users),
        "about half user-facing: {users}"
    );
    let arrivals: Vec<f64> = a.kernels.iter().map(|k| k.arrival).collect();
    assert!(arrivals.windows(2).all(|w| w[0] <= w[1]));
    // Pareto durations: every one at least the scale, mean near the target.
    let batch: Vec<f64> = a
        .kernels
        .iter()
        .filter(|k| !k.user_facing)
        .map(|k| k.work)
        .collect();
    assert!(batch.iter().all(|w| *w >= 20_000.0 / 3.0 - 1e-6));
}

#[test]
fn every_name_resolves_to_the_policy_of_that_name() {
    for (i, name) in NAMES.iter().enumerate() {
        let p = by_name(name, 50.0).unwrap_or_else(|| panic!("{name} does not resolve"));
        assert_eq!(p.name(), *name);
        assert!(!NAMES[..i].contains(name), "{name} listed twice");
        // Every policy has its promises decided (panics for a name without them).
        promises(name);
    }
    assert!(by_name("nosuch", 50.0).is_none());
}

/// What a policy promises beyond the invariants every policy keeps. A name without an entry
/// panics, so a new policy in `NAMES` cannot run the property tests until its promises are
/// decided.
struct Promises {
    /// Runs kernels on whole GPUs only (no spatial sharing).
    whole_gpu: bool,
    /// May preempt (a kernel leaves its GPU and resumes later, paying its resume overhead).
    preempts: bool,
    /// May revoke batch kernels (at most `max_revocations` times each); user-facing kernels
    /// are never revoked.
    revokes: Option<u32>,
    /// Kernels on one GPU at once, at most.
    tenants: usize,
}

fn promises(name: &str) -> Promises {
    let (whole_gpu, preempts, revokes) = match name {
        // Non-preemptive: every kernel runs once, start to end.
        "fifo" | "sjf-aging" => (true, false, None),
        "hpf" | "sjf" | "srt" | "rr" | "ffs" | "cfs" | "frs" => (true, true, None),
        // TReM takes GPUs back by revoking, never by preempting.
        "priority" | "elastic" => (true, false, Some(5)),
        // Spatial sharing: kernels share GPUs and lose SMs by shrinking, never the whole GPU,
        // so "one kernel per GPU" and "one interval per run" do not hold; what holds instead
        // is checked below (SMs in use within the GPU, each kernel on one GPU without a gap
        // from start to end, at most 4 tenants).
        "spatial" | "shares" | "concurrent" => (false, false, None),
        _ => panic!("policy {name}: decide which properties hold for it in `promises`"),
    };
    Promises {
        whole_gpu,
        preempts,
        revokes,
        tenants: match name {
            "spatial" | "shares" => 4,
            // The hardware's limit (H100): up to 128 kernels side by side.
            "concurrent" => 128,
            _ => 1,
        },
    }
}

/// Random workloads that use every field a policy or the simulator reads: priorities,
/// weights, user-facing kernels with SLAs, preemption and revocation costs, declared time
/// limits (some shorter than the work), dependencies on earlier kernels and limited widths.
fn workload() -> impl Strategy<Value = (Vec<KernelSpec>, usize, u32)> {
    let kernel = (
        (0.0..1000.0f64, 1.0..500.0f64, 0u8..3, 0.5..3.0f64),
        (0.0..30.0f64, 0.0..20.0f64, 0.0..50.0f64),
        (
            prop::option::of(0.0..2000.0f64),
            prop::option::of(0.3..1.5f64),
        ),
        (
            0u32..48,
            prop::option::weighted(0.2, any::<prop::sample::Index>()),
        ),
    );
    let specs = prop::collection::vec(kernel, 1..25).prop_map(|ks| {
        ks.into_iter()
            .enumerate()
            .map(
                |(i, ((a, w, p, wt), (l, r, rv), (sla, limit), (sms, dep)))| {
                    let mut s = KernelSpec::new(a, w)
                        .priority(p)
                        .weight(wt)
                        .overheads(l, r)
                        .revoke_latency(rv)
                        .max_sms(sms);
                    if let Some(sla) = sla {
                        s = s.user_facing(sla);
                    }
                    if let Some(f) = limit {
                        s = s.time_limit(f * w);
                    }
                    if let (Some(d), true) = (dep, i > 0) {
                        s = s.after(&[d.index(i)]);
                    }
                    s
                },
            )
            .collect::<Vec<_>>()
    });
    (specs, 1usize..4, 8u32..140)
}

proptest! {
    #[test]
    fn every_policy_keeps_the_invariants((specs, gpus, sms) in workload()) {
        for name in NAMES {
            let promised = promises(name);
            let mut p = by_name(name, 50.0).unwrap();
            let out = simulate_sms(&specs, gpus, sms, p.as_mut()).unwrap();
            let ivs = |k: usize| out.intervals.iter().filter(move |i| i.kernel == k);
            let mut paid_total = 0.0;
            for (i, s) in specs.iter().enumerate() {
                let kv = &out.kernels[i];
                let mine: Vec<_> = ivs(i).collect();
                prop_assert!(!mine.is_empty(), "{name}: kernel {i} never ran");
                // Not before its arrival nor before the kernels it depends on finished.
                let first = mine.iter().map(|iv| iv.start).fold(f64::INFINITY, f64::min);
                prop_assert!(first >= s.arrival, "{name}: kernel {i} ran before it arrived");
                for &d in &s.after {
                    prop_assert!(first >= out.finish[d], "{name}: kernel {i} ran before {d} finished");
                }
                // On one GPU at a time, and off every GPU once it finished.
                for (a, b) in mine.iter().zip(mine.iter().skip(1)) {
                    prop_assert!(a.end <= b.start + 1e-9, "{name}: kernel {i} ran twice at once");
                }
                prop_assert!(close(mine[mine.len() - 1].end, out.finish[i]), "{name}: kernel {i}");
                // Killed exactly when it needs more than it declared.
                prop_assert_eq!(
                    kv.killed,
                    s.time_limit > 0.0 && s.work > s.time_limit,
                    "{}: kernel {} (work {}, limit {})", name, i, s.work, s.time_limit
                );
                let needed = if kv.killed { s.time_limit } else { s.work };
                prop_assert!(out.finish[i] >= s.arrival + needed - 1e-6, "{name}: kernel {i} too early");
                // Progress over its intervals (GPU time at the speed its SMs give) = what it
                // needed + the resume overheads it paid + the work and latency its revocations
                // threw away.
                let progress: f64 = mine
                    .iter()
                    .map(|iv| (iv.end - iv.start) * s.speed((iv.share * sms as f64).round() as u32, sms))
                    .sum();
                let paid = needed
                    + kv.preemptions as f64 * s.resume_overhead
                    + kv.wasted
                    + kv.revocations as f64 * s.revoke_latency;
                prop_assert!(close(progress, paid), "{name}: kernel {i} made {progress} for {paid}");
                paid_total += paid;
                if promised.whole_gpu {
                    prop_assert!(mine.iter().all(|iv| iv.share == 1.0), "{name}: kernel {i} shared a GPU");
                    prop_assert_eq!(mine.len() as u32, 1 + kv.preemptions + kv.revocations, "{}: kernel {}", name, i);
                    prop_assert_eq!(kv.shrinks, 0);
                } else {
                    // Never leaves its GPU from start to finish (its SMs may change).
                    for (a, b) in mine.iter().zip(mine.iter().skip(1)) {
                        prop_assert!(a.gpu == b.gpu && close(a.end, b.start), "{name}: kernel {i} left its GPU");
                    }
                }
                if !promised.preempts {
                    prop_assert_eq!(kv.preemptions, 0, "{}: kernel {}", name, i);
                }
                match promised.revokes {
                    None => prop_assert_eq!(kv.revocations, 0, "{}: kernel {}", name, i),
                    Some(max) => {
                        prop_assert!(kv.revocations <= max, "{name}: kernel {i} revoked {} times", kv.revocations);
                        prop_assert!(!s.user_facing || kv.revocations == 0, "{name}: user-facing kernel {i} revoked");
                    }
                }
            }
            // No GPU ever had more SMs in use than it has (for whole-GPU policies: never two
            // kernels at once); a shared GPU has at most the policy's tenants.
            for g in 0..gpus {
                let on: Vec<_> = out.intervals.iter().filter(|i| i.gpu == g).collect();
                for a in &on {
                    let now: Vec<_> = on.iter().filter(|b| b.start <= a.start && a.start < b.end).collect();
                    let used: f64 = now.iter().map(|b| b.share).sum();
                    prop_assert!(used <= 1.0 + 1e-9, "{name}: GPU {g} at {}: {used}", a.start);
                    prop_assert!(now.len() <= promised.tenants, "{name}: GPU {g} at {}: {} tenants", a.start, now.len());
                }
            }
            if promised.whole_gpu {
                prop_assert!(close(out.metrics.busy, paid_total), "{name}: busy {} for {paid_total}", out.metrics.busy);
            }
            // Metrics within their ranges. A kernel's NTT is at least what it needed over its
            // work: 1 when it completed, less when it was killed at a shorter limit; so ANTT ≥ 1
            // and STP ≤ n when no kernel was killed.
            let floor: Vec<f64> = specs
                .iter()
                .zip(&out.kernels)
                .map(|(s, kv)| if kv.killed { s.time_limit / s.work } else { 1.0 })
                .collect();
            for (i, f) in floor.iter().enumerate() {
                prop_assert!(out.metrics.ntt[i] >= f - 1e-9, "{name}: kernel {i} NTT {}", out.metrics.ntt[i]);
            }
            let n = specs.len() as f64;
            prop_assert!(out.metrics.antt >= floor.iter().sum::<f64>() / n - 1e-9);
            prop_assert!(out.metrics.stp > 0.0);
            prop_assert!(out.metrics.stp <= floor.iter().map(|f| 1.0 / f).sum::<f64>() + 1e-9);
            prop_assert!(out.metrics.dntt >= 0.0);
            prop_assert!(out.metrics.wasted_work >= 0.0);
            prop_assert_eq!(out.metrics.killed as usize, out.kernels.iter().filter(|k| k.killed).count());
            if let Some(a) = out.metrics.sla_attainment {
                prop_assert!((0.0..=1.0).contains(&a));
            }
            // Deterministic.
            let mut again = by_name(name, 50.0).unwrap();
            prop_assert_eq!(simulate_sms(&specs, gpus, sms, again.as_mut()).unwrap().finish, out.finish);
        }
    }
}

#[test]
fn policies_see_the_estimates_not_the_truth() {
    use crate::{simulate_predicted, Estimator};
    // `a` is long and `b` short, but the model learned the opposite from earlier runs.
    let mut est = Estimator::new(1e-3, 100.0);
    for _ in 0..3 {
        est.model.observe("a", &[1.0, 256.0, 0.0, 0.0], 10.0);
        est.model.observe("b", &[1.0, 256.0, 0.0, 0.0], 1000.0);
    }
    let specs = vec![
        k(0.0, 100.0),
        k(1.0, 500.0).named("a", [1.0, 256.0, 0.0, 0.0]),
        k(1.0, 5.0).named("b", [1.0, 256.0, 0.0, 0.0]),
    ];
    let truth = simulate(&specs, 1, &mut Sjf).unwrap();
    assert!(truth.finish[2] < truth.finish[1], "{:?}", truth.finish);
    let believed = simulate_predicted(&specs, 1, 132, &mut Sjf, &mut est).unwrap();
    assert!(
        believed.finish[1] < believed.finish[2],
        "{:?}",
        believed.finish
    );
    // Estimates: the prior for the anonymous kernel, then the model's two wrong answers.
    let err = believed.metrics.estimate_error.unwrap();
    let expected = (0.0 + (500.0 - 10.0) / 500.0 + (1000.0 - 5.0) / 5.0) / 3.0;
    assert!((err - expected).abs() < 1e-6, "{err} vs {expected}");
    assert_eq!(truth.metrics.estimate_error, None);
}

#[test]
fn the_estimator_learns_program_durations_online() {
    use crate::{simulate_predicted, Estimator};
    let w = Generator {
        kernels: 600,
        programs: 4,
        feature_noise: 0.0,
        seed: 9,
        ..Generator::default()
    }
    .generate();
    assert!(w
        .kernels
        .iter()
        .all(|s| s.features.is_some() && !s.name.is_empty()));
    let mut est = Estimator::new(1e-9, 1000.0);
    let out = simulate_predicted(&w.kernels, 1, 132, &mut Fifo, &mut est).unwrap();
    // Exact features: once a program has completed twice its predictions are (nearly) exact,
    // so only the first few arrivals per program are off.
    let err = out.metrics.estimate_error.unwrap();
    assert!(err < 0.2, "mean relative error {err}");
    let late: Vec<f64> = w.kernels[300..]
        .iter()
        .map(|s| {
            ((est
                .model
                .predict(&s.name, s.features.as_ref().unwrap())
                .unwrap()
                - s.work)
                / s.work)
                .abs()
        })
        .collect();
    assert!(late.iter().all(|e| *e < 1e-3), "{late:?}");
}

/// `placed` is what `on_gpus` walks: `place` and `vacate` keep it equal to the kernels whose
/// `gpu` is set, in id order, through any sequence of placements.
#[test]
fn placed_follows_place_and_vacate() {
    let specs: Vec<KernelSpec> = (0..6).map(|_| k(0.0, 100.0)).collect();
    let mut sys = all_ready(&specs, 3);
    let check = |sys: &SystemView| {
        let want: Vec<usize> = (0..6).filter(|&k| sys.kernels[k].gpu.is_some()).collect();
        assert_eq!(sys.placed, want);
        let seen: Vec<usize> = sys.on_gpus().map(|k| k.id).collect();
        assert_eq!(seen, want);
    };
    sys.place(4, 0, 132, true).unwrap();
    sys.place(1, 1, 60, false).unwrap();
    sys.place(3, 1, 72, false).unwrap();
    check(&sys);
    assert!(sys.place(2, 1, 1, false).is_err(), "GPU 1 is full");
    check(&sys);
    sys.vacate(1);
    sys.vacate(1); // twice: nothing more happens
    check(&sys);
    sys.kernels[1].status = Status::Ready;
    sys.place(1, 2, 10, false).unwrap();
    sys.vacate(4);
    check(&sys);
    assert_eq!(sys.placed, vec![1, 3]);
}

/// A context switch: the GPU idles `switch_us` before a kernel that follows another one makes
/// progress; the first start on an idle GPU, and a kernel that resumes where nobody ran in
/// between, pay nothing.
#[test]
fn a_context_switch_delays_the_kernel_that_follows_another() {
    use crate::sim::simulate_switching;
    let w = vec![k(0.0, 100.0), k(0.0, 100.0)];
    let out = simulate_switching(&w, 1, 132, &mut Fifo, None, 10.0).unwrap();
    assert_eq!(out.finish, vec![100.0, 210.0]);
    // Round robin with a 30 µs quantum: every turn after the first pays the switch, so the
    // two 100 µs kernels need 200 µs of work plus a switch per turn but the first.
    let mut rr = RoundRobin::new(30.0);
    let plain = simulate_switching(&w, 1, 132, &mut rr, None, 0.0).unwrap();
    let mut rr = RoundRobin::new(30.0);
    let switching = simulate_switching(&w, 1, 132, &mut rr, None, 5.0).unwrap();
    let turns = switching.intervals.len();
    assert!(turns > 2, "{turns} turns");
    let makespan = |o: &crate::Outcome| o.finish.iter().copied().fold(0.0, f64::max);
    assert!(
        (makespan(&switching) - (makespan(&plain) + 5.0 * (turns - 1) as f64)).abs() < 1e-6,
        "{} vs {} with {turns} turns",
        makespan(&switching),
        makespan(&plain)
    );
    // A kernel alone on its GPU never switches.
    let one = simulate_switching(&w[..1], 1, 132, &mut Fifo, None, 10.0).unwrap();
    assert_eq!(one.finish, vec![100.0]);
    assert!(simulate_switching(&w, 1, 132, &mut Fifo, None, f64::NAN).is_err());
}

/// Closed-loop jobs: with a window of 3, a job's fourth kernel is released when its first
/// finishes, so no job ever has more than 3 kernels released and unfinished; SLAs count from
/// release (a kernel that waited for its turn is not late for it).
#[test]
fn closed_loop_jobs_keep_at_most_the_window_outstanding() {
    let g = Generator {
        kernels: 400,
        tasks_per_job: 12,
        job_window: 3,
        load: 2.0,
        ..Generator::default()
    };
    let w = g.generate();
    assert!(w.kernels.iter().any(|k| !k.after.is_empty()));
    for (i, k) in w.kernels.iter().enumerate() {
        for &p in &k.after {
            assert_eq!(i - p, 3, "kernel {i} waits for {p}");
            assert_eq!(w.kernels[p].arrival, k.arrival, "within one job");
        }
    }
    let out = simulate(&w.kernels, 2, &mut Hpf).unwrap();
    // Per job (kernels with one arrival), at every release: released and unfinished ≤ 3.
    let mut jobs: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
    for (i, k) in w.kernels.iter().enumerate() {
        jobs.entry(k.arrival.to_bits()).or_default().push(i);
    }
    for ks in jobs.values() {
        for &a in ks {
            let t = out.released[a];
            let open = ks
                .iter()
                .filter(|&&b| out.released[b] <= t && out.finish[b] > t)
                .count();
            assert!(open <= 3, "{open} kernels of one job outstanding at {t}");
        }
    }
    for (i, k) in w.kernels.iter().enumerate() {
        let release = out.released[i];
        assert!(release >= k.arrival);
        for &p in &k.after {
            assert!(
                release >= out.finish[p],
                "kernel {i} released before {p} finished"
            );
        }
    }
    // Without a window every kernel of a job is released at its arrival.
    let open = Generator {
        job_window: 0,
        tasks_per_job: 8,
        ..g
    }
    .generate();
    assert!(open.kernels.iter().all(|k| k.after.is_empty()));
}

#[test]
fn an_sla_counts_from_release() {
    // The second kernel waits for the first (100 µs), then takes 10 µs: 110 µs after its
    // arrival but 10 after its release, within its 50 µs SLA.
    let mut second = k(0.0, 10.0).user_facing(50.0);
    second.after = vec![0];
    let out = simulate(&[k(0.0, 100.0), second], 1, &mut Fifo).unwrap();
    assert_eq!(out.released, vec![0.0, 100.0]);
    assert_eq!(out.finish, vec![100.0, 110.0]);
    assert_eq!(out.metrics.sla_attainment, Some(1.0));
}

#[test]
fn jobs_of_a_task_table_run_its_rows() {
    let table = vec![
        TableTask {
            name: "small".into(),
            work: 100.0,
            max_sms: 0,
        },
        TableTask {
            name: "wide".into(),
            work: 2_000.0,
            max_sms: 33,
        },
        TableTask {
            name: "long".into(),
            work: 50_000.0,
            max_sms: 0,
        },
    ];
    let g = Generator {
        kernels: 400,
        tasks_per_job: 8,
        job_window: 2,
        task_table: table.clone(),
        ..Generator::default()
    };
    let w = g.generate();
    assert_eq!(w.kernels.len(), 400);
    for k in &w.kernels {
        let row = table
            .iter()
            .find(|r| r.name == k.name)
            .unwrap_or_else(|| panic!("kernel `{}` is no row of the table", k.name));
        assert_eq!(k.work, row.work, "{}", k.name);
        assert_eq!(k.max_sms, row.max_sms, "{}", k.name);
        assert!(k.features.is_none());
    }
    for row in &table {
        assert!(
            w.kernels.iter().any(|k| k.name == row.name),
            "{} drawn",
            row.name
        );
    }
    // Jobs (runs of one arrival) keep their closed loop: task t waits for task t - 2.
    let mut start = 0;
    while start < w.kernels.len() {
        let end = (start..w.kernels.len())
            .find(|&i| w.kernels[i].arrival != w.kernels[start].arrival)
            .unwrap_or(w.kernels.len());
        for (t, k) in w.kernels[start..end].iter().enumerate() {
            let want: Vec<usize> = if t >= 2 { vec![start + t - 2] } else { vec![] };
            assert_eq!(k.after, want, "task {t} of the job at {start}");
        }
        start = end;
    }
}

#[test]
fn task_tables_are_read_with_their_mistakes_named() {
    let t = parse_task_table("name,work_us,max_sms\n# a comment\n\nsmall, 100\nwide,2000,33\n")
        .unwrap();
    assert_eq!(
        t,
        vec![
            TableTask {
                name: "small".into(),
                work: 100.0,
                max_sms: 0
            },
            TableTask {
                name: "wide".into(),
                work: 2000.0,
                max_sms: 33
            },
        ]
    );
    let e = parse_task_table("small,100\nbad,-5\n").unwrap_err();
    assert!(e.contains("line 2") && e.contains("positive"), "{e}");
    let e = parse_task_table("small,100\nwide,2000,many\n").unwrap_err();
    assert!(e.contains("line 2") && e.contains("max_sms"), "{e}");
    let e = parse_task_table("small,100,1,2\n").unwrap_err();
    assert!(e.contains("line 1") && e.contains("name,work_us"), "{e}");
    assert!(parse_task_table("# nothing\nname,work\n").is_err());
}
