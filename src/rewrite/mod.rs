//! Rewriting: turns an analysis into byte-range edits. It never re-parses and never applies.

mod declared;
mod function_name;
mod helper;
mod kernel;
pub(crate) use kernel::{declared_template, default_of, strip_default};
mod launch;
pub(crate) mod macro_launch;
mod predicate;

use crate::analysis::{Analysis, BodyFacts, FUNCTOR_CALL};
use crate::diagnostics::Diagnostic;
use crate::edit::Edit;
use crate::vocab::{CALL_FUNCTOR, CTX, CTX_TYPE, INCLUDE, TASK_GRID};
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

pub struct Rewrite {
    pub edits: Vec<Edit>,
    pub diagnostics: Vec<Diagnostic>,
}

/// `compact`: generated headers stay on the line they attach to (for `#line` output, so that
/// original lines keep their numbers).
/// `opts.known_kernels`: kernels defined in files this one includes; `opts.known_helpers`: their
/// helpers, those with the task-context form called with the context. With
/// `opts.line_directives` generated code is compact (one line per original line).
pub fn rewrite(
    a: &Analysis,
    src: &str,
    opts: &crate::Options,
) -> Result<Rewrite, crate::edit::OverlapError> {
    let (compact, known) = (opts.line_directives, opts.known_kernels.as_slice());
    let mut edits = Vec::new();
    let mut diagnostics = Vec::new();
    // Kernels declared here, defined in another file, and launched here.
    let declared: Vec<_> = a
        .declared_kernels
        .iter()
        .filter(|d| !known.iter().any(|k| k.name == d.name))
        .filter(|d| {
            a.launches
                .iter()
                .any(|l| l.name == d.name && !l.in_device_code)
        })
        .collect();
    for d in &declared {
        declared::rewrite(d, src, &mut edits);
    }
    let included_declared = declared::rewrite_included(a, known, &mut edits);
    let local_ctx_helpers = a.helpers.iter().any(|h| h.needs_ctx && h.reached);
    if !a.kernels.iter().any(|k| k.transformed()) && !local_ctx_helpers && a.live_exports.is_empty()
    {
        // Launches of kernels defined elsewhere are still rewritten or explained; the launch
        // shim comes with the including of the file that defines them, or with the include
        // below for kernels only declared (here or in an included file).
        let mut shim = !declared.is_empty() || included_declared;
        for l in &a.launches {
            // A launch through the kernel's pointer needs the shim whatever the kernel.
            shim |= launch::rewrite(l, a, src, known, false, &mut edits, &mut diagnostics);
        }
        for m in &a.macro_launches {
            shim |= macro_launch::rewrite(m, a, src, known, &mut edits, &mut diagnostics);
        }
        if shim || opts.include_support {
            edits.push(Edit::insert(a.include_at, INCLUDE));
        }
        return Ok(Rewrite { edits, diagnostics });
    }
    edits.push(Edit::insert(a.include_at, INCLUDE));
    // Helpers of this file that take the context, and those of included files whose files
    // give them the context form in the same run (`KnownHelper::with_ctx`).
    let ctx_helpers: BTreeSet<&str> = a
        .helpers
        .iter()
        .filter(|h| h.needs_ctx && h.reached)
        .map(|h| h.site.name.as_str())
        .chain(
            opts.known_helpers
                .iter()
                .filter(|h| h.reads_block_ids && h.with_ctx)
                .filter(|h| !a.helpers.iter().any(|l| l.site.name == h.name))
                .map(|h| h.name.as_str()),
        )
        .collect();
    let call_defaults: BTreeMap<&str, &[Option<String>]> = a
        .helpers
        .iter()
        .filter(|h| h.needs_ctx && h.reached)
        .filter_map(|h| Some((h.site.name.as_str(), h.call_defaults.as_deref()?)))
        .collect();
    for k in a.kernels.iter().filter(|k| k.transformed()) {
        kernel::rewrite(k, src, &ctx_helpers, &call_defaults, compact, &mut edits);
    }
    for h in a.helpers.iter().filter(|h| h.needs_ctx && h.reached) {
        helper::rewrite(h, src, &ctx_helpers, &call_defaults, compact, &mut edits);
    }
    // The live copies of synchronizing helpers that predicated kernels call, each once, after
    // its helper's definition.
    let mut copied = BTreeSet::new();
    let live = a
        .kernels
        .iter()
        .filter(|k| k.transformed())
        .filter_map(|k| k.predication.as_ref())
        .flat_map(|p| &p.live_helpers)
        .chain(&a.live_exports);
    for l in live {
        if copied.insert(l.helper) {
            let h = &a.helpers[l.helper];
            let copy = predicate::live_copy(h, l, src, &ctx_helpers)?;
            edits.push(Edit::insert(h.site.outer.end_byte(), copy));
        }
    }
    for l in &a.launches {
        launch::rewrite(l, a, src, known, false, &mut edits, &mut diagnostics);
    }
    for m in &a.macro_launches {
        macro_launch::rewrite(m, a, src, known, &mut edits, &mut diagnostics);
    }
    Ok(Rewrite { edits, diagnostics })
}

