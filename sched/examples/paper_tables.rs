//! Tables of behaviours the source papers report, from the simulator (docs/scheduling.md):
//! `cargo run --release -p cupreempt-sched --example paper_tables`.

use cupreempt_sched::policies::{Ffs, Fifo, Hpf, Srt, TremElastic, TremPriority};
use cupreempt_sched::{simulate, Generator, KernelSpec, Policy};

fn main() {
    println!("HPF vs FIFO: turnaround of a 1 ms urgent kernel behind a low-priority one");
    println!("(preemption latency 30 us, resume overhead 10 us)\n");
    println!("| low-priority kernel | urgent arrives after | FIFO ms | HPF ms | speedup |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for low_ms in [1.0, 10.0, 100.0] {
        for delay_ms in [0.1, 0.5, 0.9] {
            let delay = delay_ms * low_ms * 1000.0;
            let w = [
                KernelSpec::new(0.0, low_ms * 1000.0).overheads(30.0, 10.0),
                KernelSpec::new(delay, 1000.0).priority(1),
            ];
            let fifo = simulate(&w, 1, &mut Fifo).expect("fifo").finish[1] - delay;
            let hpf = simulate(&w, 1, &mut Hpf).expect("hpf").finish[1] - delay;
            println!(
                "| {low_ms} ms | {:.0}% ({:.2} ms) | {:.3} | {:.3} | {:.2}x |",
                delay_ms * 100.0,
                delay / 1000.0,
                fifo / 1000.0,
                hpf / 1000.0,
                fifo / hpf
            );
        }
    }

    println!(
        "\nFFS: GPU shares of two kernels with weights 2:1, each preemption costing O = 50 us"
    );
    println!("(all of it lost work), while both run (until the first one finishes)\n");
    println!("| max_overhead | epoch T us | share w=2 | share w=1 | lost to preemption |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for cap in [0.02, 0.05, 0.10, 0.20] {
        let w = [
            KernelSpec::new(0.0, 100_000.0)
                .weight(2.0)
                .overheads(0.0, 50.0),
            KernelSpec::new(0.0, 100_000.0)
                .weight(1.0)
                .overheads(0.0, 50.0),
        ];
        let out = simulate(&w, 1, &mut Ffs::new(cap)).expect("ffs");
        let until = out.finish.iter().copied().fold(f64::INFINITY, f64::min);
        let ran = |k: usize| {
            out.intervals
                .iter()
                .filter(|i| i.kernel == k)
                .map(|i| i.end.min(until) - i.start.min(until))
                .sum::<f64>()
        };
        // Each run after a kernel's first starts with its resume overhead (lost work).
        let resumes = out
            .intervals
            .iter()
            .filter(|i| i.start < until)
            .count()
            .saturating_sub(2);
        let lost = resumes as f64 * 50.0;
        println!(
            "| {:.0}% | {:.0} | {:.3} | {:.3} | {:.2}% |",
            cap * 100.0,
            100.0 / (cap * 3.0),
            ran(0) / until,
            ran(1) / until,
            100.0 * lost / until
        );
    }

    trem_tables();
    smt_table();
}

/// Simultaneous multi-tenancy: greedy STP allocation of CTAs vs an even split vs one kernel at
/// a time, on one GPU of 132 SMs × 8 CTA slots; mixes of kernels that saturate early
/// (memory-bound, 32–256 CTAs) or late (compute-bound, 1,056), arriving within 1 ms, shrinking
/// costs 30 µs. Means over 50 random mixes per size.
fn smt_table() {
    use cupreempt_sched::smt::{saturating_profile, simulate_smt, Sharing, Tenant};
    use cupreempt_sched::Rng;
    let capacity = 132 * 8;
    println!("\nSimultaneous multi-tenancy (CTA counts): STP and ANTT, means of 50 mixes\n");
    println!("| kernels | greedy STP | even STP | exclusive STP | greedy ANTT | even ANTT | exclusive ANTT |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for n in [2usize, 4, 8] {
        let mut rng = Rng::new(n as u64);
        let mut sums = [[0.0f64; 2]; 3];
        for _ in 0..50 {
            let tenants: Vec<Tenant> = (0..n)
                .map(|_| {
                    let saturate = if rng.unit() < 0.5 {
                        32 << (rng.next_u64() % 4)
                    } else {
                        1056
                    };
                    Tenant {
                        arrival: rng.unit() * 1000.0,
                        profile: saturating_profile(
                            1_000.0 * 1056.0 * (0.5 + rng.unit()),
                            saturate,
                            1024,
                        ),
                        shrink_cost: 30.0,
                    }
                })
                .collect();
            for (j, sharing) in [Sharing::Greedy, Sharing::Even, Sharing::Exclusive]
                .into_iter()
                .enumerate()
            {
                let o = simulate_smt(&tenants, capacity, sharing);
                sums[j][0] += o.stp / 50.0;
                sums[j][1] += o.antt / 50.0;
            }
        }
        println!(
            "| {n} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            sums[0][0], sums[1][0], sums[2][0], sums[0][1], sums[1][1], sums[2][1]
        );
    }
}

