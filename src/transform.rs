//! The pipeline: parse → analyse → rewrite → emit, then a check that the output parses no worse
//! than the input when asked (`Options::verify`).

use crate::analysis::{self, SyncMode};
use crate::diagnostics::{Code, Diagnostic, KernelId};
use crate::edit::{self, Edit, LineMap};
use crate::options::Options;
use crate::parse;
use crate::program::{KnownHelper, KnownKernel};
use serde::Serialize;
use tree_sitter::Tree;

#[derive(Debug, Clone, Serialize)]
pub struct KernelReport {
    #[serde(skip)]
    pub id: KernelId,
    pub name: String,
    /// 1-based line of the kernel's name.
    pub line: usize,
    pub transformed: bool,
    pub mode: Option<SyncMode>,
    /// Compiled-in chunk (0: adaptive) and budget (0: default 20 us).
    pub chunk: u32,
    pub budget_ns: u32,
    /// The task loop keeps its state in dynamic shared memory, which the launches add
    /// (`KernelPlan::loop_state_dynamic`); in JSON only where true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub loop_state_dynamic: bool,
    /// Each instance of the template chooses where the loop keeps its state
    /// (`KernelPlan::loop_state_per_instance`); in JSON only where true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub loop_state_per_instance: bool,
    /// Codes of the diagnostics about this kernel (ids in JSON).
    #[serde(serialize_with = "crate::diagnostics::code_ids")]
    pub codes: Vec<Code>,
    /// The kernel's definition in the input.
    #[serde(skip)]
    pub source_range: Option<std::ops::Range<usize>>,
    /// The definition plus everything generated after it, in the output (without #line).
    #[serde(skip)]
    pub output_range: Option<std::ops::Range<usize>>,
}

impl KernelReport {
    /// Whether `d` concerns this kernel: it is tagged with this kernel, or it is about a launch
    /// left alone that names it (a launch names its kernel by name only, so it concerns every
    /// kernel of that name).
    pub fn is_about(&self, d: &Diagnostic) -> bool {
        d.kernel
            .as_ref()
            .is_some_and(|t| t.id == self.id || (d.code == Code::LaunchLeft && t.name == self.name))
    }
}

/// The codes of a kernel's diagnostics, first occurrence first: those labelled inside its
/// definition (a refusal found in a helper it calls is labelled first at the kernel's call, so
/// it counts for the kernel) and its launches left alone.
fn codes(k: &KernelReport, diagnostics: &[Diagnostic]) -> Vec<Code> {
    let def = k.source_range.clone().unwrap_or_default();
    let mut out = Vec::new();
    for d in diagnostics.iter().filter(|d| k.is_about(d)) {
        let at = d.labels.first().map_or(0, |l| l.start);
        if (d.code == Code::LaunchLeft || def.contains(&at)) && !out.contains(&d.code) {
            out.push(d.code);
        }
    }
    out
}

#[derive(Debug)]
pub struct Transformed {
    pub output: String,
    pub diagnostics: Vec<Diagnostic>,
    pub kernels: Vec<KernelReport>,
    /// The kernels this file defines, as files that include it need to know them.
    pub defines: Vec<KnownKernel>,
    /// Its helpers that callers in files including it cannot see into (`KnownHelper`).
    pub helpers: Vec<KnownHelper>,
}

impl Transformed {
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.is_refusal() || d.code == Code::ParseError)
    }
    pub fn transformed_count(&self) -> usize {
        self.kernels.iter().filter(|k| k.transformed).count()
    }
    /// Whether the output includes cupreempt's header (a file that includes this one then
    /// includes it first too: `Options::include_support`).
    pub fn includes_support(&self) -> bool {
        self.output.contains(crate::vocab::INCLUDE.trim_end())
    }
}

/// The deepest nesting of syntax nodes that the analysis takes on. Its walks over kernel and
/// helper bodies follow the tree's shape; deeper files are left as they are (CP011).
pub const MAX_DEPTH: usize = 20_000;

