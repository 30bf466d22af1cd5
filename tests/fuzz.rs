//! A bounded, deterministic mutation fuzzer for the transformer library (docs/fuzzing.md).
//!
//! Seeds are every fixture (`fixtures/*.cu`, `fixtures/bench/*.cu`) and the regression corpus
//! (`tests/fuzz/corpus/`). Each execution mutates seeds (bytes flipped, spans deleted,
//! duplicated or swapped, CUDA tokens and fragments inserted, deep nesting, CRLF, non-ASCII
//! bytes) and runs on the mutant what the commands run: `transform` (with and without `#line`
//! directives), the reports `check` prints (labels turned into lines and columns, the kernels'
//! source and output ranges), the diagnostics drawn by miette, and the diff module. It fails
//! on a panic, on an input that runs longer than the time limit, on an internal error, and on
//! an output that parses worse (more tree-sitter ERROR/MISSING nodes) than its input.
//!
//! The seed is fixed, so a run is reproducible; `CUPREEMPT_FUZZ_ITERS` sets the number of
//! executions, `CUPREEMPT_FUZZ_SECS` runs for that long instead, `CUPREEMPT_FUZZ_SEED` picks
//! another seed and `CUPREEMPT_FUZZ_FINDINGS` the folder where failing inputs are saved.
//! Inputs in `tests/fuzz/known_failures/` are run in a child process and reported, and do not
//! fail the test: they are reproducers of open bugs.

#[path = "../src/cli/render.rs"]
#[allow(dead_code)]
mod render;

use cupreempt::{diff, parse, transform, Options};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The seed of the default run ("cupreemp").
const SEED: u64 = 0x6375_7072_6565_6d70;
/// Executions of the default run: about 30 s in a debug build on two cores.
const DEFAULT_ITERS: u64 = 6000;
/// An input that runs longer than this is a hang.
const TIME_LIMIT: Duration = Duration::from_secs(20);
/// The stack of the thread that runs an input: the main thread's, as the command line has.
const STACK: usize = 8 << 20;
/// Deepest nesting a mutation inserts (`CUPREEMPT_FUZZ_NEST` changes it).
const DEFAULT_NEST: usize = 100;
/// The name under which executions run, so that the panic hook knows their panics.
const EXEC_THREAD: &str = "fuzz-exec";

/// Inserted whole at a random place.
const FRAGMENTS: &[&str] = &[
    "__global__",
    "__global__ void k(int* p) { p[0] = 1; }\n",
    "__device__",
    "__host__",
    "__shared__",
    "extern __shared__ float s[];",
    "<<<",
    ">>>",
    "<<<1, 1>>>",
    "k<<<g, b, 0, s>>>(p);",
    "__syncthreads();",
    "__syncthreads_count(1);",
    "return;",
    "if (threadIdx.x",
    "if (threadIdx.x > 5) return;",
    "threadIdx.x",
    "blockIdx.x",
    "gridDim.y",
    "blockDim.z",
    "{",
    "}",
    "{}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "#if 0\n",
    "#if defined(X)\n",
    "#else\n",
    "#endif\n",
    "#define TID (threadIdx.x)\n",
    "#define K(x) __global__ void x() {}\n",
    "#pragma cupreempt chunk(4)\n",
    "#pragma unroll\n",
    "#include \"cupreempt.cuh\"\n",
    "\\\n",
    "template<",
    "template <typename T, int N>",
    "typename",
    ">",
    "<",
    "namespace n {",
    "extern \"C\"",
    "static",
    "asm(\"mov.u32 %0, %%tid.x;\" : \"=r\"(l));",
    "cooperative_groups::this_grid().sync();",
    "for (int i = 0; i < n; ++i)",
    "while (1)",
    "do {} while (0);",
    "else",
    "goto out;",
    "__launch_bounds__(256)",
    "__align__(16)",
    "[=] __device__ (int i) { return i; }",
    "new int*[rows]",
    "//",
    "/*",
    "*/",
    "\"",
    "'",
    "R\"(",
    "\r\n",
    "\r",
    "\t",
    "\0",
    "é",
    "中文",
    "🦀",
    "\u{feff}",
    "\u{200b}",
];

