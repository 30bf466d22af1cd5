// Runs only parse + analysis on the benchmark source (for profiling with callgrind).
include!("../benches/gen_source.rs");

fn main() {
    let src = generate(5000);
    let parsed = cupreempt::parse::parse(&src);
    let a = cupreempt::analysis::analyze(&parsed, &src, &cupreempt::Options::default());
    println!("{} kernels", a.kernels.len());
}
