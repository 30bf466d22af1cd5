//! The pipeline: parse → analyse → rewrite → emit, then a check that the output parses no worse
//! than the input when asked (`Options::verify`).

use crate::analysis::{self, SyncMode};
use crate::diagnostics::{Code, Diagnostic, KernelId};
use crate::edit::{self, Edit, LineMap};
use crate::options::Options;
use crate::parse;
use serde::Serialize;
use tree_sitter::{InputEdit, Point, Tree};

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
    /// Codes of the diagnostics about this kernel.
    pub codes: Vec<&'static str>,
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
fn codes(k: &KernelReport, diagnostics: &[Diagnostic]) -> Vec<&'static str> {
    let def = k.source_range.clone().unwrap_or_default();
    let mut out = Vec::new();
    for d in diagnostics.iter().filter(|d| k.is_about(d)) {
        let at = d.labels.first().map_or(0, |l| l.start);
        let c = d.code.id();
        if (d.code == Code::LaunchLeft || def.contains(&at)) && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

#[derive(Debug)]
pub struct Transformed {
    pub output: String,
    pub diagnostics: Vec<Diagnostic>,
    pub kernels: Vec<KernelReport>,
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
}

#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error(transparent)]
    Overlap(#[from] edit::OverlapError),
    #[error("internal error: the transformed output of {file} has {after} syntax errors where the input had {before}; nothing was written")]
    BrokenOutput {
        file: String,
        before: usize,
        after: usize,
    },
}

/// The deepest nesting of syntax nodes that the analysis takes on. Its walks over kernel and
/// helper bodies follow the tree's shape; deeper files are left as they are (CP011).
pub const MAX_DEPTH: usize = 20_000;

/// The call stack the pipeline runs on. The walks of the analysis recurse once or a few times
/// per level of nesting; this is room for `MAX_DEPTH` levels with unoptimised frames. Only the
/// pages a run touches are ever committed.
const STACK_BYTES: usize = 1 << 30;

pub fn transform(
    src: &str,
    file_name: &str,
    opts: &Options,
) -> Result<Transformed, TransformError> {
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

/// A note when `src` is the output of an earlier run: it includes `cupreempt.cuh`, or it holds
/// the wrappers a run generates (`NAME__cupreempt_body`). Such a file is left as it is, so
/// that running again (`--in-place` twice) changes nothing; transforming it again would wrap the
/// wrappers.
fn already_transformed(src: &str) -> Option<Diagnostic> {
    let include = crate::vocab::INCLUDE.trim_end();
    let (at, len, what) = match src.find(include) {
        Some(at) => (at, include.len(), "it includes cupreempt.cuh"),
        None => {
            let marker = "__cupreempt_body";
            let at = src.find(marker)?;
            (at, marker.len(), "it holds cupreempt's generated wrappers")
        }
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

fn transform_here(
    src: &str,
    file_name: &str,
    opts: &Options,
) -> Result<Transformed, TransformError> {
    if let Some(d) = already_transformed(src) {
        return Ok(Transformed {
            output: src.to_string(),
            diagnostics: vec![d],
            kernels: Vec::new(),
        });
    }
    let parsed = parse::parse(src);
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
        return Ok(Transformed {
            output: src.to_string(),
            diagnostics: vec![d],
            kernels: Vec::new(),
        });
    }
    let analysis = analysis::analyze(root, src, opts);
    let rewrite = crate::rewrite::rewrite(&analysis, src, opts.line_directives);
    let mut edits = rewrite.edits;
    // Generated text takes the file's line ends, so that the output never mixes them.
    let eol = edit::line_end(src);
    if eol != "\n" {
        for e in &mut edits {
            e.text = edit::with_line_end(&e.text, eol);
        }
    }
    // Stable: same-offset insertions keep their order.
    edits.sort_by_key(|e| (e.start, e.end));
    let lines = opts.line_directives.then_some(LineMap { file_name });
    let output = edit::apply(src, &edits, lines.as_ref())?;
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

    let before = parse::error_ranges(root).len();
    let after = if edits.is_empty() || !opts.verify {
        before
    } else if opts.line_directives {
        parse::error_count(&output)
    } else {
        let mut old = parsed.tree.clone();
        tell_tree(&mut old, src, &output, &edits);
        parse::error_ranges(parse::reparse(&output, &old).root_node()).len()
    };
    if after > before {
        return Err(TransformError::BrokenOutput {
            file: file_name.to_string(),
            before,
            after,
        });
    }

    let mut diagnostics = analysis.diagnostics;
    diagnostics.extend(rewrite.diagnostics);
    diagnostics.sort_by_key(|d| d.labels.first().map_or(0, |l| l.start));
    let mut kernels = analysis
        .kernels
        .iter()
        .map(|k| KernelReport {
            id: k.id,
            name: k.site.name.clone(),
            line: k.site.name_node.start_position().row + 1,
            transformed: k.transformed(),
            mode: k.mode,
            chunk: k.chunk,
            budget_ns: k.budget_ns,
            codes: Vec::new(),
            source_range: Some(k.site.outer.byte_range()),
            output_range: (!opts.line_directives).then(|| {
                shift(k.site.outer.start_byte(), false)..shift(k.site.outer.end_byte(), true)
            }),
        })
        .collect::<Vec<_>>();
    for k in &mut kernels {
        k.codes = codes(k, &diagnostics);
    }
    Ok(Transformed {
        output,
        diagnostics,
        kernels,
    })
}

/// Describes the applied edits to the old tree so that re-parsing is incremental.
/// `edits` are sorted.
fn tell_tree(tree: &mut Tree, src: &str, out: &str, edits: &[Edit]) {
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(out.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let point_in_out = |at: usize| {
        let row = line_starts.partition_point(|&s| s <= at) - 1;
        Point {
            row,
            column: at - line_starts[row],
        }
    };
    let advance = |p: Point, text: &str| match text.rfind('\n') {
        Some(i) => Point {
            row: p.row + text.matches('\n').count(),
            column: text.len() - i - 1,
        },
        None => Point {
            row: p.row,
            column: p.column + text.len(),
        },
    };
    let mut delta: isize = 0;
    for e in edits {
        let start = (e.start as isize + delta) as usize;
        let start_position = point_in_out(start);
        tree.edit(&InputEdit {
            start_byte: start,
            old_end_byte: start + (e.end - e.start),
            new_end_byte: start + e.text.len(),
            start_position,
            old_end_position: advance(start_position, &src[e.start..e.end]),
            new_end_position: advance(start_position, &e.text),
        });
        delta += e.text.len() as isize - (e.end - e.start) as isize;
    }
}