/// Opening and closing halves for deep nesting.
const NESTS: &[(&str, &str)] = &[
    ("{", "}"),
    ("{\n", "}\n"),
    ("namespace n {", "}"),
    ("if (threadIdx.x) {", "}"),
    ("if (t > 1) {", "}"),
    ("for (;;) {", "}"),
    ("(", ")"),
    ("[", "]"),
    ("#if 1\n", "#endif\n"),
    ("template<typename T", ">"),
    ("a + (", ")"),
    ("-", ""),
    ("!", ""),
    ("*", ""),
];

/// Bytes that are not ASCII, most not valid UTF-8 alone (a Latin-1 comment, a stray
/// continuation byte).
const HIGH_BYTES: &[u8] = &[0x80, 0xa0, 0xc3, 0xe9, 0xef, 0xfe, 0xff, 0xe2, 0x82, 0xac];

/// splitmix64: small, fast and good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// A number from the environment, decimal or `0x` hexadecimal; a value that is neither stops
/// the run (a typo must not quietly fall back to the default).
fn env_num(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    };
    Some(parsed.unwrap_or_else(|| panic!("{name}={v}: not a number (decimal or 0x hexadecimal)")))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `dir` whose name ends in `.cu`, sorted, as (name, bytes).
fn cu_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "cu") {
            if let Ok(bytes) = std::fs::read(&p) {
                let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
                out.push((name, bytes));
            }
        }
    }
    out.sort();
    out
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = cu_files(&root().join("fixtures"));
    out.extend(cu_files(&root().join("fixtures/bench")));
    out.extend(cu_files(&root().join("tests/fuzz/corpus")));
    out
}

/// A random span of `len` bytes: start and end, biased to short spans.
fn span(rng: &mut Rng, len: usize) -> (usize, usize) {
    let start = rng.below(len + 1);
    let max = (len - start).min(if rng.chance(4) { 4096 } else { 64 });
    (start, start + rng.below(max + 1))
}

/// One mutation of `buf`; `seeds` gives material to splice in.
fn mutate_once(rng: &mut Rng, buf: &mut Vec<u8>, seeds: &[(String, Vec<u8>)], nest: usize) {
    let len = buf.len();
    match rng.below(14) {
        // A bit flipped.
        0 if len > 0 => {
            let i = rng.below(len);
            buf[i] ^= 1 << rng.below(8);
        }
        // One byte replaced by a random printable one or a punctuation mark of C.
        1 if len > 0 => {
            let i = rng.below(len);
            let punct = b"{}()[]<>;,:=!&|+-*/%^~?#\\\"'\n \t0aZ_";
            buf[i] = if rng.chance(3) {
                (rng.below(95) + 32) as u8
            } else {
                punct[rng.below(punct.len())]
            };
        }
        // A span deleted.
        2 | 3 => {
            let (a, b) = span(rng, len);
            buf.drain(a..b);
        }
        // A span duplicated somewhere.
        4 => {
            let (a, b) = span(rng, len);
            let piece = buf[a..b].to_vec();
            let at = rng.below(len + 1);
            buf.splice(at..at, piece);
        }
        // Two spans swapped.
        5 if len > 2 => {
            let mut cuts = [
                rng.below(len),
                rng.below(len),
                rng.below(len),
                rng.below(len),
            ];
            cuts.sort_unstable();
            let [a, b, c, d] = cuts;
            let mut out = Vec::with_capacity(len);
            out.extend_from_slice(&buf[..a]);
            out.extend_from_slice(&buf[c..d]);
            out.extend_from_slice(&buf[b..c]);
            out.extend_from_slice(&buf[a..b]);
            out.extend_from_slice(&buf[d..]);
            *buf = out;
        }
        // A CUDA token or fragment inserted.
        6..=8 => {
            let f = FRAGMENTS[rng.below(FRAGMENTS.len())].as_bytes();
            let at = rng.below(len + 1);
            buf.splice(at..at, f.iter().copied());
        }
        // A span of another seed spliced in.
        9 => {
            let other = &seeds[rng.below(seeds.len())].1;
            let (a, b) = span(rng, other.len());
            let at = rng.below(len + 1);
            buf.splice(at..at, other[a..b].iter().copied());
        }
        // Deep nesting around a span, balanced or not.
        10 => {
            let (open, close) = NESTS[rng.below(NESTS.len())];
            let depth = 1 + rng.below(nest.max(1));
            let (a, b) = span(rng, len);
            let mut out = Vec::with_capacity(len + depth * (open.len() + close.len()));
            out.extend_from_slice(&buf[..a]);
            out.extend(
                open.as_bytes()
                    .iter()
                    .copied()
                    .cycle()
                    .take(open.len() * depth),
            );
            out.extend_from_slice(&buf[a..b]);
            if !rng.chance(4) {
                out.extend(
                    close
                        .as_bytes()
                        .iter()
                        .copied()
                        .cycle()
                        .take(close.len() * depth),
                );
            }
            out.extend_from_slice(&buf[b..]);
            *buf = out;
        }
        // Line ends turned into CRLF (all, or from a point on), or lone CRs.
        11 => {
            let from = if rng.chance(2) { 0 } else { rng.below(len + 1) };
            let lone = rng.chance(4);
            let mut out = buf[..from].to_vec();
            for &c in &buf[from..] {
                if c == b'\n' {
                    out.push(b'\r');
                    if lone {
                        continue;
                    }
                }
                out.push(c);
            }
            *buf = out;
        }
        // Bytes that are not ASCII.
        12 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(3);
            let bytes: Vec<u8> = (0..n)
                .map(|_| HIGH_BYTES[rng.below(HIGH_BYTES.len())])
                .collect();
            buf.splice(at..at, bytes);
        }
        // A bracket turned into another one (one `]` turned `[` is a classic).
        _ => {
            let brackets = b"{}()[]<>";
            let at: Vec<usize> = buf
                .iter()
                .enumerate()
                .filter(|(_, c)| brackets.contains(c))
                .map(|(i, _)| i)
                .collect();
            if !at.is_empty() {
                let i = at[rng.below(at.len())];
                buf[i] = brackets[rng.below(brackets.len())];
            }
        }
    }
}

