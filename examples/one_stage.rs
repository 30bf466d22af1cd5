// `one_stage parse|transform`: runs one of them once on the benchmark source, for repeatable
// instruction counts with `valgrind --tool=callgrind` (docs/benchmarks.md).
include!("../benches/gen_source.rs");

fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    let src = generate(5000);
    match what.as_str() {
        "parse" => {
            let t = cupreempt::parse::parse(&src);
            println!("{}", t.tree.root_node().child_count());
        }
        "transform" => {
            let t = cupreempt::transform(&src, "bench.cu", &cupreempt::Options::default());
            println!("{}", t.output.len());
        }
        _ => eprintln!("usage: one_stage parse|transform"),
    }
}
