//! `cupreempt transform`

use super::render::render;
use super::tally::Tally;
use super::{files, stderr_color, SelectArgs};
use clap::Args;
use cupreempt::program::{self, KnownHelper, KnownKernel};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TransformArgs {
    /// Files, or folders to search for .cu/.cuh files and for headers (.h, .hpp, .hxx, .inl...)
    /// whose code defines or launches a kernel; `-`: standard input (one input; the
    /// output goes to standard output or `-o`).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output file (one input only); `-` or nothing: standard output.
    #[arg(short = 'o', long, conflicts_with_all = ["out_dir", "in_place"])]
    output: Option<PathBuf>,
    /// Write each output under this folder, mirroring the inputs' layout.
    #[arg(long, conflicts_with = "in_place")]
    out_dir: Option<PathBuf>,
    /// Replace each input, keeping the original as FILE.orig. Writes `#line N` directives (no
    /// file name), so that the file, compiled as the original was, keeps its line numbers and
    /// `__FILE__` in `assert`, `__LINE__` and compiler messages.
    #[arg(long)]
    in_place: bool,
    /// With --in-place: no `#line` directives.
    #[arg(long, conflicts_with = "line_directives")]
    no_line_directives: bool,
    /// Write outputs even when some kernels were refused or a file has syntax errors.
    #[arg(long)]
    keep_going: bool,
    #[command(flatten)]
    select: SelectArgs,
}

/// What a run did, for its last line.
#[derive(Default)]
struct Summary {
    written: usize,
    unchanged: usize,
    skipped: usize,
    found: Tally,
}

impl Summary {
    fn line(&self) -> String {
        let f = &self.found;
        format!(
            "cupreempt: {} files written, {} unchanged, {} skipped; {} kernels transformed, {} refused{}; {} warnings",
            self.written,
            self.unchanged,
            self.skipped,
            f.transformed,
            f.refused,
            f.by_code(),
            f.warnings
        )
    }
}

