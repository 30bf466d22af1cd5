//! Launches in macro bodies: `#define RUN(p, n) fill<<<(n + 255) / 256, 256>>>(p, n)`.
//!
//! The file's tree reads a `#define`'s body as text, so each body with a `<<<` is parsed on
//! its own as the statements of a function: a text in which the body's bytes keep their
//! offsets (its line continuations blanked), everything before it blank but for a function's
//! head, and `;}` after it. Its launches are then rewritten as any other (`launch.rs`), the
//! edits landing on the file's own bytes; the line breaks the rewritten head keeps get their
//! continuations back. A body that does not read as statements (an expression cut in two) and a
//! launch whose kernel is a parameter of the macro are left as they are, with CP101.

use crate::analysis::scan::{launch_site, MacroLaunches};
use crate::analysis::Analysis;
use crate::diagnostics::{Code, Diagnostic};
use crate::edit::Edit;
use crate::lang::kinds;
use crate::program::KnownKernel;
use crate::vocab::LAUNCH_ANY_MACRO;
use tree_sitter::Node;

/// The head put before a body: it must fit in the bytes before it (`#define X` is 9 at least).
const HEAD: &str = "void f(){";

/// The text a macro body is parsed from: `src`'s bytes of `body` at their offsets, line
/// continuations blanked; `None` where the head does not fit before it.
pub(crate) fn body_text(src: &str, body: &std::ops::Range<usize>) -> Option<String> {
    if body.start < HEAD.len() || body.end > src.len() {
        return None;
    }
    let mut out = String::with_capacity(body.end + 4);
    out.push_str(HEAD);
    out.extend(std::iter::repeat_n(' ', body.start - HEAD.len()));
    let text = &src[body.clone()];
    // `\` before a line end continues the line: a space keeps the offsets.
    let mut chars = text.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        let continues = c == '\\' && matches!(chars.peek(), Some((_, '\n')) | Some((_, '\r')));
        out.push(if continues { ' ' } else { c });
    }
    out.push_str("\n;}\n");
    Some(out)
}

/// The launches (calls with `<<<...>>>`) under `node`, in order.
pub(crate) fn launches_in<'t>(node: Node<'t>, out: &mut Vec<Node<'t>>) {
    let k = kinds();
    if node.kind_id() == k.call_expression {
        let mut c = node.walk();
        if node
            .named_children(&mut c)
            .any(|n| n.kind_id() == k.kernel_call_syntax)
        {
            out.push(node);
        }
    }
    let mut c = node.walk();
    for child in node.children(&mut c) {
        launches_in(child, out);
    }
}

/// Rewrites the launches of macro `m`'s body, or says why they stay as they are. Returns
/// whether they now launch through the kernel's pointer (`cupreempt::launch_any`), which the
/// file's include of the launch shim must then bring.
pub fn rewrite(
    m: &MacroLaunches,
    a: &Analysis,
    src: &str,
    known: &[KnownKernel],
    edits: &mut Vec<Edit>,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    let at = src[m.body.clone()]
        .find("<<<")
        .map_or(m.body.start, |i| m.body.start + i);
    let left = |why: &str| {
        Diagnostic::new(
            Code::LaunchLeft,
            format!(
                "a launch inside the macro `{}` is left as it is: {why}",
                m.name
            ),
        )
        .label(at..at + 3, "this launch is not preemptible")
        .help("launch the kernel from a function, and call that function in the macro")
    };
    // `#define LAUNCH(kernel, n, args) kernel<<<grid(n), 256>>>args`: the kernel is whatever
    // a use names, so the launch goes through the kernel's pointer (`CUPREEMPT_LAUNCH_ANY`,
    // with the launch as written for a use that leaves out default arguments),
    // whose wrapper the runtime finds by the kernel's name where the compiler launcher split
    // its unit (docs/transformation.md, "Launches in macros").
    if let Some(launches) = parameter_launches(src, m) {
        for l in launches {
            edits.push(Edit::replace(
                l.kernel.start..l.open.end,
                format!("{LAUNCH_ANY_MACRO}({})(", &src[l.kernel.clone()]),
            ));
            edits.push(Edit::replace(l.close, ")"));
        }
        return true;
    }
    let Some(text) = body_text(src, &m.body) else {
        diags.push(left("its body could not be read"));
        return false;
    };
    let parsed = crate::parse::parse(&text);
    let root = parsed.tree.root_node();
    let errors = crate::parse::error_ranges(root);
    let mut calls = Vec::new();
    launches_in(root, &mut calls);
    let sites: Vec<_> = calls
        .into_iter()
        .filter(|c| c.start_byte() >= m.body.start && c.end_byte() <= m.body.end)
        .filter_map(|c| launch_site(c, &text, &errors, false))
        .collect();
    if !errors.is_empty() || sites.is_empty() {
        diags.push(left("its body does not read as statements with a launch"));
        return false;
    }
    let mut any = false;
    for l in &sites {
        // `#define RUN(kernel) kernel<<<1, 1>>>()`: whatever kernel a use names, not the one
        // that happens to share the parameter's name.
        let names_param = m
            .params
            .iter()
            .any(|p| *p == l.name || crate::lang::has_word(&l.qualifier, p));
        if names_param {
            diags.push(left("the kernel it launches is a parameter of the macro"));
            continue;
        }
        any |= super::launch::rewrite(l, a, &text, known, true, edits, diags);
    }
    any
}

