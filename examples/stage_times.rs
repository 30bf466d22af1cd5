// Times each stage of the transformer on the benchmark's generated file (for profiling).
include!("../benches/gen_source.rs");

fn main() {
    let src = generate(5000);
    let opts = cupreempt::Options::default();
    let t = std::time::Instant::now();
    let parsed = cupreempt::parse::parse(&src);
    let t_parse = t.elapsed();
    let t = std::time::Instant::now();
    let a = cupreempt::analysis::analyze(&parsed, &src, &opts);
    let t_an = t.elapsed();
    let t = std::time::Instant::now();
    let r = cupreempt::rewrite::rewrite(&a, &src, &opts).expect("edits do not overlap");
    let t_rw = t.elapsed();
    let t = std::time::Instant::now();
    let out = cupreempt::edit::apply(&src, &r.edits, None).unwrap();
    let t_ap = t.elapsed();
    let t = std::time::Instant::now();
    let _ = cupreempt::transform(&src, "x.cu", &opts);
    let t_all = t.elapsed();
    println!("parse {t_parse:?} analyze {t_an:?} rewrite {t_rw:?} apply {t_ap:?} (out {} bytes) total transform {t_all:?}", out.len());
}