/// Execution `iter` of the run with seed `seed`: the input, and the name of the seed it came
/// from. Every execution has its own generator, so that one can be made again on its own.
fn mutant(seed: u64, iter: u64, seeds: &[(String, Vec<u8>)], nest: usize) -> (Vec<u8>, String) {
    let mut rng = Rng(seed ^ iter.wrapping_mul(0xa076_1d64_78bd_642f));
    let (name, base) = &seeds[rng.below(seeds.len())];
    let mut buf = base.clone();
    let n = 1 + rng.below(4) + if rng.chance(4) { rng.below(12) } else { 0 };
    for _ in 0..n {
        mutate_once(&mut rng, &mut buf, seeds, nest);
    }
    (buf, name.clone())
}

/// The checks on one input. `Err` describes what went wrong; a panic is caught by the caller.
fn check(bytes: &[u8], line_directives: bool) -> Result<(), String> {
    // The library takes text: bytes that are not UTF-8 are replaced, as a lossless reader
    // would have to present them (U+FFFD is three bytes: char boundaries matter).
    let src = String::from_utf8_lossy(bytes);
    let src: &str = &src;
    // Without the library's own re-parse, so that an output that parses worse is seen here.
    let opts = Options {
        line_directives,
        verify: false,
        ..Options::default()
    };
    let name = "fuzz.cu";
    let t = transform(src, name, &opts);

    // No overlapping edits (CP013 with the input handed back). The other CP013, an output the
    // library found parsing worse and did not hand out, is its guard on inputs that already
    // have syntax errors, which mutants mostly are.
    if let Some(d) = t
        .diagnostics
        .iter()
        .find(|d| d.code.id() == "CP013" && d.message.contains("overlapping edits"))
    {
        return Err(format!("internal-error: {}", d.message));
    }

    // The output parses no worse than the input.
    if t.output != src {
        let before = parse::error_count(src);
        let after = parse::error_count(&t.output);
        if after > before {
            return Err(format!(
                "parse-worse: the output has {after} syntax errors where the input has {before}"
            ));
        }
    }

    // What `check` prints: every label is a range of the input on char boundaries, turned
    // into a line and a column; every kernel's line exists.
    let lines = src.split('\n').count();
    for d in &t.diagnostics {
        for l in &d.labels {
            let what = if l.start > l.end {
                "label-reversed"
            } else if l.end > src.len() {
                "label-past-end"
            } else if !src.is_char_boundary(l.start) || !src.is_char_boundary(l.end) {
                "label-inside-char"
            } else {
                ""
            };
            if !what.is_empty() {
                return Err(format!(
                    "{what}: label {}..{} of {} in a {}-byte input",
                    l.start,
                    l.end,
                    d.code.id(),
                    src.len()
                ));
            }
            let _line = src[..l.start].matches('\n').count() + 1;
        }
    }
    for k in &t.kernels {
        if k.line == 0 || k.line > lines {
            return Err(format!("kernel {} on line {} of {lines}", k.name, k.line));
        }
        let _ = serde_json::to_string(k).map_err(|e| format!("kernel report to JSON: {e}"))?;
        // What `diff --kernel` shows.
        if let Some(r) = &k.source_range {
            let Some(s) = src.get(r.clone()) else {
                return Err(format!(
                    "kernel {} source range {r:?} out of the input",
                    k.name
                ));
            };
            if let Some(o) = &k.output_range {
                let Some(out) = t.output.get(o.clone()) else {
                    return Err(format!(
                        "kernel {} output range {o:?} out of the output",
                        k.name
                    ));
                };
                let _ = diff::counts(s, out);
            }
        }
    }
    let _ =
        serde_json::to_string(&t.diagnostics).map_err(|e| format!("diagnostics to JSON: {e}"))?;
    let _ = render::render_plain(&t.diagnostics, name, src);

    // What `diff` shows.
    let _ = diff::unified(src, &t.output);
    let _ = diff::side_by_side(src, &t.output);
    let _ = diff::counts(src, &t.output);

    // A transformed file is refused the second time, and left as it is.
    if t.transformed_count() > 0 && !line_directives {
        let again = transform(&t.output, name, &opts);
        if again.output != t.output {
            return Err("re-running on the output changed it".into());
        }
    }
    Ok(())
}

