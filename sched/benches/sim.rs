//! Simulator throughput: scheduling events per second on one core (goal ≥ 1 million/s).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cupreempt_sched::{policies, simulate, Generator};

fn bench(c: &mut Criterion) {
    let w = Generator {
        kernels: 20_000,
        seed: 3,
        load: 1.2,
        sm_widths: vec![16, 33, 66, 132],
        ..Generator::default()
    }
    .generate();
    let mut g = c.benchmark_group("simulate 20k kernels, 4 GPUs");
    for name in policies::NAMES {
        let mut p = policies::by_name(name, 1000.0).expect("policy");
        let events = simulate(&w.kernels, 4, p.as_mut())
            .expect("simulate")
            .events;
        g.throughput(Throughput::Elements(events));
        g.bench_function(*name, |b| {
            b.iter(|| {
                let mut p = policies::by_name(name, 1000.0).expect("policy");
                simulate(&w.kernels, 4, p.as_mut()).expect("simulate")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
