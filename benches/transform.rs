//! Transform time vs tree-sitter parse time alone, on a generated ~5,000-line CUDA file with a
//! mix of kernels (plain, templates, helpers reading blockIdx, shared memory and barriers,
//! predicated hazards, refused grid syncs) and host launch sites. Goal: transform ≤ 1.5× parse.

use criterion::{black_box, criterion_group, criterion_main, Criterion};

include!("gen_source.rs");

fn bench(c: &mut Criterion) {
    let src = generate(5000);
    let opts = cupreempt::Options::default();
    let mut g = c.benchmark_group(format!("{} lines", src.lines().count()));
    g.bench_function("parse", |b| {
        b.iter(|| cupreempt::parse::parse(black_box(&src)))
    });
    g.bench_function("transform", |b| {
        b.iter(|| cupreempt::transform(black_box(&src), "bench.cu", &opts))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