/// TReM: Priority and Elastic with and without revocation (at most 5 per kernel, or none),
/// over the offered load per GPU and the GPU count; then SLA attainment against the
/// revocation latency. User-facing:batch 80:20, SLA 200 ms, 5,000 kernels, seed 1.
fn trem_tables() {
    let run = |gpus: usize, load: f64, revoke_ms: f64, policy: &mut dyn Policy| {
        let g = Generator {
            kernels: 5000,
            user_share: 0.8,
            // Load 1 here means the GPUs are busy 100% of the time on average.
            mean_interarrival: 0.8 * 1_000.0 + 0.2 * 20_000.0,
            load: load * gpus as f64,
            revoke_latency: revoke_ms * 1000.0,
            ..Generator::default()
        };
        let w = g.generate();
        simulate(&w.kernels, gpus, policy)
            .expect("simulate")
            .metrics
    };
    println!("\nTReM Priority and Elastic, with revocation (at most 5 per kernel) and without");
    println!("(revocation latency 10 ms; SLA: user-facing kernels done within 200 ms)\n");
    println!("| GPUs | load per GPU | policy | SLA met | revocations | wasted work | SLA met without revocation | ANTT with / without |");
    println!("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for gpus in [1usize, 4, 16] {
        for load in [0.25, 0.5, 1.0, 1.5, 2.0] {
            for name in ["priority", "elastic"] {
                let make = |max: u32| -> Box<dyn Policy> {
                    if name == "priority" {
                        Box::new(TremPriority::new(max))
                    } else {
                        Box::new(TremElastic::new(100_000.0, max))
                    }
                };
                let with = run(gpus, load, 10.0, make(5).as_mut());
                let without = run(gpus, load, 10.0, make(0).as_mut());
                println!(
                    "| {gpus} | {load} | {name} | {:.1}% | {} | {:.2}% | {:.1}% | {:.2} / {:.2} |",
                    100.0 * with.sla_attainment.unwrap_or(f64::NAN),
                    with.revocations,
                    100.0 * with.wasted_work,
                    100.0 * without.sla_attainment.unwrap_or(f64::NAN),
                    with.antt,
                    without.antt
                );
            }
        }
    }
    println!("\nSLA attainment as the revocation latency grows (4 GPUs, load 1.0 per GPU)\n");
    println!("| revocation latency | Priority SLA met | Priority wasted | Elastic SLA met | Elastic wasted | SRT (preemption) SLA met |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for ms in [10.0, 30.0, 100.0, 300.0, 1000.0] {
        let p = run(4, 1.0, ms, &mut TremPriority::new(5));
        let e = run(4, 1.0, ms, &mut TremElastic::new(100_000.0, 5));
        let s = run(4, 1.0, ms, &mut Srt);
        println!(
            "| {ms} ms | {:.1}% | {:.2}% | {:.1}% | {:.2}% | {:.1}% |",
            100.0 * p.sla_attainment.unwrap_or(f64::NAN),
            100.0 * p.wasted_work,
            100.0 * e.sla_attainment.unwrap_or(f64::NAN),
            100.0 * e.wasted_work,
            100.0 * s.sla_attainment.unwrap_or(f64::NAN)
        );
    }
}
