//! Edits of the predicated form (see `analysis::predicate` for why and when).

use super::{body_indent, opens_own_line};
use crate::analysis::{HelperPlan, LiveHelper, PredicatedLoop, Predication, Step};
use crate::edit::Edit;
use crate::lang::{self, fields};
use crate::vocab::{
    after_label, live_copy_name, CTX_LIVE, CTX_TYPE, LIVE_COPY_SUFFIX, LIVE_RESULT, LIVE_VALUE,
};
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

pub fn rewrite(p: &Predication, body: Node, src: &str, edits: &mut Vec<Edit>) {
    if !p.loops.is_empty() {
        for l in &p.loops {
            predicated_loop(l, src, edits);
        }
        steps(&p.steps, src, edits);
        return;
    }
    // After the prologue's shadows (same offset, collected later).
    edits.push(Edit::insert(
        body.start_byte() + 1,
        if opens_own_line(body, src) {
            format!(
                "\n{}bool {CTX_LIVE} = true;  // cupreempt: cleared by `return` (predicated form)",
                body_indent(body, src)
            )
        } else {
            format!(" bool {CTX_LIVE} = true;")
        },
    ));
    steps(&p.steps, src, edits);
}

/// A predicated loop (`analysis::predicate::PredicatedLoop`): braces around it hold its own
/// flag; the condition, evaluated by live threads only, clears it; the loop goes on while any
/// thread of the block is live, which the body's first `__syncthreads();` tests where it has
/// one (`if (!__syncthreads_or(__cp_live)) break;`), else the condition (`__syncthreads_or`
/// around it). An update that only live threads may run is skipped by the others.
fn predicated_loop(l: &PredicatedLoop, src: &str, edits: &mut Vec<Edit>) {
    let node = l.node;
    let at = above_pragmas(src, node.start_byte());
    let flag = format!("{{ bool {CTX_LIVE} = true;");
    if at < node.start_byte() {
        // `#pragma unroll` must stay right above its loop: the braces open above it.
        let indent = code_indent(&src[at..node.end_byte()]);
        edits.push(Edit::insert(at, format!("{indent}{flag}\n")));
    } else {
        edits.push(Edit::insert(at, format!("{flag} ")));
    }
    edits.push(Edit::insert(node.end_byte(), " }"));
    let c = l.condition.byte_range();
    let clear = format!("{CTX_LIVE} = {CTX_LIVE} && (");
    if l.exit_barrier.is_some() {
        edits.push(Edit::insert(c.start, format!("({clear}")));
        edits.push(Edit::insert(c.end, ")), true"));
    } else {
        edits.push(Edit::insert(c.start, format!("__syncthreads_or({clear}")));
        edits.push(Edit::insert(c.end, "))"));
    }
    if let Some(u) = l.guarded_update {
        edits.push(Edit::insert(
            u.start_byte(),
            format!("{CTX_LIVE} ? (void)("),
        ));
        edits.push(Edit::insert(u.end_byte(), ") : (void)0"));
    }
    if let Some(b) = l.exit_barrier {
        edits.push(Edit::replace(
            b.byte_range(),
            format!("if (!__syncthreads_or({CTX_LIVE})) break;"),
        ));
    }
}