/// The call stack the pipeline runs on. The walks of the analysis recurse once or a few times
/// per level of nesting; this is room for `MAX_DEPTH` levels with unoptimised frames. Only the
/// pages a run touches are ever committed.
const STACK_BYTES: usize = 1 << 30;

/// Transforms one file. It never fails: what it cannot do is a diagnostic, and a file it
/// cannot rewrite at all keeps its text (`output` is `src`).
pub fn transform(src: &str, file_name: &str, opts: &Options) -> Transformed {
    std::thread::scope(|s| {
        match std::thread::Builder::new()
            .name("cupreempt-transform".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(s, || transform_here(src, file_name, opts))
        {
            Ok(h) => h
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // No thread to be had: run here, still guarded by MAX_DEPTH.
            Err(_) => transform_here(src, file_name, opts),
        }
    })
}

/// `opts` with its command line's `-D NAME=VALUE` read as definitions after the included
/// files' (an included file's definition of the same name is kept: the compiler would warn of
/// the redefinition and take the file's); None where every one is known already.
fn with_command_line_values(opts: &Options) -> Option<Options> {
    let mut out: Option<Options> = None;
    for (name, value) in &opts.defined_values {
        let known = &out.as_ref().unwrap_or(opts).known_macros.definitions;
        if !known.iter().any(|(n, _)| n == name) {
            let o = out.get_or_insert_with(|| opts.clone());
            o.known_macros
                .definitions
                .push((name.clone(), value.clone()));
        }
    }
    out
}

/// A note when `src` is the output of an earlier run: it includes `cupreempt.cuh`, or it holds
/// the wrappers a run generates (`NAME__cupreempt_body`). Such a file is left as it is, so
/// that running again (`--in-place` twice) changes nothing; transforming it again would wrap the
/// wrappers.
/// Mentions in comments do not count (`// calls k__cupreempt_body`, a commented-out include).
fn already_transformed(src: &str) -> Option<Diagnostic> {
    let include = crate::vocab::INCLUDE.trim_end();
    // The first use of `text` in code: its line up to it, comments blanked, still holds it (a
    // block comment opened on an earlier line is not seen).
    let in_code = |text: &str| {
        src.match_indices(text).map(|(at, _)| at).find(|&at| {
            let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
            crate::lang::without_comments(&src[line_start..at + text.len()]).contains(text)
        })
    };
    let marker = "__cupreempt_body";
    let (at, len, what) = match in_code(include) {
        Some(at) => (at, include.len(), "it includes cupreempt.cuh"),
        None => (
            in_code(marker)?,
            marker.len(),
            "it holds cupreempt's generated wrappers",
        ),
    };
    Some(
        Diagnostic::new(
            Code::AlreadyTransformed,
            format!("already transformed ({what}): left as it is"),
        )
        .label(at..at + len, "output of an earlier run")
        .help(
            "to transform it differently, transform the original file (FILE.orig after --in-place)",
        ),
    )
}

/// CP013 when `output` (the result of `edits` on `src`, whose tree is `tree`) parses worse than
/// `src`, counted after every transform. `growth`: the prefix sums of the edits' length changes.
fn parses_worse_than_input(
    tree: &Tree,
    output: &str,
    edits: &[Edit],
    growth: &[isize],
    included_macros: &[(String, String)],
) -> Option<Diagnostic> {
    if edits.is_empty() {
        return None;
    }
    let before = parse::error_ranges(tree.root_node()).len();
    // A parse from scratch: an incremental one must be told every edit, and each such
    // notice walks the tree, which made it cost three parses on a file of 5,000 lines.
    let after = parse::error_ranges(parse::parse_with(output, included_macros).tree.root_node());
    parses_worse(before, &after, edits, growth)
}

/// CP013 when the output has more syntax errors (`after`, ranges in the output) than the
/// input had (`before`): the output is not used. The label is the input range of the last edit
/// that starts at or before the output's first error (`growth`: the prefix sums of the edits'
/// length changes, so edit `i` starts at `edits[i].start + growth[i]` in the output).
fn parses_worse(
    before: usize,
    after: &[std::ops::Range<usize>],
    edits: &[Edit],
    growth: &[isize],
) -> Option<Diagnostic> {
    if after.len() <= before {
        return None;
    }
    let first = after.iter().map(|r| r.start).min().unwrap_or(0);
    let near = edits
        .iter()
        .enumerate()
        .filter(|(i, e)| (e.start as isize + growth[*i]) as usize <= first)
        .map(|(_, e)| e)
        .next_back()
        .or(edits.first());
    let mut d = Diagnostic::new(
        Code::WorseOutput,
        format!(
            "internal error: the transformed file would have {} syntax errors where the input has {before}; the file is left as it is",
            after.len()
        ),
    )
    .help(REPORT_HELP);
    if let Some(e) = near {
        d = d.label(e.start..e.end, "the output goes wrong after this edit");
    }
    Some(d)
}

/// The deepest level of the tree under `root` (the root is level 1), found without recursion.
pub fn depth(root: tree_sitter::Node) -> (usize, usize) {
    let mut c = root.walk();
    let (mut level, mut deepest, mut at) = (1, 1, root.start_byte());
    loop {
        if c.goto_first_child() {
            level += 1;
            if level > deepest {
                deepest = level;
                at = c.node().start_byte();
            }
            continue;
        }
        loop {
            if c.goto_next_sibling() {
                break;
            }
            if !c.goto_parent() {
                return (deepest, at);
            }
            level -= 1;
        }
    }
}

fn transform_here(src: &str, file_name: &str, opts: &Options) -> Transformed {
    let with_values = with_command_line_values(opts);
    let opts = with_values.as_ref().unwrap_or(opts);
    let first = transform_once(src, file_name, opts);
    let Some((retry, note)) = unconfigured_retry(src, opts, &first) else {
        return first;
    };
    let second = transform_once(src, file_name, &retry);
    if second.transformed_count() <= first.transformed_count() {
        return first;
    }
    // What files that include this one learn of its helpers stays as the first reading has
    // it: their kernels' wrappers are not guarded by this file's assumption.
    let mut out = Transformed {
        helpers: first.helpers,
        ..second
    };
    out.diagnostics.push(note);
    out
}

/// The blamed macros' names, and those of the included files' macros that their definitions
/// reach by name (and theirs) where one of their own definitions calls the blamed macro's
/// reader: `BLOCK_SYNC()` expands to `__syncthreads()`, which a configuration redefines to call
/// the reader, so both are judged. A reached macro that calls no reader is read as written
/// (CUTLASS's logging `__syncthreads()` names `cutlass`, a macro defined only under
/// `CUTLASS_NAMESPACE`).
fn blamed_with_reached<'a>(
    blamed_by: &[&'a crate::diagnostics::BlamedMacro],
    definitions: &'a [(String, String)],
) -> std::collections::BTreeSet<&'a str> {
    // Each macro's definitions, looked up once per word below (a file may define thousands).
    let mut texts: std::collections::HashMap<&str, Vec<&str>> = std::collections::HashMap::new();
    for (name, text) in definitions {
        texts.entry(name.as_str()).or_default().push(text.as_str());
    }
    let mut blamed: std::collections::BTreeSet<&str> =
        blamed_by.iter().map(|b| b.name.as_str()).collect();
    for b in blamed_by {
        let reader = b.reader.rsplit("::").next().unwrap_or(&b.reader);
        let mut seen: std::collections::BTreeSet<&str> = [b.name.as_str()].into();
        let mut todo: Vec<&str> = vec![b.name.as_str()];
        while let Some(m) = todo.pop() {
            for text in texts.get(m).into_iter().flatten() {
                for word in crate::lang::identifiers(text) {
                    let Some((&name, reached)) = texts.get_key_value(word) else {
                        continue;
                    };
                    if seen.insert(name) {
                        todo.push(name);
                        if reached
                            .iter()
                            .any(|t| crate::lang::identifiers(t).any(|w| w == reader))
                        {
                            blamed.insert(name);
                        }
                    }
                }
            }
        }
    }
    blamed
}