thread_local! {
    /// What the panic hook saw last in this execution thread.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Keeps execution threads' panics quiet (they are reported as findings), and others as usual.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if thread::current().name() == Some(EXEC_THREAD) {
                LAST_PANIC.with(|l| *l.borrow_mut() = Some(info.to_string()));
            } else {
                default(info);
            }
        }));
    });
}

/// A failure: a short signature (to count repeats) and the message.
struct Failure {
    signature: String,
    message: String,
    hang: bool,
}

/// Runs `check` on one input in its own thread, with the time limit; the extra check
/// `inject` stands for a bug in the harness's own check path (the self-test uses it).
fn execute(
    bytes: Vec<u8>,
    line_directives: bool,
    inject: Option<fn(&[u8])>,
) -> Result<(), Failure> {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name(EXEC_THREAD.into())
        .stack_size(STACK)
        .spawn(move || {
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                if let Some(f) = inject {
                    f(&bytes);
                }
                check(&bytes, line_directives)
            }))
            .map_err(|_| LAST_PANIC.with(|l| l.borrow_mut().take()));
            let _ = tx.send(r);
        });
    let handle = match spawned {
        Ok(h) => h,
        Err(e) => {
            return Err(Failure {
                signature: "spawn".into(),
                message: format!("cannot start a thread: {e}"),
                hang: false,
            })
        }
    };
    match rx.recv_timeout(TIME_LIMIT) {
        Ok(Ok(Ok(()))) => {
            let _ = handle.join();
            Ok(())
        }
        Ok(Ok(Err(message))) => {
            let _ = handle.join();
            let signature = message.split(':').next().unwrap_or("error").to_string();
            let signature = format!("{signature}{}", mode(line_directives));
            Err(Failure {
                signature,
                message,
                hang: false,
            })
        }
        Ok(Err(seen)) => {
            let _ = handle.join();
            let message = seen.unwrap_or_else(|| "panic".into());
            // "panicked at src/x.rs:12:5:" names the place; its file is the signature (the
            // line moves with every edit of the file).
            let place = message
                .split_once("panicked at ")
                .map_or(message.as_str(), |(_, rest)| rest)
                .split(':')
                .next()
                .unwrap_or("")
                .to_string();
            Err(Failure {
                signature: format!("panic in {place}{}", mode(line_directives)),
                message,
                hang: false,
            })
        }
        Err(_) => Err(Failure {
            signature: format!("hang{}", mode(line_directives)),
            message: format!("no result after {} s", TIME_LIMIT.as_secs()),
            hang: true,
        }),
    }
}

/// The part of a signature that names the options.
fn mode(line_directives: bool) -> &'static str {
    if line_directives {
        " [line directives]"
    } else {
        ""
    }
}