/// The live copy of a synchronizing helper (`analysis::predicate`, "synchronizing helpers"),
/// to follow its definition: the helper's text renamed, the flag its first parameter, its
/// body predicated by `steps`.
pub fn live_copy(
    h: &HelperPlan,
    copy: &LiveHelper,
    src: &str,
    ctx_helpers: &BTreeSet<&str>,
) -> Result<String, crate::edit::OverlapError> {
    let s = &h.site;
    let std::ops::Range { start, end } = s.definition_range();
    let mut edits = vec![Edit::replace(
        s.name_node.byte_range(),
        live_copy_name(&s.name),
    )];
    let flag = format!("bool {CTX_LIVE}");
    let mut close = "";
    if h.needs_ctx {
        // A copy of the task-context form (`rewrite::helper`), the flag after the context.
        match s
            .template
            .and_then(|t| t.child_by_field_id(fields().parameters))
        {
            Some(list) => edits.push(Edit::insert(
                list.end_byte() - 1,
                format!(", class {CTX_TYPE}"),
            )),
            None => {
                edits.push(Edit::insert(
                    s.head,
                    format!("extern \"C++\" {{ template <class {CTX_TYPE}> "),
                ));
                close = " }  // extern \"C++\"";
            }
        }
        super::context_params(s, src, Some(&flag), &mut edits);
        super::prologue(&h.facts, s.body, src, false, ctx_helpers, &mut edits);
        // No block defaults: the analysis gives no copy to a helper with any.
        super::context_calls(&h.facts, ctx_helpers, &BTreeMap::new(), &mut edits);
        super::block_index_calls(&h.facts, &mut edits);
    } else {
        super::first_params(s, src, &flag, &mut edits);
        // A `static` copy that no kernel of a unit calls (one made for other files).
        edits.push(Edit::insert(
            s.head,
            super::helper::unused_static_attribute(s, src),
        ));
    }
    if let Some(t) = &copy.result_type {
        // What the returns store (`Step::Return`'s `hold`), returned at the end.
        let body = s.body.byte_range();
        let (head, tail) = if opens_own_line(s.body, src) {
            let indent = body_indent(s.body, src);
            (
                format!("\n{indent}{t} {LIVE_RESULT}{{}};  // cupreempt: what the returns store"),
                format!("{indent}return {LIVE_RESULT};\n"),
            )
        } else {
            (
                format!(" {t} {LIVE_RESULT}{{}};"),
                format!(" return {LIVE_RESULT}; "),
            )
        };
        let tail = if src[..body.end - 1].ends_with('\n') {
            tail
        } else {
            format!(" return {LIVE_RESULT}; ")
        };
        edits.push(Edit::insert(body.start + 1, head));
        edits.push(Edit::insert(body.end - 1, tail));
    }
    steps(&copy.steps, src, &mut edits);
    for e in &mut edits {
        e.start -= start;
        e.end -= start;
    }
    let text = crate::edit::apply(&src[start..end], &edits, None)?;
    Ok(format!(
        "\n// cupreempt: `{}` for threads that may have returned (the predicated form): they pass\n\
         // its barriers with `{CTX_LIVE}` cleared and skip its work.\n{text}{close}",
        s.name
    ))
}

