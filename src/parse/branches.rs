//! Statements whose parts the preprocessor chooses: `for (...)` then `#ifdef A` one body
//! `#else` another `#endif`, or an `if (...)` head in each branch of a conditional and one body
//! after it. The grammar reads a conditional only where a whole statement or declaration may
//! stand, so such a statement is a syntax error (CP001), and its kernel was left as it is.
//!
//! Where a syntax error points into such a conditional (or just before it), the grammar is
//! given the conditional's first branch alone: its directive lines and its other branches are
//! blanked in the masked view (same length, newlines kept). The other branches' text stays in
//! the file and in any output, untouched; `Parsed::hidden` lists them, and the analysis refuses
//! a kernel whose hidden text holds anything it would have to see (analysis::hidden).

use std::ops::Range;
use tree_sitter::{Node, Tree};

/// One `#if`/`#ifdef`/`#ifndef` group, closed by its `#endif`.
#[derive(Debug, PartialEq)]
pub(super) struct Conditional {
    /// From the `#if` line's start to the `#endif` line's end.
    span: Range<usize>,
    /// Every directive line of the group (`#if`, `#elif`, `#else`, `#endif`), with its
    /// backslash continuations.
    directives: Vec<Range<usize>>,
    /// The text between two directive lines, in order.
    branches: Vec<Range<usize>>,
}

/// Every closed conditional group of `src` (nested ones too), in the order they close. Lines
/// inside block comments are skipped.
pub(super) fn conditionals(src: &str) -> Vec<Conditional> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    // Open groups: what they have so far, and where the current branch starts.
    let mut open: Vec<(Conditional, usize)> = Vec::new();
    let mut in_comment = false;
    let mut i = 0;
    while i < b.len() {
        let line_end = b[i..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| i + p);
        let line = &src[i..line_end];
        let trimmed = line.trim_start();
        if !in_comment && trimmed.starts_with('#') {
            // The directive and its continuation lines.
            let mut end = line_end;
            while end < b.len() && end > 0 && b[end - 1] == b'\\' {
                end = b[end + 1..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| end + 1 + p);
            }
            let word: String = trimmed[1..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let directive = i..end;
            match word.as_str() {
                "if" | "ifdef" | "ifndef" => open.push((
                    Conditional {
                        span: i..end,
                        directives: vec![directive],
                        branches: Vec::new(),
                    },
                    end,
                )),
                "elif" | "else" | "elifdef" | "elifndef" => {
                    if let Some((g, from)) = open.last_mut() {
                        g.branches.push(*from..i);
                        g.directives.push(directive);
                        *from = end;
                    }
                }
                "endif" => {
                    if let Some((mut g, from)) = open.pop() {
                        g.branches.push(from..i);
                        g.directives.push(directive);
                        g.span.end = end;
                        out.push(g);
                    }
                }
                _ => {}
            }
            i = end + 1;
            continue;
        }
        // Block comments that span lines (a `#` inside one is no directive).
        let mut rest = line;
        loop {
            if in_comment {
                match rest.find("*/") {
                    Some(p) => {
                        in_comment = false;
                        rest = &rest[p + 2..];
                    }
                    None => break,
                }
            } else {
                let open_at = rest.find("/*");
                let line_comment = rest.find("//");
                match open_at {
                    Some(p) if line_comment.is_none_or(|l| p < l) => {
                        in_comment = true;
                        rest = &rest[p + 2..];
                    }
                    _ => break,
                }
            }
        }
        i = line_end + 1;
    }
    out
}

/// The view with the conditionals that syntax errors of `tree` point into reduced to their
/// first branch, and the ranges of the branches blanked; None where no conditional with more
/// than one branch is near an error.
pub(super) fn first_branches(
    src: &str,
    view: &[u8],
    tree: &Tree,
    groups: &[Conditional],
) -> Option<(Vec<u8>, Vec<Range<usize>>)> {
    let errors = error_nodes(tree.root_node());
    let near = |g: &Conditional| {
        errors.iter().any(|e| {
            let overlaps = e.start < g.span.end && g.span.start < e.end.max(e.start + 1);
            // An error just before the group: only blanks between them (`for (...)` whose
            // body the group chooses).
            let before = e.start <= g.span.start
                && src
                    .get(e.start..g.span.start)
                    .is_some_and(|t| t.trim().is_empty());
            overlaps || before
        })
    };
    let chosen: Vec<&Conditional> = groups
        .iter()
        .filter(|g| g.branches.len() > 1 && near(g))
        .collect();
    if chosen.is_empty() {
        return None;
    }
    let mut bytes = view.to_vec();
    let mut hidden = Vec::new();
    for g in chosen {
        for r in g.directives.iter().chain(&g.branches[1..]) {
            for b in &mut bytes[r.clone()] {
                if *b != b'\n' {
                    *b = b' ';
                }
            }
        }
        hidden.extend(
            g.branches[1..]
                .iter()
                .filter(|r| !src[(*r).clone()].trim().is_empty())
                .cloned(),
        );
    }
    Some((bytes, hidden))
}

/// The ranges of the tree's ERROR and MISSING nodes.
fn error_nodes(root: Node) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    if !root.has_error() {
        return out;
    }
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.is_error() || n.is_missing() {
            out.push(n.byte_range());
            continue;
        }
        if n.has_error() {
            let mut c = n.walk();
            stack.extend(n.children(&mut c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_their_directives_and_branches() {
        let src = "a\n#ifdef X\nb\n#else\nc\n#endif\nd\n";
        let g = conditionals(src);
        assert_eq!(g.len(), 1);
        let text = |r: &Range<usize>| &src[r.clone()];
        assert_eq!(text(&g[0].span), "#ifdef X\nb\n#else\nc\n#endif");
        assert_eq!(
            g[0].branches.iter().map(text).collect::<Vec<_>>(),
            ["\nb\n", "\nc\n"]
        );
        assert_eq!(g[0].directives.len(), 3);
    }

    #[test]
    fn nested_groups_and_comments() {
        let src = "#if A\n#if B\nx\n#endif\n#elif C\ny\n#endif\n/*\n#if D\n*/\n";
        let g = conditionals(src);
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!(&src[g[0].span.clone()], "#if B\nx\n#endif");
        assert_eq!(g[1].branches.len(), 2);
    }

    #[test]
    fn continued_directive_lines_are_one_directive() {
        let src = "#if defined(A) && \\\n    defined(B)\nx\n#else\ny\n#endif\n";
        let g = conditionals(src);
        assert_eq!(g.len(), 1);
        assert_eq!(&src[g[0].branches[0].clone()], "\nx\n");
    }
}