/// The signatures of open bugs: the lines `signature: ...` that start the notes (`.txt`) in
/// `tests/fuzz/known_failures/`. Findings with these signatures are reported and do not fail
/// a run.
fn known_signatures() -> Vec<String> {
    let mut out = Vec::new();
    let dir = root().join("tests/fuzz/known_failures");
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "txt") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            out.extend(
                text.lines()
                    .map_while(|l| l.strip_prefix("signature: "))
                    .map(|sig| sig.trim().to_string()),
            );
        }
    }
    out
}

fn findings_dir(default: &str) -> PathBuf {
    std::env::var_os("CUPREEMPT_FUZZ_FINDINGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(default))
}

fn slug(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// What a run found.
#[derive(Default)]
struct Report {
    executions: u64,
    /// Signature → (times seen, first saved input, message).
    findings: BTreeMap<String, (u64, PathBuf, String)>,
    /// The signatures of open bugs.
    known: Vec<String>,
}

impl Report {
    /// Findings that are not open bugs.
    fn new_findings(&self) -> usize {
        self.findings
            .keys()
            .filter(|s| !self.known.contains(s))
            .count()
    }
}

/// The fuzz loop. `inject` adds a check of the harness's own (the self-test uses it).
fn run(
    seed: u64,
    iters: u64,
    secs: Option<u64>,
    inject: Option<fn(&[u8])>,
    dir: PathBuf,
) -> Report {
    install_panic_hook();
    let seeds = seeds();
    assert!(!seeds.is_empty(), "no seeds: fixtures/*.cu is missing");
    let nest = env_num("CUPREEMPT_FUZZ_NEST").map_or(DEFAULT_NEST, |n| n as usize);
    let _ = std::fs::create_dir_all(&dir);
    // The input in flight, on disk, for a crash that ends the process (a stack overflow).
    let current = dir.join("current-input.cu");
    let known = known_signatures();
    let mut report = Report {
        known: known.clone(),
        ..Report::default()
    };
    let start = Instant::now();
    let deadline = secs.map(|s| start + Duration::from_secs(s));
    let mut next_note = start + Duration::from_secs(60);

    // The seeds themselves first, as they are, then the mutants.
    let mut iter = 0u64;
    let mut replay = seeds.iter();
    loop {
        let (bytes, origin, tag) = if let Some((name, bytes)) = replay.next() {
            (bytes.clone(), name.clone(), format!("seed {name}"))
        } else {
            let more = match deadline {
                Some(d) => Instant::now() < d,
                None => iter < iters,
            };
            if !more {
                break;
            }
            let (bytes, origin) = mutant(seed, iter, &seeds, nest);
            iter += 1;
            (bytes, origin, format!("iteration {}", iter - 1))
        };
        let line_directives = report.executions % 4 == 3;
        let _ = std::fs::write(&current, &bytes);
        report.executions += 1;
        if let Err(f) = execute(bytes.clone(), line_directives, inject) {
            let entry = report
                .findings
                .entry(f.signature.clone())
                .or_insert_with(|| {
                    let path = dir.join(format!("{}-{}.cu", slug(&f.signature), report.executions));
                    let _ = std::fs::write(&path, &bytes);
                    let note = format!(
                        "signature: {}\n{}\nfrom {origin} ({tag}, seed {seed:#x}, line directives \
                     {line_directives})\n",
                        f.signature, f.message
                    );
                    let _ = std::fs::write(path.with_extension("txt"), &note);
                    let known = if known.contains(&f.signature) {
                        " (known)"
                    } else {
                        ""
                    };
                    println!(
                        "fuzz: finding{known}: {}\n  input: {}",
                        f.signature,
                        path.display()
                    );
                    (0, path, f.message.clone())
                });
            entry.0 += 1;
            if f.hang {
                // The thread still runs; later timings would mean nothing.
                break;
            }
        }
        if Instant::now() >= next_note {
            next_note += Duration::from_secs(60);
            println!(
                "fuzz: {} executions in {:.0} s, {} distinct findings",
                report.executions,
                start.elapsed().as_secs_f64(),
                report.findings.len()
            );
        }
    }
    let _ = std::fs::remove_file(&current);
    println!(
        "fuzz: {} executions ({} seeds, {} mutants) in {:.1} s, seed {seed:#x}, {} distinct \
         findings ({} of them known)",
        report.executions,
        seeds.len(),
        iter,
        start.elapsed().as_secs_f64(),
        report.findings.len(),
        report.findings.len() - report.new_findings()
    );
    print!("{}", describe(&report));
    report
}

fn describe(report: &Report) -> String {
    report
        .findings
        .iter()
        .map(|(sig, (n, path, msg))| {
            let known = if report.known.contains(sig) {
                "known: "
            } else {
                ""
            };
            let msg = msg.lines().take(2).collect::<Vec<_>>().join(" / ");
            format!(
                "  {known}{sig} ({n}x), e.g. {}\n    {msg}\n",
                path.display()
            )
        })
        .collect()
}

#[test]
fn fuzz_transform_check_diff() {
    let seed = env_num("CUPREEMPT_FUZZ_SEED").unwrap_or(SEED);
    let iters = env_num("CUPREEMPT_FUZZ_ITERS").unwrap_or(DEFAULT_ITERS);
    let secs = env_num("CUPREEMPT_FUZZ_SECS");
    let report = run(seed, iters, secs, None, findings_dir("fuzz-findings"));
    assert!(
        report.new_findings() == 0,
        "the fuzzer found {} distinct failures that are not known (tests/fuzz/known_failures/):\n{}",
        report.new_findings(),
        describe(&report)
    );
}

/// The harness reports a failing input: a check that panics on some inputs is found, with the
/// input saved.
#[test]
fn fuzz_reports_a_failing_input() {
    fn injected(bytes: &[u8]) {
        if bytes.windows(3).any(|w| w == b"<<<") && bytes.contains(&b'\r') {
            panic!("injected failure");
        }
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-self-test");
    let report = run(SEED, 200, None, Some(injected), dir);
    let (n, path, msg) = report
        .findings
        .values()
        .find(|(_, _, m)| m.contains("injected failure"))
        .unwrap_or_else(|| panic!("the injected failure was not found:\n{}", describe(&report)));
    assert!(*n > 0 && msg.contains("tests/fuzz.rs"), "{msg}");
    let saved = std::fs::read(path).unwrap_or_default();
    assert!(saved.windows(3).any(|w| w == b"<<<") && saved.contains(&b'\r'));
}

/// Every regression input passes on its own (they are seeds of the fuzz run as well; this
/// names the one that fails).
#[test]
fn fuzz_corpus_passes() {
    install_panic_hook();
    let corpus = cu_files(&root().join("tests/fuzz/corpus"));
    let mut failed = Vec::new();
    for (name, bytes) in &corpus {
        for line_directives in [false, true] {
            if let Err(f) = execute(bytes.clone(), line_directives, None) {
                failed.push(format!("{name}: {}", f.message));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Open bugs: each input of `tests/fuzz/known_failures/` runs in a child process (a stack
/// overflow ends a process), and the result is printed; none fails this test. An input that
/// passes belongs in `tests/fuzz/corpus/`.
#[test]
fn fuzz_known_failures_reported() {
    let known = cu_files(&root().join("tests/fuzz/known_failures"));
    let Ok(exe) = std::env::current_exe() else {
        println!("known failures: cannot find the test binary; skipped");
        return;
    };
    for (name, _) in &known {
        let out = std::process::Command::new(&exe)
            .args([
                "replay_one_input",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CUPREEMPT_FUZZ_REPLAY", root().join(name))
            .output();
        match out {
            Ok(o) if o.status.success() => {
                println!("known failure {name}: now passes; move it to tests/fuzz/corpus/")
            }
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stderr).to_string()
                    + &String::from_utf8_lossy(&o.stdout);
                let why = text
                    .lines()
                    .find(|l| l.contains("overflowed") || l.contains("fuzz replay:"))
                    .unwrap_or("failed");
                println!("known failure {name}: still fails ({}): {why}", o.status);
            }
            Err(e) => println!("known failure {name}: cannot run the child: {e}"),
        }
    }
}

/// The child of `fuzz_known_failures_reported`: runs the input named by
/// `CUPREEMPT_FUZZ_REPLAY`, if any, and fails if it fails. Without the variable it does nothing;
/// with it, it also replays any input by hand.
#[test]
fn replay_one_input() {
    let Some(path) = std::env::var_os("CUPREEMPT_FUZZ_REPLAY") else {
        return;
    };
    install_panic_hook();
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("fuzz replay: {e}"));
    for line_directives in [false, true] {
        if let Err(f) = execute(bytes.clone(), line_directives, None) {
            panic!(
                "fuzz replay: {} (line directives {line_directives}): {}",
                f.signature, f.message
            );
        }
    }
}