fn steps(steps: &[Step], src: &str, edits: &mut Vec<Edit>) {
    for step in steps {
        match step {
            Step::Run {
                range,
                guarded,
                label,
                braced,
            } => {
                let mut head = String::new();
                let mut tail = String::new();
                if *braced {
                    head.push_str("{ ");
                }
                if *guarded {
                    head.push_str(&format!("if ({CTX_LIVE}) {{ "));
                    tail.push_str(" }");
                }
                if let Some(n) = label {
                    tail.push_str(&format!(" {}:;", after_label(*n)));
                }
                if *braced {
                    tail.push_str(" }");
                }
                // A `#pragma` right above the range (`#pragma unroll` before a loop) applies to
                // its first statement, so the guard opens above it; a directive must start its
                // line, and one that ends the range must end its line before what follows.
                let start = if head.is_empty() {
                    range.start
                } else {
                    above_pragmas(src, range.start)
                };
                // At a directive's line start, the guard gets a line of its own, indented as
                // the first line of code in the range.
                let indent = if src[..start].ends_with('\n') {
                    code_indent(&src[start..range.end])
                } else {
                    ""
                };
                if !head.is_empty() && src[start..].trim_start().starts_with('#') {
                    head.truncate(head.trim_end().len());
                    head = format!("{indent}{head}\n");
                }
                if !tail.is_empty() && ends_in_directive(src, range.end) {
                    tail = format!("\n{indent}{}", tail.trim_start());
                }
                edits.push(Edit::insert(start, head));
                edits.push(Edit::insert(range.end, tail));
            }
            Step::Return { node, label, hold } => {
                let value = node.named_child(0).filter(|v| v.kind() != "comment");
                let mut text = String::new();
                match value {
                    Some(v) if *hold => text.push_str(&format!(
                        "if ({CTX_LIVE}) {LIVE_RESULT} = {}; ",
                        crate::lang::text(v, src)
                    )),
                    Some(v) => text.push_str(&format!("{}; ", crate::lang::text(v, src))),
                    None => {}
                }
                text.push_str(&format!("{CTX_LIVE} = false;"));
                if let Some(n) = label {
                    text.push_str(&format!(" goto {};", after_label(*n)));
                }
                if value.is_some() || label.is_some() {
                    text = format!("{{ {text} }}");
                }
                edits.push(Edit::replace(node.byte_range(), text));
            }
            Step::LiveInit { value } => live_value_around(*value, edits),
            Step::LiveConstruct {
                value,
                ty,
                assigned,
            } => {
                let assign = if *assigned { "" } else { " = " };
                edits.push(Edit::insert(
                    value.start_byte(),
                    format!("{assign}{}{ty}", live_value_open()),
                ));
                edits.push(Edit::insert(value.end_byte(), LIVE_VALUE_CLOSE));
            }
            Step::LiveCall {
                name,
                args,
                wrap,
                ctx,
            } => {
                edits.push(Edit::insert(name.end, LIVE_COPY_SUFFIX));
                // After the context where the call passes it (`context_calls`: same offset,
                // collected first).
                let flag = match (lang::count_named(*args) == 0, *ctx) {
                    (true, true) => format!(", {CTX_LIVE}"),
                    (true, false) => CTX_LIVE.to_string(),
                    (false, _) => format!("{CTX_LIVE}, "),
                };
                edits.push(Edit::insert(args.start_byte() + 1, flag));
                for a in wrap {
                    live_value_around(*a, edits);
                }
            }
            Step::NeutralVote { args, and } => {
                let head = if *and {
                    format!("!{CTX_LIVE} || (")
                } else {
                    format!("{CTX_LIVE} && (")
                };
                edits.push(Edit::insert(args.start_byte() + 1, head));
                edits.push(Edit::insert(args.end_byte() - 1, ")"));
            }
        }
    }
}

/// `e` evaluated only while the thread is live: `live_value(__cp_live, [&] { return e; })`.
fn live_value_around(e: Node, edits: &mut Vec<Edit>) {
    edits.push(Edit::insert(e.start_byte(), live_value_open()));
    edits.push(Edit::insert(e.end_byte(), LIVE_VALUE_CLOSE));
}

/// The text before a value evaluated only while live (`live_value_around`), and after it.
fn live_value_open() -> String {
    format!("{LIVE_VALUE}({CTX_LIVE}, [&] {{ return ")
}
const LIVE_VALUE_CLOSE: &str = "; })";

/// Where a statement at `at` begins once the `#pragma` lines right above it are counted in: the
/// start of the first of them (`at` itself where there are none, or where text precedes `at`
/// on its line).
fn above_pragmas(src: &str, at: usize) -> usize {
    let mut start = at;
    loop {
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        if line_start == 0 || !src[line_start..start].trim().is_empty() {
            return start;
        }
        let prev_start = src[..line_start - 1].rfind('\n').map_or(0, |i| i + 1);
        if !src[prev_start..line_start - 1]
            .trim_start()
            .starts_with("#pragma")
        {
            return start;
        }
        start = prev_start;
    }
}

/// The leading blanks of the first line of `text` that is code, not a directive.
fn code_indent(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map_or("", |l| &l[..l.len() - l.trim_start().len()])
}

/// Whether the line that `at` ends (or lies in) is a preprocessor directive: text inserted at
/// `at` would become part of it.
fn ends_in_directive(src: &str, at: usize) -> bool {
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    src[line_start..at].trim_start().starts_with('#')
}

#[cfg(test)]
mod tests {
    use crate::options::Options;
    use crate::transform::transform;

    /// The transformed text of a kernel with `body` that must come out predicated.
    fn predicated(body: &str) -> String {
        let src = format!(
            "__global__ void k(const float* in, float* out, int n, int m) {{\n{body}\n}}\n"
        );
        let t = transform(&src, "t.cu", &Options::default());
        assert_eq!(t.transformed_count(), 1, "{:?}", t.diagnostics);
        t.output
    }

