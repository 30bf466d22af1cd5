//! Statements passed to a macro: dispatch macros that take the code to run for each case as
//! their last, variadic argument, as extension code writes them around its launches:
//!
//! ```text
//! TYPE_SWITCH(dtype, IType,
//!     auto kernel = scale_kernel<IType>;
//!     kernel<<<grid, block, 0, stream>>>(in, out);
//! );
//! ```
//!
//! The grammar reads a call's arguments as expressions, so the whole use was a syntax error
//! (CP100) and its launches stayed as written (CP101). Where the file does not parse, a use at
//! the start of a statement whose arguments hold a `;` outside any bracket is read as a block:
//! in the masked view its name and the arguments before the statements are blanked behind a
//! `{`, and its `)` becomes `}` (same length, newlines kept), where the statements then read
//! alone. Which arguments come before the statements is found by reading: the first top-level
//! comma after which the rest reads as statements (a leading argument read with them, `F,
//! k<<<g, b>>>(x);`, is a comma expression and reads too). Uses inside other uses are read
//! first. The file's text and any output keep the use as written; launches among the
//! statements are rewritten in place. What the macro wraps the statements in (a condition, a
//! loop, two copies) is not known here, so the analysis refuses a kernel that holds such a use
//! (`Parsed::statement_macros`, analysis/hidden.rs).

use std::ops::Range;
use tree_sitter::Parser;

/// The uses read as blocks: the masked bytes (`src`'s length) and each use's whole range, or
/// None where no use reads better that way.
pub(super) fn blocks(view: &[u8], parser: &mut Parser) -> Option<(Vec<u8>, Vec<Range<usize>>)> {
    let mut uses = candidates(view);
    if uses.is_empty() {
        return None;
    }
    // Innermost first: a use's statements read only once the uses inside them are blocks.
    uses.sort_by_key(|u| u.close - u.open);
    let mut bytes = view.to_vec();
    let mut read = Vec::new();
    for u in uses {
        let Some(comma) = statements_start(&bytes, &u, parser) else {
            continue;
        };
        bytes[u.name] = b'{';
        for b in &mut bytes[u.name + 1..comma.unwrap_or(u.open) + 1] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        bytes[u.close] = b'}';
        read.push(u.name..u.close + 1);
    }
    (!read.is_empty()).then_some((bytes, read))
}

/// A macro use `NAME(...)` whose arguments hold a top-level `;`.
#[derive(Debug, PartialEq)]
struct Use {
    name: usize,
    open: usize,
    close: usize,
    /// Top-level commas before the first top-level `;`.
    commas: Vec<usize>,
}

/// Where the statements start: after the first of `u`'s commas (or right after its `(`: None)
/// whose rest, up to the `)`, reads as statements with no syntax error.
fn statements_start(bytes: &[u8], u: &Use, parser: &mut Parser) -> Option<Option<usize>> {
    std::iter::once(None)
        .chain(u.commas.iter().map(|&c| Some(c)))
        .find(|start| {
            let from = start.unwrap_or(u.open) + 1;
            let Ok(body) = std::str::from_utf8(&bytes[from..u.close]) else {
                return false;
            };
            let text = format!("void f(){{{body}\n}}");
            parser
                .parse(&text, None)
                .is_some_and(|t| !t.root_node().has_error())
        })
}

/// The uses at the start of a statement (after `;`, `{`, `}`, `:` or `)`, or first on a line
/// after a directive) whose arguments hold a `;` outside brackets. Comments, string and
/// character literals are skipped.
fn candidates(b: &[u8]) -> Vec<Use> {
    let ident = |x: u8| x == b'_' || x.is_ascii_alphanumeric();
    let mut out = Vec::new();
    // Open brackets: (position, byte, index into `out` of the use it opens, if any).
    let mut stack: Vec<(usize, u8, Option<usize>)> = Vec::new();
    // The last significant byte, and whether a directive line ended since.
    let mut last = b';';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = memchr(b, i, b'\n');
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = find(b, i + 2, b"*/").map_or(b.len(), |e| e + 2);
                continue;
            }
            b'"' | b'\'' if super::opens_literal(b, i) => {
                i = (super::literal_end(b, i, c) + 1).min(b.len());
                last = c;
                continue;
            }
            b'#' if line_start(b, i) => {
                // A directive (and its continued lines) separates like a statement's end.
                let mut j = i;
                loop {
                    j = memchr(b, j, b'\n');
                    if j >= 2 && b[j - 1] == b'\\' || (j >= 3 && &b[j - 2..j] == b"\\\r") {
                        j += 1;
                        continue;
                    }
                    break;
                }
                i = j;
                last = b';';
                continue;
            }
            b'(' | b'[' | b'{' => {
                stack.push((i, c, None));
            }
            b')' | b']' | b'}' => {
                if let Some((_, _, Some(u))) = stack.pop() {
                    let used: &mut Use = &mut out[u];
                    used.close = i;
                }
            }
            b';' => {
                if let Some((_, b'(', Some(u))) = stack.last() {
                    let used: &mut Use = &mut out[*u];
                    if used.commas.last() != Some(&usize::MAX) {
                        used.commas.push(usize::MAX); // the first `;`: no more commas
                    }
                }
            }
            b',' => {
                if let Some((_, b'(', Some(u))) = stack.last() {
                    let used: &mut Use = &mut out[*u];
                    if used.commas.last() != Some(&usize::MAX) {
                        used.commas.push(i);
                    }
                }
            }
            _ if ident(c) && (i == 0 || !ident(b[i - 1])) => {
                let end = (i..b.len()).find(|&j| !ident(b[j])).unwrap_or(b.len());
                let open = (end..b.len()).find(|&j| !b[j].is_ascii_whitespace());
                // An argument of a use may be another use (`OUTER(c, F, INNER(d, G, s;);)`).
                let in_use = matches!(stack.last(), Some((_, b'(', Some(_))));
                let at_statement = (matches!(last, b';' | b'{' | b'}' | b':' | b')')
                    || in_use && matches!(last, b',' | b'('))
                    && !KEYWORDS.contains(&&b[i..end]);
                if let Some(open) = open.filter(|&o| b[o] == b'(' && at_statement) {
                    if !b[i].is_ascii_digit() {
                        out.push(Use {
                            name: i,
                            open,
                            close: 0,
                            commas: Vec::new(),
                        });
                        stack.push((open, b'(', Some(out.len() - 1)));
                        last = b'(';
                        i = open + 1;
                        continue;
                    }
                }
                last = b[end - 1];
                i = end;
                continue;
            }
            _ => {}
        }
        if !c.is_ascii_whitespace() {
            last = c;
        }
        i += 1;
    }
    out.into_iter()
        .filter(|u| u.close > u.open && u.commas.last() == Some(&usize::MAX))
        .map(|mut u| {
            u.commas.pop();
            u
        })
        .collect()
}