/// Shadows of the virtual built-ins at the top of a body, so that every use (macros included)
/// reads the task's values. With `thread_index` (kernel bodies), `threadIdx` too: the task
/// context reads it afresh for every task, so that the compiler cannot hoist what the body
/// computes from it out of the task loop and keep it in registers across the whole loop (on
/// the CUDA samples this raised wrappers from 22 to 50 registers; docs/transformation.md, "Two
/// wrappers"). A kernel body (`thread_index`) gets both `blockIdx` and `gridDim` even where the
/// analysis sees no read: a macro of a header it does not read (`#define GLOBAL_IDX
/// (blockIdx.x * blockDim.x + threadIdx.x)`) or of the command line expands to a read that
/// only the compiler sees, and without the shadow it would read the persistent block's index.
/// Those are `[[maybe_unused]]` (no warning where nothing reads them).
/// `block.group_index()` of this thread block becomes the task's index, `::dim3(blockIdx)`
/// (the body's `blockIdx` is the task's; the query's type, `dim3`, is kept).
/// `cg::this_grid()` before a query of the grid's shape or of this thread's place in it
/// becomes the task's grid, made from the body's (the task's) blockIdx, gridDim and threadIdx.
pub(super) fn block_index_calls(facts: &BodyFacts, edits: &mut Vec<Edit>) {
    for c in &facts.block_index_calls {
        edits.push(Edit::replace(c.byte_range(), "::dim3(blockIdx)"));
    }
    let fields = crate::lang::fields();
    for call in &facts.grid_queries {
        let grid = call
            .child_by_field_id(fields.function)
            .and_then(|f| f.child_by_field_id(fields.argument));
        if let Some(grid) = grid {
            edits.push(Edit::replace(
                grid.byte_range(),
                format!("{TASK_GRID}(blockIdx, gridDim, threadIdx)"),
            ));
        }
    }
}

