//! Tables of behaviours the source papers report, from the simulator (docs/scheduling.md):
//! `cargo run --release -p cupreempt-runtime --example paper_tables`.

use cupreempt_runtime::sched::policies::{Ffs, Fifo, Hpf};
use cupreempt_runtime::sched::{simulate, KernelSpec};

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
}