/// Kernels refused because a macro of an included file calls a helper that reads
/// blockIdx/gridDim (CP008), where definitions of that macro are in effect only where a
/// configuration macro is defined that no file here defines and no `-D` gives (CUTLASS's
/// synclog redefines `__syncthreads` to log each barrier, block index included, only under
/// `CUTLASS_ENABLE_SYNCLOG`; every kernel that included it and synchronized was refused): the
/// options to judge the file again without those definitions, that configuration macro taken
/// as undefined, and the note that says so (CP203). The rewrite compiles every wrapper only
/// where the configuration macros stay undefined (`rewrite::kernel`), so a build that does
/// define one runs the kernels as written: nothing rests on the guess. Names that begin with
/// `_` are the compiler's and the platform's, never taken as undefined. None where no refusal
/// is of that kind.
fn unconfigured_retry(
    src: &str,
    opts: &Options,
    first: &Transformed,
) -> Option<(Options, Diagnostic)> {
    let blamed_by: Vec<&crate::diagnostics::BlamedMacro> = first
        .diagnostics
        .iter()
        .filter_map(|d| d.blamed_macro.as_deref())
        .collect();
    if blamed_by.is_empty() {
        return None;
    }
    let normalized = parse::without_carriage_returns(src);
    let own_defines = parse::defines(&normalized);
    let own: std::collections::BTreeSet<&str> = own_defines.iter().map(|d| d.name).collect();
    let known = &opts.known_macros;
    let blamed = blamed_with_reached(&blamed_by, &known.definitions);
    // Every name that some file or the command line defines, gathered once.
    let defined: std::collections::BTreeSet<&str> = own
        .iter()
        .copied()
        .chain(opts.defined_macros.iter().map(String::as_str))
        .chain(known.definitions.iter().map(|(n, _)| n.as_str()))
        .collect();
    let unconfigured = |name: &str| !name.starts_with('_') && !defined.contains(name);
    let mut dropped: Vec<String> = Vec::new();
    let mut assumed: std::collections::BTreeSet<String> = Default::default();
    for &m in &blamed {
        // The file's own definition is read as written.
        if own.contains(m) {
            continue;
        }
        let Some(each) = known.requirements_of(m) else {
            continue;
        };
        // The definitions in effect only under an unconfigured macro go; the others (an
        // `#else` branch's plain `__syncthreads()`) stay.
        let configs: Vec<&String> = each
            .iter()
            .filter_map(|requires| requires.iter().find(|x| unconfigured(x)))
            .collect();
        if !configs.is_empty() {
            dropped.push(m.to_string());
            assumed.extend(configs.into_iter().cloned());
        }
    }
    if dropped.is_empty() {
        return None;
    }
    let mut o = opts.clone();
    let undefined: Vec<String> = assumed.iter().cloned().collect();
    o.known_macros = known.without(&dropped, &undefined);
    for a in &assumed {
        if !o.assumed_undefined.contains(a) {
            o.assumed_undefined.push(a.clone());
        }
    }
    let quoted = |names: &mut dyn Iterator<Item = &String>| {
        names
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Where the file first uses one of those macros, in a kernel or in a helper it reaches.
    let first_use = first
        .diagnostics
        .iter()
        .filter_map(|d| d.blamed_macro.as_deref())
        .filter(|b| dropped.contains(&b.name))
        .map(|b| b.used.clone())
        .min_by_key(|r| r.start);
    let note = Diagnostic::new(
        Code::UnconfiguredMacro,
        format!(
            "{} {} {} defined only where {} {}, which no file here defines and no -D gives: \
             the kernels are judged without {}, and their wrappers are compiled only where {} \
             {} undefined",
            if dropped.len() > 1 { "macros" } else { "macro" },
            quoted(&mut dropped.iter()),
            if dropped.len() > 1 { "are" } else { "is" },
            quoted(&mut assumed.iter()),
            if assumed.len() > 1 { "are" } else { "is" },
            if dropped.len() > 1 { "them" } else { "it" },
            quoted(&mut assumed.iter()),
            if assumed.len() > 1 { "stay" } else { "stays" },
        ),
    )
    .help({
        let options = assumed
            .iter()
            .map(|a| format!("-D {a}"))
            .collect::<Vec<_>>()
            .join(" ");
        if assumed.len() > 1 {
            format!(
                "a build that defines any of them runs these kernels as written; pass the same \
                 -D options to cupreempt to judge the kernels with those definitions ({options})"
            )
        } else {
            format!(
                "a build that defines it runs these kernels as written; pass the same -D to \
                 cupreempt to judge them with it ({options})"
            )
        }
    });
    let note = match first_use {
        Some(r) => note.label(r, "judged without that definition"),
        None => note,
    };
    Some((o, note))
}

/// `src` as it is, with one diagnostic that says why.
fn left_as_written(src: &str, why: Diagnostic) -> Transformed {
    Transformed {
        output: src.to_string(),
        diagnostics: vec![why],
        kernels: Vec::new(),
        defines: Vec::new(),
        helpers: Vec::new(),
    }
}

/// CP013 for two edits that touch the same bytes: a fault of the rewriter, not of the input.
/// The file is left as it is, and the run goes on with the next.
fn overlapping_edits(e: &edit::OverlapError, src: &str) -> Diagnostic {
    // An insertion's empty range labelled as the character after it, within the input.
    let span = |(start, end): (usize, usize)| {
        let start = start.min(src.len().saturating_sub(1));
        start..end.max(start + 1).min(src.len())
    };
    Diagnostic::new(Code::WorseOutput, format!("{e}; the file is left as it is"))
        .label(span(e.first), "one change here")
        .label(span(e.second), "and another over the same bytes")
        .help(REPORT_HELP)
}

const REPORT_HELP: &str = "please report this file to cupreempt's authors; `--exclude` the kernel near the label to transform the others";

fn transform_once(src: &str, file_name: &str, opts: &Options) -> Transformed {
    if let Some(d) = already_transformed(src) {
        return left_as_written(src, d);
    }
    // The analysis and the rewrite read the file with `\n` line ends (same offsets); the edits
    // apply to the file as written.
    let written = src;
    let normalized = parse::without_carriage_returns(written);
    let src: &str = &normalized;
    let parsed = parse::parse_with(src, &opts.known_macros.definitions);
    let root = parsed.tree.root_node();
    let (deepest, at) = depth(root);
    if deepest > MAX_DEPTH {
        let d = Diagnostic::new(
            Code::TooDeep,
            format!(
                "the file nests {deepest} levels deep (more than {MAX_DEPTH}); it is left as it is"
            ),
        )
        .label(at..at + 1, "the deepest point")
        .help("split the deepest construct into functions");
        return left_as_written(written, d);
    }
    let analysis = analysis::analyze(&parsed, src, opts);
    let rewrite = match crate::rewrite::rewrite(&analysis, src, opts) {
        Ok(r) => r,
        Err(e) => return left_as_written(written, overlapping_edits(&e, written)),
    };
    let mut edits = rewrite.edits;
    // Generated text takes the file's line ends, so that the output never mixes them. What
    // it copies from the `\r\n` file's view carries the view's blank for each `\r`: the
    // blank goes (a blank before a line end means nothing to the compiler).
    let eol = edit::line_end(written);
    if eol != "\n" {
        for e in &mut edits {
            e.text = edit::with_line_end(&e.text.replace(" \n", "\n"), eol);
        }
    }
    // Stable: same-offset insertions keep their order.
    edits.sort_by_key(|e| (e.start, e.end));
    let lines = opts.line_directives.then_some(LineMap {
        file_name: (!opts.line_directives_keep_name).then_some(file_name),
    });
    let output = match edit::apply(written, &edits, lines.as_ref()) {
        Ok(o) => o,
        Err(e) => return left_as_written(written, overlapping_edits(&e, written)),
    };
    // Where an input offset lands in the output: the edits are sorted and do not overlap, so
    // a prefix sum of their length changes answers it with a binary search.
    let mut growth = Vec::with_capacity(edits.len() + 1);
    growth.push(0isize);
    for e in &edits {
        growth.push(growth[growth.len() - 1] + e.text.len() as isize - (e.end - e.start) as isize);
    }
    let shift = |at: usize, inclusive: bool| -> usize {
        let n = edits.partition_point(|e| {
            if inclusive {
                e.start <= at
            } else {
                e.start < at
            }
        });
        (at as isize + growth[n]) as usize
    };

    // An output that parses worse than its input is never handed out, whatever the options.
    if let Some(d) = parses_worse_than_input(
        &parsed.tree,
        &output,
        &edits,
        &growth,
        &opts.known_macros.definitions,
    ) {
        return left_as_written(written, d);
    }

    // Kernels it defines, and those it only declares (a file including it can launch them
    // through their weak wrapper declarations, `rewrite/declared.rs`).
    let defines = analysis
        .kernels
        .iter()
        .filter(|k| k.launched_by_name())
        .map(KnownKernel::of)
        .chain(
            analysis
                .declared_kernels
                .iter()
                .map(|d| KnownKernel::declared(d, src)),
        )
        .collect();
    let mut helpers = KnownHelper::of_all(&analysis.helpers);
    helpers.extend(
        analysis
            .unread_helpers
            .iter()
            .map(|u| KnownHelper::unread(&u.name)),
    );
    let mut diagnostics = analysis.diagnostics;
    diagnostics.extend(rewrite.diagnostics);
    diagnostics.sort_by_key(|d| d.labels.first().map_or(0, |l| l.start));
    let lines = crate::lang::LineStarts::new(src);
    let mut kernels = analysis
        .kernels
        .iter()
        .map(|k| KernelReport {
            id: k.id,
            name: k.site.name.clone(),
            line: lines.line(k.site.name_node.start_byte()),
            transformed: k.transformed(),
            mode: k.mode,
            chunk: k.chunk,
            budget_ns: k.budget_ns,
            loop_state_dynamic: k.transformed() && k.loop_state_dynamic,
            loop_state_per_instance: k.transformed() && k.loop_state_per_instance.is_some(),
            codes: Vec::new(),
            source_range: Some(k.site.outer.byte_range()),
            output_range: (!opts.line_directives).then(|| {
                shift(k.site.outer.start_byte(), false)..shift(k.site.outer.end_byte(), true)
            }),
        })
        .collect::<Vec<_>>();
    // Kernels a syntax error hides: left as they are, refused (CP001).
    kernels.extend(analysis.lost_kernels.iter().map(|(id, k)| KernelReport {
        id: *id,
        name: k.name.clone(),
        line: src[..k.at.start].matches('\n').count() + 1,
        transformed: false,
        mode: None,
        chunk: 0,
        budget_ns: 0,
        loop_state_dynamic: false,
        loop_state_per_instance: false,
        codes: Vec::new(),
        source_range: Some(k.at.clone()),
        output_range: None,
    }));
    for k in &mut kernels {
        k.codes = codes(k, &diagnostics);
    }
    Transformed {
        output,
        diagnostics,
        kernels,
        defines,
        helpers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_in_comments_do_not_mark_a_file_transformed() {
        let include = crate::vocab::INCLUDE.trim_end();
        let commented = format!(
            "// {include}\n/* k__cupreempt_body */\n// see k__cupreempt_body\n__global__ void k() {{}}\n"
        );
        assert!(already_transformed(&commented).is_none());
        assert!(already_transformed(&format!("{include}\n__global__ void k() {{}}\n")).is_some());
        assert!(already_transformed("void k__cupreempt_body() {}\n").is_some());
        assert!(
            already_transformed("int x; // k__cupreempt_body\nvoid k__cupreempt_body();\n")
                .is_some()
        );
    }

    /// A file whose lines end in `\r\n`, with a statement macro continued over such lines and
    /// used without `;`: read as its `\n` twin is (the kernel transformed, no syntax error), and
    /// written back with `\r\n` on every line, generated ones included.
    #[test]
    fn crlf_files_read_as_lf_files_and_keep_their_line_ends() {
        let lf = "#define ROW(k) \\\n  if (i < n) { \\\n    out[i] = (float)(k); \\\n  }\n\
                  __global__ void k(float* out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (n > 2) {\n    ROW(2)\n  }\n}\n";
        let crlf = lf.replace('\n', "\r\n");
        let opts = Options::default();
        let a = transform(lf, "a.cu", &opts);
        let b = transform(&crlf, "b.cu", &opts);
        assert_eq!(a.transformed_count(), 1, "{:?}", a.diagnostics);
        assert_eq!(b.transformed_count(), 1, "{:?}", b.diagnostics);
        assert!(
            b.diagnostics.iter().all(|d| d.code != Code::ParseError),
            "{:?}",
            b.diagnostics
        );
        assert_eq!(
            b.output.matches('\n').count(),
            b.output.matches("\r\n").count()
        );
        assert_eq!(b.output.replace("\r\n", "\n"), a.output);
    }

    /// Two edits over the same bytes leave the file as it is with CP013, whose labels lie in
    /// the input (an insertion's at the character after it).
    #[test]
    fn overlapping_edits_are_reported_on_the_input() {
        let src = "__global__ void k() {}\n";
        let overlap = edit::OverlapError {
            first: (4, 9),
            second: (src.len(), src.len()),
        };
        let d = overlapping_edits(&overlap, src);
        assert_eq!(d.code, Code::WorseOutput);
        let spans: Vec<_> = d.labels.iter().map(|l| (l.start, l.end)).collect();
        assert_eq!(spans, [(4, 9), (src.len() - 1, src.len())]);
    }

    /// The guard on a fake output: one `]` of the input turned `[` by an "edit" parses worse,
    /// and is refused with CP013 pointing at that edit, with or without `verify` and
    /// `line_directives`; an edit that parses as well passes.
    #[test]
    fn an_output_that_parses_worse_is_refused() {
        let src = "__global__ void k(float* a) { a[blockIdx.x] = 1.0f; }\nvoid h() { int b[2]; b[0] = 1; }\n";
        let tree = parse::parse(src).tree;
        let at = src.find("0]").unwrap() + 1;
        let bad = [Edit {
            start: at,
            end: at + 1,
            text: "[".into(),
        }];
        let good = [Edit {
            start: at,
            end: at + 1,
            text: "] ".into(),
        }];
        let out = edit::apply(src, &bad, None).unwrap();
        let d = parses_worse_than_input(&tree, &out, &bad, &[0, 0], &[])
            .expect("a worse output is refused");
        assert_eq!(d.code, Code::WorseOutput);
        assert_eq!((d.labels[0].start, d.labels[0].end), (at, at + 1));
        let out = edit::apply(src, &good, None).unwrap();
        assert!(
            parses_worse_than_input(&tree, &out, &good, &[0, 1], &[]).is_none(),
            "{out}"
        );
    }
}