/// A launch in a macro body whose kernel is one of the macro's parameters: the parameter's
/// name, the `<<<` and the `>>>`.
#[derive(Debug, PartialEq)]
struct ParameterLaunch {
    kernel: std::ops::Range<usize>,
    open: std::ops::Range<usize>,
    close: std::ops::Range<usize>,
}

/// The launches of `m`'s body where every one launches a parameter of the macro
/// (`kernel<<<...>>>`, its arguments in parentheses or a parameter themselves); None where
/// the body has another launch, or a `<<<` without its `>>>`.
fn parameter_launches(src: &str, m: &MacroLaunches) -> Option<Vec<ParameterLaunch>> {
    let body = &src[m.body.clone()];
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = body[from..].find("<<<") {
        let open = from + i;
        let before = body[..open].trim_end();
        // Past the last character that is no identifier's (which may take several bytes).
        let name_start = before
            .char_indices()
            .rfind(|&(_, c)| !crate::lang::is_identifier_char(c))
            .map_or(0, |(j, c)| j + c.len_utf8());
        let name = &before[name_start..];
        // `ns::kernel`, `obj.kernel`, `a ## kernel`: a name the parameter is only part of.
        let joined = ["::", ".", "->", "##"]
            .iter()
            .any(|j| before[..name_start].trim_end().ends_with(j));
        if name.is_empty() || joined || !m.params.iter().any(|p| p == name) {
            return None;
        }
        let close = open + 3 + body[open + 3..].find(">>>")?;
        let at = m.body.start;
        found.push(ParameterLaunch {
            kernel: at + name_start..at + before.len(),
            open: at + open..at + open + 3,
            close: at + close..at + close + 3,
        });
        from = close + 3;
    }
    (!found.is_empty()).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launches(src: &str, params: &[&str]) -> Option<Vec<String>> {
        let start = src.find(')').unwrap() + 1;
        let m = MacroLaunches {
            name: "L".into(),
            params: params.iter().map(|p| p.to_string()).collect(),
            body: start..src.trim_end().len(),
        };
        parameter_launches(src, &m).map(|v| {
            v.iter()
                .map(|l| {
                    format!(
                        "{}|{}|{}",
                        &src[l.kernel.clone()],
                        &src[l.open.end..l.close.start],
                        src[l.close.end..].trim_end()
                    )
                })
                .collect()
        })
    }

    #[test]
    fn launches_of_a_kernel_parameter_are_found_with_their_configuration() {
        let src = "#define L(kernel, n, args) { kernel<<<(n + 255) / 256, 256, 0, s>>>args; }\n";
        assert_eq!(
            launches(src, &["kernel", "n", "args"]),
            Some(vec!["kernel|(n + 255) / 256, 256, 0, s|args; }".to_string()])
        );
        // Two launches, arguments in parentheses, a continued line.
        let src = "#define L(k, a) k <<<1, 2>>>(a); \\\n k<<<3, 4>>>(a)\n";
        assert_eq!(
            launches(src, &["k", "a"]).map(|v| v.len()),
            Some(2),
            "{:?}",
            launches(src, &["k", "a"])
        );
        // A named kernel, a kernel with template arguments, an unclosed launch: not this form.
        assert_eq!(launches("#define L(n) fill<<<n, 1>>>(p)\n", &["n"]), None);
        assert_eq!(
            launches("#define L(k) k<float><<<1, 1>>>()\n", &["k"]),
            None
        );
        assert_eq!(launches("#define L(k) k<<<1, 1\n", &["k"]), None);
        // A character of several bytes right before the kernel's name (a fuzzer's find: it
        // panicked slicing inside it).
        assert_eq!(
            launches("#define L(k) \u{e9}k<<<1, 1>>>()\n", &["k"]),
            Some(vec!["k|1, 1|()".to_string()])
        );
        assert_eq!(launches("#define L(k) ns::k<<<1, 1>>>()\n", &["k"]), None);
        assert_eq!(
            launches("#define L(k) pre ## k<<<1, 1>>>()\n", &["k"]),
            None
        );
        assert_eq!(
            launches("#define L(k) k<<<1, 1>>>(); fill<<<1, 1>>>()\n", &["k"]),
            None,
            "one launch of another kernel: the body is read as statements"
        );
    }

    #[test]
    fn the_body_keeps_its_offsets_and_loses_its_continuations() {
        let src = "#define RUN(p, n) \\\n  fill<<<1, 2>>>(p, \\\n n)\nint x;\n";
        let start = src.find('\\').unwrap();
        let end = src.find("n)\n").unwrap() + 2;
        let t = body_text(src, &(start..end)).unwrap();
        assert!(t.starts_with(HEAD));
        assert_eq!(&t[start..end], " \n  fill<<<1, 2>>>(p,  \n n)");
        assert!(t.ends_with("\n;}\n"));
        assert_eq!(body_text("#x 1", &(3..4)), None, "no room for the head");
    }
}