/// Words followed by parentheses that are no macro use (`for (;;)` holds `;`s).
const KEYWORDS: &[&[u8]] = &[
    b"for",
    b"while",
    b"if",
    b"switch",
    b"return",
    b"sizeof",
    b"alignof",
    b"decltype",
    b"catch",
    b"throw",
    b"new",
    b"delete",
    b"static_assert",
    b"typeid",
    b"noexcept",
    b"asm",
    b"__asm__",
    b"__asm",
    b"volatile",
    b"defined",
    b"operator",
    b"co_return",
    b"co_await",
    b"co_yield",
    b"_Pragma",
    b"__pragma",
    b"__attribute__",
    b"__declspec",
    b"alignas",
];

fn memchr(b: &[u8], from: usize, x: u8) -> usize {
    (from..b.len()).find(|&j| b[j] == x).unwrap_or(b.len())
}

fn find(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    (from..b.len().saturating_sub(pat.len() - 1)).find(|&j| &b[j..j + pat.len()] == pat)
}

/// Whether only blanks come before `i` on its line.
pub(super) fn line_start(b: &[u8], i: usize) -> bool {
    b[..i]
        .iter()
        .rev()
        .take_while(|&&x| x != b'\n')
        .all(|x| x.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(src: &str) -> Option<String> {
        let mut parser = Parser::new();
        parser
            .set_language(&crate::lang::language())
            .expect("grammar");
        blocks(src.as_bytes(), &mut parser).map(|(b, _)| String::from_utf8(b).expect("utf-8"))
    }

    #[test]
    fn a_dispatch_use_reads_as_a_block_of_its_statements() {
        let src = "void f() {\n  SWITCH(c, F,\n    auto k = g<F, 2>;\n    k<<<1, 2>>>(x););\n}\n";
        let head = "SWITCH(c, F,";
        let want = src.replacen(head, &format!("{{{}", " ".repeat(head.len() - 1)), 1);
        let want = want.replacen("(x););", "(x);};", 1);
        assert_eq!(read(src), Some(want));
    }

    #[test]
    fn nested_uses_and_leading_arguments_with_brackets_and_strings() {
        let src = "void f() {\n  OUTER(t.type(), \"a, b;\", INNER(c, F, using T = float; run<T><<<1, 1>>>();););\n}\n";
        let got = read(src).expect("read");
        assert_eq!(got.len(), src.len());
        let words: Vec<&str> = got.split_whitespace().collect();
        assert_eq!(
            words.join(" "),
            "void f() { { { using T = float; run<T><<<1, 1>>>();};}; }",
            "{got}"
        );
        let mut parser = Parser::new();
        parser.set_language(&crate::lang::language()).unwrap();
        assert!(
            !parser.parse(&got, None).unwrap().root_node().has_error(),
            "{got}"
        );
    }

    /// A digit separator in a leading argument opens no character literal, which would have
    /// run to the line's end and hidden the statements after it.
    #[test]
    fn digit_separators_in_leading_arguments() {
        let src = "void f() {\n  SWITCH(n > 1'000, F, auto k = g<F, 2>; k<<<1, 2>>>(x););\n}\n";
        let got = read(src).expect("read");
        let words: Vec<&str> = got.split_whitespace().collect();
        assert_eq!(
            words.join(" "),
            "void f() { { auto k = g<F, 2>; k<<<1, 2>>>(x);}; }",
            "{got}"
        );
    }

    /// Calls whose arguments are expressions, lambdas with statements, and uses that are not
    /// at a statement's start are no candidates; a broken detector reads one of them.
    #[test]
    fn leaves_expressions_lambdas_and_uses_inside_expressions() {
        for src in [
            "void f() { g(a, b); }\n",
            "void f() { DISPATCH(t, \"n\", [&] { run(); x = 1; }); }\n",
            "void f() { x = M(a; b); }\n",
            "void f() { h(a, // c; d\n b); }\n",
            "void f() { for (int i = 0; i < n; ++i) g(i); }\n",
        ] {
            assert_eq!(read(src), None, "{src}");
        }
    }
}