/// The start of a transformed body: the task's values as locals shadowing the built-ins, and
/// the body's lambdas given what they need of them (`lambda_captures`). `thread_index`: a
/// kernel's body (blockIdx and gridDim always, threadIdx where read), else a helper's (what it
/// reads).
pub(super) fn prologue(
    facts: &BodyFacts,
    body: Node,
    src: &str,
    thread_index: bool,
    ctx_helpers: &BTreeSet<&str>,
    edits: &mut Vec<Edit>,
) {
    let shadowed = shadowed(facts, thread_index);
    let member_calls: Vec<std::ops::Range<usize>> = facts
        .ctx_member_calls
        .iter()
        .map(|(_, c)| c.byte_range())
        .collect();
    lambda_captures(body, src, &shadowed, ctx_helpers, &member_calls, edits);
    if shadowed.is_empty() {
        return;
    }
    // `::blockIdx` names the hardware's built-in, past the local declared below: it becomes
    // the local's name.
    for q in &facts.global_builtins {
        let name = q.child_by_field_id(crate::lang::fields().name);
        if let Some(name) = name.filter(|n| shadowed.contains(&crate::lang::text(*n, src))) {
            edits.push(Edit::delete(q.start_byte()..name.start_byte()));
        }
    }
    // The types by their global names: a parameter of the function may be named `dim3` or
    // `uint3` (llm.c's permute kernel takes `int dim1, ..., int dim4`), and in the body it
    // hides the type.
    let multiline = opens_own_line(body, src);
    let indent = body_indent(body, src);
    let mut text = String::new();
    for name in &shadowed {
        text.push_str(&if multiline {
            format!("\n{indent}")
        } else {
            " ".to_string()
        });
        let local = match crate::lang::VIRTUAL_BUILTINS
            .iter()
            .find(|(n, _)| n == name)
        {
            Some((_, ty)) => {
                let read = facts.virtual_reads.contains(name);
                let unused = if read { "" } else { "[[maybe_unused]] " };
                format!("{unused}const ::{ty} {name} = {CTX}.{name};")
            }
            None => format!(
                "const ::uint3 {name} = {CTX}.{}();",
                crate::vocab::THREAD_INDEX
            ),
        };
        text.push_str(&local);
    }
    if multiline {
        text.push_str("  // cupreempt: the task's values");
    }
    edits.push(Edit::insert(body.start_byte() + 1, text));
}

/// The names that `prologue` declares as locals of a body (the task's values): in a kernel's
/// body (`kernel`) blockIdx and gridDim always and threadIdx where read, in a helper's what it
/// reads of blockIdx and gridDim.
fn shadowed(facts: &BodyFacts, kernel: bool) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = crate::lang::VIRTUAL_BUILTINS
        .iter()
        .filter(|(name, _)| kernel || facts.virtual_reads.contains(name))
        .map(|(name, _)| *name)
        .collect();
    if kernel && facts.reads_thread_idx {
        names.push("threadIdx");
    }
    names
}

/// A lambda of the body without a capture default (`[]`, `[x]`) that reads a name the
/// prologue turned into a local (`shadowed`), or that calls a helper now given the context
/// (`__cp`), would reference an enclosing function's local it does not capture: it gets those
/// names captured (by copy; the context by reference). Before, such a lambda read the built-in
/// and compiled; unchanged, the transformed body did not compile.
fn lambda_captures(
    body: Node,
    src: &str,
    shadowed: &[&str],
    ctx_helpers: &BTreeSet<&str>,
    member_calls: &[std::ops::Range<usize>],
    edits: &mut Vec<Edit>,
) {
    let k = crate::lang::kinds();
    crate::lang::visit(body, |n| {
        if n.kind_id() != k.lambda_expression {
            return true;
        }
        let Some(captures) = n.child_by_field_id(crate::lang::fields().captures) else {
            return true;
        };
        let mut cursor = captures.walk();
        let listed: Vec<Node> = captures.named_children(&mut cursor).collect();
        if listed.iter().any(|c| c.kind() == "lambda_default_capture") {
            return true;
        }
        let captured: BTreeSet<&str> = listed
            .iter()
            .filter(|c| c.kind_id() == k.identifier)
            .map(|c| crate::lang::text(*c, src))
            .collect();
        // What the lambda's text reads, nested lambdas included (they capture from it).
        let mut reads: Vec<String> = Vec::new();
        crate::lang::visit(n, |m| {
            let name = crate::lang::text(m, src);
            let capture = if m.kind_id() != k.identifier || captured.contains(name) {
                None
            } else if shadowed.contains(&name) {
                Some(name.to_string())
            } else if ctx_helpers.contains(name)
                && m.parent().is_some_and(|p| p.kind_id() == k.call_expression)
            {
                Some(format!("&{CTX}"))
            } else {
                None
            };
            if let Some(c) = capture.filter(|c| !reads.contains(c)) {
                reads.push(c);
            }
            true
        });
        // A call that passes the context to a member (`tile.origin()`), which the names above
        // do not show.
        let within =
            |r: &std::ops::Range<usize>| n.start_byte() <= r.start && r.end <= n.end_byte();
        let passes = format!("&{CTX}");
        if member_calls.iter().any(within) && !reads.contains(&passes) && !captured.contains(CTX) {
            reads.push(passes);
        }
        if !reads.is_empty() {
            reads.sort();
            let list = reads.join(", ");
            let close = captures.end_byte() - 1;
            let sep = if listed.is_empty() { "" } else { ", " };
            edits.push(Edit::insert(close, format!("{sep}{list}")));
        }
        true
    });
}