    const HEAD: &str = "  __shared__ float s[64];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n";

    #[test]
    fn straight_line_code_is_guarded_and_barriers_stay() {
        let out = predicated(&format!(
            "{HEAD}  s[threadIdx.x] = in[i];\n  __syncthreads();\n  out[i] = s[0];"
        ));
        assert!(out.contains("if (i >= n) __cp_live = false;"), "{out}");
        assert!(
            out.contains("if (__cp_live) { s[threadIdx.x] = in[i]; }\n  __syncthreads();"),
            "{out}"
        );
        assert!(out.contains("if (__cp_live) { out[i] = s[0]; }"), "{out}");
    }

    #[test]
    fn loads_after_a_return_read_nothing_in_returned_threads() {
        let out = predicated(&format!(
            "{HEAD}  float v = in[i];\n  int j = i + 1;\n  __syncthreads();\n  out[i] = v + j;"
        ));
        assert!(
            out.contains("float v = cupreempt::live_value(__cp_live, [&] { return in[i]; });"),
            "{out}"
        );
        assert!(
            out.contains("  int j = i + 1;\n"),
            "pure initializers stay: {out}"
        );
    }

    #[test]
    fn reductions_get_the_neutral_vote() {
        let out = predicated(&format!("{HEAD}  int c = __syncthreads_count(in[i] > 0);\n  int a = __syncthreads_and(in[i] > 0);\n  out[i] = c + a;"));
        assert!(
            out.contains("__syncthreads_count(__cp_live && (in[i] > 0))"),
            "{out}"
        );
        assert!(
            out.contains("__syncthreads_and(!__cp_live || (in[i] > 0))"),
            "{out}"
        );
    }

    #[test]
    fn a_uniform_break_in_a_barrier_loop_is_taken_by_returned_threads_too() {
        let out = predicated(&format!("{HEAD}  for (int r = 0; r < m; ++r) {{\n    if (r * 2 > m) break;\n    s[threadIdx.x] += in[i];\n    __syncthreads();\n  }}"));
        assert!(
            out.contains("    if (r * 2 > m) break;\n"),
            "unguarded: {out}"
        );
        assert!(
            out.contains("if (__cp_live) { s[threadIdx.x] += in[i]; }"),
            "{out}"
        );
    }

    #[test]
    fn a_preprocessor_conditional_after_a_return_is_guarded_whole() {
        let out = predicated(&format!(
            "{HEAD}#if __CUDA_ARCH__ >= 300\n  if (threadIdx.x == 0) s[0] = in[i];\n#else\n  s[threadIdx.x] = in[i];\n#endif\n  __syncthreads();\n  out[i] = s[0];"
        ));
        assert!(
            out.contains("\n  if (__cp_live) {\n#if __CUDA_ARCH__ >= 300\n"),
            "{out}"
        );
        assert!(out.contains("#endif\n  }\n  __syncthreads();"), "{out}");
        // A declaration in a branch would be out of reach behind the guard's braces.
        let src = format!(
            "__global__ void k(const float* in, float* out, int n, int m) {{\n{HEAD}#ifdef WIDE\n  float v = in[i];\n#else\n  float v = 0;\n#endif\n  __syncthreads();\n  out[i] = v;\n}}\n"
        );
        let t = transform(&src, "t.cu", &Options::default());
        assert_eq!(t.transformed_count(), 0);
    }

    #[test]
    fn a_return_in_the_middle_of_a_run_jumps_past_it() {
        let out = predicated("  int i = threadIdx.x;\n  for (int r = 0; r < m; ++r) {\n    out[i] = r;\n    if (in[i] > r) return;\n    out[i] += 1;\n    __syncthreads();\n  }");
        assert!(
            out.contains("{ __cp_live = false; goto __cp_after_1; }"),
            "{out}"
        );
        assert!(out.contains("out[i] += 1; } __cp_after_1:;"), "{out}");
    }
}