pub fn run(a: TransformArgs) -> anyhow::Result<ExitCode> {
    let mut opts = a.select.options()?;
    if a.in_place && !a.no_line_directives {
        opts.line_directives = true;
        opts.line_directives_keep_name = true;
    }
    let inputs = files::inputs(&a.inputs, a.out_dir.as_deref())?;
    let opts = one_program(opts, &inputs);
    let to_stdout = a.out_dir.is_none()
        && !a.in_place
        && a.output.as_deref().is_none_or(|o| o.as_os_str() == "-");
    if inputs.iter().any(|(p, _)| files::is_stdin(p)) && (a.in_place || a.out_dir.is_some()) {
        anyhow::bail!("standard input (`-`) has no file to replace or mirror: use -o FILE or no output option (standard output)");
    }
    if inputs.len() != 1 && (to_stdout || a.output.is_some()) {
        anyhow::bail!("{} input files: use --out-dir or --in-place", inputs.len());
    }
    if let Some(out) = a.output.as_deref().filter(|o| o.as_os_str() != "-") {
        if inputs.iter().any(|(p, _)| files::same_file(p, out)) {
            anyhow::bail!(
                "-o {} names the input itself: it would be overwritten with no backup (use --in-place, which keeps FILE.orig)",
                out.display()
            );
        }
    }
    if let Some(dir) = &a.out_dir {
        // Two inputs that land on one output would overwrite each other: refuse before
        // writing anything.
        let mut targets: BTreeMap<PathBuf, &PathBuf> = BTreeMap::new();
        for (path, root) in &inputs {
            let target = dir.join(path.strip_prefix(root).unwrap_or(path));
            if let Some(first) = targets.insert(target.clone(), path) {
                anyhow::bail!(
                    "{} and {} would both be written to {}: nothing written (give their common folder as the input, so that --out-dir keeps their layout)",
                    first.display(),
                    path.display(),
                    target.display()
                );
            }
        }
    }
    // Each file is read, transformed and written on its own: a file with errors is skipped
    // (unless --keep-going) and the others are still written.
    let mut sum = Summary::default();
    let mut kernels = BTreeSet::new();
    let color = stderr_color();
    let known = known_kernels(&inputs, &opts, a.select.include_dirs());
    let (support, mut done) = support_first(&inputs, &known, &opts);
    for (path, root) in &inputs {
        let include_support = support.contains(path);
        let opts = &cupreempt::Options {
            include_support,
            ..known.get(path).cloned().unwrap_or_default().options(&opts)
        };
        let name = files::display_name(path);
        // A file that is not UTF-8 is transformed with stand-ins for its odd bytes, which go
        // back into the output (`files::Foreign`).
        let (src, foreign) = match files::read(path)? {
            files::Source::Text(src) => (src, None),
            files::Source::Foreign(f) => (f.text.clone(), Some(f)),
            files::Source::Skipped(d, shown) => {
                eprint!("{}", render(std::slice::from_ref(&d), &name, &shown, color));
                sum.skipped += 1;
                *sum.found.codes.entry(d.code.id()).or_default() += 1;
                continue;
            }
        };
        // An included input `support_first` transformed as this loop would: its result.
        let earlier = (foreign.is_none() && !include_support)
            .then(|| done.remove(path))
            .flatten();
        let mut t = earlier.unwrap_or_else(|| cupreempt::transform(&src, &name, opts));
        if let Some(note) = files::includes_not_found(&src, path, a.select.include_dirs(), &t) {
            t.diagnostics.push(note);
        }
        eprint!("{}", render(&t.diagnostics, &name, &src, color));
        kernels.extend(t.kernels.iter().map(|k| k.name.clone()));
        sum.found.add(&t);
        // A syntax error outside kernels (CP100) is a warning: its region is copied as it is
        // and launches in it stay plain (CP101), so the output is as correct as the input.
        // Refused kernels keep the file from being written unless --keep-going.
        if t.diagnostics.iter().any(|d| d.is_refusal()) && !a.keep_going {
            eprintln!(
                "cupreempt: {name} not written because of the errors above (--keep-going writes it anyway)"
            );
            sum.skipped += 1;
            continue;
        }
        let bytes: std::borrow::Cow<[u8]> = match &foreign {
            None => t.output.as_bytes().into(),
            Some(f) => match f.restore_or_report(&t.output) {
                Ok(b) => b.into(),
                Err(d) => {
                    eprint!("{}", render(std::slice::from_ref(&d), &name, &src, color));
                    sum.skipped += 1;
                    *sum.found.codes.entry(d.code.id()).or_default() += 1;
                    continue;
                }
            },
        };
        let target = if to_stdout {
            use anyhow::Context;
            use std::io::Write;
            std::io::stdout()
                .write_all(&bytes)
                .context("cannot write standard output")?;
            sum.written += 1;
            continue;
        } else if a.in_place {
            if t.output == src {
                sum.unchanged += 1;
                continue;
            }
            let backup = files::backup_path(path);
            std::fs::copy(path, &backup)?;
            eprintln!(
                "cupreempt: {} (original kept as {})",
                path.display(),
                backup.display()
            );
            path.clone()
        } else if let Some(dir) = &a.out_dir {
            let rel = path.strip_prefix(root).unwrap_or(path);
            dir.join(rel)
        } else {
            a.output.clone().unwrap_or_default()
        };
        files::write_bytes_atomically(&target, &bytes)?;
        sum.written += 1;
        eprintln!(
            "cupreempt: wrote {} ({} of {} kernels transformed)",
            target.display(),
            t.transformed_count(),
            t.kernels.len()
        );
    }
    for w in super::unmatched_selection(&opts, &kernels) {
        eprintln!("cupreempt: {w}");
        sum.found.warnings += 1;
    }
    eprintln!("{}", sum.line());
    Ok(if sum.skipped > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The inputs that include another input whose output includes cupreempt's header, a file
/// that already includes it (`Known::includes_transformed`), or a file that defines a kernel
/// (whose output will): they include it first (`Options::include_support`; an output that includes it anyway is not
/// changed), as the launcher's sources do, so that the header and the standard headers it
/// brings meet none of the program's macros (HeCBench's sw4ck defines `base` and `u`, then
/// includes the files that hold its kernels). To see, the included inputs are transformed
/// here, with the options `run` gives them unless they include it first themselves: those
/// results come back for `run` to use.
fn support_first(
    inputs: &[(PathBuf, PathBuf)],
    known: &BTreeMap<PathBuf, Known>,
    opts: &cupreempt::Options,
) -> (BTreeSet<PathBuf>, BTreeMap<PathBuf, cupreempt::Transformed>) {
    let mut done: BTreeMap<PathBuf, Option<cupreempt::Transformed>> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (path, _) in inputs {
        let Some(k) = known.get(path) else { continue };
        // A file it includes that defines a kernel includes the header once a run transforms
        // it (a later one, folder by folder, where this run knows the kernel as untouched):
        // from inside a `namespace N { #include ... }` of this file, unless this file has
        // included it first (xmrig-cuda's RandomX variants include their kernels' headers so).
        let included_support = k.includes_transformed
            || !k.kernels.is_empty()
            || k.included_inputs.iter().any(|q| {
                done.entry(q.clone())
                    .or_insert_with(|| {
                        let opts = known.get(q).cloned().unwrap_or_default().options(opts);
                        let src = std::fs::read(q).ok().and_then(files::text_of)?;
                        Some(cupreempt::transform(&src, &files::display_name(q), &opts))
                    })
                    .as_ref()
                    .is_some_and(cupreempt::Transformed::includes_support)
            });
        if included_support {
            out.insert(path.clone());
        }
    }
    let done = done
        .into_iter()
        .filter(|(p, _)| !out.contains(p))
        .filter_map(|(p, t)| Some((p, t?)))
        .collect();
    (out, done)
}

/// `opts` for `inputs` as one program: with several files, a helper of one that reads
/// blockIdx/gridDim gets its task-context form, for the kernels of the others
/// (`known_kernels`).
pub(super) fn one_program(
    opts: cupreempt::Options,
    inputs: &[(PathBuf, PathBuf)],
) -> cupreempt::Options {
    cupreempt::Options {
        helpers_for_other_files: inputs.len() > 1,
        ..opts
    }
}

/// For each input, the kernels and helpers defined in the other inputs that it includes
/// (directly or through other files): its launches of those kernels are rewritten too, since
/// the included file is transformed alongside it (`--out-dir` keeps the layout, `--in-place`
/// the paths), and its kernels that call such helpers pass the task context to those that take
/// it (`KnownHelper`). Included files that are not inputs are read, never written: a kernel
/// that calls one of their helpers that reads blockIdx/gridDim is refused (CP008), and one
/// that synchronizes is a barrier; a kernel they define is known by name only, so that a launch
/// of one says which file to transform too; a kernel they only declare is launched through
/// weak wrappers declared in the launching file (`rewrite::declared`).
pub(super) fn known_kernels(
    inputs: &[(PathBuf, PathBuf)],
    opts: &cupreempt::Options,
    search: &[PathBuf],
) -> BTreeMap<PathBuf, Known> {
    let mut out = BTreeMap::new();
    let texts: Vec<(&PathBuf, String)> = inputs
        .iter()
        .filter(|(p, _)| !files::is_stdin(p))
        .filter_map(|(p, _)| Some((p, files::text_of(std::fs::read(p).ok()?)?)))
        .collect();
    let canonical: Vec<(PathBuf, String)> = texts
        .iter()
        .map(|(p, s)| (p.canonicalize().unwrap_or_else(|_| (*p).clone()), s.clone()))
        .collect();
    let resolver = program::IncludeResolver::new(search);
    let closure = |p: &Path, s: &str| resolver.closure(p, s, &|_| true);
    let mut graph: program::IncludeGraph = canonical
        .iter()
        .map(|(p, s)| (p.clone(), closure(p, s)))
        .collect();
    let mut outside: BTreeMap<PathBuf, String> = BTreeMap::new();
    for f in graph.included() {
        if !graph.contains(f) && !outside.contains_key(f) {
            if let Some(t) = std::fs::read(f).ok().and_then(files::text_of) {
                outside.insert(f.clone(), t);
            }
        }
    }
    let memo = program::MacroMemo::default();
    let mut defines = program::defines_of(&canonical, &outside, &graph, opts, &memo);
    // What each input's included files define as macros (texts by path: a folder of a
    // thousand inputs asks for each of their closures' files).
    let input_texts: BTreeMap<&Path, &String> =
        canonical.iter().map(|(c, t)| (c.as_path(), t)).collect();
    let text_of = |p: &Path| {
        input_texts
            .get(p)
            .map(|t| (*t).clone())
            .or_else(|| outside.get(p).cloned())
    };
    let macros: Vec<program::IncludedMacros> = canonical
        .iter()
        .map(|(c, _)| memo.macros_in_context(&graph, c, &text_of))
        .collect();
    if !outside.is_empty() {
        let outside: Vec<(PathBuf, String)> = outside.into_iter().collect();
        for (p, s) in &outside {
            graph.insert(p.clone(), closure(p, s));
        }
        let o = cupreempt::Options {
            helpers_for_other_files: false,
            ..opts.clone()
        };
        let inputs: BTreeMap<PathBuf, String> = canonical.iter().cloned().collect();
        for (p, (kernels, helpers)) in program::defines_of(&outside, &inputs, &graph, &o, &memo) {
            let helpers = helpers
                .into_iter()
                .map(|h| KnownHelper {
                    with_ctx: false,
                    live_copy: None,
                    ..h
                })
                .collect();
            // A kernel such a file only declares (a header of prototypes, its definition in
            // another translation unit) is launched through weak wrappers, as one declared in
            // the launching file is: they link where the defining file was transformed.
            let kernels = kernels
                .into_iter()
                .map(|k| match k.declaration {
                    Some(_) => k,
                    None => KnownKernel {
                        transformed: false,
                        untransformed_file: Some(p.display().to_string()),
                        ..k
                    },
                })
                .collect();
            defines.entry(p).or_insert((kernels, helpers));
        }
    }
    // Each input's path as given, by its canonical path.
    let given: std::collections::HashMap<&PathBuf, &PathBuf> = canonical
        .iter()
        .zip(&texts)
        .map(|((c, _), (p, _))| (c, *p))
        .collect();
    // Whether a file that is no input already includes cupreempt's header: each read once,
    // however many inputs include it.
    let mut transformed_on_disk: std::collections::HashMap<PathBuf, bool> = Default::default();
    let index = program::KnownIndex::new(&defines, &graph);
    for (((p, _), (c, _)), macros) in texts.iter().zip(&canonical).zip(macros) {
        let (kernels, helpers) = index.known_from(c);
        let namesakes = program::namesake_ordinals(&defines, c);
        let included_inputs: Vec<PathBuf> = graph
            .closure(c)
            .filter_map(|d| given.get(d))
            .filter(|q| **q != *p)
            .map(|q| (*q).clone())
            .collect();
        let includes_transformed = graph
            .closure(c)
            .filter(|d| *d != c && !given.contains_key(d))
            .any(|d| {
                *transformed_on_disk.entry(d.clone()).or_insert_with(|| {
                    std::fs::read(d)
                        .ok()
                        .and_then(files::text_of)
                        .is_some_and(|t| t.contains(cupreempt::vocab::INCLUDE.trim_end()))
                })
            });
        if !kernels.is_empty()
            || !helpers.is_empty()
            || !macros.definitions.is_empty()
            || !macros.functions.parameters.is_empty()
            || !namesakes.is_empty()
            || !included_inputs.is_empty()
            || includes_transformed
        {
            out.insert(
                (*p).clone(),
                Known {
                    kernels,
                    helpers,
                    macros,
                    namesakes,
                    included_inputs,
                    includes_transformed,
                },
            );
        }
    }
    out
}

/// What one input knows of the files it includes (`known_kernels`).
#[derive(Default, Clone)]
pub(super) struct Known {
    pub kernels: Vec<KnownKernel>,
    pub helpers: Vec<KnownHelper>,
    pub macros: program::IncludedMacros,
    pub namesakes: BTreeMap<String, usize>,
    /// The other inputs it includes, directly or through other files (as given).
    pub included_inputs: Vec<PathBuf>,
    /// A file it includes that is no input already includes cupreempt's header (transformed
    /// by an earlier run, as a folder at a time is): the input includes it first too
    /// (`support_first`), since it may include that file where the standard headers cannot
    /// go (inside a namespace, as a miner's per-coin units include their shared headers).
    pub includes_transformed: bool,
}

impl Known {
    /// `opts` with what the input knows.
    pub fn options(self, opts: &cupreempt::Options) -> cupreempt::Options {
        cupreempt::Options {
            known_kernels: self.kernels,
            known_helpers: self.helpers,
            known_macros: self.macros,
            namesakes: self.namesakes,
            ..opts.clone()
        }
    }
}