/// The text of `range` (within `node`) on one line, without the comments of `node` in it: for
/// generated text written on one line, where a line comment would swallow what follows. A
/// preprocessor directive in it keeps a line of its own (`noexcept` chosen by `#ifdef`
/// between a helper's parameters and its body), with a line break before and after it.
pub(crate) fn one_line(node: Node, range: std::ops::Range<usize>, src: &str) -> String {
    let (start, end) = (range.start, range.end);
    let mut comments = Vec::new();
    crate::lang::visit(node, |n| {
        if n.kind_id() == crate::lang::kinds().comment {
            comments.push(n.byte_range());
            return false;
        }
        true
    });
    let mut out = String::with_capacity(end - start);
    let mut at = start;
    for c in comments.iter().filter(|c| c.start >= start && c.end <= end) {
        out.push_str(&src[at..c.start]);
        out.push(' ');
        at = c.end;
    }
    out.push_str(&src[at..end]);
    if crate::lang::lines_in_directives(&out).any(|(_, directive)| directive) {
        return with_directive_lines(&out);
    }
    // Each line break with the indentation after it becomes one space (whitespace elsewhere,
    // inside a string literal say, is kept).
    let mut flat = String::with_capacity(out.len());
    let mut lines = out.lines();
    if let Some(first) = lines.next() {
        flat.push_str(first.trim_end());
    }
    for line in lines {
        flat.push(' ');
        flat.push_str(line.trim());
    }
    flat.trim().to_string()
}

