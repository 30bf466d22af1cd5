//! Kernels that hold text the grammar did not read: the other branches of a conditional that
//! chooses part of a statement (`Parsed::hidden`, parse/branches.rs). The analysis sees the
//! first branch only, and the rewrite copies the others as they are, so a kernel is
//! transformed only where no hidden branch holds what the analysis or the rewrite would have
//! to see: a return, a jump, a barrier, a launch, inline assembly, shared memory, a read of
//! blockIdx or gridDim (their task values are declared only for what the analysis saw), a call
//! of a helper or a use of a macro that reads them or synchronizes; and, in a kernel with
//! returns (whose analysis follows writes), no write or call that may write.
//!
//! Also text the grammar could not read at all: a device function that a syntax error hides
//! (`scan::Found::unread_helpers`) counts as reading the block index where its text may
//! (`unread_may_matter`), so that a kernel calling it is refused rather than transformed with
//! a call that reads the hardware's index.

use super::callgraph::CallGraph;
use super::macros::MacroFacts;
use super::{FunctionSite, HelperPlan, KernelPlan, SyncMode};
use crate::diagnostics::{Code, Diagnostic};
use crate::lang;
use std::collections::BTreeMap;
use std::ops::Range;
use tree_sitter::Node;

/// Words whose presence in a hidden branch the rewrite would have to see.
const UNSEEN: &[&str] = &[
    "return",
    "goto",
    "break",
    "continue",
    "asm",
    "__asm__",
    "__shared__",
    "blockIdx",
    "gridDim",
    "extern",
    "sync",
    "__syncthreads",
    "__syncthreads_count",
    "__syncthreads_and",
    "__syncthreads_or",
    "__barrier_sync",
];

/// CP001 where a hidden branch inside `plan`'s definition, or inside a helper it reaches,
/// holds something the analysis would have to see (module docs); or lies in the head of
/// either (the rewrite would copy only the head it read); or lies outside every function (a
/// class's members, say) and holds a word that reads the block index or synchronizes.
pub fn refusal(
    plan: &KernelPlan,
    hidden: &[Range<usize>],
    helpers: &[HelperPlan],
    graph: &CallGraph,
    macros: &BTreeMap<String, MacroFacts>,
    root: Node,
    src: &str,
) -> Option<Diagnostic> {
    if hidden.is_empty() {
        return None;
    }
    // The kernel's definition and body, then those of the helpers it reaches.
    let mut functions = vec![(
        plan.site.outer.byte_range(),
        plan.site.body.byte_range(),
        true,
    )];
    functions.extend(graph.reachable(&plan.facts, helpers).into_iter().map(|h| {
        let site = &helpers[h].site;
        (site.outer.byte_range(), site.body.byte_range(), false)
    }));
    let has_returns = !plan.facts.returns.is_empty();
    // A write (or a call that may write) in a hidden branch matters to the returns' analysis
    // only where a return can run after it: one later in the text, or one in a loop around the
    // branch, which brings control back to it; a `goto` may bring it back from anywhere. A
    // correlation kernel's bounds return at its top and a warp reduction chosen by `#ifdef
    // MMCV_WITH_HIP` far below it were a refusal (CP001).
    let body_text = &src[plan.site.body.byte_range()];
    let goes_back = crate::lang::word_indices(body_text, "goto")
        .next()
        .is_some();
    let return_after = |r: &Range<usize>| {
        goes_back
            || plan.facts.returns.iter().any(|ret| {
                let at = ret.range();
                at.start >= r.start
                    || plan
                        .facts
                        .loops
                        .iter()
                        .any(|l| within(l, &at) && within(l, r))
            })
    };
    let head_branches = plan
        .head_branches
        .as_ref()
        .map_or(&[][..], |h| &h.hidden[..]);
    for r in hidden.iter().filter(|r| !head_branches.contains(r)) {
        let text = crate::lang::without_comments(&src[r.clone()]);
        let why = match functions.iter().find(|(outer, _, _)| within(outer, r)) {
            Some((_, body, _)) if !within(body, r) => {
                Some("part of the function's head".to_string())
            }
            Some((_, _, own)) => {
                unseen(&text, *own && has_returns && return_after(r), graph, macros)
            }
            None if inside_function(root, r) => None,
            None => unseen(&text, false, graph, macros),
        };
        if let Some(why) = why {
            let head = functions
                .iter()
                .any(|(outer, body, _)| within(outer, r) && !within(body, r));
            let help = if head {
                "write the head once and let a macro choose its attributes (`#if A` `#define BOUNDS __launch_bounds__(256)` `#else` `#define BOUNDS` `#endif`, then `__global__ void BOUNDS k(...)`), which the transformation reads"
            } else {
                WHOLE_STATEMENTS
            };
            return Some(refused(plan, r, src, &why).help(help));
        }
    }
    None
}

/// Conditional groups in a kernel's head that choose among its attributes, as hashing miners
/// and a speech toolkit choose launch bounds per architecture:
/// `#if __CUDA_ARCH__ >= 500` `__global__ __launch_bounds__(128, 1)` `#else` `__global__
/// __launch_bounds__(64, 1)` `#endif` `void k(...)`. The grammar reads the first branch. The
/// shared body, which takes no attributes, keeps the branch read (made a body's head as any
/// head is) and loses the groups' directive lines and the other branches (their lines stay,
/// empty); the generated kernels' heads copy the groups as written, so that each
/// configuration's kernels carry its own attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadBranches {
    /// The branches the grammar did not read (`Parsed::hidden` ranges in the head).
    pub hidden: Vec<Range<usize>>,
    /// The groups around them, each from its `#if` line's start to its `#endif` line's end.
    pub groups: Vec<Range<usize>>,
    /// Where the generated kernels' heads begin: the first group's `#if` line where it comes
    /// before the head's first word (`FunctionSite::head`), else that word.
    pub from: usize,
    /// A branch the grammar did not read has launch bounds or a register cap (so the kernel
    /// gets no wrapper held to 32 registers: two sets would not compile).
    pub bounds: bool,
}

/// The words a head group's lines may hold: the execution space, the return type, `static`,
/// and the attributes with their arguments (`lang::KERNEL_ATTRIBUTE_CALLS`).
const HEAD_WORDS: &[&str] = &["__global__", "void", "static"];

/// The head's conditional groups (`HeadBranches`) where every branch of every group that a
/// branch the grammar did not read belongs to holds only `HEAD_WORDS` and
/// `lang::KERNEL_ATTRIBUTE_CALLS`, and each group ends before the kernel's name (a group that
/// starts before the head's first word only where no linkage comes before it, and after a
/// template's parameter list); None where no such branch lies in
/// the head, or where one does not qualify (`refusal` then says why).
pub fn head_branches(
    site: &FunctionSite,
    hidden: &[Range<usize>],
    hidden_groups: &[Range<usize>],
    src: &str,
) -> Option<HeadBranches> {
    let (outer, body) = (site.outer.byte_range(), site.body.byte_range());
    let ranges: Vec<Range<usize>> = hidden
        .iter()
        .filter(|r| within(&outer, r) && !within(&body, r))
        .cloned()
        .collect();
    if ranges.is_empty() {
        return None;
    }
    let name = site.written_name().start;
    let mut from = site.head;
    let mut bounds = false;
    let mut groups = Vec::new();
    for r in &ranges {
        // The innermost group around the branch (`Parsed::hidden_groups`).
        let (start, end) = hidden_groups
            .iter()
            .filter(|g| within(g, r))
            .min_by_key(|g| g.len())
            .map(|g| (g.start, g.end))?;
        if !groups.contains(&(start..end)) {
            groups.push(start..end);
        }
        if end > name || !attributes_only(&src[start..end]) {
            return None;
        }
        if start < site.head {
            // After a template's head (`template <int N>` `#if A` `__launch_bounds__(N)`
            // `#endif` `__global__ void k()`), never inside it or a linkage's.
            let after_template = site.template_head_end().is_none_or(|e| e <= start);
            if !after_template || site.linkage.is_some() {
                return None;
            }
            from = from.min(start);
        }
        bounds |= lang::KERNEL_ATTRIBUTE_CALLS
            .iter()
            .any(|w| lang::word_indices(&src[r.clone()], w).next().is_some());
    }
    // A group nested in another (`#if A` `#if B` ... `#endif` `#else` ... `#endif`) is emptied
    // with the outer one's lines.
    let outermost: Vec<Range<usize>> = groups
        .iter()
        .filter(|g| !groups.iter().any(|o| o != *g && within(o, g)))
        .cloned()
        .collect();
    Some(HeadBranches {
        hidden: ranges,
        groups: outermost,
        from,
        bounds,
    })
}