/// `one_line`'s text where it holds directives: the code between them on one line each, every
/// directive on a line of its own (a directive continued with `\` keeps its continuation
/// lines).
fn with_directive_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (line, directive) in crate::lang::lines_in_directives(text) {
        let trimmed = line.trim();
        if directive {
            // Also before the first: the text goes after generated code on its line.
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(trimmed);
            out.push('\n');
        } else if !trimmed.is_empty() {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push(' ');
            }
            out.push_str(trimmed);
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Whether nothing but whitespace follows the body's `{` on its line (then generated lines at
/// its top get lines of their own).
pub(crate) fn opens_own_line(body: Node, src: &str) -> bool {
    src[body.start_byte() + 1..body.end_byte()]
        .trim_start_matches([' ', '\t', '\r'])
        .starts_with('\n')
}

/// The indentation of the first statement of a body.
pub(crate) fn body_indent(body: Node, src: &str) -> String {
    let first = body
        .named_child(0)
        .map(|n| n.start_byte())
        .unwrap_or(body.start_byte());
    let line_start = src[..first].rfind('\n').map_or(0, |i| i + 1);
    let ws: String = src[line_start..first]
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect();
    if ws.is_empty() || body.named_child(0).is_none() {
        "  ".to_string()
    } else {
        ws
    }
}

/// `f(x)` → `f(__cp, x)` for calls to helpers that take the task context; a call that leaves
/// out arguments whose defaults read blockIdx/gridDim passes them (`HelperPlan::call_defaults`:
/// `f(p)` → `f(__cp, p, __cp.blockIdx.x)`, the task's).
pub(super) fn context_calls(
    facts: &BodyFacts,
    ctx_helpers: &BTreeSet<&str>,
    call_defaults: &BTreeMap<&str, &[Option<String>]>,
    edits: &mut Vec<Edit>,
) {
    // Calls of members that take the context, where the class called is certain
    // (`CallGraph::ctx_member_calls`): by name (`Foo::run(...)`) or through an object.
    let to_members: Vec<std::ops::Range<usize>> = facts
        .ctx_member_calls
        .iter()
        .map(|(_, c)| c.byte_range())
        .collect();
    for (member, call) in &facts.ctx_member_calls {
        let Some(args) = call.child_by_field_id(crate::lang::fields().arguments) else {
            continue;
        };
        let sep = if crate::lang::count_named(args) > 0 {
            ", "
        } else {
            ""
        };
        // `f(x)` of an object, or of an expression, whose class the text may not tell
        // (`CallGraph::functor_calls`): `cupreempt::call_functor(__cp, f, x)` calls its context
        // form where it has one. (`x.operator()(y)` names the member: it takes the context.)
        let object = call
            .child_by_field_id(crate::lang::fields().function)
            .filter(|f| {
                member == FUNCTOR_CALL && f.kind_id() != crate::lang::kinds().field_expression
            });
        match object {
            Some(f) => {
                edits.push(Edit::insert(
                    f.start_byte(),
                    format!("{CALL_FUNCTOR}({CTX}, "),
                ));
                edits.push(Edit::replace(f.end_byte()..args.start_byte() + 1, sep));
            }
            None => edits.push(Edit::insert(args.start_byte() + 1, format!("{CTX}{sep}"))),
        }
    }
    for c in facts.calls.iter().filter(|c| {
        ctx_helpers.contains(c.name.as_str()) && !to_members.contains(&c.node.byte_range())
    }) {
        let sep = if c.arg_count > 0 { ", " } else { "" };
        edits.push(Edit::insert(c.args.start_byte() + 1, format!("{CTX}{sep}")));
        if let Some(passed) = call_defaults
            .get(c.name.as_str())
            .and_then(|d| omitted_block_defaults(d, c.arg_count))
        {
            edits.push(Edit::insert(c.args.end_byte() - 1, passed));
        }
    }
}

/// The text that passes a call's omitted arguments (the call gives `given`) up to the last one
/// whose default reads blockIdx/gridDim: `, __cp.blockIdx.x, __cp.gridDim.x`. None where none
/// of them does, or one in between has no default (then the call is not one the helper
/// allows).
fn omitted_block_defaults(defaults: &[Option<String>], given: usize) -> Option<String> {
    let reads = |d: &str| {
        crate::lang::VIRTUAL_BUILTINS
            .iter()
            .any(|(name, _)| crate::lang::has_word(d, name))
    };
    let last = defaults
        .iter()
        .rposition(|d| d.as_deref().is_some_and(reads))?;
    if last < given {
        return None;
    }
    defaults[given..=last]
        .iter()
        .map(|d| d.as_ref().map(|d| format!(", {}", from_context(d))))
        .collect()
}

/// `text` with `blockIdx` and `gridDim` read from the task context (`__cp.blockIdx.x`): a
/// helper's body declares the locals that hold the task's values only for the names it
/// reads itself, so a default passed at a call there must not rely on them.
fn from_context(text: &str) -> String {
    let mut out = text.to_string();
    for (name, _) in crate::lang::VIRTUAL_BUILTINS {
        let at: Vec<usize> = crate::lang::word_indices(&out, name).collect();
        for i in at.into_iter().rev() {
            // A member already (`p.blockIdx`) names something else.
            if !out[..i].trim_end().ends_with(['.', '>', ':']) {
                out.insert_str(i, &format!("{CTX}."));
            }
        }
    }
    out
}

/// Inserts the context parameter first in a parameter list.
fn context_param(site: &crate::analysis::FunctionSite, src: &str, edits: &mut Vec<Edit>) {
    context_params(site, src, None, edits)
}

/// Inserts the context parameter first in a parameter list, and `extra` (a declaration) after
/// it.
pub(super) fn context_params(
    site: &crate::analysis::FunctionSite,
    src: &str,
    extra: Option<&str>,
    edits: &mut Vec<Edit>,
) {
    let mut decl = format!("{CTX_TYPE}& {CTX}");
    if let Some(extra) = extra {
        decl.push_str(", ");
        decl.push_str(extra);
    }
    first_params(site, src, &decl, edits);
}

/// Inserts `decl` (one or more parameter declarations) first in a parameter list.
pub(super) fn first_params(
    site: &crate::analysis::FunctionSite,
    src: &str,
    decl: &str,
    edits: &mut Vec<Edit>,
) {
    let params = site.params;
    let inner = params.start_byte() + 1..params.end_byte() - 1;
    let decl = decl.to_string();
    if src[inner.clone()].trim() == "void" {
        edits.push(Edit::replace(inner, decl));
    } else if site.param_list.is_empty() {
        edits.push(Edit::insert(inner.start, decl));
    } else {
        edits.push(Edit::insert(inner.start, format!("{decl}, ")));
    }
}

#[cfg(test)]
mod tests {
    use super::omitted_block_defaults;

    /// A call passes what it leaves out up to the last default that reads the block index,
    /// and nothing where it leaves out none of those.
    #[test]
    fn omitted_defaults_are_passed_up_to_the_last_block_index_read() {
        let d = |v: &[Option<&str>]| v.iter().map(|x| x.map(String::from)).collect::<Vec<_>>();
        let defaults = d(&[
            None,
            Some("4"),
            Some("blockIdx.x"),
            Some("blockIdx.y"),
            Some("1"),
        ]);
        assert_eq!(
            omitted_block_defaults(&defaults, 1).as_deref(),
            Some(", 4, __cp.blockIdx.x, __cp.blockIdx.y")
        );
        assert_eq!(
            omitted_block_defaults(&defaults, 3).as_deref(),
            Some(", __cp.blockIdx.y")
        );
        let both = d(&[None, Some("gridDim.x * blockIdx.y + threadIdx.x")]);
        assert_eq!(
            omitted_block_defaults(&both, 1).as_deref(),
            Some(", __cp.gridDim.x * __cp.blockIdx.y + threadIdx.x")
        );
        assert_eq!(
            omitted_block_defaults(&defaults, 4),
            None,
            "all of them given"
        );
        assert_eq!(omitted_block_defaults(&d(&[None, Some("2")]), 1), None);
        // A gap without a default: not a call the helper allows.
        assert_eq!(
            omitted_block_defaults(&d(&[None, None, Some("gridDim.x")]), 1),
            None
        );
    }
    /// A declaration's tail and a launch's arguments come out on one line without their
    /// comments; what a comment stood between stays apart.
    #[test]
    fn one_line_leaves_out_comments_and_line_breaks() {
        let src =
            "void f(int a, // first\n       int b) //OUT: address\n  noexcept /* why */ {\n}\n";
        let tree = crate::parse::parse(src).tree;
        let func = tree.root_node().child(0).expect("a function");
        let params_end = src.find(") //OUT").unwrap() + 1;
        let body = src.find('{').unwrap();
        assert_eq!(super::one_line(func, params_end..body, src), "noexcept");
        let open = src.find('(').unwrap();
        assert_eq!(
            super::one_line(func, open + 1..params_end - 1, src),
            "int a, int b"
        );
        assert_eq!(super::one_line(func, 0..4, src), "void");
    }
}