/// Whether the lines of `text` that are not directives hold only `HEAD_WORDS` and
/// `lang::KERNEL_ATTRIBUTE_CALLS` with their parenthesized arguments.
fn attributes_only(text: &str) -> bool {
    let code: String = lang::without_comments(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let b = code.as_bytes();
    let mut at = 0;
    while at < b.len() {
        if b[at].is_ascii_whitespace() {
            at += 1;
            continue;
        }
        let word_end = at
            + code[at..]
                .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
                .unwrap_or(code.len() - at);
        let word = &code[at..word_end];
        if HEAD_WORDS.contains(&word) {
            at = word_end;
        } else if lang::KERNEL_ATTRIBUTE_CALLS.contains(&word) {
            let open = word_end + (code[word_end..].len() - code[word_end..].trim_start().len());
            if b.get(open) != Some(&b'(') {
                return false;
            }
            match crate::parse::closing_paren(b, open) {
                Some(close) => at = close + 1,
                None => return false,
            }
        } else {
            return false;
        }
    }
    true
}

/// CP001 where a use of a macro given statements as arguments (`Parsed::statement_macros`,
/// `SWITCH(t, T, stmts;)`, read as a block of its statements) lies in `plan`'s definition or
/// in a helper it reaches: what the macro wraps the statements in (a condition, a loop, two
/// copies) is not known, and the analysis of barriers and returns would miss it.
pub fn statement_macro_refusal(
    plan: &KernelPlan,
    uses: &[Range<usize>],
    helpers: &[HelperPlan],
    graph: &CallGraph,
    src: &str,
) -> Option<Diagnostic> {
    if uses.is_empty() {
        return None;
    }
    let mut functions = vec![plan.site.outer.byte_range()];
    functions.extend(
        graph
            .reachable(&plan.facts, helpers)
            .into_iter()
            .map(|h| helpers[h].site.outer.byte_range()),
    );
    let r = uses
        .iter()
        .find(|r| functions.iter().any(|f| within(f, r)))?;
    let name_end = src[r.clone()]
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .map_or(r.end, |n| r.start + n);
    Some(
        Diagnostic::new(
            Code::ParseErrorInKernel,
            format!(
                "`{}`: the macro `{}` is given statements as an argument; what it wraps them in is not known here, so the kernel is left as it is",
                plan.site.name,
                &src[r.start..name_end]
            ),
        )
        .label(r.start..name_end.max(r.start + 1), "statements passed to this macro")
        .help("write the statements in the kernel, or in a device function the macro calls"),
    )
}

/// Whether a hidden branch lies in the head of `site`, or in its body and holds something the
/// analysis would have to see (`unseen`, writes aside).
pub fn unread_in(
    site: &FunctionSite,
    hidden: &[Range<usize>],
    graph: &CallGraph,
    macros: &BTreeMap<String, MacroFacts>,
    src: &str,
) -> bool {
    let (outer, body) = (site.outer.byte_range(), site.body.byte_range());
    hidden.iter().filter(|r| within(&outer, r)).any(|r| {
        !within(&body, r)
            || unseen(
                &crate::lang::without_comments(&src[r.clone()]),
                false,
                graph,
                macros,
            )
            .is_some()
    })
}

/// Whether `r` lies inside `outer`.
fn within(outer: &Range<usize>, r: &Range<usize>) -> bool {
    outer.start <= r.start && r.end <= outer.end
}

/// Whether `r` lies inside some function definition of the tree (host code, another kernel).
fn inside_function(root: Node, r: &Range<usize>) -> bool {
    let mut n = root.descendant_for_byte_range(r.start, r.end);
    while let Some(x) = n {
        if x.kind() == "function_definition" {
            return true;
        }
        n = x.parent();
    }
    false
}

/// CP001 for a kernel decided to need the predicated form (`mode`) with a hidden branch in its
/// body: the predicated form rewrites statements the analysis must see whole.
pub fn predicated_refusal(
    mode: SyncMode,
    plan: &KernelPlan,
    hidden: &[Range<usize>],
    src: &str,
) -> Option<Diagnostic> {
    if mode != SyncMode::Predicated {
        return None;
    }
    let body = plan.site.body.byte_range();
    hidden.iter().find(|r| within(&body, r)).map(|r| {
        refused(
            plan,
            r,
            src,
            "code of a kernel that needs the predicated form",
        )
        .help(WHOLE_STATEMENTS)
    })
}

/// The help for a hidden branch inside a body.
const WHOLE_STATEMENTS: &str = "give each branch of the conditional whole statements (the `for` head and its body, the `if` and its block)";

fn refused(plan: &KernelPlan, r: &Range<usize>, src: &str, why: &str) -> Diagnostic {
    // The branch's first line of text.
    let text = &src[r.clone()];
    let start = r.start + (text.len() - text.trim_start().len());
    let end = src[start..r.end].find('\n').map_or(r.end, |p| start + p);
    Diagnostic::new(
        Code::ParseErrorInKernel,
        format!(
            "`{}`: conditional compilation chooses part of a statement, and a branch the analysis does not read holds {why}; it is left as it is",
            plan.site.name
        ),
    )
    .label(start..end.max(start + 1), "this branch is not read")
}

/// What in a hidden branch's text the analysis would have to see, in words; None if nothing.
/// `writes`: also writes and calls that may write (the kernel's returns depend on them).
fn unseen(
    text: &str,
    writes: bool,
    graph: &CallGraph,
    macros: &BTreeMap<String, MacroFacts>,
) -> Option<String> {
    if text.contains("<<<") {
        return Some("a launch".into());
    }
    // A macro defined there would be one the analysis never read (a definition under `#if`
    // branches counts as varying where it reads both).
    if text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with('#') && matches!(l[1..].split_whitespace().next(), Some("define" | "undef"))
    }) {
        return Some("a macro definition".into());
    }
    if !balanced(text) {
        return Some("a bracket that another branch closes".into());
    }
    // What comes first in the text: a word the analysis would have to see, or a write.
    let word = super::macros::identifiers(text).find_map(|(at, word)| {
        let called = text[at + word.len()..].trim_start().starts_with('(');
        unseen_word(word, called, writes, graph, macros).map(|why| (at, why))
    });
    let write = writes
        .then(|| first_write(text))
        .flatten()
        .map(|at| (at, "a write, which a return may depend on".to_string()));
    match (word, write) {
        (Some(w), Some(x)) => Some(if w.0 < x.0 { w.1 } else { x.1 }),
        (w, x) => w.or(x).map(|(_, why)| why),
    }
}

/// What a word of a hidden branch holds that the analysis would have to see (`called`: a `(`
/// follows it; `writes`: calls that may write count).
fn unseen_word(
    word: &str,
    called: bool,
    writes: bool,
    graph: &CallGraph,
    macros: &BTreeMap<String, MacroFacts>,
) -> Option<String> {
    if UNSEEN.contains(&word) || lang::GRID_SYNC.contains(&word) {
        return Some(format!("`{word}`"));
    }
    if graph.block_names.contains(word) || graph.barrier_names.contains(word) {
        return Some(format!(
            "a use of `{word}`, which reads the block index or synchronizes"
        ));
    }
    if let Some(m) = macros.get(word) {
        if !m.virtual_reads.is_empty() || m.barrier || m.returns || m.launches || m.shared {
            return Some(format!(
                "macro `{word}`, which the rewrite would have to see"
            ));
        }
        if writes && !m.calls.is_empty() {
            return Some(format!(
                "macro `{word}`, which calls a function that may write"
            ));
        }
        return None;
    }
    (writes && called && !pure(word))
        .then(|| format!("a call of `{word}`, which may write what a return depends on"))
}

/// Math and constructor functions without side effects (`lang`'s lists).
fn pure(word: &str) -> bool {
    lang::is_pure_function(word) || lang::UNIFORM_FUNCTIONS.contains(&word)
}

/// Where `text` first assigns, steps (`++`, `--`) or takes an address (`&x`).
fn first_write(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    (0..b.len()).find(|&i| {
        let (c, next, prev) = (b[i], b.get(i + 1).copied(), i.checked_sub(1).map(|p| b[p]));
        let assignment =
            c == b'=' && next != Some(b'=') && !matches!(prev, Some(b'=' | b'!' | b'<' | b'>'));
        let step = (c == b'+' || c == b'-') && next == Some(c);
        let address = c == b'&'
            && next.is_some_and(|n| n == b'_' || n.is_ascii_alphabetic())
            && prev != Some(b'&');
        assignment || step || address
    })
}

/// Whether every `{`, `(` and `[` of `text` is closed in it, in order.
fn balanced(text: &str) -> bool {
    let mut open = Vec::new();
    for c in text.chars() {
        match c {
            '{' | '(' | '[' => open.push(c),
            '}' | ')' | ']' => {
                let want = match c {
                    '}' => '{',
                    ')' => '(',
                    _ => '[',
                };
                if open.pop() != Some(want) {
                    return false;
                }
            }
            _ => {}
        }
    }
    open.is_empty()
}

/// Whether a device function that a syntax error hides (its name ends at `from`) may read the
/// block index or synchronize, as far as its text tells: its body (from the first `{` after the
/// name to the matching `}`) names blockIdx, gridDim, a barrier, inline assembly, or calls a
/// function that is not a known pure one. Without a body in the text, it may.
pub(super) fn unread_may_matter(src: &str, from: usize) -> bool {
    let Some(open) = src.get(from..).and_then(|t| t.find('{')).map(|p| from + p) else {
        return true;
    };
    let mut depth = 0usize;
    let mut close = None;
    for (i, c) in src[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(close) = close else {
        return true;
    };
    let body = crate::lang::without_comments(&src[open + 1..close]);
    let may = super::macros::identifiers(&body).any(|(at, word)| {
        let called = body[at + word.len()..].trim_start().starts_with('(');
        let keyword = matches!(
            word,
            "if" | "for" | "while" | "switch" | "return" | "sizeof"
        );
        (UNSEEN.contains(&word) && !matches!(word, "return" | "break" | "continue"))
            || (called && !keyword && !pure(word))
    });
    may
}
